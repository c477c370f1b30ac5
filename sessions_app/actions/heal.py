"""A heal run: check every store, plan the repairs, optionally apply, re-check.

One function, :func:`heal`, serves ``manage.py heal_sessions`` (cron) and the
browser's background *Heal profile* job alike. It returns the version-1 JSON
report of issue 3:

``{"version": 1, "mode", "started_at", "finished_at", "profiles": [{"profile",
"root", "path", "status", "schema_version", "error", "findings": [...],
"actions": [...], "backup"}], "summary": {"profiles", "critical", "warning",
"info", "applied", "skipped", "failed"}}``

Without ``apply`` nothing is written to any store or Hermes home. With it, every
planned repair is applied (see ``engine.Applier``) and ``findings`` are those that
remain afterwards.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from typing import Callable, Iterable

from ..checks import run_store_checks
from ..models import FindingSnapshot
from ..stores.store import Store
from .base import Plan
from .engine import Applier
from .guarded import Outcome
from .registry import plan_for

log = logging.getLogger("sessions_app.actions")
APPLY_ORDER = {
    "import_jsonl_transcript": 0, "recreate_session_row": 1, "hide_duplicates": 2, "move_to_owner_store": 90,
    "recount_session": 99,
}
SEVERITIES = ("critical", "warning", "info")


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).isoformat(timespec="seconds")


def finding_json(finding) -> dict:
    return {
        "check": finding.check,
        "severity": finding.severity,
        "session_id": finding.session_id,
        "count": finding.count,
        "detail": finding.detail,
        "heal": finding.heal,
    }


def heal(
    stores: Iterable[Store],
    *,
    all_stores: Iterable[Store] | None = None,
    only: Iterable[str] | None = None,
    apply: bool = False,
    applier: Applier | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> dict:
    """Run the check catalog (restricted to ``only`` codes) over ``stores``.

    ``all_stores`` are every known profile (cross-profile checks such as
    ``id_collision`` look at them). ``progress(message, done, total)`` is called
    after each store. Returns the report documented in the module docstring.
    """
    stores = list(stores)
    everything = list(all_stores) if all_stores is not None else stores
    only = sorted(set(only or ()))
    applier = applier or Applier(actor_label="heal")
    started = time.time()
    profiles = []
    for done, store in enumerate(stores, start=1):
        try:
            profiles.append(_heal_store(store, everything, only, apply, applier))
        except Exception as exc:  # one store's surprise must not end the run (rule 9)
            log.exception("heal run failed on %s", store.path)
            profiles.append({
                "profile": store.key, "root": str(store.profile.root), "path": str(store.path),
                "status": "unreadable", "schema_version": None,
                "error": f"the pass failed: {exc.__class__.__name__}: {exc}",
                "findings": [], "actions": [], "backup": None,
            })
        if progress:
            progress(f"{store.key}: {profiles[-1]['status']}", done, len(stores))
    summary = {"profiles": len(profiles), **{s: 0 for s in SEVERITIES}, "applied": 0, "skipped": 0, "failed": 0}
    for prof in profiles:
        for f in prof["findings"]:
            summary[f["severity"]] += 1
        for a in prof["actions"]:
            if a["status"] in ("applied", "skipped", "failed"):
                summary[a["status"]] += 1
    return {
        "version": 1,
        "mode": "apply" if apply else "check",
        "started_at": _iso(started),
        "finished_at": _iso(time.time()),
        "profiles": profiles,
        "summary": summary,
    }


def _error(report) -> str | None:
    """The entry's ``error``: the store's own, else which checks could not run (their
    findings are unknown, so the pass is incomplete and exits 2)."""
    if report.error:
        return report.error
    if report.failed_checks:
        crashed = [n for n in report.notes if n.split(" ", 1)[0] in report.failed_checks]
        return "check(s) could not run: " + "; ".join(crashed or report.failed_checks)
    return None


def _heal_store(store: Store, everything: list[Store], only: list[str], apply: bool, applier: Applier) -> dict:
    others = [s for s in everything if s.key != store.key]
    report = run_store_checks(store, only=only or None, other_stores=others)
    entry = {
        "profile": store.key,
        "root": str(store.profile.root),
        "path": str(store.path),
        "status": report.status,
        "schema_version": report.schema_version,
        "error": _error(report),
        "findings": [finding_json(f) for f in report.findings],
        "actions": [],
        "backup": None,
    }
    if report.status != "ok":
        return entry
    outcomes: list[Outcome] = []
    plans = []
    with store.read() as conn:
        caps = store.capabilities(conn)
        for finding in report.findings:
            if not finding.heal:
                continue
            try:
                plan = plan_for(store, conn, caps, finding)
            except Exception as exc:  # an unexpected value: this repair fails, the rest goes on
                log.exception("planning %s failed on %s", finding.heal, store.path)
                failed = Plan(action=finding.heal, check=finding.check, profile=store.key,
                              store_path=str(store.path), session_id=finding.session_id,
                              summary="planning failed")
                outcomes.append(Outcome(failed, "failed", f"planning failed: {exc.__class__.__name__}: {exc}"))
                continue
            if plan is not None:
                plans.append(plan)
    # Repairs that add or hide rows first, recounts last: a recount planned before
    # a duplicate was hidden is then skipped as changed, never applied stale.
    plans.sort(key=lambda p: APPLY_ORDER.get(p.action, 50))
    for plan in plans:
        if apply:
            outcomes.append(applier.apply(store, plan))
        else:
            outcomes.append(Outcome(plan, "skipped" if plan.blocked else "planned", plan.blocked))
    entry["actions"] = [o.as_json() for o in outcomes]
    if apply:
        backup = applier.backups.get(str(store.path))
        entry["backup"] = backup.path if backup else None
        if any(o.status == "applied" for o in outcomes):
            after = run_store_checks(store, only=only or None, other_stores=others)
            entry["status"], entry["error"] = after.status, _error(after)
            entry["findings"] = [finding_json(f) for f in after.findings]
    return entry


def exit_status(report: dict, fail_on: str = "warning") -> int:
    """0: nothing at or above ``fail_on`` remains; 1: such findings remain;
    2: a store could not be read, a check could not run (an ``ok`` store with an
    ``error``), or an action failed."""
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
