"""Background heal jobs started from the browser.

A job is a :class:`~sessions_app.models.HealRun` row. The view creates it and calls
:func:`start`, which launches ``manage.py run_job <id>`` as a detached process
(setting ``HERMES_ADMIN_JOB_RUNNER = "process"``, the default) so no heal ever runs
inside a request or dies with a web worker; ``"thread"`` runs it in a thread of the
web process instead (tests, single-process development). The page polls the row.
The job takes the same run lock as ``heal_sessions``, so a cron run and a browser
job never overlap.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import psutil
from django.conf import settings
from django.db import connections
from django.utils import timezone

from .actions.engine import Applier
from .actions.guarded import Outcome
from .actions.registry import plan_from_dict
from .actions.heal import finding_json, heal, record_snapshot
from .checks import run_store_checks
from .locks import RunLocked, run_lock
from .models import HealRun
from .stores import registry


def start(run: HealRun):
    """Launch the job for ``run``; returns the thread or process started."""
    mode = getattr(settings, "HERMES_ADMIN_JOB_RUNNER", "process")
    if mode == "thread":
        thread = threading.Thread(target=_thread_body, args=(run.pk,), daemon=True, name=f"heal-run-{run.pk}")
        thread.start()
        return thread
    logs = Path(settings.DATA_DIR) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    manage = Path(settings.BASE_DIR) / "manage.py"
    with open(logs / f"run-{run.pk}.log", "ab") as log:  # the child keeps its own descriptor
        child = subprocess.Popen(
            [sys.executable, str(manage), "run_job", str(run.pk)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, close_fds=True, env=dict(os.environ),
        )
    # Reap the child when it ends, so finished jobs leave no zombie in the web worker.
    threading.Thread(target=child.wait, daemon=True, name=f"reap-run-{run.pk}").start()
    return child


def mark_if_dead(run: HealRun) -> HealRun:
    """A run still ``running`` whose process is gone (killed, machine restarted) is
    marked failed, so its page stops waiting."""
    if run.status != HealRun.Status.RUNNING or not run.pid:
        return run
    if not psutil.pid_exists(run.pid):
        run.status, run.error, run.finished_at = (
            HealRun.Status.FAILED, "the job process ended without finishing", timezone.now())
        run.save(update_fields=["status", "error", "finished_at"])
    return run


def _thread_body(run_id: int) -> None:
    try:
        execute(run_id)
    finally:
        # The thread's own connections (dashboard database and store aliases) end
        # with it: a connection left open keeps e.g. PostgreSQL's test database busy.
        connections.close_all()


def _progress(run: HealRun):
    def update(message: str, done: int, total: int) -> None:
        run.done, run.total = done, total
        run.log_tail = "\n".join((run.log_tail.splitlines() + [message])[-20:])
        run.save(update_fields=["done", "total", "log_tail"])
    return update


def execute(run_id: int) -> HealRun:
    """Run the job of HealRun ``run_id`` to completion (status done or failed)."""
    run = HealRun.objects.get(pk=run_id)
    run.status, run.started_at, run.pid = HealRun.Status.RUNNING, timezone.now(), os.getpid()
    run.save(update_fields=["status", "started_at", "pid"])
    try:
        with run_lock("heal", label=f"run #{run.pk} by {run.actor_label}"):
            if run.mode == "delete":  # bulk deletion (issue 5): each session judged on its own
                from .actions.deletion import run_bulk_delete
                report = run_bulk_delete(run, _progress(run))
            else:
                report = _plans_job(run) if run.plans else _heal_job(run)
                if run.plans:
                    _refresh_health(run)
        run.report, run.status = report, HealRun.Status.DONE
        if not run.plans and run.mode in ("check", "apply"):  # a whole pass: keep its counts
            record_snapshot(run, report)
    except RunLocked as exc:
        run.status, run.error = HealRun.Status.FAILED, str(exc)
    except Exception as exc:  # recorded on the run for the page; the traceback goes to the job log
        run.status, run.error = HealRun.Status.FAILED, f"{exc.__class__.__name__}: {exc}"
        raise
    finally:
        run.finished_at = timezone.now()
        run.save()
    return run


def _applier(run: HealRun) -> Applier:
    return Applier(actor=run.actor, actor_label=run.actor_label, run=run, request_address=run.request_address)


def _heal_job(run: HealRun) -> dict:
    registry.scan()
    everything = registry.stores()
    selected = [s for s in everything if not run.profiles or s.key in run.profiles]
    run.total = len(selected)
    run.save(update_fields=["total"])
    return heal(selected, all_stores=everything, only=run.only, apply=run.mode == "apply",
                applier=_applier(run), progress=_progress(run))


def _refresh_health(run: HealRun) -> None:
    """After single repairs, a fresh check pass of the profiles touched (recorded as
    its own run) so the health pages and the overview stop showing what was fixed."""
    registry.scan()
    everything = registry.stores()
    touched = sorted({p["profile"] for p in run.plans})
    selected = [s for s in everything if s.key in touched]
    if not selected:
        return
    check = HealRun.objects.create(
        mode="check", trigger=run.trigger, actor=run.actor, actor_label=run.actor_label,
        profiles=touched, status=HealRun.Status.RUNNING, started_at=timezone.now(), total=len(selected),
        request_address=run.request_address, pid=os.getpid(),
    )
    check.report = heal(selected, all_stores=everything, apply=False, applier=_applier(check))
    check.status, check.done, check.finished_at = HealRun.Status.DONE, len(selected), timezone.now()
    check.save()
    record_snapshot(check, check.report)


def _plans_job(run: HealRun) -> dict:
    """Apply previewed plans (one finding each); report in the heal report shape."""
    applier = _applier(run)
    update = _progress(run)
    profiles: dict[str, dict] = {}
    summary = {"profiles": 0, "critical": 0, "warning": 0, "info": 0, "applied": 0, "skipped": 0, "failed": 0}
    for n, data in enumerate(run.plans, start=1):
        plan = plan_from_dict(data)
        store = registry.get(plan.profile)
        entry = profiles.setdefault(plan.profile, {
            "profile": plan.profile, "path": plan.store_path, "status": "ok", "findings": [], "actions": [], "backup": None,
        })
        if store is None:
            outcome = Outcome(plan, "failed", "the profile no longer exists")
        else:
            outcome = applier.apply(store, plan)
            backup = applier.backups.get(str(store.path))
            entry["backup"] = backup.path if backup else None
            after = run_store_checks(store, session_id=plan.session_id, only=[plan.check])
            entry["findings"] = [finding_json(f) for f in after.findings]
        entry["actions"].append(outcome.as_json())
        summary[outcome.status] = summary.get(outcome.status, 0) + 1
        update(f"{plan.action} {plan.session_id or ''}: {outcome.status}", n, len(run.plans))
    summary["profiles"] = len(profiles)
    for entry in profiles.values():
        for f in entry["findings"]:
            summary[f["severity"]] += 1
    return {"version": 1, "mode": "apply", "profiles": list(profiles.values()), "summary": summary}
