"""Deleting sessions (issue 5), the only action that removes message rows (ground rule 3).

Semantics mirror upstream ``delete_session`` (reference 5; hermes-agent 0.19.0
``hermes_state.py``), plus what the issue adds:

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
  ``request_dump_<id>_*.json``) are moved into the trash entry, not unlinked;
- liveness (ground rule 6) is judged for the targets and for the children the
  deletion detaches (their ``parent_session_id`` is written): a live child
  blocks the deletion like a live target.

Order of work for one deletion (``apply_delete``): re-plan read-only and compare
the fingerprint the confirmation was signed with (targets, last message id and
row count per target, children to detach) -> judge liveness (live: refused;
maybe live: refused unless an admin typed the session id and every lease holder
is provably dead) -> back up the store (once per run) -> ``BEGIN IMMEDIATE`` ->
plan and judge again inside the transaction -> export every row that will go
into the trash (committed before the store is touched) -> delete -> ``COMMIT`` ->
mark the trash entry ``deleted`` -> move the files -> verify -> exactly one
``AuditEvent``. Once the store committed, the outcome is ``applied`` with the
real row counts whatever fails afterwards (a file that would not move, the
verify read): the reason then says "deleted, but …" (``Outcome.problems``).

A confirmation token is good for one deletion: each item carries a nonce, the
audit event of the deletion records it, and an item whose nonce is already in
an applied deletion is refused (after a restore the same token does not delete
again). The token also names the user it was issued to (checked by the views).

``Deleter.restore`` puts a trash entry back (same ids, same bytes), unless one of its
session ids (or message ids, or a title) was taken meanwhile, or an agent holds
one of the sessions it inserts or re-attaches (live), which is reported.
"""

from __future__ import annotations

import logging
import os
import secrets
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from django.core import signing

from .. import trash
from ..checks.files import session_id_of
from .. import audit
from ..models import AuditEvent
from ..stores import liveness as live_mod
from .guarded import GuardedWriter as ActingRun
from ..stores.backup import BackupError, BackupRecord
from ..stores.lineage import Lineage
from ..stores.schema import Capabilities
from ..stores.store import Store
from .guarded import StoreBusy, _transaction as transaction, _writer as writer
from .guarded import store_hazard
from .files import move_without_loss
from .rowcopy import quote

DELETE_ACTION = "delete_session"
RESTORE_ACTION = "restore_session"
TOKEN_SALT = "delete-sessions"
TOKEN_MAX_AGE = 3600  # seconds a confirmation stays valid
LEASE_SOURCES = ("turn_lease", "compression_lock")
PARAM_CHUNK = 400

log = logging.getLogger("sessions_app.actions.delete")

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


class Refused(Exception):
    """The deletion (or restore) may not happen; nothing was written."""


class Mismatch(Exception):
    """Rows deleted differ from rows exported; the transaction is rolled back."""


STARTED = "started; the process ended before the outcome was recorded"


def _identity(path) -> tuple:
    st = os.stat(path)  # stat opens no descriptor (ground rule 5)
    return (st.st_dev, st.st_ino)


def _safe_to_write(store: Store, identity: tuple | None = None) -> None:
    """Refuse when Hermes itself would not write (split WAL generation, recovery
    files, unreadable store) or when the file is no longer the one backed up."""
    hazard = store_hazard(store)
    if hazard:
        raise Refused(hazard)
    if identity is not None and _identity(store.path) != identity:
        raise Refused("the store file was replaced since it was backed up; nothing written")


# --------------------------------------------------------------------------- reading

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
        """Children to detach that an agent holds (live): they block the deletion."""
        return [sid for sid, found in self.detach_liveness.items() if found.live]

    @property
    def detach_items(self) -> list[dict]:
        """The children to detach with their liveness verdict (confirmation page)."""
        return [dict(c, verdict=self.detach_liveness[c["id"]].verdict if c["id"] in self.detach_liveness
                     else "not_live") for c in self.detach]

    @property
    def evidence(self) -> list[tuple[str, live_mod.Evidence]]:
        """The targets' evidence, then that of the live children to detach (the reason they block)."""
        return ([(t.id, e) for t in self.targets if t.liveness for e in t.liveness.evidence]
                + [(sid, e) for sid in self.live_children for e in self.detach_liveness[sid].evidence])

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
            "detach": self.detach, "live_children": self.live_children,
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
    """Names in the profile's ``sessions/`` that belong to ``ids`` (upstream's three shapes)."""
    wanted = set(ids)
    try:
        entries = list(os.scandir(store.profile.sessions_dir))
    except OSError:
        return []
    names = []
    for entry in entries:
        if entry.is_file(follow_symlinks=False):
            sid, _kind = session_id_of(entry.name)
            if sid in wanted:
                names.append(entry.name)
    return sorted(names)


