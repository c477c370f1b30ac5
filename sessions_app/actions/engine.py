"""Repairs on the guarded write (docs/architecture.md §5.1).

:class:`Applier` applies repair plans for one run, the same way for the browser
and for cron: each plan becomes a :class:`RepairWrite` that the guarded writer
performs (hazards, liveness, re-read of ``Plan.guard``, backup, ``BEGIN
IMMEDIATE``, the repair's statements, verify, one audit event). Multi-store
repairs (moves) orchestrate their stores themselves through the same writer.
:meth:`Applier.apply_all` applies one store's plans in the order their
dependencies ask for (``registry.RUNS_AFTER``, docs/architecture.md §5.2), planning a
repair again once one it depends on was applied.
"""

from __future__ import annotations

import time
from typing import Callable

from ..checks import run_store_checks
from ..stores.store import Store
from .base import Action, Plan
from .guarded import (
    Changed, GuardedWriter, Outcome, Refused, Skip, Write, WriteContext, jsonable, refuse_live,
)
from .registry import ACTIONS, order, plan_for, plan_from_dict, waits_for  # noqa: F401  (the engine's public names)


class RepairWrite(Write):
    """One repair plan as a guarded write: the guard re-read before and inside the
    transaction, the session idle (unless the action says otherwise)."""

    def __init__(self, action: Action, plan: Plan):
        self.repair, self.plan = action, plan
        self.action = plan.action
        self.writes_store = plan.writes_store
        self.loaded = None

    def authorize(self, writer, store, outcome):
        self.repair.validate(store, self.plan)  # ValueError: invalid plan
        if self.plan.blocked:
            raise Skip(self.plan.blocked)
        if writer.actor is not None and not writer.actor.has_perm(f"sessions_app.{self.repair.permission}"):
            raise Refused(f"{writer.actor_label} lacks the {self.repair.permission} permission this action needs")

    def check(self, ctx: WriteContext) -> None:
        if self.repair.needs_idle_session:
            refuse_live(ctx.store, ctx.conn, ctx.caps, self.repair.liveness_ids(self.plan), time.time(),
                        closed_counts=self.repair.closed_activity_counts, inside=ctx.inside)
        if jsonable(self.repair.state(ctx.conn, ctx.caps, self.plan)) != self.plan.guard:
            raise Changed("re-read inside the write transaction" if ctx.inside else "re-read before writing")
        if not ctx.inside:
            self.loaded = self.repair.load(ctx.store, ctx.conn, ctx.caps, self.plan)

    def execute(self, ctx: WriteContext) -> None:
        if self.loaded is None:
            ctx.outcome.rows_changed = self.repair.write(ctx.conn, ctx.caps, self.plan)
        else:
            ctx.outcome.rows_changed = self.repair.write(ctx.conn, ctx.caps, self.plan, self.loaded)

    def verify(self, store, outcome):
        with store.read() as conn:
            return self.repair.verify_store(store, conn, store.capabilities(conn), self.plan)

    def verified(self, outcome, problem):
        # A repair that does not hold is a failure for cron to see (exit 2).
        if problem:
            outcome.status, outcome.reason = "failed", f"verify: {problem}"
        else:
            outcome.status, outcome.reason = "applied", self.repair.after_verify(self.plan)

    def settle(self, outcome):
        pass  # a repair that committed but does not verify stays failed (cron exits 2)

    def audit_fields(self, store, outcome):
        return dict(
            check_code=self.plan.check,
            session_ids=[self.plan.session_id] if self.plan.session_id else [],
            plan=jsonable(self.plan.as_dict()),
            changes=jsonable([c.__dict__ for c in self.plan.changes]),
            rows_changed=outcome.rows_changed,
        )


class Applier(GuardedWriter):
    """Applies repair plans for one run; remembers which stores were backed up."""

    def apply(self, store: Store, plan: Plan) -> Outcome:
        """Apply one plan; never raises for store problems (they become the outcome)."""
        return self.perform(store, RepairWrite(ACTIONS[plan.action], plan))

    def apply_all(self, store: Store, plans: list[Plan], *, confirmed: bool = False,
                  done: Callable[[Outcome], None] | None = None) -> list[Outcome]:
        """Apply ``plans`` of ``store`` in dependency order (``registry.order``); one
        ``Outcome`` per plan, in that order. Never raises for store problems.

        A plan whose session had a repair it depends on applied earlier in this call
        (``registry.waits_for``) is planned again from a fresh check of that session
        first: when the finding is gone it is ``skipped`` ("not needed any more"),
        never applied stale. ``confirmed`` plans (previewed and signed by an admin)
        are applied only if planning again gives the same changes; otherwise they are
        skipped, to be previewed again. ``done(outcome)`` is called after each plan.
        """
        outcomes: list[Outcome] = []
        applied: list[Plan] = []
        for plan in order(list(plans)):
            after = waits_for(plan, applied)
            outcome = None
            if after and plan.session_id is not None:
                plan, outcome = _plan_again(store, plan, after, confirmed)
            if outcome is None:
                outcome = self.apply(store, plan)
                if outcome.status == "applied":
                    applied.append(plan)
            outcomes.append(outcome)
            if done:
                done(outcome)
        return outcomes

    def steps(self, store, write, outcome):
        # A multi-store repair (a move) runs its stores' writes itself, through this writer.
        if isinstance(write, RepairWrite) and write.repair.multi_store:
            write.repair.run(self, store, write.plan, outcome)
        else:
            super().steps(store, write, outcome)


def _plan_again(store: Store, plan: Plan, after: list[str], confirmed: bool) -> tuple[Plan, Outcome | None]:
    """``plan`` made again from a fresh read-only check of its session after the
    repairs ``after`` were applied: ``(new plan, None)`` to apply it, or ``(plan,
    outcome)`` when it is not to be applied."""
    names = ", ".join(after)
    report = run_store_checks(store, session_id=plan.session_id, only=[plan.check])
    if report.status != "ok":
        return plan, Outcome(plan, "skipped", f"not applied: after {names} the store could not be checked again "
                                              f"({report.status}: {report.error}); retry later")
    finding = next((f for f in report.findings if f.session_id == plan.session_id and f.heal == plan.action), None)
    if finding is None:
        return plan, Outcome(plan, "skipped", f"not needed any more: {names} healed it")
    with store.read() as conn:
        fresh = plan_for(store, conn, store.capabilities(conn), finding)
    if fresh is None:
        return plan, Outcome(plan, "skipped", f"not needed any more: {names} healed it")
    if confirmed and (fresh.changes != plan.changes or fresh.params != plan.params):
        return plan, Outcome(plan, "skipped", f"{names} changed what this repair was previewed against; "
                                              "preview it again")
    return fresh, None
