"""The two store writes of a move (``MoveToOwnerStore.run`` in ``move.py``) and the
check that a copy is exactly what the move writes.

:class:`CopyIntoTarget` copies the moved sessions from one read snapshot of the
source into one guarded write transaction on the target and verifies the
copy there before ``COMMIT`` (:func:`copy_difference`); :class:`RemoveFromSource`
then deletes them from the source, and only once that committed do their files
follow. Both are guarded writes (``guarded.py``): each store gets its own
backup, its own liveness refusal and its own audit event.
"""

from __future__ import annotations

import re
import time

from ..stores.store import Store
from .base import one
from .guarded import Changed, Mismatch, Write, jsonable
from .rowcopy import exact_select, fingerprint, quote

# Messages columns the target computes itself (upstream import_moved_session,
# docs/store.md §11.1): the insert trigger derives display_order from the copied
# display_identity.
NOT_COPIED = ("id", "display_order")
# Session columns a move may rewrite (detached parent, suffixed title, new owner):
# the only ones in which a copy may differ from its source.
SESSION_FREE = ("title", "profile_name", "parent_session_id")
PROMPT_REFS = ("system_prompt_hash", "tool_names")
HASH_RE = re.compile(r"^[0-9a-f]{64}$")


def message_columns(caps, tcaps) -> list[str]:
    return [c for c in caps.columns("messages") if tcaps.has("messages", c) and c not in NOT_COPIED]


def messages_print(conn, columns, session_id) -> list:
    return fingerprint(conn, "messages", columns, "session_id = ?", (session_id,), order="id")


def target_prompts(plan, tcaps) -> list[str]:
    """The prompt rows the copy carries (none when the target has no prompt table)."""
    return plan.params["prompts"] if tcaps.has_table("system_prompts") else []


def unresolved_refs(src, columns, prompts, session_id) -> dict:
    """Prompt references of the session the target could not resolve: written NULL."""
    out = {}
    for col in PROMPT_REFS:
        value = one(src, f"SELECT {quote(col)} FROM sessions WHERE id = ?", (session_id,)) if col in columns else None
        if isinstance(value, str) and HASH_RE.match(value) and value not in prompts:
            out[col] = None
    return out


def _exact_row(conn, columns, session_id) -> list | None:
    row = conn.execute(f"SELECT {exact_select(columns)} FROM sessions WHERE id = ?", (session_id,)).fetchone()
    return None if row is None else [tuple(row[n:n + 2]) for n in range(0, len(row), 2)]


def copy_difference(src, caps, dst, tcaps, plan, session_id) -> str | None:
    """Why ``dst``'s ``session_id`` is not the copy step 3 writes from ``src``, or None.

    Compared exactly, over the columns both stores have: every message row in
    ``messages.id`` order, the session row except :data:`SESSION_FREE` (prompt
    references the target cannot resolve are expected NULL), and the usage rows
    (when both stores keep them). Used for the check before ``COMMIT`` and to tell
    an interrupted move's copy from another session with the same id.
    """
    if not one(dst, "SELECT 1 FROM sessions WHERE id = ?", (session_id,)):
        return f"{session_id} is missing from the target"
    cols = message_columns(caps, tcaps)
    if messages_print(src, cols, session_id) != messages_print(dst, cols, session_id):
        return f"the messages of {session_id} differ"
    scols = [c for c in caps.columns("sessions") if tcaps.has("sessions", c) and c not in SESSION_FREE]
    expected = _exact_row(src, scols, session_id)
    if expected is None:
        return f"{session_id} is missing from the source"
    for col in unresolved_refs(src, scols, target_prompts(plan, tcaps), session_id):
        expected[scols.index(col)] = (None, "null")
    if expected != _exact_row(dst, scols, session_id):
        return f"the session row of {session_id} differs"
    if caps.has_table("session_model_usage") and tcaps.has_table("session_model_usage"):
        ucols = [c for c in caps.columns("session_model_usage") if tcaps.has("session_model_usage", c)]
        order = ", ".join(quote(c) for c in ucols)
        prints = [fingerprint(conn, "session_model_usage", ucols, "session_id = ?", (session_id,), order=order)
                  for conn in (src, dst)]
        if prints[0] != prints[1]:
            return f"the usage rows of {session_id} differ"
    return None


