"""Retention pruning: plan what goes (read-only), and one batch as one guarded write.

A prune moves sessions into the trash exactly as a deletion does (``actions/
deletion``: the same plan, export, delete, files and trash entry per unit, so a
pruned session is restored like a deleted one), in batches of one transaction
each. Rules (docs/store.md §10.4):

- the criteria (``stores.retention.Criteria``) select ended sessions only;
- a **unit** is a whole compression lineage (root and every compression
  continuation), with the delegate children deletion takes along; a lineage goes
  only if every one of its segments is selected (an open tip keeps it all), and it
  goes as one unit, one trash entry;
- **pinned** sessions are always spared (column ``pinned`` where the store has
  it): a unit with a pinned segment or delegate child stays;
- **archived** sessions are spared unless ``criteria.include_archived`` (column
  ``archived``, 0.17.0 on; upstream's ``hermes sessions prune`` does the same): a
  unit with an archived segment or delegate child stays, reason ``archived``;
- **liveness** per session (ground rule 6): any evidence, recent activity of a
  session its writer ended included, spares the unit; a child the deletion would
  detach that is live or maybe live spares it too. Nothing is overridden in bulk;
- inside each batch's guarded write transaction every unit is planned and judged again
  (:class:`PruneWrite`), and a unit that changed is dropped, not the batch.

:func:`plan_units` makes the preview cheaply, with set-based reads of the whole
store; the write re-plans each unit with ``deletion.build_plan``.

Longer than most modules on purpose: the preview and the batch write share the unit
rules above, and keeping them in one place keeps what is shown what is written.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from .. import trash
from ..stores import liveness as live_mod
from ..stores import retention
from ..stores.lineage import UP_CAP, Lineage
from ..stores.retention import Criteria
from ..stores.store import Store
from .deletion.apply import export_and_delete, move_files_into
from .deletion.plan import DeletePlan, build_plan
from .files import session_files_by_id
from .guarded import Changed, Refused, Skip, Write, jsonable

PRUNE_ACTION = "prune_sessions"
# One batch holds the store's write lock while it exports and deletes; live agents
# wait meanwhile. About 40 ms per unit (its trash file's durable commit) plus about
# 1 ms per message row (the FTS triggers of release stores) on a quiet benchmark
# machine, three to five times that on a loaded one (docs/benchmarks.md, Retention
# pruning): with these bounds a batch held the lock 0.5 s at most on a quiet machine,
# 1.3-2 s (median) on a loaded one, well inside the 20 s Hermes' writers wait;
# --batch-size lowers them.
BATCH_UNITS = 10  # units per transaction
BATCH_ROWS = 1_000  # message rows per transaction (a bigger unit goes alone)


@dataclass
class Unit:
    """One deletion a prune makes: ``root`` (the lineage root), ``segments`` (the
    lineage, root first), ``delegates`` (their delegate children), with message
    ``rows``, ``content_bytes`` and ``files`` (names in ``sessions/``), ``ended_at``
    (the newest end among its segments, epoch seconds), ``title`` of the root."""

    root: str
    segments: list[str]
    delegates: list[str] = field(default_factory=list)
    rows: int = 0
    content_bytes: int = 0
    files: int = 0
    ended_at: float | None = None
    title: str | None = None
    source: str | None = None
    parents: list[str] = field(default_factory=list)  # parents of its sessions outside it

    @property
    def ids(self) -> list[str]:
        return self.segments + self.delegates

    def as_json(self) -> dict:
        return {"root": self.root, "sessions": list(self.segments), "delegates": list(self.delegates),
                "messages": self.rows, "content_bytes": self.content_bytes, "files": self.files,
                "ended_at": self.ended_at, "title": self.title, "source": self.source}


@dataclass
class Spared:
    """Sessions the criteria select that stay. ``reason``: ``pinned`` | ``live`` |
    ``maybe_live`` | ``routed`` (a gateway routes a chat to it, on a store without
    heartbeats) | ``lineage`` (another segment of its conversation is not
    selected) | ``open_delegate`` | ``with_parent`` (a delegate child whose parent
    stays) | ``not_empty`` | ``gone`` | ``changed``;
    ``detail`` says it in words; ``session_ids`` the sessions concerned."""

    session_ids: list[str]
    reason: str
    detail: str

    def as_json(self) -> dict:
        return {"session_ids": list(self.session_ids), "reason": self.reason, "detail": self.detail}


# Reasons that will pass by themselves (a live agent finishes; a retry may work):
# the sessions still "remain to prune" for the exit status.
TRANSIENT = ("live", "maybe_live", "changed")
# Spared at apply because an agent may hold it: a guard said no, so ``refused``
# (vocabulary.OUTCOMES). Pinned or archived since the preview is "not applicable any
# more": ``skipped``, for the unit and for its batch alike.
HELD = ("live", "maybe_live", "routed")


@dataclass
class Preview:
    """What a prune of one store would do now: ``units`` (oldest end first) and ``spared``."""

    units: list[Unit] = field(default_factory=list)
    spared: list[Spared] = field(default_factory=list)

    @property
    def sessions(self) -> int:
        return sum(len(u.ids) for u in self.units)

    @property
    def rows(self) -> int:
        return sum(u.rows for u in self.units)

    @property
    def content_bytes(self) -> int:
        return sum(u.content_bytes for u in self.units)

    @property
    def files(self) -> int:
        return sum(u.files for u in self.units)

    def spared_count(self, *reasons: str) -> int:
        return sum(len(s.session_ids) for s in self.spared if not reasons or s.reason in reasons)


def _live_reason(verdict: str, evidence) -> str:
    """``routed`` when the only evidence is a gateway route on a store that keeps no
    heartbeats (it stays as long as the gateway routes that chat there: not a passing
    state, docs/store.md §10.4), else the verdict."""
    if verdict == "maybe_live" and evidence and all(e.source == "gateway" and not e.blocks for e in evidence):
        return "routed"
    return verdict


def _evidence_text(evidence) -> str:
    return "; ".join(f"{e.source}: {e.detail}" for e in evidence[:3])


def plan_units(store: Store, conn, caps, criteria: Criteria, now: float | None = None) -> Preview:
    """The preview of a prune of ``store`` (read-only, any connection)."""
    now = time.time() if now is None else now
    out = Preview()
    for item in retention.not_empty(conn, caps, criteria, now):
        out.spared.append(Spared([item.session_id], "not_empty", item.detail))
    chosen = retention.candidates(conn, caps, criteria, now)
    if not chosen:
        return out
    graph = retention.read_graph(conn, caps)
    in_chains = set(graph.compression_parent) | set(graph.compression_parent.values())
    groups: dict[str, list[str]] = {}
    for sid in chosen:
        lineage = graph.lineage(sid) if sid in in_chains else [sid]
        groups.setdefault(lineage[0], lineage)
    covered: dict[str, str] = {}  # session id -> root of the unit taking it along
    pending: list[tuple[str, list[str], list[str]]] = []
    for root, lineage in groups.items():
        outside = [s for s in lineage if s not in chosen]
        if outside:
            out.spared.append(Spared([s for s in lineage if s in chosen], "lineage",
                                     f"its conversation has {len(outside)} segment(s) the criteria do not select "
                                     f"({', '.join(outside[:3])}{'…' if len(outside) > 3 else ''}); "
                                     "a compression lineage goes only as a whole"))
            continue
        delegates = graph.delegate_descendants(lineage)
        pending.append((root, lineage, delegates))
        for d in delegates:
            covered.setdefault(d, root)
    ids = [s for _, lin, dels in pending for s in lin + dels]
    ended = retention.column_values(conn, caps, "ended_at", ids)
    pinned = {k for k, v in retention.column_values(conn, caps, "pinned", ids).items() if v}
    archived = archived_among(conn, caps, criteria, ids)
    index = live_mod.live_sessions(store, conn, caps, now)
    stats = retention.message_stats(conn, ids)
    staying: dict[str, str] = {}  # root of a spared unit -> why
    delegated = [root for root, _, _ in pending if root not in covered and root in graph.children_of_someone]
    held_by = pinned_delegators(conn, caps, delegated)
    for root, lineage, delegates in pending:
        if root in covered:
            continue  # a delegate of another unit's session: judged with that unit
        unit_ids = lineage + delegates
        spare = _spare_reason(unit_ids, delegates, ended, pinned, index, graph) or _archived_reason(unit_ids, archived)
        if spare is None and root in held_by:
            spare = ("pinned", f"a delegate child of the pinned session {held_by[root]}: the pin keeps the work it "
                               "delegated too")
        if spare:
            out.spared.append(Spared(unit_ids, *spare))
            staying[root] = spare[0]
            continue
        first = chosen.get(root, {})
        unit = Unit(root, list(lineage), list(delegates), title=first.get("title"), source=first.get("source"))
        for sid in unit_ids:
            found = stats.get(sid)
            if found:
                unit.rows += found.rows
                unit.content_bytes += found.content_bytes
        ends = [ended[s] for s in lineage if isinstance(ended.get(s), (int, float))]
        unit.ended_at = max(ends) if ends else None
        inside = set(unit_ids)
        unit.parents = sorted({p for p, kids in graph.children.items() if p not in inside
                               for k in kids if k in inside}) if graph.children_of_someone & inside else []
        out.units.append(unit)
    for root, lineage, _delegates in pending:
        if root in covered and covered[root] in staying:
            out.spared.append(Spared(lineage, "with_parent", f"a delegate child of {covered[root]}, which stays "
                                     f"({staying[covered[root]].replace('_', ' ')}): it goes only with its parent"))
    files = session_files_by_id(store, [s for u in out.units for s in u.ids])
    for unit in out.units:
        unit.files = sum(len(files.get(s, ())) for s in unit.ids)
    out.units.sort(key=lambda u: (u.ended_at if u.ended_at is not None else 0.0, u.root))
    return out


def archived_among(conn, caps, criteria: Criteria, ids: list[str]) -> set[str]:
    """Those of ``ids`` that are archived and so stay (empty with
    ``criteria.include_archived`` or on a store without the ``archived`` column)."""
    if criteria.include_archived:
        return set()
    return {k for k, v in retention.column_values(conn, caps, "archived", ids).items() if v}


def _archived_reason(unit_ids, archived: set[str]) -> tuple[str, str] | None:
    held = sorted(s for s in unit_ids if s in archived)
    if not held:
        return None
    return "archived", (f"archived ({', '.join(held[:3])}): as upstream's `hermes sessions prune`, a prune spares "
                        "archived sessions unless archived sessions are included (--include-archived)")


def _spare_reason(unit_ids, delegates, ended, pinned, index, graph) -> tuple[str, str] | None:
    """Why a unit stays, as ``(reason, detail)``, or None when it may go."""
    held = sorted(s for s in unit_ids if s in pinned)
    if held:
        return "pinned", (f"pinned ({', '.join(held[:3])}): Hermes treats a pin as a durable keep, "
                          "so no prune takes it; unpin it first")
    open_delegates = [d for d in delegates if ended.get(d) is None]
    if open_delegates:
        return "open_delegate", f"delegate child {', '.join(open_delegates[:3])} has not ended"
    for sid in unit_ids:
        verdict = index.verdict(sid)
        if verdict != "not_live":
            return _live_reason(verdict, index.evidence(sid)), \
                f"{sid} looks {verdict.replace('_', ' ')} ({_evidence_text(index.evidence(sid))})"
    inside = set(unit_ids)
    for sid in unit_ids:
        for child in graph.children.get(sid, ()):
            verdict = index.verdict(child)
            if child not in inside and verdict != "not_live":  # its parent link would be written
                return _live_reason(verdict, index.evidence(child)), (
                    f"{child}, a child this prune would detach, looks {verdict.replace('_', ' ')} "
                    f"({_evidence_text(index.evidence(child))})")
    return None


def pinned_delegators(conn, caps, ids: list[str]) -> dict[str, str]:
    """``id -> pinned ancestor`` for those of ``ids`` that are delegate children
    (recursively) of a pinned session: a subagent's work belongs to the
    conversation that delegated it, so a pin there keeps it too."""
    if not caps.has("sessions", "pinned") or not caps.has("sessions", "parent_session_id"):
        return {}
    graph = Lineage(conn, caps.columns("sessions"))
    found = {}
    for sid in ids:
        node, seen = graph.get(sid), {sid}
        for _ in range(UP_CAP):
            parent = graph.parent(node) if node else None
            if not parent or parent.get("missing") or parent["edge"] != "delegate" or parent["id"] in seen:
                break
            seen.add(parent["id"])
            row = conn.execute("SELECT pinned FROM sessions WHERE id = ?", (parent["id"],)).fetchone()
            if row and row[0]:
                found[sid] = parent["id"]
                break
            node = parent
    return found


def related(units: list[Unit]) -> list[list[Unit]]:
    """Units in groups that must share a batch, parents first.

    A unit holding the parent of another unit's session (a branch or reset child,
    a delegate of a release that marked none) detaches that child when it runs. In
    one transaction, parent first, the child's own export still reads the link (the
    export reads the committed store), and the parent's entry records the child as
    detached: the two trash entries then restore in either order with the link
    back. Split over two transactions one of those records would be lost.
    """
    owner = {sid: n for n, unit in enumerate(units) for sid in unit.ids}
    group = list(range(len(units)))

    def find(i):
        while group[i] != i:
            group[i] = group[group[i]]
            i = group[i]
        return i

    for n, unit in enumerate(units):
        for parent in unit.parents:
            if parent in owner:
                group[find(n)] = find(owner[parent])
    members: dict[int, list[int]] = {}
    for n in range(len(units)):
        members.setdefault(find(n), []).append(n)
    out = []
    for root in sorted(members, key=lambda r: min(members[r])):
        ordered, placed, pending = [], set(), list(members[root])
        while pending:  # parents first (a unit whose parents are all placed, or outside the group)
            ready = [n for n in pending if all(owner.get(p) in placed or owner.get(p) is None
                                               or owner.get(p) == n for p in units[n].parents)] or pending[:1]
            for n in ready:
                ordered.append(units[n])
                placed.add(n)
            pending = [n for n in pending if n not in placed]
        out.append(ordered)
    return out


def batches(units: list[Unit], size: int = BATCH_UNITS, max_rows: int = BATCH_ROWS) -> list[list[Unit]]:
    """Units in batches of at most ``size`` units and about ``max_rows`` message rows
    (one unit, or one group of related units, bigger than that is a batch of its
    own); related units share a batch, parents first (:func:`related`)."""
    out: list[list[Unit]] = []
    current: list[Unit] = []
    rows = 0
    for group in related(units):
        weight = sum(u.rows for u in group)
        if current and (len(current) + len(group) > size or rows + weight > max_rows):
            out.append(current)
            current, rows = [], 0
        current.extend(group)
        rows += weight
    if current:
        out.append(current)
    return out


# --------------------------------------------------------------------------- the write

def qualify(store: Store, conn, caps, plan: DeletePlan, criteria: Criteria, now: float) -> Spared | None:
    """Judge one unit's fresh deletion plan (inside or before the transaction):
    None when it may go, else why not. Liveness is the plan's own, per session."""
    ids = plan.target_ids
    if not plan.exists:
        return Spared([plan.session_id], "gone", "no longer in the store")
    segments = [t.id for t in plan.targets if t.kind != "delegate"]
    delegates = [t.id for t in plan.targets if t.kind == "delegate"]
    unmatched = sorted(set(segments) - retention.matching(conn, caps, criteria, now, segments))
    if unmatched:
        return Spared(ids, "changed", f"{', '.join(unmatched[:3])} no longer match(es) the criteria "
                                      "(written, reopened or continued since the plan)")
    ended = retention.column_values(conn, caps, "ended_at", ids)
    pinned = {k for k, v in retention.column_values(conn, caps, "pinned", ids).items() if v}
    held = sorted(s for s in ids if s in pinned)
    if held:
        return Spared(ids, "pinned", f"pinned ({', '.join(held[:3])}): spared")
    by = pinned_delegators(conn, caps, [plan.session_id])
    if by:
        return Spared(ids, "pinned", f"a delegate child of the pinned session {by[plan.session_id]}: spared")
    archived = _archived_reason(ids, archived_among(conn, caps, criteria, ids))
    if archived:
        return Spared(ids, *archived)
    open_delegates = [d for d in delegates if ended.get(d) is None]
    if open_delegates:
        return Spared(ids, "open_delegate", f"delegate child {', '.join(open_delegates[:3])} has not ended")
    if plan.verdict != "not_live":
        reasons = "; ".join(f"{sid}: {e.source}: {e.detail}" for sid, e in plan.evidence[:3])
        if plan.held_children:
            return Spared(ids, _live_reason(plan.verdict, [e for _, e in plan.evidence]),
                          f"{plan.override_blocker} ({reasons})")
        return Spared(ids, _live_reason(plan.verdict, [e for _, e in plan.evidence]),
                      f"looks {plan.verdict.replace('_', ' ')} ({reasons})")
    return None