def judge(targets: list[Target], children: dict[str, live_mod.Liveness] | None = None) -> tuple[str, bool, str]:
    """``(verdict, override possible, why not)`` for a set of targets.

    The worst verdict wins. ``children`` (id -> Liveness) are the children the
    deletion detaches: it writes their parent link, so a ``live`` one makes the
    whole deletion ``live`` (ground rule 6); a maybe-live child does not block
    (only its parent link changes, as upstream's own deletion does). An override
    is possible only for ``maybe_live``
    where every lease or lock holder is provably dead and nothing else speaks for
    liveness but recent activity, or a routing entry on a store that keeps no
    gateway heartbeats (the entry goes with the session). An unreadable registry
    proves nothing either way: no override.
    """
    live_children = [sid for sid, found in (children or {}).items() if found.live]
    if live_children:
        return "live", False, (f"an agent holds {', '.join(live_children)}, which this deletion would detach "
                               "(its parent link would be cleared under a live agent)")
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
               now: float | None = None) -> DeletePlan:
    """The plan for deleting ``session_id`` (read-only; works on any connection)."""
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
            live_mod.evidence_for(store, conn, caps, sid, now, closed_counts=False)))
    plan.detach = _children_to_detach(conn, ids)
    graph = Lineage(conn, caps.columns("sessions"))
    for child in plan.detach:
        node = graph.get(child["id"])
        parent = graph.parent(node) if node else None
        child["edge"] = parent["edge"] if parent else "other"
        plan.detach_liveness[child["id"]] = live_mod.evidence_for(store, conn, caps, child["id"], now,
                                                                  closed_counts=False)
    plan.prompts = _prompt_candidates(conn, caps, ids)
    plan.prompt_refs = _prompt_refs(conn, caps, ids)
    plan.dependents = _dependent_counts(conn, caps, {"targets": ids, "prompts": plan.prompts})
    if plan.prompts:
        plan.dependents["system_prompts"] = len(plan.prompts)
    plan.files = session_files(store, ids)
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


# --------------------------------------------------------------------------- tokens

class TokenMismatch(signing.BadSignature):
    """A genuine token used by another user than the one it was issued to."""


def sign(items: list[dict], user_id: int | None = None) -> str:
    """A confirmation token for ``items`` ({profile, session_id, lineage, fingerprint} each),
    issued to ``user_id``. Each item gets a fresh ``nonce``: the deletion's audit
    event records it, so the item deletes at most once (see ``Deleter.delete``)."""
    items = [dict(item, nonce=secrets.token_hex(12)) for item in items]
    return signing.dumps({"items": items, "uid": user_id}, salt=TOKEN_SALT, compress=True)


def token_item(plan: DeletePlan) -> dict:
    return {"profile": plan.profile, "session_id": plan.session_id, "lineage": plan.lineage,
            "fingerprint": plan.fingerprint}


def unsign(token: str, user_id: int | None = None, max_age: int = TOKEN_MAX_AGE) -> list[dict]:
    """The items of a token issued to ``user_id``; raises ``signing.SignatureExpired``,
    :class:`TokenMismatch` (another user's token) or ``BadSignature``."""
    data = signing.loads(token or "", salt=TOKEN_SALT, max_age=max_age)
    items = data.get("items") if isinstance(data, dict) else None
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise signing.BadSignature("malformed confirmation")
    if data.get("uid") != user_id:
        raise TokenMismatch("this confirmation was issued to another user")
    return items


def used_by(nonce: str | None) -> AuditEvent | None:
    """The applied deletion that already used the confirmation item ``nonce``, if any."""
    if not nonce:
        return None
    return AuditEvent.objects.filter(action=DELETE_ACTION, outcome="applied", plan__token_nonce=nonce).first()


# --------------------------------------------------------------------------- applying

@dataclass
class Outcome:
    """What one deletion or restore did. ``status``: applied | refused | failed.

    ``committed``: the store transaction committed, so rows did change: the
    outcome is ``applied`` even when a later step failed; ``problems`` lists such
    steps and ``reason`` then reads "deleted, but …" / "restored, but …".
    ``done`` is the description of what the committed transaction did.
    """

    status: str
    reason: str = ""
    plan: DeletePlan | None = None
    entry: trash.TrashEntry | None = None
    changed: bool = False  # the agent wrote since the confirmation (stale token)
    override: bool = False
    backup: BackupRecord | None = None
    counts: dict = field(default_factory=dict)
    changes: list = field(default_factory=list)
    report: dict = field(default_factory=dict)
    nonce: str = ""  # the confirmation item's nonce (deletions)
    committed: bool = False
    done: str = ""
    problems: list = field(default_factory=list)

    @property
    def rows_changed(self) -> int:
        return sum(v for v in self.counts.values() if isinstance(v, int))

    def settle(self, verb: str) -> None:
        """After a commit the outcome is ``applied``, whatever failed next: a failure
        recorded by the caller's exception handling becomes one more problem."""
        if not self.committed:
            return
        if self.status != "applied" and self.reason:
            self.problems.append(self.reason)
        self.status = "applied"
        self.reason = f"{verb}, but {'; '.join(self.problems)}; {self.done}" if self.problems else self.done


