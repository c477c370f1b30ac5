"""Pruning a remote profile: the preview read on its host, the run's spec checked there.

The preview (``prune_preview``, a ``hermes.read``) is ``actions.prune_run.run_prune``
in check mode on this worker's store, the very code one host's Prune page runs;
the confirmed prune is a fleet ``prune`` run on the host's queue, run by
``jobs.execute`` → ``run_prune_job`` (each batch one guarded write, every unit
judged again inside it: docs/architecture.md §5.1). A redelivered prune re-plans
from the store: a unit already moved to the trash is no longer there to prune,
so nothing goes twice.
"""

from __future__ import annotations

from ..stores.retention import Criteria, CriteriaError
from . import worker
from .browse import _bool
from .reads import plain

ROOTS_MAX = 2000  # units one confirmation may prune (views.prune.CONFIRM_MAX)


def criteria_arg(task: str, value, profile: str = "") -> Criteria:
    """Criteria from their ``as_dict`` form, else refuse (audited)."""
    try:
        criteria = Criteria.from_dict(value)
    except (CriteriaError, TypeError, ValueError) as exc:
        raise worker.refuse(task, f"malformed prune criteria ({exc})", profile=profile) from None
    if not criteria.given:
        raise worker.refuse(task, "prune criteria select nothing", profile=profile)
    return criteria


def prune_preview(key: str, criteria: dict, masked: bool = True) -> dict:
    """What pruning profile ``key`` by ``criteria`` (``Criteria.as_dict()``) would
    move to the trash, read-only: ``{"report": the prune report in check mode
    (actions/prune_run.py: units, spared, summary; sizes in bytes, times in epoch
    seconds), "sources": [source values of the store]}``; unit titles masked when
    ``masked``. Refuses a profile that is not this worker's or malformed criteria."""
    from ..actions.prune_run import run_prune
    from ..secrets import mask
    from ..stores.listing import distinct_sources

    store = worker.store_for("read", key)
    criteria = criteria_arg("read", criteria, key)
    # Inside the worker's read task (a few seconds' timeout): no whole-table
    # structure read here; the prune job makes it before any batch
    # (actions.prune_run.preview_store), as the one-host page's preview does.
    report = run_prune([store], criteria, apply=False, verify=False)
    if _bool(masked, "masked"):
        for prof in report["profiles"]:
            for unit in prof["units"]:
                unit["title"] = mask(unit.get("title"))
    return plain({"report": report, "sources": distinct_sources([store])})


def validate_prune_run(run) -> None:
    """A fleet ``prune`` run's spec: one ``{"criteria", "roots": {key: [root, …]}}``
    whose profiles are this worker's, at most :data:`ROOTS_MAX` unit roots (session
    id strings), else refuse."""
    spec = run.plans[0] if len(run.plans) == 1 else None
    if not isinstance(spec, dict) or not isinstance(spec.get("roots"), dict) or not spec["roots"]:
        raise worker.refuse("run_job", f"prune run #{run.pk} has no units to prune")
    criteria_arg("run_job", spec.get("criteria"))
    total = 0
    for key, roots in spec["roots"].items():
        worker.store_for("run_job", key)
        if key not in run.profiles or not isinstance(roots, list):
            raise worker.refuse("run_job", f"prune run #{run.pk} names units of {key!r} badly", profile=key)
        for root in roots:
            worker.session_id_arg("run_job", root, key)
        total += len(roots)
    if total > ROOTS_MAX:
        raise worker.refuse("run_job", f"prune run #{run.pk} names {total} units (at most {ROOTS_MAX})")


PRUNES = {"prune_preview": prune_preview}
