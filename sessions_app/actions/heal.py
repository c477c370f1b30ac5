"""A heal run: check every store, plan the repairs, optionally apply, re-check.

One function, :func:`heal`, serves ``manage.py heal_sessions`` (cron) and the
browser's background *Heal profile* job alike. It returns the version-2 report
(``runs.RunReport``, shape in ``sessions_app/runs.py``). Without ``apply``
nothing is written to any store or Hermes home. With it, every planned repair is
applied on the guarded write (``engine.Applier.apply_all``, in dependency order,
docs/architecture.md §5.2) and ``findings`` are those that remain afterwards.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Iterable

from ..checks import run_store_checks
from ..runs import ProfileReport, RunReport, finding_json, iso
from ..stores.store import Store
from .base import Plan
from .deletion.resume import finish_unfinished
from .engine import Applier
from .reconcile import reconcile
from .guarded import Outcome
from .registry import order, plan_for, waits_for

log = logging.getLogger("sessions_app.actions")


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
    report = RunReport(mode="apply" if apply else "check", started_at=iso(time.time()))
    for done, store in enumerate(stores, start=1):
        try:
            report.profiles.append(_heal_store(store, everything, only, apply, applier))
        except Exception as exc:  # one store's surprise must not end the run (rule 9)
            log.exception("heal run failed on %s", store.path)
            report.profiles.append(ProfileReport(
                profile=store.key, root=str(store.profile.root), path=str(store.path), status="unreadable",
                error=f"the pass failed: {exc.__class__.__name__}: {exc}"))
        if progress:
            progress(f"{store.key}: {report.profiles[-1].status}", done, len(stores))
    report.finished_at = iso(time.time())
    return report.as_json()


def dry_run(plans: list[Plan]) -> list[Outcome]:
    """The outcomes of a dry run of one store's ``plans``, in the order applying
    would take: ``planned`` (the reason names the repairs it waits for, after which
    it is planned again), or ``skipped`` with the reason a plan is blocked."""
    ordered = order(plans)
    out = []
    for n, plan in enumerate(ordered):
        if plan.blocked:
            out.append(Outcome(plan, "skipped", plan.blocked))
            continue
        after = waits_for(plan, [p for p in ordered[:n] if not p.blocked])
        reason = (f"after {', '.join(after)} on this session, and planned again then: it may not be needed"
                  if after else "")
        out.append(Outcome(plan, "planned", reason))
    return out


def _resumed_json(outcome: Outcome) -> dict:
    entry = outcome.entry
    targets = list(entry.manifest.get("targets") or []) if entry is not None else []
    return {"action": "finish_interrupted", "session_id": targets[0] if targets else None,
            "status": outcome.report_status, "reason": outcome.reason, "changes": []}


def _error(report) -> str | None:
    """The entry's ``error``: the store's own, else which checks could not run (their
    findings are unknown, so the pass is incomplete and exits 2)."""
    if report.error:
        return report.error
    if report.failed_checks:
        crashed = [n for n in report.notes if n.split(" ", 1)[0] in report.failed_checks]
        return "check(s) could not run: " + "; ".join(crashed or report.failed_checks)
    return None


def _heal_store(store: Store, everything: list[Store], only: list[str], apply: bool,
                applier: Applier) -> ProfileReport:
    others = [s for s in everything if s.key != store.key]
    try:  # audit events a killed run left saying "started": the store tells what happened
        reconcile(store)
    except Exception:  # an unreadable store says so below; never stop the run for this
        log.warning("could not reconcile unfinished audit events of %s", store.path, exc_info=True)
    resumed = []
    if apply:  # a deletion or restore a killed process left halfway is finished first
        resumed = [o for o in finish_unfinished(store, applier) if o.status != "skipped"]
    report = run_store_checks(store, only=only or None, other_stores=others)
    entry = ProfileReport(profile=store.key, root=str(store.profile.root), path=str(store.path),
                          status=report.status, schema_version=report.schema_version, error=_error(report),
                          findings=[finding_json(f) for f in report.findings])
    if report.status != "ok":
        return entry
    outcomes: list[Outcome] = []
    plans = []
    planned: set[tuple] = set()
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
            # Two findings healed by the same repair of one session (history_lost and
            # unanswered_turn both by recover_messages): one plan, applied once.
            if plan is not None and (plan.action, plan.session_id) not in planned:
                planned.add((plan.action, plan.session_id))
                plans.append(plan)
    # In dependency order (docs/architecture.md §5.2): hiding a duplicate before the
    # recount that would count it, which is planned again then (and dropped when the
    # hide healed it); imports and row recreation first, moves last.
    if apply:
        outcomes.extend(applier.apply_all(store, plans))
    else:
        outcomes.extend(dry_run(plans))
    entry.actions = [_resumed_json(o) for o in resumed] + [o.as_json() for o in outcomes]
    if apply:
        backup = applier.backups.get(str(store.path))
        entry.backup = backup.path if backup else None
        if any(o.status == "applied" for o in outcomes):
            after = run_store_checks(store, only=only or None, other_stores=others)
            entry.status, entry.error = after.status, _error(after)
            entry.findings = [finding_json(f) for f in after.findings]
    return entry
