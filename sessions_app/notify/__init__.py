"""Notifications when a store is damaged or a run goes wrong (issue 18).

:func:`run_ended` is called by ``runs.finish`` / ``runs.fail`` /
``runs.mark_if_dead`` (every run of every face ends there), :func:`check_stuck`
by ``watch_stores`` on each cycle. Which events exist and what they say:
:mod:`.events`; where they go: :mod:`.channels` (webhooks, e-mail), configured by
environment variables (README, *Notifications*). Each notification is one audit
event (``notify_<kind>``, outcome ``applied`` when a channel took it, ``failed``
otherwise, the channels' results in ``reason``), and nothing here ever raises
into the run that called it: errors are recorded, and the time spent is bounded
by ``HERMES_NOTIFY_BUDGET`` seconds per run.
"""

from __future__ import annotations

import logging
import threading
import time

from django.conf import settings
from django.db import connections

from .. import audit
from ..models import AuditEvent, HealRun
from . import channels, events
from .events import Event, run_kind  # noqa: F401  (public names)

log = logging.getLogger("sessions_app.notify")
ACTOR = "notifications"


def _budget() -> channels.Budget:
    return channels.Budget(float(getattr(settings, "HERMES_NOTIFY_BUDGET", 10.0)))


def send(event: Event, run: HealRun | None = None, budget: channels.Budget | None = None) -> AuditEvent:
    """Deliver ``event`` on every channel and record it; returns the audit event."""
    start = time.monotonic()
    results = channels.deliver(event, budget or _budget())
    ok = any(d.ok for d in results)
    return audit.record(
        actor_label=ACTOR, action=f"notify_{event.kind}", check_code=next(iter(event.codes), "")[:64],
        profile=event.profile, store_path=event.store_path,
        plan={"event": event.as_json(), "deliveries": [d.as_json() for d in results]},
        outcome=AuditEvent.Outcome.APPLIED if ok else AuditEvent.Outcome.FAILED,
        reason="; ".join(d.line() for d in results), duration_ms=int((time.monotonic() - start) * 1000),
        run=run)


def _notify(run: HealRun) -> list[AuditEvent]:
    budget = _budget()
    return [send(event, run, budget) for event in events.events_for(run)]


def run_ended(run: HealRun, background: bool = False) -> list[AuditEvent]:
    """Notify what ``run`` (just done or failed) calls for. Never raises.

    ``background``: deliver from a daemon thread (a web request that settled a
    dead run must not wait for a webhook); returns ``[]`` then."""
    if not channels.configured():
        return []
    if background:
        threading.Thread(target=_in_thread, args=(run.pk,), daemon=True, name=f"notify-run-{run.pk}").start()
        return []
    try:
        return _notify(run)
    except Exception:  # never let telling about a run break the run
        log.exception("notifications for run #%s failed", run.pk)
        return []


def _in_thread(run_id: int) -> None:
    try:
        run = HealRun.objects.filter(pk=run_id).first()
        if run is not None:
            _notify(run)
    except Exception:
        log.exception("notifications for run #%s failed", run_id)
    finally:
        connections.close_all()


def check_stuck(threshold: float | None = None) -> list[AuditEvent]:
    """One ``run_stuck`` notification per run running past ``threshold`` seconds
    (default ``HERMES_STUCK_SECONDS``); a run already notified is not notified again."""
    if not channels.configured():
        return []
    threshold = float(getattr(settings, "HERMES_STUCK_SECONDS", 7200) if threshold is None else threshold)
    sent = []
    try:
        budget = _budget()
        for run, age in events.stuck_runs(threshold):
            if AuditEvent.objects.filter(action="notify_run_stuck", run=run).exists():
                continue
            sent.append(send(events.run_stuck_event(run, age, threshold), run, budget))
    except Exception:
        log.exception("stuck-run notifications failed")
    return sent
