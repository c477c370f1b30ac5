"""Applying one confirmed deletion on the guarded write (the only action that
removes message rows, ground rule 3).

Order of work (``DeleteWrite`` performed by ``GuardedWriter.perform``): the
token's nonce must not be used yet -> re-plan read-only and compare the
fingerprint the confirmation was signed with (targets, last message id and row
count per target, children to detach) -> judge liveness (live, or a child to detach live or maybe
live: refused; maybe live: refused unless an admin typed the session id and every lease holder is
provably dead) -> back up the store (once per run) -> the guarded write transaction ->
plan and judge again inside the transaction -> export every row that will go
into the trash (committed to the trash file before the store is touched) ->
delete -> ``COMMIT`` -> mark the trash entry ``deleted`` -> move the files ->
verify -> the one audit event. Once the store committed, the outcome is
``applied`` with the real row counts whatever fails afterwards (a file that
would not move, the verify read): the reason then says "deleted, but …".
"""

from __future__ import annotations

import time

from ... import trash
from ...stores.store import Store
from ..files import move_without_loss
from ..guarded import Mismatch, Outcome, Refused, Write, jsonable
from .plan import (
    DELETE_ACTION, DEPENDENTS, DETACHED_ROWS, DeletePlan, _render, build_plan, describe_change, session_files,
)
from .tokens import used_by


def decide(plan: DeletePlan, session_id: str, override: str | None, may_override: bool) -> bool:
    """True when an override is used; raises :class:`Refused` when the deletion may not happen."""
    if plan.verdict == "not_live":
        return False
    reasons = "; ".join(f"{sid}: {e.source}: {e.detail}" for sid, e in plan.evidence[:4])
    if plan.held_children:  # never overridden: the child stays, and would be written under its agent
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


def verify_deleted(store: Store, plan: DeletePlan) -> str | None:
    """None when no row of the targets is left (fresh read-only connection)."""
    ids = plan.target_ids
    ph = "(" + ",".join("?" * len(ids)) + ")"
    with store.read() as conn:
        left = conn.execute(f"SELECT COUNT(*) FROM sessions WHERE id IN {ph}", ids).fetchone()[0]
        rows = conn.execute(f"SELECT COUNT(*) FROM messages WHERE session_id IN {ph}", ids).fetchone()[0]
    if left or rows:
        return f"verify: {left} session row(s) and {rows} message row(s) still present"
    return None


