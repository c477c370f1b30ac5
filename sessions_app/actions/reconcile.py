"""Audit events a killed process left saying "started": the store says what happened.

Every guarded write creates its audit event before it writes (outcome ``failed``,
reason :data:`~.guarded.STARTED`) and completes it afterwards. A process killed in
between leaves that first word, which may be wrong: the change may have committed.
:func:`reconcile` (run at the start of each heal run, for each store) settles such
events once their process is gone — a repair by its own ``verify`` on the store
now, a deletion or restore by whether its sessions are in the store — and says in
the reason that it was reconciled and how. Nothing in the store is written.
"""

from __future__ import annotations

import time

from django.utils import timezone

from ..audit import record
from ..models import AuditEvent, HealRun
from ..runs import mark_if_dead
from ..stores.store import Store
from .deletion.plan import DELETE_ACTION, RESTORE_ACTION
from .guarded import STARTED
from .registry import ACTIONS, plan_from_dict

# An event with no run (a browser deletion) is settled only once it is older than
# this: its request may still be running.
QUIET_SECONDS = 3600


def _gone(event: AuditEvent) -> bool:
    """Whether the process that wrote ``event`` can no longer complete it."""
    if event.run_id:
        run = mark_if_dead(HealRun.objects.get(pk=event.run_id))
        return run.status != HealRun.Status.RUNNING
    return (timezone.now() - event.created_at).total_seconds() > QUIET_SECONDS


def _present(conn, ids: list[str]) -> int:
    if not ids:
        return 0
    marks = ",".join("?" * len(ids))
    return conn.execute(f"SELECT COUNT(*) FROM sessions WHERE id IN ({marks})", ids).fetchone()[0]


def _verdict(store: Store, conn, caps, event: AuditEvent) -> tuple[str, str] | None:
    """``(outcome, how)`` the store shows for ``event``, or None when it cannot tell."""
    ids = list(event.session_ids or [])
    if event.action == DELETE_ACTION:
        return ("applied", "its sessions are gone from the store") if ids and not _present(conn, ids) else \
            ("failed", "its sessions are still in the store: nothing was deleted")
    if event.action == RESTORE_ACTION:
        return ("applied", "its sessions are back in the store") if ids and _present(conn, ids) == len(ids) else \
            ("failed", "its sessions are not in the store: nothing was restored")
    action = ACTIONS.get(event.action)
    if action is None or not isinstance(event.plan, dict) or not event.plan.get("action"):
        return None
    try:
        plan = plan_from_dict({**event.plan, "guard": {}})
        problem = action.verify_store(store, conn, caps, plan)
    except Exception:  # a plan of an older shape, a store that changed since: cannot tell
        return None
    return ("applied", "the store holds the repair") if problem is None else \
        ("failed", f"the store does not hold the repair ({problem})")


def reconcile(store: Store) -> int:
    """Settle ``store``'s events left "started" by a process that is gone; returns how many."""
    events = [e for e in AuditEvent.objects.filter(store_path=str(store.path), outcome="failed", reason=STARTED)
              if _gone(e)]
    if not events:
        return 0
    settled = 0
    with store.read() as conn:
        caps = store.capabilities(conn)
        for event in events:
            found = _verdict(store, conn, caps, event)
            stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
            if found is None:
                record(event, reason=f"{STARTED}; what it did could not be told from the store (looked {stamp})")
            else:
                record(event, outcome=found[0], reason=(f"the process ended before it recorded the outcome; "
                                                        f"reconciled {stamp}: {found[1]}"))
            settled += 1
    return settled
