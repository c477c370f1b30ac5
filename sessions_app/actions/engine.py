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
import sqlite3
import time
from dataclasses import dataclass, field

from ..models import AuditEvent
from ..stores import liveness
from ..stores.backup import BackupError, BackupRecord, backup_store
from ..stores.store import Store
from ..stores.writer import StoreBusy, transaction, writer
from .base import Action, ActionContext, Change, Plan
from .files import RemoveLeftoverFiles
from .rows import ClearStaleLease, HideDuplicates
from .session_rows import (
    CloseStaleSession, DetachFromMissingParent, InheritRoutingIdentity, RecountSession, RecreateSessionRow,
    ReopenCompressionParent, StampOwner,
)

ACTIONS: dict[str, Action] = {
    action.name: action
    for action in (
        RecreateSessionRow(), DetachFromMissingParent(), ReopenCompressionParent(), RecountSession(),
        HideDuplicates(), CloseStaleSession(), StampOwner(), ClearStaleLease(), InheritRoutingIdentity(),
        RemoveLeftoverFiles(),
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


class Changed(Exception):
    """The state a plan was made against changed before it could be applied."""


class Applier:
    """Applies plans for one run; remembers which stores were backed up.

    ``actor`` (a user or None) and ``actor_label`` (user name, or command and host
    for cron) go into every audit event, with ``run`` and ``request_address``.
    """

    def __init__(self, actor=None, actor_label: str = "", run=None, request_address: str | None = None):
        self.actor = actor
        self.actor_label = actor_label or (actor.get_username() if actor else "system")
        self.run = run
        self.request_address = request_address
        self.backups: dict[str, BackupRecord] = {}

    def backup_for(self, store: Store) -> BackupRecord:
        key = str(store.path)
        if key not in self.backups:
            self.backups[key] = backup_store(store, label="run")
        return self.backups[key]

    def _live(self, store, conn, caps, plan, now) -> liveness.Liveness | None:
        action = ACTIONS[plan.action]
        if not action.needs_idle_session or not plan.session_id:
            return None
        verdict = liveness.evidence_for(store, conn, caps, plan.session_id, now)
        return verdict if verdict.verdict != "not_live" else None

    def apply(self, store: Store, plan: Plan) -> Outcome:
        """Apply one plan; never raises for store problems (they become the outcome)."""
        started = time.monotonic()
        action = ACTIONS[plan.action]
        outcome = Outcome(plan, "skipped")
        try:
            if plan.blocked:
                outcome.reason = plan.blocked
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
        self._audit(store, plan, outcome, int((time.monotonic() - started) * 1000))
        return outcome

    def _apply(self, store: Store, action: Action, plan: Plan, outcome: Outcome) -> None:
        now = time.time()
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
            outcome.backup = self.backup_for(store)
            with writer(store) as conn:
                with transaction(conn):
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

    def _audit(self, store: Store, plan: Plan, outcome: Outcome, duration_ms: int) -> None:
        backup = outcome.backup if outcome.status == "applied" or outcome.rows_changed else None
        AuditEvent.objects.create(
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
            backup_path=backup.path if backup else "",
            backup_size=backup.size if backup else None,
            backup_sha256=backup.sha256 if backup else "",
            duration_ms=duration_ms,
            request_address=self.request_address,
            run=self.run,
        )


def _live_reason(live: liveness.Liveness) -> str:
    items = "; ".join(f"{e.source}: {e.detail}" for e in live.evidence[:3])
    label = "live" if live.verdict == "live" else "maybe live"
    return f"session looks {label}, nothing written ({items})"