class DeleteWrite(Write):
    """One confirmed deletion (``item`` of a confirmation token) as a guarded write."""

    action = DELETE_ACTION
    verb = "deleted"

    def __init__(self, item: dict, override: str | None = None, may_override: bool = False):
        self.session_id = str(item.get("session_id", ""))
        self.lineage = bool(item.get("lineage"))
        self.expected = item.get("fingerprint") or {}
        self.nonce = str(item.get("nonce") or "")
        self.typed, self.may_override = override, may_override
        self.entry: trash.TrashEntry | None = None

    def authorize(self, writer, store, outcome):
        if not self.nonce:
            raise Refused("this confirmation carries no nonce (issued by an older version); confirm again")
        used = used_by(self.nonce)
        if used is not None:
            raise Refused(f"this confirmation was already used by the deletion recorded as audit event "
                          f"#{used.pk}; nothing deleted, confirm again")
        self.actor_label = writer.actor_label
        self.run_id = writer.run.pk if writer.run is not None else None

    def check(self, ctx):
        plan = build_plan(ctx.store, ctx.conn, ctx.caps, self.session_id, self.lineage, time.time(),
                          inside=ctx.inside)
        if ctx.inside:  # the files as listed before the lock (they are listed again when they move)
            plan.files = ctx.outcome.plan.files
        ctx.outcome.plan = plan
        if not plan.exists:
            raise Refused("the session no longer exists; nothing deleted")
        if plan.fingerprint != self.expected:
            ctx.outcome.changed = True
            raise Refused(f"changed since the confirmation ({describe_change(self.expected, plan.fingerprint)}); "
                          + ("nothing deleted" if ctx.inside else "nothing deleted, look at the evidence again"))
        ctx.outcome.override = decide(plan, self.session_id, self.typed, self.may_override)
        if not ctx.inside:
            # The trash entry exists before the transaction: the rows go into it
            # (and are committed there) before the store loses them.
            # Nonce and run let a redelivered job tell its own finished deletion (bulk.py).
            self.entry = trash.new_entry(ctx.store.key, self.session_id, store_path=str(ctx.store.path),
                                         session_id=self.session_id, lineage=self.lineage, actor=self.actor_label,
                                         nonce=self.nonce, run=self.run_id)

    def execute(self, ctx):
        ctx.outcome.counts = export_and_delete(ctx.conn, ctx.caps, ctx.store, ctx.outcome.plan, self.entry)

    def discard(self, outcome):
        if self.entry is not None:
            trash.discard(self.entry)

    def after_commit(self, writer, store, outcome):
        plan, entry = outcome.plan, self.entry
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
            outcome.done = (f"OVERRIDE of a maybe-live verdict by {writer.actor_label} (typed the session id; "
                            f"every holder provably dead); " + outcome.done)
        # The entry says "deleted" before any file moves into it: a retry or a purge
        # never takes it for an unfinished deletion while it holds the only copy.
        entry.update(state="deleted", deleted_at=time.time(), targets=plan.target_ids,
                     targets_info=[{"id": t.id, "kind": t.kind, "title": t.title, "source": t.source,
                                    "messages": t.messages} for t in plan.targets],
                     detached=plan.detach, counts=dict(outcome.counts), override=outcome.override,
                     backup=outcome.backup.path if outcome.backup else "")
        moved, problems = move_files_into(store, plan, entry)
        outcome.counts["files"] = len(moved)
        outcome.rows_changed = _rows(outcome.counts)
        outcome.changes += [{"op": "move", "table": "file", "key": {"name": n},
                             "before": str(store.profile.sessions_dir / n), "after": str(entry.files_dir / n)}
                            for n in moved]
        outcome.done += f", {len(moved)} file(s)"
        outcome.problems += problems
        entry.update(files=moved, file_problems=problems, counts=dict(outcome.counts))

    def verify(self, store, outcome):
        return verify_deleted(store, outcome.plan)

    def settle(self, outcome):
        outcome.rows_changed = _rows(outcome.counts)
        super().settle(outcome)

    def audit_fields(self, store, outcome):
        return deletion_audit(outcome, self.session_id, self.expected.get("targets") or [self.session_id])


def _rows(counts: dict) -> int:
    return sum(v for v in counts.values() if isinstance(v, int))


def deletion_audit(outcome: Outcome, session_id: str, fallback_ids: list[str], entry=None) -> dict:
    """The audit fields shared by deletions and restores: the plan summary with the
    trash entry, the override, the token nonce and the post-commit problems."""
    entry = entry or outcome.entry
    plan = outcome.plan
    summary = plan.summary() if isinstance(plan, DeletePlan) else {}
    summary.update({"session_id": session_id, "trash_entry": entry.id if entry else "",
                    "trash_path": str(entry.path) if entry else "", "override": outcome.override,
                    "changed_since_confirmation": outcome.changed})
    if outcome.report:
        summary["report"] = outcome.report
    if outcome.nonce:
        summary["token_nonce"] = outcome.nonce  # what makes a confirmation single-use (used_by)
    if outcome.problems:
        summary["problems_after_commit"] = outcome.problems
    ids = plan.target_ids if isinstance(plan, DeletePlan) and plan.exists else fallback_ids
    fields = dict(check_code="override_live" if outcome.override else "", session_ids=list(ids),
                  plan=jsonable(summary), changes=jsonable(outcome.changes))
    if entry is not None and not outcome.plan:
        fields.update(profile=entry.profile, store_path=entry.manifest.get("store_path", ""))
    return fields


def export_and_delete(conn, caps, store, plan: DeletePlan, entry) -> dict[str, int]:
    """Inside the write transaction: export to the trash, then delete; counts per table.

    Raises :class:`Mismatch` (rolled back) when the rows deleted differ from the
    rows exported or planned.
    """
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
        # Every prompt a target references, not only those collected (plan._prompt_refs).
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


def move_files_into(store: Store, plan: DeletePlan, entry) -> tuple[list[str], list[str]]:
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
