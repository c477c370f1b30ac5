"""The tasks a fleet worker runs on its host (queue ``hermes.<host>``).

- ``hermes.read(op, kwargs)``: the read API of :mod:`.reads` and :mod:`.browse`
  (plain JSON, sent with an expiry so a host that comes back later does no stale
  work; not acknowledged late: a read nobody waits for any more is not worth
  redelivering);
- ``hermes.run_job(run_id)``: a ``HealRun`` the dashboard created (a check pass, a
  heal — recovery and migration are repairs of it —, previewed plans, deletions
  of confirmed sessions, restores of trash entries, confirmed prunes), run by ``jobs.execute``, the
  same job code one host runs, so the same engine (``actions/heal.py``,
  ``engine.Applier``, ``actions/deletion``) writes through the guarded write, and
  the run record and audit events land in the central database. Acknowledged late, handed out again when the worker died
  (``reject_on_worker_lost``; Redis ``visibility_timeout``), and idempotent: a run
  already done is not run again, one still running in a live process of this
  host is left to it, and a run a killed worker left ``running`` is run again —
  what it had applied is gone from the findings or skipped as changed by the
  plans' guards, so nothing is applied twice; a deletion or restore it left
  halfway is finished first (``actions/deletion/resume.py``), and one it had
  finished is reported done, not written again (``actions/deletion/bulk.py``).

Every argument is validated on the worker (:mod:`.worker`): profiles, plans and
paths must be this host's, else the task is refused and audited.
"""

from __future__ import annotations

import inspect
import logging

from hermes_admin.celery import app

from . import worker
from .browse import BROWSE
from .reads import READS
from .prunes import PRUNES, validate_prune_run
from .repairs import REPAIRS

OPS = {**READS, **BROWSE, **REPAIRS, **PRUNES}

log = logging.getLogger("sessions_app.fleet")


@app.task(name="hermes.read", acks_late=False)
def read(op, kwargs=None):
    """Answer ``op`` of :data:`OPS` (:mod:`.reads`, :mod:`.browse`) with ``kwargs``.

    Returns ``{"ok": True, "host", "data"}`` or ``{"ok": False, "host", "refused":
    reason}``; never raises for a refused argument.
    """
    host = worker.own_host()
    try:
        fn = OPS.get(op) if isinstance(op, str) else None
        if fn is None:
            raise worker.refuse("read", f"unknown read {op!r}")
        kwargs = kwargs or {}
        if not isinstance(kwargs, dict):
            raise worker.refuse("read", "the read's arguments are not a mapping")
        try:
            inspect.signature(fn).bind(**kwargs)
        except TypeError as exc:
            raise worker.refuse(f"read:{op}", f"bad arguments: {exc}") from None
        return {"ok": True, "host": host, "data": fn(**kwargs)}
    except worker.Refused as exc:
        return {"ok": False, "host": host, "refused": str(exc)}


FLEET_MODES = ("check", "apply", "delete", "restore", "prune")


def _validate_items(run) -> None:
    """A deletion's confirmed items or a restore's entries: this host's profiles,
    usable session ids, trash entries of this host's data folder deleted from
    that very profile's store (:func:`.browse.entry_for`)."""
    from .browse import entry_for

    for item in run.plans:
        if not isinstance(item, dict):
            raise worker.refuse("run_job", "an item is not a mapping")
        key = item.get("profile")
        if run.mode == "delete":
            worker.store_for("run_job", key, session_ids=[str(item.get("session_id"))])
            worker.session_id_arg("run_job", item.get("session_id"), key)
            if not isinstance(item.get("fingerprint"), dict) or not isinstance(item.get("nonce"), str):
                raise worker.refuse("run_job", "a deletion item lacks its fingerprint or nonce", profile=str(key))
        else:
            entry_for("run_job", key, item.get("trash_entry"))


