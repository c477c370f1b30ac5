"""Apply plans under the ground rules, the same way for the browser and for cron.

For each plan (design section 1, rules 2-6):

1. a blocked plan is skipped with its reason;
2. the session's liveness is checked (turn lease, compression lock, registry,
   gateway, recent activity); anything but ``not_live`` skips with the evidence;
3. the state the plan was made against is re-read and compared;
4. the store is backed up before the first write of the run (one backup per store
   per :class:`Applier`);
5. ``BEGIN IMMEDIATE``; liveness and state are checked again inside the
   transaction (nothing can change them while the write lock is held); the write;
   ``COMMIT``;
6. the repair is verified on a fresh read-only connection;
7. one :class:`~sessions_app.models.AuditEvent` records the outcome.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
from dataclasses import dataclass, field

from ..checks.files import deleted_sidecar_holders
from .. import audit
from ..models import AuditEvent
from ..stores import liveness
from ..stores.backup import BackupError, BackupRecord
from ..stores.store import Store
from ..stores.writer import StoreBusy, transaction, writer
from .base import Action, ActionContext, ActingRun, Change, Changed, Plan
from .files import RemoveLeftoverFiles
from .move import MoveToOwnerStore
from .rows import ClearStaleLease, HideDuplicates
from .session_rows import (
    CloseStaleSession, DetachFromMissingParent, InheritRoutingIdentity, RecountSession, RecreateSessionRow,
    ReopenCompressionParent, StampOwner,
)
from .transcripts import ImportJsonlTranscript

log = logging.getLogger("sessions_app.actions")

ACTIONS: dict[str, Action] = {
    action.name: action
    for action in (
        RecreateSessionRow(), DetachFromMissingParent(), ReopenCompressionParent(), RecountSession(),
        HideDuplicates(), CloseStaleSession(), StampOwner(), ClearStaleLease(), InheritRoutingIdentity(),
        RemoveLeftoverFiles(),
        ImportJsonlTranscript(), MoveToOwnerStore(),
    )
}


def normalized(value):
    """JSON round trip, so a guard compares equal before and after serialization."""
    return json.loads(json.dumps(value, default=str))


def plan_for(store: Store, conn: sqlite3.Connection, caps, finding, now: float | None = None) -> Plan | None:
    """The plan healing ``finding``, or None when no action heals its check."""
    action = ACTIONS.get(getattr(finding, "heal", None) or "")
    if action is None:
        return None
    plan = action.plan(ActionContext(store, conn, caps, now or time.time()), finding)
    plan.guard = normalized(plan.guard)
    return plan


def plan_from_dict(data: dict) -> Plan:
    """Rebuild a plan serialized with ``dataclasses.asdict`` (guard included)."""
    data = dict(data)
    data["changes"] = [Change(**c) for c in data.get("changes", [])]
    return Plan(**data)


@dataclass
class Outcome:
    """What happened to one plan. ``status``: planned | applied | skipped | failed."""

    plan: Plan
    status: str
    reason: str = ""
    rows_changed: int = 0
    backup: BackupRecord | None = None
    evidence: list = field(default_factory=list)
    refused: bool = False  # skipped because the session looks live (audited as "refused")

    def as_json(self) -> dict:
        """The ``actions[]`` entry of the ``heal_sessions --json`` report."""
        return {
            "action": self.plan.action,
            "session_id": self.plan.session_id,
            "status": self.status,
            "reason": self.reason,
            "changes": [c.__dict__ for c in self.plan.changes] if self.status in ("planned", "applied") else [],
        }


class Applier(ActingRun):
    """Applies plans for one run; remembers which stores were backed up.

    ``actor`` (a user or None) and ``actor_label`` (user name, or command and host
    for cron) go into every audit event, with ``run`` and ``request_address``.
    """

    def _live(self, store, conn, caps, plan, now) -> liveness.Liveness | None:
        action = ACTIONS[plan.action]
        if not action.needs_idle_session:
            return None
        for session_id in action.liveness_ids(plan):
            verdict = liveness.evidence_for(store, conn, caps, session_id, now,
                                            closed_counts=action.closed_activity_counts)
            if verdict.verdict != "not_live":
                return verdict
        return None

    def apply(self, store: Store, plan: Plan) -> Outcome:
        """Apply one plan; never raises for store problems (they become the outcome)."""
        started = time.monotonic()
        action = ACTIONS[plan.action]
        # The event exists before anything is written: a process killed mid-action
        # leaves "failed: did not finish" behind, never an unrecorded change.
        event = self._audit(store, plan, Outcome(plan, "failed", "started; the process ended before "
                                                 "the outcome was recorded"), 0)
        outcome = Outcome(plan, "skipped")
        try:
            action.validate(store, plan)
            if plan.blocked:
                outcome.reason = plan.blocked
            elif self.actor is not None and not self.actor.has_perm(f"sessions_app.{action.permission}"):
                outcome.reason = f"{self.actor_label} lacks the {action.permission} permission this action needs"
                outcome.refused = True
            elif action.multi_store:
                action.run(self, store, plan, outcome)
            else:
                self._apply(store, action, plan, outcome)
        except StoreBusy:
            outcome.status, outcome.reason = "skipped", "the store stayed locked; retry later"
        except Changed as exc:
            outcome.status, outcome.reason = "skipped", f"changed since it was planned ({exc}); nothing written"
        except BackupError as exc:
            outcome.status, outcome.reason = "failed", f"no write: {exc}"
        except (sqlite3.Error, OSError) as exc:
            outcome.status, outcome.reason = "failed", f"{exc.__class__.__name__}: {exc}"
        except ValueError as exc:
            outcome.status, outcome.reason = "failed", f"invalid plan: {exc}"
        except Exception as exc:  # an unexpected value in a damaged store: fail this one, go on
            log.exception("action %s failed on %s", plan.action, store.path)
            outcome.status, outcome.reason = "failed", f"{exc.__class__.__name__}: {exc}"
        self._audit(store, plan, outcome, int((time.monotonic() - started) * 1000), event=event)
        return outcome

    def _apply(self, store: Store, action: Action, plan: Plan, outcome: Outcome) -> None:
        now = time.time()
        hazard = store_hazard(store)
        if hazard:
            outcome.reason, outcome.refused = hazard, True
            return
        with store.read() as conn:
            caps = store.capabilities(conn)
            live = self._live(store, conn, caps, plan, now)
            if live is not None:
                outcome.reason, outcome.refused = _live_reason(live), True
                outcome.evidence = [e.to_dict() for e in live.evidence]
                return
            if normalized(action.state(conn, caps, plan)) != plan.guard:
                raise Changed("re-read before writing")
        if plan.writes_store:
            identity = _identity(store.path)
            outcome.backup = self.backup_for(store)
            with writer(store) as conn:
                with transaction(conn):
                    # The file written must be the one just backed up, still safe to write.
                    if _identity(store.path) != identity:
                        raise Changed("the store file was replaced")
                    hazard = store_hazard(store)
                    if hazard:
                        outcome.reason, outcome.refused = hazard, True
                        return
                    live = self._live(store, conn, caps, plan, time.time())
                    if live is not None:
                        outcome.reason, outcome.refused = _live_reason(live), True
                        outcome.evidence = [e.to_dict() for e in live.evidence]
                        return
                    if normalized(action.state(conn, caps, plan)) != plan.guard:
                        raise Changed("re-read inside the write transaction")
                    outcome.rows_changed = action.write(conn, caps, plan)
        else:
            outcome.rows_changed = action.write(None, caps, plan)
        with store.read() as conn:
            problem = action.verify(conn, caps, plan)
        outcome.status, outcome.reason = ("failed", f"verify: {problem}") if problem else ("applied", "")
        if not problem:
            outcome.reason = action.after_verify(plan)

    def audit(self, store: Store, plan: Plan, outcome: Outcome, duration_ms: int,
              event: AuditEvent | None = None) -> AuditEvent:
        """Create (or, given ``event``, complete) an AuditEvent for ``store``; multi-store
        actions record one per store they write, before the write and after it."""
        return self._audit(store, plan, outcome, duration_ms, event=event)

    def _audit(self, store: Store, plan: Plan, outcome: Outcome, duration_ms: int,
               event: AuditEvent | None = None) -> AuditEvent:
        """Create (or, given ``event``, complete) the action's one AuditEvent."""
        backup = outcome.backup if outcome.status == "applied" or outcome.rows_changed else None
        fields = dict(
            actor=self.actor,
            actor_label=self.actor_label,
            action=plan.action,
            check_code=plan.check,
            profile=store.key,
            store_path=str(store.path),
            session_ids=[plan.session_id] if plan.session_id else [],
            plan=normalized(plan.as_dict()),
            outcome="refused" if outcome.refused else {"planned": "skipped"}.get(outcome.status, outcome.status),
            reason=outcome.reason,
            changes=normalized([c.__dict__ for c in plan.changes]) if outcome.status == "applied" else [],
            rows_changed=outcome.rows_changed,
            duration_ms=duration_ms,
            request_address=self.request_address,
            run=self.run,
        )
        return audit.record(event, backup=backup, **fields)


