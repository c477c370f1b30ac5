"""Runs: their lifecycle and their typed report (docs/architecture.md §6, "Runs, jobs, audit").

A run is a :class:`~sessions_app.models.HealRun` row: a check pass, a heal, the
repair of previewed plans, a bulk deletion. Every run is created by
:func:`create`, started by :func:`begin`, advanced by :func:`progress`, and
ends in :func:`finish` or :func:`fail`; :func:`mark_if_dead` settles a run whose
process was killed (browser jobs and commands alike record their pid), so no
page polls a dead run forever. Every end of a run (finished, failed, found dead)
is handed to ``notify.run_ended``, which tells admins what calls for it
(issue 18; nothing when no channel is configured, never an error for the run).

The report a run keeps (and ``heal_sessions --json`` prints) is built from the
dataclasses below — the one place its shape is written (version 1)::

    {"version": 1, "mode", "started_at", "finished_at",
     "profiles": [{"profile", "root", "path", "status", "schema_version", "error",
                   "findings": [...], "actions": [...], "backup"}],
     "summary": {"profiles", "critical", "warning", "info", "applied", "skipped", "failed"}}
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import asdict, dataclass, field

import psutil
from django.utils import timezone

from .checks.base import SEVERITIES
from .models import FindingSnapshot, HealRun

OUTCOMES = ("applied", "skipped", "failed")


def iso(ts: float) -> str:
    """Epoch seconds as an ISO 8601 UTC time (seconds)."""
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).isoformat(timespec="seconds")


def finding_json(finding) -> dict:
    """A report's finding entry from a ``checks.base.Finding``."""
    return {"check": finding.check, "severity": finding.severity, "session_id": finding.session_id,
            "count": finding.count, "detail": finding.detail, "heal": finding.heal}


@dataclass
class ProfileReport:
    """One profile's part of a run report. ``findings`` are ``finding_json`` dicts
    (check, severity, session_id, count, detail, heal); ``actions`` are
    ``Outcome.as_json()`` dicts (action, session_id, status, reason, changes)."""

    profile: str
    path: str
    root: str | None = None
    status: str = "ok"
    schema_version: int | None = None
    error: str | None = None
    findings: list[dict] = field(default_factory=list)
    actions: list[dict] = field(default_factory=list)
    backup: str | None = None

    def as_json(self) -> dict:
        data = asdict(self)
        if data["root"] is None:  # plan and deletion runs name no root
            data.pop("root")
            data.pop("schema_version")
            data.pop("error")
        return data


@dataclass
class RunReport:
    """The version-1 report of a run; ``mode`` ``check`` | ``apply`` | ``delete``."""

    mode: str
    profiles: list[ProfileReport] = field(default_factory=list)
    started_at: str | None = None
    finished_at: str | None = None
    skipped_roots: list[str] = field(default_factory=list)

    def profile(self, key: str, path: str = "") -> ProfileReport:
        """The entry of profile ``key``, added on first use."""
        for entry in self.profiles:
            if entry.profile == key:
                return entry
        entry = ProfileReport(profile=key, path=path)
        self.profiles.append(entry)
        return entry

    def summary(self) -> dict:
        """Counts over every profile: findings per severity, actions per outcome."""
        counts = {"profiles": len(self.profiles), **{s: 0 for s in SEVERITIES}, **{o: 0 for o in OUTCOMES}}
        for entry in self.profiles:
            for f in entry.findings:
                counts[f["severity"]] += 1
            for a in entry.actions:
                if a["status"] in OUTCOMES:
                    counts[a["status"]] += 1
        return counts

    def as_json(self) -> dict:
        data = {"version": 1, "mode": self.mode}
        if self.started_at:
            data.update(started_at=self.started_at, finished_at=self.finished_at)
        data["profiles"] = [p.as_json() for p in self.profiles]
        data["summary"] = self.summary()
        if self.skipped_roots:
            data["skipped_roots"] = list(self.skipped_roots)
        return data


def exit_status(report: dict, fail_on: str = "warning") -> int:
    """The cron contract: 0 nothing at or above ``fail_on`` remains; 1 such
    findings remain; 2 a store could not be read, a check could not run (an
    ``ok`` store with an ``error``), or an action failed."""
    if any(p["status"] not in ("ok", "missing") or (p["status"] == "ok" and p["error"])
           for p in report["profiles"]) or report["summary"]["failed"]:
        return 2
    levels = SEVERITIES[: SEVERITIES.index(fail_on) + 1]
    if any(report["summary"][level] for level in levels):
        return 1
    return 0


