"""Planning a deletion (read-only): what goes, what is detached, who holds it.

Semantics mirror upstream ``delete_session`` (docs/store.md §10.1, hermes-agent
0.19.0 ``hermes_state.py``), plus what the dashboard adds:

- **targets**: the session asked for (or, with ``lineage``, every segment of its
  compression lineage, reached from the root through every compression edge),
  plus their delegate children, recursively: rows whose ``model_config``
  ``_delegate_from`` names a target, or whose parent is a target and that carry
  any ``_delegate_from`` marker (upstream ``_collect_delegate_child_ids``) or
  come from ``source = 'subagent'`` (what ``stores.lineage`` labels delegate);
- other children of a target (branch, reset, compression, other) are detached:
  ``parent_session_id = NULL``, they stay;
- the targets' messages, ``session_model_usage`` and ``telegram_dm_topic_bindings``
  rows (upstream's FK cascades), ``gateway_routing`` entries whose ``entry_json``
  names a target, and lease rows (``session_turn_leases`` keyed on a target,
  ``compression_locks`` of a target; only stale ones can be left at that point)
  go; ``system_prompts`` rows referenced only by targets are collected
  (upstream collects every unreferenced prompt; we only collect the ones this
  deletion orphaned), but every prompt a target references is exported, so a
  restore never needs a prompt that a later deletion collected;
  ``conversation_generations`` is never touched;
- the targets' files in ``sessions/`` (``<id>.json``, ``<id>.jsonl``,
  ``request_dump_<id>_*.json``, ``session_<id>.json``) are moved into the trash
  entry, not unlinked;
- liveness (ground rule 6) is judged for the targets and for the children the
  deletion detaches (their ``parent_session_id`` is written): a child that is
  live or maybe live refuses the whole deletion, with no override (an admin's
  override speaks for the sessions that go, never for one an agent may be
  writing into: docs/store.md §7); delete it with its lineage, or wait.

:func:`build_plan` computes a :class:`DeletePlan`; its ``fingerprint`` is what a
confirmation token binds (``tokens.py``), and what the write compares again
inside its transaction (``apply.py``).

Longer than most modules on purpose: what a deletion removes, read in one place so the confirmation page and the write agree.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ...stores import liveness as live_mod
from ...stores.lineage import Lineage
from ...stores.schema import Capabilities
from ...stores.store import Store
from ..files import session_file_names

DELETE_ACTION = "delete_session"
RESTORE_ACTION = "restore_session"
LEASE_SOURCES = ("turn_lease", "compression_lock")
PARAM_CHUNK = 400


# Dependent tables: (table, key column needed, where-template on the table).
# ``{T}`` is the set of target ids, ``{P}`` the prompts to collect, ``{R}`` every
# prompt a target references (exported), ``{D}`` the children to detach.
DEPENDENTS = (
    ("session_model_usage", "session_id", "session_id IN {T}"),
    ("telegram_dm_topic_bindings", "session_id", "session_id IN {T}"),
    ("gateway_routing", "entry_json",
     "json_valid(entry_json) AND json_extract(entry_json, '$.session_id') IN {T}"),
    ("session_turn_leases", "conversation_id", "conversation_id IN {T}"),
    ("compression_locks", "session_id", "session_id IN {T}"),
)
NOT_RESTORED = ("session_turn_leases", "compression_locks")
DETACHED_ROWS = "_detached_sessions"  # trash table: detached children's rows before the deletion
def _ph(values) -> str:
    return "(" + ",".join("?" * len(values)) + ")"


def _render(where: str, sets: dict[str, list], temp: bool) -> tuple[str, list]:
    """``where`` with ``{T}``/``{P}`` as temp-table subqueries (``temp``) or
    ``(?, …)`` lists with their parameters in order of appearance."""
    params: list = []
    out = where
    if temp:
        return out.format(T="(SELECT v FROM temp.targets)", P="(SELECT v FROM temp.prompts)",
                          D="(SELECT v FROM temp.detached)", R="(SELECT v FROM temp.referenced)"), params
    # Parameters must follow textual order.
    pieces = []
    rest = out
    while True:
        positions = [(rest.find("{" + k + "}"), k) for k in ("T", "P", "D", "R") if rest.find("{" + k + "}") >= 0]
        if not positions:
            pieces.append(rest)
            break
        pos, key = min(positions)
        values = sets[{"T": "targets", "P": "prompts", "D": "detached", "R": "referenced"}[key]]
        pieces.append(rest[:pos] + (_ph(values) if values else "(NULL)"))
        params.extend(values)
        rest = rest[pos + 3:]
    return "".join(pieces), params


def _marker_sql(caps: Capabilities) -> str:
    if not caps.has("sessions", "model_config"):
        return "NULL"
    return "json_extract(CASE WHEN json_valid(model_config) THEN model_config END, '$._delegate_from')"


def delegate_descendants(conn, caps: Capabilities, roots: list[str]) -> list[str]:
    """Delegate children of ``roots``, recursively, never a root itself (upstream #49148)."""
    marker = _marker_sql(caps)
    found = set(roots)
    frontier = list(roots)
    result: list[str] = []
    while frontier:
        step: list[str] = []
        for i in range(0, len(frontier), PARAM_CHUNK):
            chunk = frontier[i:i + PARAM_CHUNK]
            ph = _ph(chunk)
            rows = conn.execute(
                f"SELECT id FROM sessions WHERE {marker} IN {ph} "
                f"OR (parent_session_id IN {ph} AND ({marker} IS NOT NULL OR source = 'subagent')) ORDER BY id",
                chunk + chunk)
            step.extend(r[0] for r in rows if r[0] not in found)
        step = list(dict.fromkeys(step))
        found.update(step)
        result.extend(step)
        frontier = step
    return result


def resolve_roots(conn, caps: Capabilities, session_id: str, lineage: bool) -> list[str]:
    """The sessions asked for: one, or the whole compression lineage (root first)."""
    if not lineage:
        return [session_id]
    graph = Lineage(conn, caps.columns("sessions"))
    chain = graph.chain(session_id)
    if not chain:
        return [session_id]
    roots = live_mod.compression_descendants(graph, chain[0]["id"])
    return roots if session_id in roots else roots + [session_id]


@dataclass
class Target:
    """One session that goes. ``kind``: ``asked`` | ``lineage`` | ``delegate``."""

    id: str
    kind: str
    title: str | None = None
    source: str | None = None
    parent_session_id: str | None = None
    ended_at: float | None = None
    end_reason: str | None = None
    messages: int = 0
    last_message_id: int | None = None
    liveness: live_mod.Liveness | None = None

    @property
    def verdict(self) -> str:
        return self.liveness.verdict if self.liveness else "not_live"


@dataclass
class DeletePlan:
    """What one deletion removes, with the liveness of every target.

    ``fingerprint`` is what the confirmation token binds: the target ids, per
    target ``[last message id, message rows]``, and the children to detach.
    """

    profile: str
    store_path: str
    session_id: str
    lineage: bool
    exists: bool = True
    targets: list[Target] = field(default_factory=list)
    detach: list[dict] = field(default_factory=list)
    # Liveness of each child to detach (its parent link is written): id -> Liveness.
    detach_liveness: dict[str, live_mod.Liveness] = field(default_factory=dict)
    dependents: dict[str, int] = field(default_factory=dict)
    prompts: list[str] = field(default_factory=list)  # collected: no other session uses them
    prompt_refs: list[str] = field(default_factory=list)  # exported: every prompt a target references
    files: list[str] = field(default_factory=list)
    verdict: str = "not_live"
    override_possible: bool = False
    override_blocker: str = ""
    fingerprint: dict = field(default_factory=dict)

    @property
    def target_ids(self) -> list[str]:
        return [t.id for t in self.targets]

    @property
    def messages(self) -> int:
        return sum(t.messages for t in self.targets)

    @property
    def dependent_rows(self) -> int:
        return sum(self.dependents.values())

    @property
    def dependent_counts(self) -> list[tuple[str, int]]:
        """``(table, rows)`` for the dependent tables that have rows to remove."""
        return [(table, n) for table, n in self.dependents.items() if n]

    @property
    def delegates(self) -> list[Target]:
        return [t for t in self.targets if t.kind == "delegate"]

    @property
    def live_children(self) -> list[str]:
        """Children to detach that an agent holds (live)."""
        return [sid for sid, found in self.detach_liveness.items() if found.live]

    @property
    def held_children(self) -> list[str]:
        """Children to detach that are live or maybe live: they refuse the deletion."""
        return [sid for sid, found in self.detach_liveness.items() if found.verdict != "not_live"]

    @property
    def detach_items(self) -> list[dict]:
        """The children to detach with their liveness verdict (confirmation page)."""
        return [dict(c, verdict=self.detach_liveness[c["id"]].verdict if c["id"] in self.detach_liveness
                     else "not_live") for c in self.detach]

    @property
    def evidence(self) -> list[tuple[str, live_mod.Evidence]]:
        """The targets' evidence, then that of the held children to detach (the reason they block)."""
        return ([(t.id, e) for t in self.targets if t.liveness for e in t.liveness.evidence]
                + [(sid, e) for sid in self.held_children for e in self.detach_liveness[sid].evidence])

    @property
    def evidence_items(self) -> list[dict]:
        """The evidence as the ``_evidence.html`` fragment wants it."""
        return [{"session_id": sid, "e": e} for sid, e in self.evidence]

    def summary(self) -> dict:
        """A JSON-ready description (audit events, job reports)."""
        return {
            "profile": self.profile, "session_id": self.session_id, "lineage": self.lineage,
            "targets": [{"id": t.id, "kind": t.kind, "messages": t.messages, "last_message_id": t.last_message_id,
                         "verdict": t.verdict} for t in self.targets],
            "detach": self.detach, "live_children": self.live_children, "held_children": self.held_children,
            "dependents": self.dependents, "prompts": len(self.prompts),
            "files": self.files, "verdict": self.verdict,
            "evidence": [{"session_id": sid, **e.to_dict()} for sid, e in self.evidence],
        }


def _session_rows(conn, caps, ids: list[str]) -> dict[str, dict]:
    cols = [c for c in ("id", "title", "source", "parent_session_id", "ended_at", "end_reason")
            if caps.has("sessions", c)]
    found = {}
    for i in range(0, len(ids), PARAM_CHUNK):
        chunk = ids[i:i + PARAM_CHUNK]
        cur = conn.execute(f"SELECT {', '.join(cols)} FROM sessions WHERE id IN {_ph(chunk)}", chunk)
        for row in cur:
            found[row[0]] = dict(zip(cols, row))
    return found


def _message_stats(conn, ids: list[str]) -> dict[str, tuple[int, int]]:
    stats = {}
    for i in range(0, len(ids), PARAM_CHUNK):
        chunk = ids[i:i + PARAM_CHUNK]
        for sid, last, count in conn.execute(
                f"SELECT session_id, MAX(id), COUNT(*) FROM messages WHERE session_id IN {_ph(chunk)} GROUP BY session_id",
                chunk):
            stats[sid] = (last, count)
    return stats


def _children_to_detach(conn, ids: list[str]) -> list[dict]:
    inside = set(ids)
    found = []
    for i in range(0, len(ids), PARAM_CHUNK):
        chunk = ids[i:i + PARAM_CHUNK]
        for child, parent in conn.execute(
                f"SELECT id, parent_session_id FROM sessions WHERE parent_session_id IN {_ph(chunk)} ORDER BY id", chunk):
            if child not in inside:
                found.append({"id": child, "parent_session_id": parent})
    return found


def _prompt_candidates(conn, caps, ids: list[str]) -> list[str]:
    """``system_prompts`` rows referenced by a target and by no other session."""
    if not caps.has_table("system_prompts"):
        return []
    refs = [c for c in ("system_prompt_hash", "tool_names") if caps.has("sessions", c)]
    if not refs or not ids:
        return []
    ph = _ph(ids)
    union = " UNION ".join(f"SELECT {c} FROM sessions WHERE id IN {ph}" for c in refs)
    others = " OR ".join(f"s.{c} = p.hash" for c in refs)
    sql = (f"SELECT p.hash FROM system_prompts p WHERE p.hash IN ({union}) "
           f"AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.id NOT IN {ph} AND ({others})) ORDER BY p.hash")
    return [r[0] for r in conn.execute(sql, ids * len(refs) + ids)]


def _prompt_refs(conn, caps, ids: list[str]) -> list[str]:
    """Every ``system_prompts`` row a target references, shared or not.

    All of them go into the trash, not only the ones this deletion collects: a
    shared prompt may be collected later by another deletion, and a restore must
    not depend on it still being in the store (restore inserts them ``OR IGNORE``).
    """
    if not caps.has_table("system_prompts"):
        return []
    refs = [c for c in ("system_prompt_hash", "tool_names") if caps.has("sessions", c)]
    if not refs or not ids:
        return []
    union = " UNION ".join(f"SELECT {c} FROM sessions WHERE id IN {_ph(ids)}" for c in refs)
    return [r[0] for r in conn.execute(f"SELECT hash FROM system_prompts WHERE hash IN ({union}) ORDER BY hash",
                                       ids * len(refs))]


def _dependent_counts(conn, caps, sets) -> dict[str, int]:
    counts = {}
    for table, needed, where in DEPENDENTS:
        if caps.has(table, needed):
            sql, params = _render(where, sets, temp=False)
            counts[table] = conn.execute(f"SELECT COUNT(*) FROM {table} WHERE {sql}", params).fetchone()[0]
    return counts


def session_files(store: Store, ids: list[str]) -> list[str]:
    """Names in the profile's ``sessions/`` that belong to ``ids`` (the one lister)."""
    return session_file_names(store, ids)


def judge(targets: list[Target], children: dict[str, live_mod.Liveness] | None = None) -> tuple[str, bool, str]:
    """``(verdict, override possible, why not)`` for a set of targets.

    The worst verdict wins. ``children`` (id -> Liveness) are the children the
    deletion detaches: it writes their parent link, a write to a session an
    agent may hold (ground rule 6, docs/store.md §7), so a ``live`` one makes the
    whole deletion ``live`` and a ``maybe_live`` one makes it ``maybe_live``
    with no override (the override is about the sessions that go; the child
    stays and would be written under its agent). An override
    is possible only for ``maybe_live``
    where every lease or lock holder is provably dead and nothing else speaks for
    liveness but recent activity, or a routing entry on a store that keeps no
    gateway heartbeats (the entry goes with the session). An unreadable registry
    proves nothing either way: no override.
    """
    children = children or {}
    live_children = [sid for sid, found in children.items() if found.live]
    if live_children:
        return "live", False, (f"an agent holds {', '.join(live_children)}, which this deletion would detach "
                               "(its parent link would be cleared under a live agent)")
    maybe_children = [sid for sid, found in children.items() if found.verdict != "not_live"]
    if maybe_children:
        return "maybe_live", False, (f"{', '.join(maybe_children)}, which this deletion would detach, may be live "
                                     "(its parent link would be cleared while an agent may be writing into it); "
                                     "wait until it is quiet, or delete it with its lineage")
    verdicts = {t.verdict for t in targets}
    verdict = "live" if "live" in verdicts else "maybe_live" if "maybe_live" in verdicts else "not_live"
    if verdict != "maybe_live":
        return verdict, False, "" if verdict == "not_live" else "a live verdict cannot be overridden"
    for t in targets:
        for e in (t.liveness.evidence if t.liveness else ()):
            if e.source in LEASE_SOURCES and e.holder_dead is not True:
                return verdict, False, f"the holder of the {e.source.replace('_', ' ')} on {t.id} is not provably dead"
            if e.source == "gateway" and not e.blocks:
                continue
            if e.source not in LEASE_SOURCES and e.source != "activity":
                return verdict, False, f"{e.source} evidence on {t.id} cannot be overridden ({e.detail})"
    return verdict, True, ""


def build_plan(store: Store, conn, caps: Capabilities, session_id: str, lineage: bool = False,
               now: float | None = None, closed_counts: bool = False, inside: bool = False) -> DeletePlan:
    """The plan for deleting ``session_id`` (read-only; works on any connection).

    ``closed_counts``: recent activity of a session its writer ended still counts
    as liveness evidence (pruning, which nobody confirms session by session, takes
    that view; a confirmed deletion does not, ``stores.liveness.evidence_for``).
    ``inside``: the re-plan inside the write transaction reads the store only (no
    registry file, no ``sessions/`` listing: ``files`` stays empty, the files are
    listed again when they move after the commit; guarded.py, step 6)."""
    now = time.time() if now is None else now
    plan = DeletePlan(store.key, str(store.path), session_id, bool(lineage))
    if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is None:
        plan.exists = False
        plan.fingerprint = {"targets": [], "last": {}, "detach": []}
        return plan
    roots = resolve_roots(conn, caps, session_id, lineage)
    delegates = delegate_descendants(conn, caps, roots)
    ids = roots + delegates
    rows = _session_rows(conn, caps, ids)
    ids = [i for i in ids if i in rows]
    stats = _message_stats(conn, ids)
    for sid in ids:
        row = rows[sid]
        last, count = stats.get(sid, (None, 0))
        kind = "asked" if sid == session_id else "delegate" if sid in delegates else "lineage"
        plan.targets.append(Target(
            sid, kind, row.get("title"), row.get("source"), row.get("parent_session_id"), row.get("ended_at"),
            row.get("end_reason"), count, last,
            live_mod.evidence_for(store, conn, caps, sid, now, closed_counts=closed_counts, registry=not inside)))
    plan.detach = _children_to_detach(conn, ids)
    graph = Lineage(conn, caps.columns("sessions"))
    for child in plan.detach:
        node = graph.get(child["id"])
        parent = graph.parent(node) if node else None
        child["edge"] = parent["edge"] if parent else "other"
        plan.detach_liveness[child["id"]] = live_mod.evidence_for(store, conn, caps, child["id"], now,
                                                                  closed_counts=closed_counts, registry=not inside)
    plan.prompts = _prompt_candidates(conn, caps, ids)
    plan.prompt_refs = _prompt_refs(conn, caps, ids)
    plan.dependents = _dependent_counts(conn, caps, {"targets": ids, "prompts": plan.prompts})
    if plan.prompts:
        plan.dependents["system_prompts"] = len(plan.prompts)
    plan.files = [] if inside else session_files(store, ids)
    plan.verdict, plan.override_possible, plan.override_blocker = judge(plan.targets, plan.detach_liveness)
    plan.fingerprint = {
        "targets": sorted(ids),
        "last": {t.id: [t.last_message_id, t.messages] for t in plan.targets},
        "detach": sorted(c["id"] for c in plan.detach),
    }
    return plan


def plan_for(store: Store, session_id: str, lineage: bool = False, now: float | None = None) -> DeletePlan:
    with store.read() as conn:
        return build_plan(store, conn, store.capabilities(conn), session_id, lineage, now)


def describe_change(before: dict, after: dict) -> str:
    """Why a fingerprint no longer matches, in words."""
    if not after.get("targets"):
        return "the session no longer exists"
    parts = []
    gone = sorted(set(before.get("targets", [])) - set(after["targets"]))
    new = sorted(set(after["targets"]) - set(before.get("targets", [])))
    if gone:
        parts.append("gone meanwhile: " + ", ".join(gone))
    if new:
        parts.append("new delegate children: " + ", ".join(new))
    for sid, now_last in after.get("last", {}).items():
        then = before.get("last", {}).get(sid)
        if then is not None and list(then) != list(now_last):
            parts.append(f"{sid}: last message id {then[0]} -> {now_last[0]}, rows {then[1]} -> {now_last[1]}")
    if sorted(before.get("detach", [])) != sorted(after.get("detach", [])):
        parts.append("its children changed")
    return "; ".join(parts) or "the session changed"