def _validate_run(run) -> None:
    """Refuse a run naming anything that is not this host's, or an apply plan that is
    not the run's own (a profile the run does not name, an action not registered)."""
    from ..runs import FLEET_TRIGGER

    if run.trigger != FLEET_TRIGGER:
        raise worker.refuse("run_job", f"run #{run.pk} is not a fleet run")
    if run.mode not in FLEET_MODES:
        raise worker.refuse("run_job", f"run #{run.pk} is a {run.mode!r} run, which hosts do not take")
    if not run.profiles and not run.plans:
        raise worker.refuse("run_job", f"run #{run.pk} names no profile (a fleet run names its host's)")
    for key in run.profiles:
        worker.store_for("run_job", key)
    if run.mode == "prune":
        return validate_prune_run(run)
    if run.mode in ("delete", "restore"):
        if not run.plans:
            raise worker.refuse("run_job", f"{run.mode} run #{run.pk} has nothing to do")
        return _validate_items(run)
    from ..actions.registry import ACTIONS

    for plan in run.plans:
        if not isinstance(plan, dict):
            raise worker.refuse("run_job", "a plan is not a mapping")
        sids = [str(plan.get("session_id") or "")]
        # The run's profiles are what the dashboard checked the user's token against
        # and what the run page names: a plan for another of this host's profiles is
        # not what was confirmed, even though this host could write it.
        if plan.get("profile") not in run.profiles:
            raise worker.refuse("run_job", f"a plan of run #{run.pk} is for profile {plan.get('profile')!r}, "
                                f"which the run does not name", profile=str(plan.get("profile") or ""),
                                session_ids=sids)
        if not isinstance(plan.get("action"), str) or plan["action"] not in ACTIONS:
            raise worker.refuse("run_job", f"a plan of run #{run.pk} names no known action "
                                f"({str(plan.get('action'))[:64]!r})", profile=str(plan.get("profile")),
                                session_ids=sids)
        store = worker.store_for("run_job", plan.get("profile"), session_ids=sids)
        path = worker.path_inside("run_job", plan.get("store_path"), profile=store.key)
        if path != str(store.path):
            raise worker.refuse("run_job", f"plan store {path} is not profile {store.key}'s store",
                                profile=store.key, path=path)
        params = plan.get("params") or {}
        if not isinstance(params, dict):
            raise worker.refuse("run_job", "a plan's params are not a mapping", profile=store.key)
        if params.get("target_profile"):  # a move: the second store must be this host's too
            worker.store_for("run_job", params["target_profile"])
        if params.get("target_path"):
            worker.path_inside("run_job", params["target_path"], profile=store.key)


@app.task(name="hermes.run_job", bind=True, acks_late=True, reject_on_worker_lost=True)
def run_job(self, run_id):
    """Run fleet run ``run_id`` on this host (see the module docstring).

    Returns ``{"run", "status", "note"}``; raises nothing for a refused run.
    """
    from .. import jobs, runs
    from ..models import HealRun

    host = worker.own_host()
    if not isinstance(run_id, int) or isinstance(run_id, bool):
        worker.refuse("run_job", f"{run_id!r} is not a run id")
        return {"run": None, "status": "refused", "note": "not a run id"}
    run = HealRun.objects.filter(pk=run_id).first()
    if run is None:
        worker.refuse("run_job", f"there is no run #{run_id}")
        return {"run": run_id, "status": "refused", "note": "no such run"}
    try:
        _validate_run(run)
    except worker.Refused as exc:
        if run.status in (HealRun.Status.QUEUED, HealRun.Status.RUNNING):
            runs.fail(run, f"refused by host {host}: {exc}")
        return {"run": run_id, "status": "refused", "note": str(exc)}
    if run.status in (HealRun.Status.DONE, HealRun.Status.FAILED):
        return {"run": run_id, "status": run.status, "note": "already finished; nothing done again"}
    if run.status == HealRun.Status.RUNNING and runs.process_alive(run):
        return {"run": run_id, "status": run.status, "note": "running in a live process of this host"}
    if run.status == HealRun.Status.RUNNING:
        log.warning("run #%s was left running by a process that died; running it again", run_id)
    run = jobs.execute(run_id)
    return {"run": run_id, "status": run.status, "note": ""}
