"""The worker's read API, continued: the repair preview of one finding, and a
profile's migration plans (JSONL imports, moves to the owning profile).

Runs on the host that holds the store (task ``hermes.read``) through the very
presenter one host's repair page uses (``presenters.health.repair_preview``: the
live check, ``actions.registry.plan_for``, the liveness evidence), and answers
plain JSON. The dashboard keeps ``plan_data`` (the unmasked plan, what applying
it executes) in the login session of the user who saw the preview, the form
carrying a signed reference bound to that user (``views.common.plan_token``); applying it is a fleet ``apply``
run on the host's queue (``hermes.run_job``), whose plans the worker checks again
against its own roots (:func:`.tasks._validate_run`) and whose guards refuse a
plan the store has moved past (docs/architecture.md §5.1).
"""

from __future__ import annotations

from dataclasses import asdict

from ..checks.registry import BY_CODE as CHECKS
from . import worker
from .browse import _bool
from .reads import plain


def repair_preview(key: str, session_id: str, check: str, masked: bool = True, texts: bool = False) -> dict:
    """The plan for the ``check`` finding of ``session_id`` in profile ``key``.

    Returns ``{"finding": {"check", "severity", "detail", "heal"} | None, "plan":
    {"action", "summary", "notes", "blocked", "changes": [Change dicts]} | None,
    "plan_data": the unmasked plan dict | None, "live": {"verdict", "evidence":
    [{"source", "detail"}]} | None, "permission", "first": [{"check", "heal"}],
    "inserted": [{"role", "source", "kind", "after_id", "text"}], "inserted_total"}``
    (``presenters.health.RepairPreview``: the excerpts only when ``texts``, the
    dashboard's user may read transcripts); texts masked when ``masked``. Refuses (audited) a profile or session id that
    is not this worker's, or an unknown check code.
    """
    from ..presenters.health import repair_preview as preview_for

    store = worker.store_for("read", key, session_ids=[session_id])
    session_id = worker.session_id_arg("read", session_id, key)
    if not isinstance(check, str) or check not in CHECKS:
        raise worker.refuse("read", f"unknown check {check!r}", profile=key, session_ids=[session_id])
    shown = preview_for(store, session_id, check, masked=_bool(masked, "masked"), texts=_bool(texts, "texts"))
    f, plan, live = shown.finding, shown.plan, shown.live
    return plain({
        "finding": {"check": f.check, "severity": f.severity, "detail": f.detail, "heal": f.heal} if f else None,
        "plan": {"action": plan.action, "summary": plan.summary, "notes": plan.params.get("notes") or [],
                 "blocked": plan.blocked, "changes": [asdict(c) for c in plan.changes]} if plan else None,
        "plan_data": shown.plan_data,
        "live": {"verdict": live.verdict, "evidence": [{"source": e.source, "detail": e.detail}
                                                       for e in live.evidence]} if live else None,
        "permission": shown.permission,
        "first": [{"check": x.check, "heal": x.heal} for x in shown.first],
        "inserted": shown.inserted, "inserted_total": shown.inserted_total,
    })


REPAIRS = {"repair_preview": repair_preview}


def migration_plans(key: str, masked: bool = True) -> dict:
    """The migration page of profile ``key`` (``presenters.migration``: JSONL imports
    and moves to the owning profile, planned now from the store and its files):
    ``{"rows": [{"action", "session_id", "counts", "summary", "blocked", "notes",
    "permission", "plan_data": the unmasked plan dict}]}``, texts masked when
    ``masked``. Applying is a fleet ``apply`` run of the chosen ``plan_data``."""
    from ..actions.registry import ACTIONS
    from ..presenters.migration import _row, migration_plans as plans_of

    store = worker.store_for("read", key)
    masked = _bool(masked, "masked")
    rows = []
    for plan in plans_of(store):
        row = _row(plan, masked)
        rows.append({"action": plan.action, "session_id": plan.session_id, "counts": row["counts"],
                     "summary": row["summary"], "blocked": row["blocked"], "notes": row["notes"],
                     "permission": ACTIONS[plan.action].permission, "plan_data": asdict(plan)})
    return plain({"rows": rows})


REPAIRS["migration_plans"] = migration_plans