@contextmanager
def _recorded(outcome: Outcome, store: Store, done: str):
    """Turn whatever stops a deletion or a restore (``done``: "deleted" or
    "restored") into ``outcome``'s status and reason, so each still ends in exactly
    one audit event; an unexpected error also leaves its traceback in the log."""
    try:
        yield
    except Refused as exc:
        outcome.status, outcome.reason = "refused", str(exc)
    except StoreBusy:
        outcome.status, outcome.reason = "failed", f"the store stayed locked by an agent; nothing {done}, retry later"
    except BackupError as exc:
        outcome.status, outcome.reason = "failed", f"no write: {exc}"
    except Mismatch as exc:
        outcome.status, outcome.reason = "failed", f"rolled back, nothing {done}: {exc}"
    except (sqlite3.Error, OSError) as exc:
        outcome.status, outcome.reason = "failed", f"{exc.__class__.__name__}: {exc}"
    except Exception as exc:  # a bug: still exactly one audit event, the traceback in the log
        log.exception("unexpected error in %s", store)
        outcome.status, outcome.reason = "failed", f"unexpected {exc.__class__.__name__}: {exc}"


class Deleter(ActingRun):
    """Deletes and restores for one request or job: remembers backups per store,
    writes one :class:`AuditEvent` per deletion or restore."""

    backup_label = "delete"

    def _backup(self, store: Store) -> BackupRecord:
        return self.backup_for(store)

    # ------------------------------------------------------------------ delete

    def delete(self, store: Store, item: dict, override: str | None = None, may_override: bool = False) -> Outcome:
        """Apply one confirmed deletion; never raises for store problems.

        ``item`` is one entry of a confirmation token. ``override`` is the text
        the admin typed to override a maybe-live verdict (None: no override asked);
        ``may_override`` whether the actor holds ``override_live``.
        """
        started = time.monotonic()
        session_id = str(item.get("session_id", ""))
        lineage = bool(item.get("lineage"))
        expected = item.get("fingerprint") or {}
        nonce = str(item.get("nonce") or "")
        outcome = Outcome("refused", nonce=nonce)
        # The event exists before anything is written: a process killed midway leaves
        # "failed: did not finish" behind, never an unrecorded deletion.
        event = self._audit(DELETE_ACTION, store, Outcome("failed", STARTED, nonce=nonce), session_id,
                            list((expected.get("targets") or [session_id])), 0)
        with _recorded(outcome, store, "deleted"):
            if not nonce:
                raise Refused("this confirmation carries no nonce (issued by an older version); confirm again")
            used = used_by(nonce)
            if used is not None:
                raise Refused(f"this confirmation was already used by the deletion recorded as audit event "
                              f"#{used.pk}; nothing deleted, confirm again")
            self._delete(store, session_id, lineage, expected, override, may_override, outcome)
        outcome.settle("deleted")
        self._audit(DELETE_ACTION, store, outcome, session_id,
                    outcome.plan.target_ids if outcome.plan and outcome.plan.exists else [session_id],
                    int((time.monotonic() - started) * 1000), event=event)
        return outcome

    def _decide(self, plan: DeletePlan, session_id: str, override: str | None, may_override: bool) -> bool:
        """True when an override is used; raises :class:`Refused` when not allowed."""
        if plan.verdict == "not_live":
            return False
        reasons = "; ".join(f"{sid}: {e.source}: {e.detail}" for sid, e in plan.evidence[:4])
        if plan.live_children:
            raise Refused(f"{plan.override_blocker}; nothing deleted ({reasons})")
        if plan.verdict == "live":
            raise Refused(f"an agent holds this session (live), nothing deleted ({reasons})")
        if override is None or override == "":
            raise Refused(f"the session may be live, nothing deleted ({reasons}); "
                          "an admin may override when every holder is provably dead by typing the session id")
        if not may_override:
            raise Refused("overriding a maybe-live verdict needs the override_live permission")
        if override.strip() != session_id:
            raise Refused("the typed session id does not match; nothing deleted")
        if not plan.override_possible:
            raise Refused(f"no override: {plan.override_blocker}")
        return True

    def _delete(self, store, session_id, lineage, expected, override, may_override, outcome: Outcome) -> None:
        now = time.time()
        with store.read() as conn:
            caps = store.capabilities(conn)
            plan = build_plan(store, conn, caps, session_id, lineage, now)
        outcome.plan = plan
        if not plan.exists:
            raise Refused("the session no longer exists; nothing deleted")
        if plan.fingerprint != expected:
            outcome.changed = True
            raise Refused(f"changed since the confirmation ({describe_change(expected, plan.fingerprint)}); "
                          "nothing deleted, look at the evidence again")
        outcome.override = self._decide(plan, session_id, override, may_override)
        _safe_to_write(store)
        identity = _identity(store.path)
        outcome.backup = self._backup(store)
        entry = trash.new_entry(store.key, session_id, store_path=str(store.path), session_id=session_id,
                                lineage=lineage, actor=self.actor_label)
        try:
            with writer(store) as conn:
                with transaction(conn):
                    _safe_to_write(store, identity)
                    caps = store.capabilities(conn)
                    fresh = build_plan(store, conn, caps, session_id, lineage, time.time())
                    outcome.plan = fresh
                    if fresh.fingerprint != expected:
                        outcome.changed = True
                        raise Refused(f"changed since the confirmation "
                                      f"({describe_change(expected, fresh.fingerprint)}); nothing deleted")
                    outcome.override = self._decide(fresh, session_id, override, may_override)
                    outcome.counts = self._export_and_delete(conn, caps, store, fresh, entry)
                outcome.committed = True  # from here on, whatever fails: "deleted, but …" (Outcome.settle)
        except BaseException:
            if not outcome.committed:
                trash.discard(entry)
            raise
        plan = outcome.plan
        outcome.entry = entry
        outcome.counts["detached"] = len(plan.detach)
        outcome.changes = (
            [{"op": "delete", "table": t, "key": {"session_id": plan.target_ids}, "after": n}
             for t, n in outcome.counts.items() if t != "detached" and n]
            + [{"op": "update", "table": "sessions", "key": {"id": c["id"]}, "column": "parent_session_id",
                "before": c["parent_session_id"], "after": None} for c in plan.detach])
        outcome.done = (f"moved to the trash ({entry.id}): {len(plan.targets)} session(s), "
                        f"{outcome.counts.get('messages', 0)} message row(s)")
        if outcome.override:
            outcome.done = (f"OVERRIDE of a maybe-live verdict by {self.actor_label} (typed the session id; "
                            f"every holder provably dead); " + outcome.done)
        # The entry says "deleted" before any file moves into it: a retry or a purge
        # never takes it for an unfinished deletion while it holds the only copy.
        entry.update(state="deleted", deleted_at=time.time(), targets=plan.target_ids,
                     targets_info=[{"id": t.id, "kind": t.kind, "title": t.title, "source": t.source,
                                    "messages": t.messages} for t in plan.targets],
                     detached=plan.detach, counts=dict(outcome.counts), override=outcome.override,
                     backup=outcome.backup.path if outcome.backup else "")
        moved, problems = self._move_files(store, plan, entry)
        outcome.counts["files"] = len(moved)
        outcome.changes += [{"op": "move", "table": "file", "key": {"name": n},
                             "before": str(store.profile.sessions_dir / n), "after": str(entry.files_dir / n)}
                            for n in moved]
        outcome.done += f", {len(moved)} file(s)"
        outcome.problems += problems
        entry.update(files=moved, file_problems=problems, counts=dict(outcome.counts))
        problem = self._verify_deleted(store, plan)
        if problem:
            outcome.problems.append(problem)
        outcome.status = "applied"

    def _export_and_delete(self, conn, caps, store, plan: DeletePlan, entry) -> dict[str, int]:
        """Inside the write transaction: export to the trash, then delete; counts per table."""
        ids = plan.target_ids
        sets = {"targets": ids, "prompts": plan.prompts, "detached": [c["id"] for c in plan.detach],
                "referenced": plan.prompt_refs}
        tables: dict[str, tuple] = {}
        tables["sessions"] = (caps.columns("sessions"), "id IN {T}")
        tables["messages"] = (caps.columns("messages"), "session_id IN {T}")
        for table, needed, where in DEPENDENTS:
            if caps.has(table, needed):
                tables[table] = (caps.columns(table), where)
        if plan.prompt_refs:
            # Every prompt a target references, not only those collected (see _prompt_refs).
            tables["system_prompts"] = (caps.columns("system_prompts"), "hash IN {R}")
        # The children the deletion detaches are touched too: their whole rows as they were.
        tables[DETACHED_ROWS] = (caps.columns("sessions"), "id IN {D}", "sessions")
        rendered = {t: (spec[0], _render(spec[1], sets, temp=True)[0], *spec[2:]) for t, spec in tables.items()}
        detached = [(c["id"], c["parent_session_id"]) for c in plan.detach]
        exported = trash.export_rows(entry, store.path, rendered, sets, extra={"_detached": detached})
        entry.update(targets=ids, detached=plan.detach)  # known now, in case of an interruption
        if exported.get("sessions") != len(ids) or exported.get("messages") != plan.messages:
            raise Mismatch(f"exported {exported.get('sessions')} sessions / {exported.get('messages')} messages, "
                           f"planned {len(ids)} / {plan.messages}")
        conn.execute("CREATE TEMP TABLE targets (v PRIMARY KEY)")
        conn.execute("CREATE TEMP TABLE prompts (v PRIMARY KEY)")
        conn.executemany("INSERT OR IGNORE INTO temp.targets (v) VALUES (?)", [(i,) for i in ids])
        conn.executemany("INSERT OR IGNORE INTO temp.prompts (v) VALUES (?)", [(p,) for p in plan.prompts])
        deleted: dict[str, int] = {}
        for table, needed, where in DEPENDENTS:
            if table in tables:
                deleted[table] = conn.execute(f"DELETE FROM {table} WHERE {_render(where, sets, True)[0]}").rowcount
        # Messages before their session rows: the newest shape's FTS triggers read
        # the session row to decide which index a message row leaves.
        deleted["messages"] = conn.execute(
            "DELETE FROM messages WHERE session_id IN (SELECT v FROM temp.targets)").rowcount
        detached_n = conn.execute(
            "UPDATE sessions SET parent_session_id = NULL WHERE parent_session_id IN (SELECT v FROM temp.targets) "
            "AND id NOT IN (SELECT v FROM temp.targets)").rowcount
        deleted["sessions"] = conn.execute("DELETE FROM sessions WHERE id IN (SELECT v FROM temp.targets)").rowcount
        if plan.prompts:
            refs = [c for c in ("system_prompt_hash", "tool_names") if caps.has("sessions", c)]
            others = " OR ".join(f"s.{c} = system_prompts.hash" for c in refs)
            deleted["system_prompts"] = conn.execute(
                f"DELETE FROM system_prompts WHERE hash IN (SELECT v FROM temp.prompts) "
                f"AND NOT EXISTS (SELECT 1 FROM sessions s WHERE {others})").rowcount
        conn.execute("DROP TABLE temp.targets")
        conn.execute("DROP TABLE temp.prompts")
        if detached_n != len(plan.detach):
            raise Mismatch(f"detached {detached_n} children, planned {len(plan.detach)}")
        detached_rows = exported.pop(DETACHED_ROWS)
        if detached_rows != len(plan.detach):
            raise Mismatch(f"exported {detached_rows} detached children, planned {len(plan.detach)}")
        if "system_prompts" in exported:
            # Exported: every referenced prompt; deleted: only the ones nobody else uses.
            kept = exported.pop("system_prompts")
            if kept != len(plan.prompt_refs) or deleted.get("system_prompts", 0) != len(plan.prompts):
                raise Mismatch(f"system_prompts: exported {kept} of {len(plan.prompt_refs)} referenced, "
                               f"deleted {deleted.get('system_prompts', 0)} of {len(plan.prompts)} to collect")
            if plan.prompts:
                exported["system_prompts"] = deleted["system_prompts"]
        for table, count in exported.items():
            if deleted.get(table) != count:
                raise Mismatch(f"{table}: exported {count} rows, deleted {deleted.get(table)}")
        return exported

    def _move_files(self, store: Store, plan: DeletePlan, entry) -> tuple[list[str], list[str]]:
        """Move the targets' files into the entry; a file that will not move stays
        where it is (``move_without_loss``: never a lost byte, never an overwrite)."""
        folder = store.profile.sessions_dir
        moved, problems = [], []
        for name in session_files(store, plan.target_ids):
            try:
                entry.files_dir.mkdir(exist_ok=True)
                move_without_loss(folder / name, entry.files_dir / name)
                moved.append(name)
            except OSError as exc:
                problems.append(f"file {name} not moved into the trash: {exc}")
        return moved, problems

    @staticmethod
    def _verify_deleted(store: Store, plan: DeletePlan) -> str | None:
        ids = plan.target_ids
        with store.read() as conn:
            left = conn.execute(f"SELECT COUNT(*) FROM sessions WHERE id IN {_ph(ids)}", ids).fetchone()[0]
            rows = conn.execute(f"SELECT COUNT(*) FROM messages WHERE session_id IN {_ph(ids)}", ids).fetchone()[0]
        if left or rows:
            return f"verify: {left} session row(s) and {rows} message row(s) still present"
        return None

    # ------------------------------------------------------------------ restore

    def restore(self, store: Store | None, entry: trash.TrashEntry) -> Outcome:
        """Put a trash entry back into its store; never raises for store problems."""
        started = time.monotonic()
        outcome = Outcome("refused", entry=entry)
        targets = list(entry.manifest.get("targets") or [])
        event = self._audit(RESTORE_ACTION, store, Outcome("failed", STARTED, entry=entry),
                            entry.manifest.get("session_id", ""), targets, 0, entry=entry)
        with _recorded(outcome, store, "restored"):
            self._restore(store, entry, targets, outcome)
        outcome.settle("restored")
        self._audit(RESTORE_ACTION, store, outcome, entry.manifest.get("session_id", ""), targets,
                    int((time.monotonic() - started) * 1000), entry=entry, event=event)
        return outcome

    def _restore(self, store, entry, targets, outcome: Outcome) -> None:
        if entry.state == "pending" and targets and store is not None:
            # Interrupted after the export: restorable only if the deletion committed.
            with store.read() as conn:
                present = conn.execute(f"SELECT COUNT(*) FROM sessions WHERE id IN {_ph(targets)}", targets).fetchone()[0]
            if present:
                raise Refused("this deletion did not complete (its sessions are still in the store); nothing to restore")
        elif entry.state != "deleted":
            raise Refused(f"this trash entry is {entry.state}, not restorable")
        if store is None or str(store.path) != entry.manifest.get("store_path"):
            raise Refused("the profile's store is no longer where the session was deleted from")
        if not entry.rows_path.exists():
            raise Refused("the entry's rows are missing")
        children = self._detached_pairs(entry)
        with store.read() as conn:
            caps = store.capabilities(conn)
            self._restore_conflicts(conn, entry, targets)
            self._refuse_live(store, conn, caps, targets + self._to_reattach(conn, caps, children))
        _safe_to_write(store)
        identity = _identity(store.path)
        outcome.backup = self._backup(store)
        report: dict = {}
        with writer(store) as conn:
            conn.execute("ATTACH DATABASE ? AS trash", (str(entry.rows_path),))
            try:
                with transaction(conn):
                    _safe_to_write(store, identity)
                    caps = store.capabilities(conn)
                    self._restore_conflicts(conn, entry, targets)
                    reattach = self._to_reattach(conn, caps, children)
                    outcome.counts, report = self._insert_back(conn, caps)
                    # Judged again with the rows back in place (a lease on a lineage root
                    # now covers the segments it reaches); live -> Refused, rolled back.
                    self._refuse_live(store, conn, caps, targets + reattach)
                outcome.committed = True  # from here on, whatever fails: "restored, but …" (Outcome.settle)
            finally:
                conn.execute("DETACH DATABASE trash")
        outcome.report = report
        outcome.changes = [{"op": "insert", "table": t, "key": {"session_id": targets}, "after": n}
                           for t, n in outcome.counts.items() if t != "reattached" and n]
        outcome.done = (f"restored from the trash ({entry.id}): {len(targets)} session(s), "
                        f"{outcome.counts.get('messages', 0)} message row(s)")
        # The entry says "restored" before its files move back: a retry is refused
        # (the sessions are in the store again) instead of inserting twice.
        entry.update(state="restored", restored_at=time.time(), restored_by=self.actor_label, restore_report=report)
        moved, kept, problems = [], [], []
        folder = store.profile.sessions_dir
        if entry.files_dir.is_dir():
            for name in sorted(os.listdir(entry.files_dir)):
                if os.path.lexists(folder / name):
                    kept.append(name)
                    continue
                try:
                    folder.mkdir(exist_ok=True)
                    # A name taken since the check gets a free name: never an overwrite.
                    moved.append(move_without_loss(entry.files_dir / name, folder / name).name)
                except OSError as exc:
                    problems.append(f"file {name} not moved back (still in the trash entry): {exc}")
        outcome.counts["files"] = len(moved)
        outcome.changes += [{"op": "move", "table": "file", "key": {"name": n}, "before": str(entry.files_dir / n),
                             "after": str(folder / n)} for n in moved]
        outcome.problems += problems
        if kept:
            report["files_kept_in_trash"] = kept
        entry.update(restore_report=report, restored_files=moved, restore_file_problems=problems)
        with store.read() as conn:
            present = conn.execute(f"SELECT COUNT(*) FROM sessions WHERE id IN {_ph(targets)}", targets).fetchone()[0]
        if present != len(targets):
            outcome.problems.append(f"verify: {present} of {len(targets)} sessions present")
        notes = "; ".join(f"{k.replace('_', ' ')}: {v}" for k, v in report.items())
        outcome.done += f", {len(moved)} file(s)" + (f"; {notes}" if notes else "")
        outcome.status = "applied"

    @staticmethod
    def _detached_pairs(entry) -> list[tuple[str, str]]:
        """``(child, parent)`` of the children the deletion detached (trash table ``_detached``)."""
        rows = sqlite3.connect(entry.rows_path.absolute().as_uri() + "?mode=ro", uri=True, detect_types=0)
        try:
            if not rows.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_detached'").fetchone():
                return []
            return [(a, b) for a, b in rows.execute("SELECT a, b FROM _detached")]
        finally:
            rows.close()

    @staticmethod
    def _to_reattach(conn, caps, children: list[tuple[str, str]]) -> list[str]:
        """The detached children a restore re-attaches: still there, still without a parent."""
        ids = [c for c, _p in children]
        if not ids or not caps.has("sessions", "parent_session_id"):
            return []
        return [r[0] for r in conn.execute(
            f"SELECT id FROM sessions WHERE id IN {_ph(ids)} AND parent_session_id IS NULL ORDER BY id", ids)]

    @staticmethod
    def _refuse_live(store, conn, caps, ids: list[str]) -> None:
        """Ground rule 6 for a restore: an agent that holds a session it inserts (a
        registry entry, a lease or lock, a gateway route naming the id) or a child it
        re-attaches would race the restore; live -> :class:`Refused`, nothing written."""
        now = time.time()
        for sid in dict.fromkeys(ids):
            found = live_mod.evidence_for(store, conn, caps, sid, now, closed_counts=False)
            if found.live:
                why = "; ".join(f"{e.source}: {e.detail}" for e in found.evidence if e.blocks)
                raise Refused(f"an agent holds {sid} (live: {why}); nothing restored, the trash entry is kept")

    @staticmethod
    def _restore_conflicts(conn, entry, targets) -> None:
        """Refuse when a session id, a message id or a title was taken meanwhile."""
        taken = [r[0] for r in conn.execute(f"SELECT id FROM sessions WHERE id IN {_ph(targets)}", targets)]
        if taken:
            raise Refused("recreated meanwhile, nothing restored: " + ", ".join(taken)
                          + " (an agent wrote to this id after the deletion; the trash entry is kept)")
        rows = sqlite3.connect(entry.rows_path.absolute().as_uri() + "?mode=ro", uri=True, detect_types=0)
        try:
            message_ids = [r[0] for r in rows.execute("SELECT id FROM messages")]
            titles = [r[0] for r in rows.execute("SELECT title FROM sessions WHERE title IS NOT NULL")] \
                if "title" in [c[1] for c in rows.execute("PRAGMA table_info(sessions)")] else []
        finally:
            rows.close()
        for i in range(0, len(message_ids), PARAM_CHUNK):
            chunk = message_ids[i:i + PARAM_CHUNK]
            clash = conn.execute(f"SELECT MIN(id) FROM messages WHERE id IN {_ph(chunk)}", chunk).fetchone()[0]
            if clash is not None:
                raise Refused(f"message id {clash} is in use again; nothing restored")
        if titles:
            clash = conn.execute(f"SELECT id, title FROM sessions WHERE title IN {_ph(titles)}", titles).fetchone()
            if clash:
                raise Refused(f"the title {clash[1]!r} is now used by session {clash[0]}; nothing restored")

    @staticmethod
    def _insert_back(conn, caps) -> tuple[dict[str, int], dict]:
        """Inside the write transaction: insert the trash rows back; counts and notes.

        Column and table names come from the store and the trash file: always quoted.
        """
        saved = {n: tuple(c[1] for c in conn.execute(f"PRAGMA trash.table_info({quote(n)})"))
                 for (n,) in conn.execute("SELECT name FROM trash.sqlite_master WHERE type = 'table'").fetchall()}
        counts: dict[str, int] = {}
        report: dict = {}

        def common(table):
            cols = [c for c in saved.get(table, ()) if caps.has(table, c)]
            lost = [c for c in saved.get(table, ()) if not caps.has(table, c)]
            if lost:
                report.setdefault("columns_the_store_lacks", {})[table] = lost
            return cols

        def insert(table, verb="INSERT", select=None, order=""):
            if table not in saved or not caps.has_table(table):
                return
            cols = common(table)
            names = ", ".join(quote(c) for c in cols)
            chosen = select(cols) if select else names
            expected = conn.execute(f"SELECT COUNT(*) FROM trash.{quote(table)}").fetchone()[0]
            n = conn.execute(f"{verb} INTO main.{quote(table)} ({names}) "
                             f"SELECT {chosen} FROM trash.{quote(table)} AS t{order}").rowcount
            counts[table] = n
            if n != expected:
                report[f"{table}_not_restored"] = expected - n

        insert("system_prompts", "INSERT OR IGNORE")
        # An ignored prompt is there again already: content-addressed, so identical.
        report.pop("system_prompts_not_restored", None)

        # A prompt missing from the store and from the entry (entries made before every
        # referenced prompt was exported, when another deletion collected it since)
        # would fail the foreign key: the link is dropped and reported instead.
        prompt_known = ("t.system_prompt_hash IS NULL "
                        "OR EXISTS (SELECT 1 FROM main.system_prompts p WHERE p.hash = t.system_prompt_hash)")
        check_prompts = caps.has("sessions", "system_prompt_hash") and caps.has_table("system_prompts") \
            and "system_prompt_hash" in saved.get("sessions", ())

        def session_select(cols):
            out = []
            for c in cols:
                if c == "parent_session_id":
                    out.append("CASE WHEN t.parent_session_id IS NULL "
                               "OR EXISTS (SELECT 1 FROM main.sessions m WHERE m.id = t.parent_session_id) "
                               "OR EXISTS (SELECT 1 FROM trash.sessions t2 WHERE t2.id = t.parent_session_id) "
                               "THEN t.parent_session_id END")
                elif c == "system_prompt_hash" and check_prompts:
                    out.append(f"CASE WHEN {prompt_known} THEN t.system_prompt_hash END")
                else:
                    out.append(f"t.{quote(c)}")
            return ", ".join(out)

        if check_prompts:
            missing = conn.execute(f"SELECT COUNT(*) FROM trash.sessions t WHERE NOT ({prompt_known})").fetchone()[0]
            if missing:
                report["system_prompt_links_dropped"] = missing

        dropped = conn.execute(
            "SELECT COUNT(*) FROM trash.sessions t WHERE t.parent_session_id IS NOT NULL "
            "AND NOT EXISTS (SELECT 1 FROM main.sessions m WHERE m.id = t.parent_session_id) "
            "AND NOT EXISTS (SELECT 1 FROM trash.sessions t2 WHERE t2.id = t.parent_session_id)").fetchone()[0] \
            if caps.has("sessions", "parent_session_id") else 0
        if dropped:
            report["parent_links_dropped"] = dropped
        insert("sessions", select=session_select)
        # Sessions first: the newest shape's FTS triggers read the session row.
        insert("messages", order=" ORDER BY t.id")
        if caps.has("messages", "display_order") and "display_order" in saved.get("messages", ()):
            # The insert trigger fills a NULL display_order; put the saved value back.
            conn.execute("UPDATE main.messages SET display_order = (SELECT t.display_order FROM trash.messages t "
                         "WHERE t.id = main.messages.id) WHERE id IN (SELECT id FROM trash.messages) "
                         "AND display_order IS NOT (SELECT t.display_order FROM trash.messages t "
                         "WHERE t.id = main.messages.id)")
        insert("session_model_usage", "INSERT OR IGNORE")
        insert("telegram_dm_topic_bindings", "INSERT OR IGNORE")
        insert("gateway_routing", "INSERT OR IGNORE")
        for table in NOT_RESTORED:
            if table in saved:
                n = conn.execute(f"SELECT COUNT(*) FROM trash.{table}").fetchone()[0]
                if n:
                    report[f"{table}_not_restored"] = f"{n} (stale holds are not brought back)"
        if "_detached" in saved and caps.has("sessions", "parent_session_id"):
            counts["reattached"] = conn.execute(
                "UPDATE main.sessions SET parent_session_id = (SELECT b FROM trash._detached WHERE a = main.sessions.id) "
                "WHERE id IN (SELECT a FROM trash._detached) AND parent_session_id IS NULL").rowcount
            total = conn.execute("SELECT COUNT(*) FROM trash._detached").fetchone()[0]
            if counts["reattached"] != total:
                report["children_not_reattached"] = total - counts["reattached"]
        expected = conn.execute("SELECT COUNT(*) FROM trash.sessions").fetchone()[0]
        if counts.get("sessions") != expected:
            raise Mismatch(f"restored {counts.get('sessions')} of {expected} session rows")
        return counts, report

    # ------------------------------------------------------------------ audit

    def refuse(self, store: Store | None, session_ids: list[str], reason: str) -> AuditEvent:
        """Audit a deletion request refused before the engine ran (a token for
        another session, profile or user, a forged token, an override typed
        without the permission): outcome ``refused``, nothing written."""
        return self._audit(DELETE_ACTION, store, Outcome("refused", reason), session_ids[0] if session_ids else "",
                           session_ids, 0)

    def _audit(self, action: str, store: Store | None, outcome: Outcome, session_id: str, ids: list[str],
               duration_ms: int, entry: trash.TrashEntry | None = None, event: AuditEvent | None = None) -> AuditEvent:
        """Create (or, given ``event``, complete) the one AuditEvent of a deletion or restore."""
        entry = entry or outcome.entry
        plan = outcome.plan.summary() if outcome.plan else {}
        plan.update({"session_id": session_id, "trash_entry": entry.id if entry else "",
                     "trash_path": str(entry.path) if entry else "", "override": outcome.override,
                     "changed_since_confirmation": outcome.changed})
        if outcome.report:
            plan["report"] = outcome.report
        if outcome.nonce:
            plan["token_nonce"] = outcome.nonce  # what makes a confirmation single-use (used_by)
        if outcome.problems:
            plan["problems_after_commit"] = outcome.problems
        backup = outcome.backup if outcome.status == "applied" or outcome.rows_changed else None
        fields = dict(
            actor=self.actor,
            actor_label=self.actor_label,
            action=action,
            check_code="override_live" if outcome.override else "",
            profile=store.key if store else (entry.profile if entry else ""),
            store_path=str(store.path) if store else (entry.manifest.get("store_path", "") if entry else ""),
            session_ids=list(ids),
            plan=_jsonable(plan),
            outcome=outcome.status,
            reason=outcome.reason,
            changes=_jsonable(outcome.changes) if outcome.status == "applied" else [],
            rows_changed=outcome.rows_changed if outcome.status == "applied" else 0,
            duration_ms=duration_ms,
            request_address=self.request_address,
            run=self.run,
        )
        return audit.record(event, backup=backup, **fields)