def _identity(path) -> tuple:
    st = os.stat(path)  # stat opens no descriptor (ground rule 5)
    return (st.st_dev, st.st_ino)


def store_hazard(store: Store) -> str | None:
    """Why no write may touch ``store`` now, or None.

    Hermes itself refuses to connect while a process holds a deleted ``-wal``/``-shm``
    (a split WAL generation, reference 6.5), and its own schema repair may be midway
    when scratch or staging copies lie beside the store (reference 1.3); the
    dashboard refuses in both cases, as it does for a store it cannot read.
    """
    status = store.readiness()
    if status is not None:
        return f"the store is {status.status}: {status.reason}"
    holders = deleted_sidecar_holders(store.path)
    if holders:
        who = ", ".join(f"pid {h['pid']} ({h['name']}) holds a deleted {h['file']}" for h in holders[:3])
        return f"split WAL generation, nothing written: {who}; quit those processes and run 'hermes doctor'"
    try:
        names = os.listdir(store.path.parent)
    except OSError as exc:
        return f"cannot list the profile folder: {exc.strerror}"
    base = store.path.name
    risky = [n for n in names if n.startswith((f"{base}.retired-wal-", f"{base}.repair-scratch",
                                               f"{base}.backup-staging-"))]
    if risky:
        return f"Hermes recovery files lie beside the store ({', '.join(sorted(risky)[:3])}); nothing written"
    return None


def _live_reason(live: liveness.Liveness) -> str:
    items = "; ".join(f"{e.source}: {e.detail}" for e in live.evidence[:3])
    label = "live" if live.verdict == "live" else "maybe live"
    return f"session looks {label}, nothing written ({items})"