def record_snapshot(run, report: dict) -> None:
    """Finding counts per profile and check code, for the health-over-time views."""
    counts: dict[tuple, int] = {}
    for prof in report["profiles"]:
        for f in prof["findings"]:
            key = (prof["profile"], f["check"], f["severity"])
            counts[key] = counts.get(key, 0) + 1
    FindingSnapshot.objects.bulk_create(
        FindingSnapshot(run=run, profile=p, check_code=c, severity=s, count=n) for (p, c, s), n in counts.items()
    )


# --------------------------------------------------------------------------- lifecycle

def create(mode: str, trigger: str, *, actor=None, actor_label: str = "", request_address: str | None = None,
           **fields) -> HealRun:
    """The one place a run row is created (``trigger``: ``browser`` | ``command``)."""
    label = actor_label or (actor.get_username() if actor is not None else "")
    return HealRun.objects.create(mode=mode, trigger=trigger, actor=actor, actor_label=label,
                                  request_address=request_address, **fields)


def begin(run: HealRun) -> HealRun:
    """Mark ``run`` running in this process (its pid lets :func:`mark_if_dead` see a kill)."""
    run.status, run.started_at, run.pid = HealRun.Status.RUNNING, timezone.now(), os.getpid()
    run.save(update_fields=["status", "started_at", "pid"])
    return run


def progress(run: HealRun):
    """A ``progress(message, done, total)`` callback that keeps the run's counters
    and the last 20 lines of its log on the row (the run page polls it)."""
    def update(message: str, done: int, total: int) -> None:
        run.done, run.total = done, total
        run.log_tail = "\n".join((run.log_tail.splitlines() + [message])[-20:])
        run.save(update_fields=["done", "total", "log_tail"])
    return update


def _ended(run: HealRun, background: bool = False) -> None:
    from . import notify  # late: notify reads runs' models and this module's callers

    notify.run_ended(run, background=background)


def finish(run: HealRun, report: dict, done: int | None = None) -> HealRun:
    """``run`` ended with ``report`` (a ``RunReport.as_json()`` document); its
    notifications (new critical findings, unreadable stores, failed repairs) are
    sent before this returns, within ``HERMES_NOTIFY_BUDGET`` seconds."""
    run.report, run.status, run.finished_at = report, HealRun.Status.DONE, timezone.now()
    if done is not None:
        run.done = done
    run.save()
    _ended(run)
    return run


def fail(run: HealRun, error: str, notify: bool = True) -> HealRun:
    """``run`` ended without a report; ``error`` says why. ``notify`` False: a run
    that did not fail on its own (another run held the lock, the watcher was told
    to stop) sends no ``run_failed`` notification."""
    run.status, run.error, run.finished_at = HealRun.Status.FAILED, error, timezone.now()
    run.save()
    if notify:
        _ended(run)
    return run


# Runs a fleet worker executes on its host (issue 17): their pid is a process of
# that host, so only that host's worker judges it (sessions_app/fleet/tasks.py),
# and a killed worker's run is finished by the redelivered task, not failed here.
FLEET_TRIGGER = "fleet"


def process_alive(run: HealRun) -> bool:
    """Whether the process that began ``run`` (its ``pid``, on this machine) still
    runs; a pid reused by another process is told apart by its start time. A
    process we may not inspect (another user's) counts as alive."""
    if not run.pid:
        return False
    try:
        proc = psutil.Process(run.pid)
        started = run.started_at or run.created_at
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE and (
            started is None or proc.create_time() <= started.timestamp() + 1)
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True  # any doubt counts as alive: never settle a run that may still write


def mark_if_dead(run: HealRun, background: bool = False) -> HealRun:
    """A run still ``running`` whose process is gone (killed, machine restarted) is
    marked failed, so its page stops waiting. A pid reused by another process is
    told apart by its start time (it started after the run). Fleet runs
    (:data:`FLEET_TRIGGER`) are left to their host's worker. ``background``: its
    ``run_failed`` notification is sent from a thread (the run page calls this)."""
    if run.status != HealRun.Status.RUNNING or not run.pid or run.trigger == FLEET_TRIGGER:
        return run
    alive = process_alive(run)
    if not alive:
        run.status, run.error, run.finished_at = (
            HealRun.Status.FAILED, "the run's process ended without finishing", timezone.now())
        run.save(update_fields=["status", "error", "finished_at"])
        _ended(run, background=background)
    return run


def settle_dead_runs() -> int:
    """:func:`mark_if_dead` for every run still ``running``; returns how many were
    settled (called when a new run starts, so a killed cron run is reconciled)."""
    settled = 0
    for run in HealRun.objects.filter(status=HealRun.Status.RUNNING):
        if mark_if_dead(run).status == HealRun.Status.FAILED:
            settled += 1
    return settled
