"""A profile's health page: the latest stored pass's findings grouped by check, with
each row's links built here (one ``reverse()`` per link kind, not per row), and the
repair preview of one finding (live check, plan, liveness), masked once."""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass, field, replace

from django.urls import reverse

from ..actions.registry import ACTIONS, plan_for, prerequisites, rank, repair_first
from ..checks import run_store_checks
from ..checks.registry import BY_CODE as CHECKS
from ..checks.registry import next_step_of
from ..health import latest, staleness
from ..secrets import Masker, mask_remembered, masker_for
from ..stores import liveness
from ..stores.recovery.panel import copy_name, message_preview
from . import NotFound
from .changes import ChangeTable, change_table
from ..checks.damage import pass_damage

SHOWN_PER_CHECK = 200  # rows of one check on the page; the rest are counted
SHOWN_INSERTED = 50  # recovered messages whose text a repair preview shows; the rest are counted
SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}
_PLAIN_ID = re.compile(r"[A-Za-z0-9_.~-]+")  # ids reverse() would write as they are
_SENTINEL = "session-id-placeholder"


def session_url_maker(name: str, profile: str):
    """``url(session_id)`` equal to ``reverse(name, args=[profile, session_id])``.

    The URL around the id is reversed once; an id of plain characters (what Hermes
    writes) is put in place as it is, any other id goes through ``reverse()``
    (quoting, and its refusal of ids the route cannot hold)."""
    head, _, tail = reverse(name, args=[profile, _SENTINEL]).rpartition(_SENTINEL)

    def url(session_id: str) -> str:
        if isinstance(session_id, str) and _PLAIN_ID.fullmatch(session_id):
            return f"{head}{session_id}{tail}"
        return reverse(name, args=[profile, session_id])
    return url


@dataclass
class HealthPage:
    """``groups``: ``{"check", "code", "severity", "total", "rows", "unrepaired",
    "severities"}`` most severe first, ``severity`` the most severe of the group's
    findings and ``severities`` ``[(severity, count)]`` when they differ (each row
    then has ``show_severity``); ``rows`` the first :data:`SHOWN_PER_CHECK` of the ``total``
    findings (masked), each with ``session_url`` / ``repair_url`` / ``collision_url`` /
    ``repair_all_url`` (a store-wide finding's preview)
    where they apply and ``first`` (``[{"heal", "check"}]``: the session's repairs to
    apply before this one, ``actions.registry.repair_first``); ``unrepaired`` counts the findings without a repair (the page
    then shows the check's ``next_step``), ``repair_all`` whether to offer *Repair all* (more than one
    repairable finding, or one whose row is past those shown), ``own_next_step`` those of them whose case
    has its own (``Check.next_step_for``: the row's ``next_step``, shown in the row) and
    ``shared_next_step`` the rest, which the check's sentence covers, ``repairable`` those with one (*Repair all
    findings of this kind*)."""

    health: object
    groups: list[dict]
    counts: dict
    entry: dict
    catalog: list
    damage: dict | None = None  # checks.damage.known_damage: no heal or migration offered then