class CopyIntoTarget(Write):
    """Steps 3 and 4 on the target store: copy from one read snapshot of the
    source, verified inside the target's transaction before ``COMMIT`` (a
    difference rolls the copy back). ``differs`` / ``failure`` say why it did not
    commit, for the source's outcome."""

    action = "move_to_owner_store"

    def __init__(self, move, plan, source: Store, caps, to_copy: list[str]):
        self.move, self.plan, self.source, self.caps, self.to_copy = move, plan, source, caps, to_copy
        self.differs = ""
        self.failure = ""

    def check(self, ctx):
        if not ctx.inside:
            self.move._refuse(ctx.store, ctx.conn, ctx.caps, self.plan.params["members"], ctx.now)
        if jsonable(self.move.target_state(ctx.conn, ctx.caps, self.plan)) != self.plan.guard["target"]:
            raise Changed(f"{ctx.store.key} re-read " + ("inside the write transaction" if ctx.inside
                                                         else "before writing"))

    def execute(self, ctx):
        with self.source.read() as src:
            src.execute("BEGIN")  # one snapshot: the copy and its check read the same source
            try:
                if jsonable(self.move.state(src, self.caps, self.plan)) != self.plan.guard["source"]:
                    raise Changed(f"{self.source.key} re-read before copying")
                copied = self.move._copy(src, self.caps, ctx.conn, ctx.caps, self.plan, self.to_copy)
                problem = self.move._verify_copy(src, self.caps, ctx.conn, ctx.caps, self.plan, self.to_copy)
                if problem:
                    self.differs = problem
                    raise Mismatch(problem)  # rolls the copy back
            finally:
                if src.in_transaction:
                    src.execute("ROLLBACK")
        ctx.outcome.rows_changed = copied
        ctx.outcome.done = (f"copied {len(self.to_copy)} session(s) from {self.source.key} ({copied} rows), "
                            "verified before COMMIT; the source copy is removed next")

    def describe(self, outcome):
        if outcome.status == "applied":
            return
        self.failure = outcome.reason
        outcome.reason = (f"verify before COMMIT: {self.differs}; rolled back, nothing written" if self.differs
                          else f"nothing written: {outcome.reason}")

    def audit_fields(self, store, outcome):
        return _move_audit(self.plan, outcome)


class RemoveFromSource(Write):
    """Step 5 on the source store: liveness and the plan's state again, then the
    moved rows go; step 6 (the files follow) only once that committed."""

    action = "move_to_owner_store"

    def __init__(self, move, plan, target: Store):
        self.move, self.plan, self.target = move, plan, target
        self.moved: list[str] = []
        self.unmoved: list[str] = []

    def check(self, ctx):
        self.move._refuse(ctx.store, ctx.conn, ctx.caps, self.plan.params["members"], time.time(), ctx.inside)
        if jsonable(self.move.state(ctx.conn, ctx.caps, self.plan)) != self.plan.guard["source"]:
            raise Changed("re-read inside the write transaction" if ctx.inside else "re-read before writing")

    def execute(self, ctx):
        ctx.outcome.rows_changed = self.move._delete(ctx.conn, ctx.caps, self.plan)

    def after_commit(self, writer, store, outcome):
        self.moved, self.unmoved = self.move._move_files(store, self.target, self.plan)

    def verify(self, store, outcome):
        with store.read() as conn:
            left = [sid for sid in self.plan.params["members"]
                    if one(conn, "SELECT 1 FROM sessions WHERE id = ?", (sid,))]
        return f"verify: {', '.join(left)} still in {store.key}" if left else None

    def verified(self, outcome, problem):
        outcome.status, outcome.reason = ("failed", problem) if problem else ("applied", "")


def _move_audit(plan, outcome) -> dict:
    return dict(check_code=plan.check, session_ids=[plan.session_id] if plan.session_id else [],
                plan=jsonable(plan.as_dict()), changes=jsonable([c.__dict__ for c in plan.changes]),
                rows_changed=outcome.rows_changed)