class PruneWrite(Write):
    """One batch of a prune: every unit of it deleted into the trash in ONE
    transaction (module docstring). ``roots`` are the units' lineage roots,
    ``expected`` their target ids as previewed (a unit whose targets changed is
    dropped as ``changed``)."""

    action = PRUNE_ACTION
    verb = "pruned"

    def __init__(self, units: list[Unit], criteria: Criteria, label: str = "", run_note: str = ""):
        self.units = list(units)
        self.criteria = criteria
        self.label = label
        self.note = run_note
        self.plans: list[DeletePlan] = []
        self.spared: list[Spared] = []
        self.entries: list[trash.TrashEntry] = []
        self.done: list[tuple[DeletePlan, trash.TrashEntry, dict]] = []

    def authorize(self, writer, store, outcome):
        self.actor_label = writer.actor_label
        if writer.actor is not None and not writer.actor.has_perm("sessions_app.delete_sessions"):
            raise Refused("pruning needs the delete_sessions permission")

    def check(self, ctx):
        plans, spared = [], []
        for unit in self.units:
            plan = build_plan(ctx.store, ctx.conn, ctx.caps, unit.root, lineage=True, now=ctx.now, closed_counts=True,
                              inside=ctx.inside)
            why = qualify(ctx.store, ctx.conn, ctx.caps, plan, self.criteria, ctx.now)
            if why is None and sorted(plan.target_ids) != sorted(unit.ids):
                new = sorted(set(plan.target_ids) - set(unit.ids))
                why = Spared(plan.target_ids or [unit.root], "changed",
                             f"its sessions changed since the preview ({', '.join(new[:3]) or 'fewer sessions'}); "
                             "left for the next run")
            if why is None:
                plans.append(plan)
            else:
                spared.append(why)
        self.plans, self.spared = plans, spared
        ctx.outcome.report = self.report()
        if not plans:
            reasons = "; ".join(f"{', '.join(s.session_ids[:2])}: {s.detail}" for s in spared[:3])
            if any(s.reason in HELD for s in spared):
                raise Refused(f"no session of this batch may go now ({reasons})")
            raise Skip(f"nothing of this batch to prune any more ({reasons})")

    def execute(self, ctx):
        touched: set[str] = set()
        for plan in self.plans:
            if touched & (set(plan.target_ids) | {c["id"] for c in plan.detach}):
                # An earlier unit of this batch changed this one's rows (a child it
                # detached, a parent it removed): plan it again on the writer's view.
                plan = build_plan(ctx.store, ctx.conn, ctx.caps, plan.session_id, lineage=True, now=ctx.now,
                                  closed_counts=True, inside=True)
                why = qualify(ctx.store, ctx.conn, ctx.caps, plan, self.criteria, ctx.now)
                if why is not None:
                    self.spared.append(why)
                    continue
            entry = trash.new_entry(ctx.store.key, plan.session_id, store_path=str(ctx.store.path),
                                    session_id=plan.session_id, lineage=True, actor=self.actor_label,
                                    pruned=self.criteria.as_dict())
            self.entries.append(entry)
            counts = export_and_delete(ctx.conn, ctx.caps, ctx.store, plan, entry)
            self.done.append((plan, entry, counts))
            touched |= set(plan.target_ids) | {c["id"] for c in plan.detach}
        if not self.done:
            raise Changed("every unit of the batch changed inside the transaction")

    def discard(self, outcome):
        for entry in self.entries:
            trash.discard(entry)
        self.entries, self.done = [], []

    def after_commit(self, writer, store, outcome):
        totals: dict[str, int] = {}
        outcome.changes = []
        for plan, entry, counts in self.done:
            counts = dict(counts, detached=len(plan.detach))
            entry.update(state="deleted", deleted_at=time.time(), targets=plan.target_ids,
                         targets_info=[{"id": t.id, "kind": t.kind, "title": t.title, "source": t.source,
                                        "messages": t.messages} for t in plan.targets],
                         detached=plan.detach, counts=counts, override=False,
                         backup=outcome.backup.path if outcome.backup else "")
            moved, problems = move_files_into(store, plan, entry)
            counts["files"] = len(moved)
            entry.update(files=moved, file_problems=problems, counts=counts)
            outcome.problems += problems
            for table, n in counts.items():
                totals[table] = totals.get(table, 0) + n
            outcome.changes.append({"op": "delete", "table": "sessions", "key": {"session_id": plan.target_ids},
                                    "after": counts.get("messages", 0), "trash_entry": entry.id})
        outcome.counts = totals
        outcome.entry = self.done[0][1] if self.done else None
        outcome.report = self.report()
        outcome.done = (f"moved {sum(len(p.target_ids) for p, _, _ in self.done)} session(s) in "
                        f"{len(self.done)} unit(s) into the trash: {totals.get('messages', 0)} message row(s), "
                        f"{totals.get('files', 0)} file(s)"
                        + (f"; {len(self.spared)} unit(s) spared" if self.spared else ""))

    def verify(self, store, outcome):
        ids = [sid for plan, _, _ in self.done for sid in plan.target_ids]
        left = set()
        with store.read() as conn:
            for i in range(0, len(ids), retention.PARAM_CHUNK):
                chunk = ids[i:i + retention.PARAM_CHUNK]
                ph = ",".join("?" * len(chunk))
                left.update(r[0] for r in conn.execute(f"SELECT id FROM sessions WHERE id IN ({ph}) UNION "
                                                       f"SELECT session_id FROM messages WHERE session_id IN ({ph})",
                                                       chunk + chunk))
        return f"verify: {len(left)} pruned session(s) still have rows: {', '.join(sorted(left)[:3])}" if left else None

    def settle(self, outcome):
        outcome.rows_changed = sum(v for v in outcome.counts.values() if isinstance(v, int))
        super().settle(outcome)

    def report(self) -> dict:
        """The batch in the run report: units pruned (with their trash entries) and spared."""
        return {
            "pruned": [{"root": p.session_id, "sessions": p.target_ids, "messages": p.messages,
                        "trash_entry": e.id} for p, e, _ in self.done],
            "spared": [s.as_json() for s in self.spared],
        }

    def audit_fields(self, store, outcome):
        pruned = [sid for plan, _, _ in self.done for sid in plan.target_ids]
        summary = {"criteria": self.criteria.as_dict(), "batch": self.label, **self.report(),
                   "units_planned": [u.root for u in self.units]}
        if outcome.problems:
            summary["problems_after_commit"] = outcome.problems
        return {"session_ids": pruned or [u.root for u in self.units], "plan": jsonable(summary),
                "changes": jsonable(outcome.changes)}
