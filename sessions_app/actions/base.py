"""Repairs: plan (read-only) -> apply (one guarded transaction) -> verify.

An action turns one finding into a concrete :class:`Plan` (which
rows change and how), computed on a read-only connection. Applying re-reads, inside
the guarded write transaction, the state the plan was made against (``Plan.guard``) and skips
when it changed (ground rule 2), so a live agent's write is never overwritten.
Applying the same plan twice changes nothing the second time.

Concrete actions implement :meth:`Action.plan`, :meth:`Action.state` (the guard,
read the same way at plan and apply time), :meth:`Action.write` and
:meth:`Action.verify`. The guarded write (``guarded.py``, through
``engine.Applier``) does hazards, liveness, backups, the transaction and the
audit event, the same for every action; ``registry.py`` lists the actions.
"""

from __future__ import annotations

import sqlite3
from dataclasses import asdict, dataclass, field
from typing import ClassVar

from ..stores.schema import Capabilities
from ..stores.store import Store
from .guarded import Changed  # noqa: F401  (actions raise it from state checks)


@dataclass
class Change:
    """One planned change: ``op`` is ``update``, ``insert`` or ``move`` (files).

    ``key`` names the row (e.g. ``{"id": "…"}``); for updates ``column``,
    ``before`` and ``after`` say what changes.
    """

    op: str
    table: str
    key: dict
    column: str | None = None
    before: object = None
    after: object = None


@dataclass
class Plan:
    """A concrete, previewable repair of one finding.

    ``blocked`` non-empty means the repair cannot be applied on this store (the
    reason says why) and ``next_step``, when set, what the admin can do about it
    (else the check's own ``next_step`` is shown); ``writes_store`` False for file-only actions (no backup).
    ``params`` carries what ``write`` needs beyond the changes.
    """

    action: str
    check: str
    profile: str
    store_path: str
    session_id: str | None
    summary: str
    changes: list[Change] = field(default_factory=list)
    guard: dict = field(default_factory=dict)
    params: dict = field(default_factory=dict)
    writes_store: bool = True
    blocked: str = ""
    next_step: str = ""
    # The messages a plan inserts from copies on disk (``recovery.Insertion``s of
    # ``recover_messages``), for its preview to show their text. Not a field on
    # purpose: the signed plan, the audit trail and a fleet host's plan_data carry
    # no message text (``dataclasses.asdict`` leaves a ClassVar out).
    inserted: ClassVar[tuple] = ()

    def as_dict(self) -> dict:
        data = asdict(self)
        data.pop("guard")
        return data


@dataclass
class ActionContext:
    """What planning sees: the store, a read-only connection, capabilities, time."""

    store: Store
    conn: sqlite3.Connection
    caps: Capabilities
    now: float


class Action:
    """Base class of a repair; subclasses set ``name`` and are listed in ``registry.py``.

    ``permission`` is the dashboard permission a user needs to apply it (checked by
    the engine and the views; cron runs have no user). ``multi_store`` actions
    (moves) implement ``run(applier, store, plan, outcome)`` themselves, reusing the
    engine's backups, liveness and audit; the engine then skips its single-store steps.
    """

    name = ""
    writes_store = True
    # Whether liveness of the finding's session must be "not live" before writing.
    needs_idle_session = True
    permission = "run_heal"
    multi_store = False

    def plan(self, ctx: ActionContext, finding) -> Plan:
        raise NotImplementedError

    def validate(self, store: Store, plan: Plan) -> None:
        """Re-check, at apply time, that a plan (possibly sent back by a browser) only
        names what this action may touch; raises ``ValueError`` otherwise."""

    # Recent activity of a session its writer has since ended does not make it
    # live (the same rule deletion and the session page use); an action where an
    # ended session may still be mid-handoff says True.
    closed_activity_counts = False

    def liveness_ids(self, plan: Plan) -> list[str]:
        """Sessions whose liveness must be ``not_live`` before writing."""
        return [plan.session_id] if plan.session_id else []

    def state(self, conn: sqlite3.Connection, caps: Capabilities, plan: Plan) -> dict:
        """The facts the plan depends on, re-read inside the write transaction."""
        raise NotImplementedError

    def write(self, conn: sqlite3.Connection, caps: Capabilities, plan: Plan) -> int:
        """Apply the plan inside an open transaction; returns rows (or files) changed."""
        raise NotImplementedError

    def verify(self, conn: sqlite3.Connection, caps: Capabilities, plan: Plan) -> str | None:
        """After commit, on a fresh read-only connection: None when the repair holds."""
        return None

    def verify_store(self, store: Store, conn: sqlite3.Connection, caps: Capabilities, plan: Plan) -> str | None:
        """:meth:`verify` for a repair that needs the store itself (its files beside it)."""
        return self.verify(conn, caps, plan)

    def load(self, store: Store, conn: sqlite3.Connection, caps: Capabilities, plan: Plan):
        """Before the write transaction (read-only): read what :meth:`write` needs from
        outside the store (files), so the write lock is held for the statements only;
        passed to ``write(conn, caps, plan, loaded)``. None: nothing to load."""
        return None

    def after_verify(self, plan: Plan) -> str:
        """Work that may follow only a verified repair (e.g. archiving a file);
        returns a note for the outcome ('' for none)."""
        return ""

    def new_plan(self, ctx: ActionContext, finding, summary: str, **kwargs) -> Plan:
        return Plan(
            action=self.name,
            check=finding.check,
            profile=ctx.store.key,
            store_path=str(ctx.store.path),
            session_id=finding.session_id,
            summary=summary,
            writes_store=self.writes_store,
            **kwargs,
        )


def one(conn: sqlite3.Connection, sql: str, params: tuple = ()):
    """First column of the first row, or None."""
    row = conn.execute(sql, params).fetchone()
    return row[0] if row else None


def row_dict(conn: sqlite3.Connection, sql: str, params: tuple = ()) -> dict | None:
    cur = conn.execute(sql, params)
    row = cur.fetchone()
    return dict(zip([d[0] for d in cur.description], row)) if row else None
