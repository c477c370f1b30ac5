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

from django.conf import settings
from django.db import connections

from .actions.engine import Applier
from .actions.guarded import Outcome
from .actions.registry import plan_from_dict
from .actions.heal import heal
from .checks import run_store_checks
from .locks import RunLocked, run_lock
from . import runs
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
    """The run page settles a killed job through this; its notification is sent
    from a thread, so the page never waits for a webhook."""
    return runs.mark_if_dead(run, background=True)


def _thread_body(run_id: int) -> None:
    try:
        execute(run_id)
    finally:
        # The thread's own connections (dashboard database and store aliases) end
        # with it: a connection left open keeps e.g. PostgreSQL's test database busy.
        connections.close_all()


def execute(run_id: int) -> HealRun:
    """Run the job of HealRun ``run_id`` to completion (status done or failed)."""
    run = runs.begin(HealRun.objects.get(pk=run_id))
    try:
        with run_lock("heal", label=f"run #{run.pk} by {run.actor_label}"):
            if run.mode == "delete":  # bulk deletion (issue 5): each session judged on its own
                from .actions.deletion import run_bulk_delete
                report = run_bulk_delete(run, runs.progress(run))
            elif run.mode == "restore":  # trash entries put back (a fleet host's, issue 17)
                from .actions.deletion import run_restore
                report = run_restore(run, runs.progress(run))
            elif run.mode == "prune":  # a confirmed prune (issue 14): batches of previewed units
                from .actions.prune_run import run_prune_job
                report = run_prune_job(run, runs.progress(run))
            elif run.mode == "flags":  # flags of selected sessions (issue 14), each on its own
                from .actions.flags import run_bulk_flags
                report = run_bulk_flags(run, runs.progress(run))
            else:
                report = _plans_job(run) if run.plans else _heal_job(run)
                if run.plans:
                    _refresh_health(run)
        runs.finish(run, report)
        if not run.plans and run.mode in ("check", "apply"):  # a whole pass: keep its counts
            runs.record_snapshot(run, report)
    except RunLocked as exc:  # not a failure of the run: nothing to notify
        runs.fail(run, str(exc), notify=False)
    except Exception as exc:  # recorded on the run for the page; the traceback goes to the job log
        runs.fail(run, f"{exc.__class__.__name__}: {exc}")
        raise
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
                applier=_applier(run), progress=runs.progress(run))


def _refresh_health(run: HealRun) -> None:
    """After single repairs, a fresh check pass of the profiles touched (recorded as
    its own run) so the health pages and the overview stop showing what was fixed."""
    registry.scan()
    everything = registry.stores()
    touched = sorted({p["profile"] for p in run.plans})
    selected = [s for s in everything if s.key in touched]
    if not selected:
        return
    check = runs.begin(runs.create("check", run.trigger, actor=run.actor, actor_label=run.actor_label,
                                   request_address=run.request_address, profiles=touched, total=len(selected)))
    report = heal(selected, all_stores=everything, apply=False, applier=_applier(check))
    runs.finish(check, report, done=len(selected))
    runs.record_snapshot(check, report)


def _plans_job(run: HealRun) -> dict:
    """Apply previewed plans (one finding each; *Repair all of this kind* sends many);
    report in the heal report shape. Each profile's plans go through
    ``Applier.apply_all``: dependency order, and a plan whose session had a repair it
    depends on applied first is checked again (dropped when that healed it)."""
    applier = _applier(run)
    update = runs.progress(run)
    report = runs.RunReport(mode="apply")
    by_profile: dict[str, list] = {}
    for data in run.plans:
        plan = plan_from_dict(data)
        by_profile.setdefault(plan.profile, []).append(plan)
    total, count = len(run.plans), 0

    def done(outcome):
        nonlocal count
        count += 1
        plan = outcome.plan
        update(f"{plan.action} {plan.session_id or ''}: {outcome.report_status}", count, total)

    for profile, plans in by_profile.items():
        store = registry.get(profile)
        entry = report.profile(profile, plans[0].store_path)
        if store is None:
            for plan in plans:
                outcome = Outcome(plan, "failed", "the profile no longer exists")
                entry.actions.append(outcome.as_json())
                done(outcome)
            continue
        outcomes = applier.apply_all(store, plans, confirmed=True, done=done)
        entry.actions.extend(o.as_json() for o in outcomes)
        backup = applier.backups.get(str(store.path))
        entry.backup = backup.path if backup else None
        # What is left of the repaired findings, session by session (the pass that
        # follows, ``_refresh_health``, checks the whole profile).
        codes = sorted({p.check for p in plans})
        for sid in dict.fromkeys(p.session_id for p in plans):
            after = run_store_checks(store, session_id=sid, only=codes)
            entry.findings.extend(runs.finding_json(f) for f in after.findings
                                  if sid is None or f.session_id == sid)
    return report.as_json()
