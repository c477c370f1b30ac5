"""Bulk export of the sessions list's filtered sessions: ``/sessions/export.zip``
(transcripts as JSON Lines and Markdown, plus the list rows) and
``/sessions/export.csv`` (the list rows alone).

Both take the sessions list's own query string (profile, source, state, dates,
id/title text, health, order), parsed by its form, so "these sessions" means
exactly what the list shows; the work is :mod:`..stores.bulk_export`. Masking as
for single exports (``masking_for``).
"""

from __future__ import annotations

from django.http import StreamingHttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET

from ..checks.registry import BY_CODE as CHECKS
from ..forms import SessionFilterForm
from ..health import latest
from ..secrets import masking_for
from ..stores import registry
from ..stores.bulk_export import csv_stream, zip_stream
from ..stores.listing import distinct_sources
from .common import require_perm


def list_filters(request, stores):
    """The sessions list's filters from this request, as ``session_list`` builds them
    (``views.sessions``): the form's fields, and for a health filter the sessions
    holding that finding in the latest check pass."""
    form = SessionFilterForm(request.GET or None, profiles=[s.key for s in stores],
                             sources=distinct_sources(stores), checks=sorted(CHECKS))
    filters = form.filters()
    if filters.check:
        health = latest([s.key for s in stores])
        filters.with_findings = {key: h.sessions_with(filters.check) for key, h in health.items()}
    return form, filters


def _describe(form) -> str:
    data = getattr(form, "cleaned_data", {}) or {}
    parts = [f"{name}={value}" for name, value in data.items()
             if value not in (None, "", [], ()) and name != "order"]
    return ", ".join(parts)


@require_GET
@require_perm("view_transcripts")
def export_zip(request):
    """The filtered sessions' transcripts, streamed as one ZIP (``inactive=1``: with
    rewound and compacted rows, as the single export's option)."""
    stores = registry.glances()
    form, filters = list_filters(request, stores)
    full = {s.key: s for s in registry.stores()}
    body = zip_stream(stores, full, filters, masked=masking_for(request.user),
                      include_inactive=request.GET.get("inactive") == "1", describe=_describe(form))
    response = StreamingHttpResponse(body, content_type="application/zip")
    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    response["Content-Disposition"] = f'attachment; filename="hermes-sessions-{stamp}.zip"'
    return response


@require_GET
@require_perm("view_dashboard")
def export_csv(request):
    """The filtered sessions' list rows as CSV (titles masked for users who see
    masked text, as on the list page)."""
    stores = registry.glances()
    _, filters = list_filters(request, stores)
    response = StreamingHttpResponse(csv_stream(stores, filters, masked=masking_for(request.user)),
                                     content_type="text/csv; charset=utf-8")
    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    response["Content-Disposition"] = f'attachment; filename="hermes-sessions-{stamp}.csv"'
    return response