def _jsonable(value):
    import json
    return json.loads(json.dumps(value, default=str))


# --------------------------------------------------------------------------- bulk job

def run_bulk_delete(run, progress) -> dict:
    """The background job of a bulk deletion (``HealRun.mode == "delete"``).

    ``run.plans`` holds the confirmed items; each session is judged and deleted
    on its own (its own transaction, its own audit event). Returns a report in
    the heal report shape the run page shows.
    """
    from ..stores import registry

    deleter = Deleter(actor=run.actor, actor_label=run.actor_label, run=run, request_address=run.request_address)
    profiles: dict[str, dict] = {}
    summary = {"profiles": 0, "critical": 0, "warning": 0, "info": 0, "applied": 0, "skipped": 0, "failed": 0}
    items = list(run.plans)
    for n, item in enumerate(items, start=1):
        key = str(item.get("profile", ""))
        store = registry.get(key)
        entry = profiles.setdefault(key, {"profile": key, "path": str(store.path) if store else "", "status": "ok",
                                          "findings": [], "actions": [], "backup": None})
        sid = str(item.get("session_id", ""))
        if store is None:
            status, reason, trash_id = "failed", "the profile no longer exists", ""
            AuditEvent.objects.create(actor=run.actor, actor_label=run.actor_label, action=DELETE_ACTION, profile=key,
                                      store_path="", session_ids=[sid], outcome="failed", reason=reason, run=run,
                                      request_address=run.request_address)
        else:
            outcome = deleter.delete(store, item)
            status = {"refused": "skipped"}.get(outcome.status, outcome.status)
            reason, trash_id = outcome.reason, outcome.entry.id if outcome.entry else ""
            backup = deleter.backups.get(str(store.path))
            entry["backup"] = backup.path if backup else None
        entry["actions"].append({"action": DELETE_ACTION, "session_id": sid, "status": status, "reason": reason,
                                 "trash_entry": trash_id, "changes": []})
        summary[status] = summary.get(status, 0) + 1
        progress(f"delete {sid}: {status}", n, len(items))
    summary["profiles"] = len(profiles)
    return {"version": 1, "mode": "delete", "profiles": list(profiles.values()), "summary": summary}
