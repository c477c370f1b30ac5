"""*Repair all findings of this kind*: one check's findings in one profile, checked
live, each planned as its own repair (read-only), for one confirmation.

The confirmed plans are applied by the same plan job as a single repair
(``jobs._plans_job`` -> ``Applier.apply_all``): each one its own guarded write,
re-read against its plan, skipped when its session changed or is live. A session
that also has a finding whose repair this one depends on (docs/architecture.md
§5.2: a duplicate to hide before a recount) is held back: that repair comes first
and may heal this finding too.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field

from ..actions.base import Plan
from ..actions.registry import ACTIONS, plan_for, prerequisites
from ..checks import run_store_checks
from ..checks.registry import BY_CODE as CHECKS
from ..secrets import masker_for
from . import NotFound
from .changes import change_table
from .health import session_url_maker

log = logging.getLogger("sessions_app.actions")
# Plans one confirmation carries (a signed form field; a move's plan is a few KB):
# the rest stay for the next round, the page says how many.
REPAIR_ALL_MAX = 200


@dataclass
class RepairAll:
    """``rows``: one per finding of ``check`` with a repair — ``session_id``,
    ``session_url``, ``summary``, ``changes`` (a ``presenters.changes.ChangeTable``) and either ``blocked`` (why it cannot be applied, ``next_step`` what to do
    about it or '') or
    ``held`` (the repairs to apply first) or neither (in ``plans``), masked.
    ``plans``: the unmasked plan dicts to sign (at most :data:`REPAIR_ALL_MAX`);
    ``left``: applicable plans beyond that cap; ``unrepaired``: findings of the check
    with no repair, ``unrepaired_steps`` ``[(count, next step)]`` of them by case
    (``Check.next_step_for``); ``error``: the store could not be checked (status: reason)."""

    check: object
    rows: list[dict] = field(default_factory=list)
    plans: list[dict] = field(default_factory=list)
    left: int = 0
    unrepaired: int = 0
    unrepaired_steps: list = field(default_factory=list)
    permissions: set = field(default_factory=set)
    error: str = ""


def repair_all_preview(store, code: str, *, user) -> RepairAll:
    """Plans for every ``code`` finding of ``store`` that has a repair. Raises
    :class:`NotFound` for a code the catalog does not know."""
    check = CHECKS.get(code)
    if check is None:
        raise NotFound("Unknown check")
    out = RepairAll(check=check)
    report = run_store_checks(store, only=[code])
    if report.status != "ok":
        out.error = f"{report.status}: {report.error}"
        return out
    findings = [f for f in report.findings if f.check == code]
    out.unrepaired = sum(1 for f in findings if not f.heal)
    steps: dict[str, int] = {}
    for f in findings:
        if not f.heal:
            steps[f.next_step_case] = steps.get(f.next_step_case, 0) + 1
    out.unrepaired_steps = [(n, check.next_step_for(case)) for case, n in sorted(steps.items())]
    findings = [f for f in findings if f.heal in ACTIONS]
    held = _held_back(store, {f.heal for f in findings})
    masker = masker_for(user)
    session_url = session_url_maker("session", store.key)
    with store.read() as conn:
        caps = store.capabilities(conn)
        for finding in findings:
            try:
                plan = plan_for(store, conn, caps, finding)
            except Exception as exc:  # an unexpected value: this row says so, the rest is offered
                log.exception("planning %s failed on %s", finding.heal, store.path)
                plan = Plan(action=finding.heal, check=code, profile=store.key, store_path=str(store.path),
                            session_id=finding.session_id, summary="planning failed",
                            blocked=f"planning failed: {exc.__class__.__name__}: {exc}")
            # Details and summaries may quote store text: masked for the page only.
            row = {"session_id": finding.session_id, "detail": masker(finding.detail),
                   "session_url": session_url(finding.session_id) if finding.session_id else "",
                   "action": plan.action, "summary": masker(plan.summary), "blocked": masker(plan.blocked),
                   "next_step": plan.next_step, "held": [],
                   # The heal page's change table (field labels, before/after), masked likewise.
                   "changes": change_table(masker.value([asdict(c) for c in plan.changes]))}
            if not plan.blocked:
                row["held"] = sorted(h for h in held.get(finding.session_id, ()) if h in prerequisites(plan.action))
            if not row["blocked"] and not row["held"]:
                if len(out.plans) < REPAIR_ALL_MAX:
                    out.plans.append(asdict(plan))
                    out.permissions.add(ACTIONS[plan.action].permission)
                else:
                    out.left += 1
                    continue
            out.rows.append(row)
    return out


def _held_back(store, heals: set[str]) -> dict[str, set[str]]:
    """Session id -> the repairs of its other findings that ``heals`` depend on."""
    needed = set().union(*(prerequisites(h) for h in heals)) if heals else set()
    codes = [c.code for c in CHECKS.values() if c.heal in needed]
    if not codes:
        return {}
    out: dict[str, set[str]] = {}
    for f in run_store_checks(store, only=codes).findings:
        if f.session_id and f.heal in needed:
            out.setdefault(f.session_id, set()).add(f.heal)
    return out
