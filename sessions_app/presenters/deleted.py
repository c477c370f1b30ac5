"""The page of a session its store no longer holds: what the dashboard knows of where it went.

Read from the dashboard's own records only — the trash entries (their
``manifest.json``), the audit events and the latest stored check pass (what it
found of the id: a loss, leftover files) — never from a store, never writing
anything (docs/architecture.md §6, "trash"). The page loads the id's copies on
disk beside it (the session page's *Copies on disk* panel). A session deleted by Hermes itself or
by hand, of which the dashboard keeps no record, is said to be unknown.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import connection

from .. import trash
from ..actions.deletion.plan import DELETE_ACTION, RESTORE_ACTION
from ..actions.prune import PRUNE_ACTION
from ..models import AuditEvent
from ..checks.registry import BY_CODE as CHECKS
from ..checks.registry import next_step_of
from ..health import latest, staleness
from ..secrets import mask_remembered, masker_for

MOVE_ACTION = "move_to_owner_store"
PURGE_ACTION = "purge_trash"
GONE_ACTIONS = (DELETE_ACTION, PRUNE_ACTION, MOVE_ACTION, PURGE_ACTION, RESTORE_ACTION)
EVENTS = 20  # the newest events naming the session that are looked at


@dataclass
class DeletedSession:
    """What is known of ``session_id``, gone from ``profile``'s store.

    ``how``: ``deleted`` (a confirmed or bulk deletion), ``pruned``, ``moved``
    (into ``moved_to``'s store) or ``unknown`` (no record). ``entry``: its trash
    entry while it holds the rows (``deleted`` or ``pending``), else None;
    ``purged``: the ``purge_trash`` event that removed that entry. ``at``: epoch
    seconds of the deletion, ``by``: who. ``title``: as the trash kept it, masked.
    ``events``: the audit events naming the session, newest first. ``findings``:
    ``(finding dict, Check | None, next step)`` of the id in the latest stored pass
    (details masked), so the page agrees with the health page that linked it;
    ``findings_run`` that pass, ``findings_stale`` the store's change since
    (``health.staleness``: its repairs are then not offered, the pass predates
    whatever removed the session)."""

    profile: str
    session_id: str
    how: str = "unknown"
    at: float | None = None
    by: str = ""
    entry: trash.TrashEntry | None = None
    purged: AuditEvent | None = None
    moved_to: str = ""
    title: str = ""
    event: AuditEvent | None = None
    events: list = field(default_factory=list)
    findings: list = field(default_factory=list)
    findings_run: object = None
    findings_stale: object = None


def _events(profile: str, session_id: str) -> list[AuditEvent]:
    qs = AuditEvent.objects.filter(profile=profile, outcome=AuditEvent.Outcome.APPLIED, action__in=GONE_ACTIONS)
    # JSON list membership: a real containment where the database has one (PostgreSQL),
    # else the quoted id in the list's text, confirmed in Python below.
    if connection.features.supports_json_field_contains:
        qs = qs.filter(session_ids__contains=[session_id])
    else:
        qs = qs.filter(session_ids__icontains=f'"{session_id}"')
    return [e for e in qs.select_related("run").order_by("-created_at", "-id")[:EVENTS]
            if session_id in (e.session_ids or [])]


def _newest_entry(profile: str, session_id: str) -> trash.TrashEntry | None:
    for entry in trash.list_entries(profile):  # newest first
        if session_id in (entry.manifest.get("targets") or []) or entry.manifest.get("session_id") == session_id:
            return entry
    return None


def deleted_session(store, session_id: str, *, user) -> DeletedSession:
    """What the trash, the audit trail and the latest stored pass say of
    ``session_id`` in ``store``'s profile (see :class:`DeletedSession`). Reads
    ``<data>/trash`` manifests and the dashboard's database, and ``os.stat``s the
    store's files; no store is opened."""
    profile = store.key
    shown = DeletedSession(profile, session_id)
    shown.events = _events(profile, session_id)
    entry = _newest_entry(profile, session_id)
    gone = next((e for e in shown.events if e.action != PURGE_ACTION), None)
    if gone is not None and gone.action == RESTORE_ACTION:
        gone = None  # it came back after its last deletion; gone since by other means
    if entry is not None and entry.state in ("deleted", "pending") and (
            gone is None or gone.action != MOVE_ACTION or (entry.deleted_at or 0) >= gone.created_at.timestamp()):
        shown.entry = entry
        shown.how = "pruned" if entry.manifest.get("pruned") else "deleted"
        shown.at, shown.by = entry.deleted_at, str(entry.manifest.get("actor") or "")
        info = next((t for t in entry.manifest.get("targets_info") or [] if t.get("id") == session_id), {})
        shown.title = info.get("title") or ""
        shown.event = gone
    elif gone is not None:
        shown.event, shown.at, shown.by = gone, gone.created_at.timestamp(), gone.actor_label
        shown.how = {DELETE_ACTION: "deleted", PRUNE_ACTION: "pruned", MOVE_ACTION: "moved"}[gone.action]
        if gone.action == MOVE_ACTION:
            shown.moved_to = str(((gone.plan or {}).get("params") or {}).get("target_profile") or "")
        else:  # deleted into the trash, whose entry is gone: purged (or removed by hand)
            shown.purged = next((e for e in shown.events if e.action == PURGE_ACTION
                                 and e.created_at >= gone.created_at), None)
    masker = masker_for(user)
    if shown.title:
        shown.title = masker(shown.title) if masker else shown.title
    health = latest([profile])[profile]
    shown.findings_run = health.run
    shown.findings_stale = staleness(store, health) if health.run else None
    for f in health.findings_of(session_id):
        detail = mask_remembered(f["detail"]) if masker else f["detail"]
        shown.findings.append(({**f, "detail": detail}, CHECKS.get(f["check"]), next_step_of(f)))
    return shown
