"""The sessions list across every profile: the filter's choices, one page of rows
with each row's health badges from the latest stored pass, titles and details masked."""

from __future__ import annotations

from dataclasses import dataclass

from ..checks.registry import BY_CODE as CHECKS
from ..health import latest
from ..secrets import masker_for
from ..stores import registry
from ..stores.listing import Filters, Page, distinct_sources, list_sessions
from .labels import end_reason_label

BADGES = 3  # findings shown per row; the rest are counted
# The liveness column's word for a verdict (stores.liveness): an ended session without
# live evidence is "ended", an open one "idle".
LIVENESS_LABELS = {"live": "live", "maybe_live": "maybe live", "unknown": "unknown"}


def list_choices() -> tuple[list, list[str], list[str]]:
    """``(stores, profile keys, sources)``: every store as a glance (a locked store is
    listed as busy without holding up the rest) and the distinct sources of all of
    them (cached per store under its file state, ``listing.distinct_sources``)."""
    stores = registry.glances()
    return stores, [s.key for s in stores], distinct_sources(stores)


@dataclass
class ListPage:
    """``page`` rows carry ``findings`` (at most :data:`BADGES`, each with its check's
    ``title``), ``more_findings`` and ``end_reason_label`` (an ended row's);
    ``checked`` is the set of profile keys a stored pass covered."""

    page: Page
    checked: set[str]


def list_page(stores, filters: Filters, *, user, limit: int, after=None, before=None) -> ListPage:
    """One page of ``filters`` over ``stores`` (cursors: ``listing.list_sessions``)."""
    health = latest([s.key for s in stores])
    if filters.check:
        filters.with_findings = {key: h.sessions_with(filters.check) for key, h in health.items()}
    page = list_sessions(stores, filters, limit=limit, after=after, before=before, liveness=True)
    masker = masker_for(user)
    for row in page.rows:
        if masker:
            row["title"] = masker(row.get("title"))
        # Badges looked up here once, not by chained template filters on every row.
        # Grouped only for the profiles the page shows (by_session: once per pass and
        # profile in this process), not for every profile on each worker's first view.
        found = health.get(row["profile"])
        items = (found.by_session().get(row["id"]) if found is not None else None) or ()
        shown = items[:BADGES]
        if masker:  # details may quote store text (titles, JSONL lines)
            shown = [{**f, "detail": masker(f["detail"])} for f in shown]
        # A badge says the check's title; its code and detail are on hover.
        shown = [{**f, "title": getattr(CHECKS.get(f["check"]), "title", f["check"])} for f in shown]
        row["findings"], row["more_findings"] = shown, max(len(items) - BADGES, 0)
        if row.get("end_reason"):
            row["end_reason_label"] = end_reason_label(row["end_reason"])
        verdict = row.get("liveness", "unknown")
        row["live_label"] = LIVENESS_LABELS.get(verdict) or ("ended" if row.get("ended_at") is not None else "idle")
        row["live_class"] = verdict if verdict in LIVENESS_LABELS else row["live_label"]
        if masker:  # evidence names session keys and holders, not store text; masked all the same
            row["live_evidence"] = [masker(d) for d in row.get("live_evidence", ())]
    return ListPage(page, {key for key, h in health.items() if h.run is not None})