def health_page(store, *, user) -> HealthPage:
    """Findings of the latest pass over ``store``, and whether the store changed
    since (``health.stale``: ``os.stat`` of its files; no store is opened)."""
    health = latest([store.key])[store.key]
    health.stale = staleness(store, health)
    masker = masker_for(user)
    urls = {kind: session_url_maker(name, store.key) for kind, name in
            (("session_url", "session"), ("repair_url", "repair_preview"), ("collision_url", "session_collision"))}
    damage = None if health.stale else pass_damage(health)
    groups: dict[str, dict] = {}
    for finding in health.findings:
        group = groups.setdefault(finding["check"], {"check": CHECKS.get(finding["check"]), "code": finding["check"],
                                                     "severity": finding["severity"], "total": 0, "rows": [],
                                                     "unrepaired": 0, "own_next_step": 0, "repairable": 0})
        group["total"] += 1
        # The heading says the most severe of its findings (a check may report some
        # as info, e.g. counter_drift's rewound rows); mixed groups say each row's.
        group["by_severity"] = by_sev = group.get("by_severity", {})
        by_sev[finding["severity"]] = by_sev.get(finding["severity"], 0) + 1
        if SEVERITY_RANK.get(finding["severity"], 9) < SEVERITY_RANK.get(group["severity"], 9):
            group["severity"] = finding["severity"]
        next_step = ""
        if not finding.get("heal"):
            group["unrepaired"] += 1
            # A case with its own next step says it in its row; the group's
            # sentence then covers only the others (none left: not shown).
            if group["check"] and finding.get("next_step_case"):
                next_step = next_step_of(finding)
                group["own_next_step"] += 1
        elif finding["heal"] in ACTIONS:
            group["repairable"] += 1
        if len(group["rows"]) >= SHOWN_PER_CHECK:
            continue
        if finding.get("heal") in ACTIONS:
            group["repairable_shown"] = group.get("repairable_shown", 0) + 1
        # Details may quote store text; the stored pass's are the same on every view.
        row = {**finding, "detail": mask_remembered(finding["detail"]) if masker else finding["detail"],
               "next_step": next_step}
        sid = finding.get("session_id")
        if sid:
            # A session gone from the store links to its "not in this profile" page,
            # which shows these findings and its copies on disk.
            row["session_url"] = urls["session_url"](sid)
            if finding.get("heal"):
                row["repair_url"] = urls["repair_url"](sid)
                # A repair this one depends on is offered first (a hide before the recount).
                first = repair_first(finding["heal"], health.findings_of(sid))
                if first:
                    row["first"] = [{"heal": f["heal"], "check": f["check"]} for f in first]
            elif finding["check"] == "id_collision":
                row["collision_url"] = urls["collision_url"](sid)
        elif finding.get("heal") in ACTIONS:  # a store-wide finding: previewed on its Repair all page
            row["repair_all_url"] = reverse("repair_all", args=[store.key, finding["check"]])
        if damage and finding.get("heal"):  # no repair is offered on a damaged store
            row["repair_blocked"] = True
        group["rows"].append(row)
    for group in groups.values():
        group["shared_next_step"] = group["unrepaired"] - group["own_next_step"]
        # One repairable finding is repaired from its row; a button for it alone is
        # noise, unless its row is past the rows shown.
        group["repair_all"] = group["repairable"] > 1 or group["repairable"] > group.get("repairable_shown", 0)
        mixed = len(group["by_severity"]) > 1
        group["severities"] = (sorted(group["by_severity"].items(), key=lambda kv: SEVERITY_RANK.get(kv[0], 9))
                               if mixed else [])
        for row in group["rows"]:
            row["show_severity"] = mixed
        group["rows"].sort(key=lambda r: SEVERITY_RANK.get(r["severity"], 9))  # stable: the pass's order within
    # Most severe first; within a severity, repairs in the order they are applied.
    ordered = sorted(groups.values(), key=lambda g: (SEVERITY_RANK.get(g["severity"], 9),
                                                     rank(getattr(g["check"], "heal", None)), g["code"]))
    return HealthPage(health=health, groups=ordered, counts=health.counts(), entry=health.entry,
                      catalog=sorted(CHECKS.values(), key=lambda c: c.code),
                      damage=damage)


SHOWN_PLANNED = 50  # planned repairs listed on the heal page; the rest are counted


def planned_repairs(health, *, user, limit: int = SHOWN_PLANNED) -> tuple[list[dict], int]:
    """The repairs the latest pass of a profile planned (``health``: a
    ``health.ProfileHealth``), for the heal page: ``([{"action", "session_id",
    "reason", "changes": ChangeTable}], total)``, the first ``limit`` of ``total``,
    texts masked for ``user`` (a move's changes carry titles). No store is opened."""
    planned = [a for a in health.entry.get("actions", []) if a.get("status") == "planned"]
    masker = masker_for(user)
    rows = []
    for a in planned[:limit]:
        changes = masker.value(a.get("changes") or []) if masker else a.get("changes") or []
        rows.append({"action": a.get("action", ""), "session_id": a.get("session_id"),
                     "reason": masker(a.get("reason") or "") if masker else a.get("reason") or "",
                     "changes": change_table(changes)})
    return rows, len(planned)


@dataclass
class RepairPreview:
    """One finding's repair: ``finding`` (None when the live check no longer finds
    it), ``plan`` and its signed form's data ``plan_data`` (unmasked: what applying
    it executes), ``changes`` (the masked plan's changes as table rows), ``live`` (a
    liveness verdict other than ``not_live``), and the ``permission`` the action needs.
    ``inserted`` lists the first :data:`SHOWN_INSERTED` of the ``inserted_total``
    messages a recovery writes (``{"role", "source", "kind", "after_id", "text"}``,
    ``text`` an excerpt, masked as the page is; empty when the viewer may not read
    transcripts: ``inserted_total`` still counts them)."""

    check: object
    finding: object
    plan: object
    plan_data: dict | None
    live: object
    permission: str
    first: list = field(default_factory=list)
    changes: ChangeTable | None = None
    inserted: list = field(default_factory=list)
    inserted_total: int = 0


def repair_preview(store, session_id: str, code: str, *, user=None, masked: bool | None = None,
                   texts: bool | None = None) -> RepairPreview:
    """The concrete plan for the ``code`` finding of ``session_id``, read-only.
    Texts are masked for ``user``, or as ``masked`` says when given (a fleet host
    does not know the dashboard's user: ``fleet/repairs.py``); the messages a
    recovery inserts are excerpted when ``texts`` (default: ``user`` may read
    transcripts). Raises :class:`NotFound` for an unknown check code."""
    if code not in CHECKS:
        raise NotFound("Unknown check")
    finding = next((f for f in run_store_checks(store, session_id=session_id, only=[code]).findings
                    if f.session_id == session_id and f.heal), None)
    plan = data = live = None
    inserted = ([], 0)
    if finding is not None:
        with store.read() as conn:
            caps = store.capabilities(conn)
            plan = plan_for(store, conn, caps, finding)
            if plan is not None and plan.session_id:
                action = ACTIONS[plan.action]
                verdict = liveness.evidence_for(store, conn, caps, plan.session_id, time.time(),
                                                closed_counts=action.closed_activity_counts, cached_routing=True)
                live = verdict if verdict.verdict != "not_live" else None
        data = asdict(plan) if plan is not None else None
        masker = Masker(masked) if masked is not None else masker_for(user)
        if texts is None:
            texts = user is not None and user.has_perm("sessions_app.view_transcripts")
        inserted = _inserted(plan, texts, bool(masker))
        if masker:
            # Display copies with store and file text masked (titles in a move's notes and
            # changes, bad-line snippets of a JSONL file); ``plan_data`` keeps the real plan.
            finding = replace(finding, detail=masker(finding.detail))
            if plan is not None:
                plan = replace(plan, summary=masker(plan.summary), blocked=masker(plan.blocked),
                               params={**plan.params, "notes": masker.value(plan.params.get("notes") or [])},
                               changes=[replace(c, before=masker.value(c.before), after=masker.value(c.after))
                                        for c in plan.changes])
    permission = ACTIONS[plan.action].permission if plan is not None else "run_heal"
    first = []
    if plan is not None and prerequisites(plan.action):
        codes = [c.code for c in CHECKS.values() if c.heal in prerequisites(plan.action)]
        first = repair_first(plan.action, run_store_checks(store, session_id=session_id, only=codes).findings)
    return RepairPreview(check=CHECKS[code], finding=finding, plan=plan, plan_data=data, live=live,
                         permission=permission, first=first,
                         changes=change_table(plan.changes) if plan is not None else None,
                         inserted=inserted[0], inserted_total=inserted[1])


def _inserted(plan, texts: bool, masked: bool) -> tuple[list[dict], int]:
    """``(excerpts, total)`` of the messages ``plan`` inserts (``Plan.inserted``)."""
    found = plan.inserted if plan is not None else ()
    if not texts:
        return [], len(found)
    return [{"role": i.message.role, "source": copy_name(i.source.path, i.source.kind), "kind": i.source.kind,
             "after_id": i.after_id, "text": message_preview(i.message, masked)}
            for i in found[:SHOWN_INSERTED]], len(found)
