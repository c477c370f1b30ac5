"""Read-only audit views: the event timeline, one event, exports, health over time."""

from __future__ import annotations

import csv
import datetime as dt
import json

from django import forms
from django.http import Http404, StreamingHttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone
from django.views.decorators.http import require_GET

from ..charts import health_chart
from ..presenters.changes import change_table
from ..models import AuditEvent
from ..secrets import Masker, masker_for
from ..stores import registry
from ..vocabulary import WRITE_OUTCOME_MEANINGS
from .common import require_perm

PAGE_SIZE = 50
EXPORT_FIELDS = (
    "id", "created_at", "actor_label", "action", "check_code", "profile", "store_path", "session_ids", "outcome",
    "reason", "rows_changed", "backup_path", "backup_size", "backup_sha256", "duration_ms", "request_address", "run_id",
    "plan", "changes",
)


class AuditFilterForm(forms.Form):
    actor = forms.CharField(required=False, max_length=200)
    action = forms.CharField(required=False, max_length=64)
    profile = forms.CharField(required=False, max_length=200)
    session = forms.CharField(required=False, max_length=200)
    outcome = forms.ChoiceField(required=False, choices=[("", "any outcome")] + list(AuditEvent.Outcome.choices))
    date_from = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    date_to = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))


def _day(value: dt.date, end: bool = False) -> dt.datetime:
    return dt.datetime.combine(value, dt.time.max if end else dt.time.min, tzinfo=dt.timezone.utc)


def filtered_events(params):
    """Events matching the filter form in ``params`` (a QueryDict), newest first."""
    form = AuditFilterForm(params or None)
    qs = AuditEvent.objects.select_related("actor").order_by("-created_at", "-id")
    if form.is_valid():
        data = form.cleaned_data
        if data["actor"]:
            qs = qs.filter(actor_label__icontains=data["actor"])
        if data["action"]:
            qs = qs.filter(action=data["action"])
        if data["profile"]:
            qs = qs.filter(profile=data["profile"])
        if data["session"]:
            # JSON list membership, portable across SQLite and PostgreSQL.
            qs = qs.filter(session_ids__contains=[data["session"]]) if _json_contains() else \
                qs.filter(session_ids__icontains=f'"{data["session"]}"')
        if data["outcome"]:
            qs = qs.filter(outcome=data["outcome"])
        if data["date_from"]:
            qs = qs.filter(created_at__gte=_day(data["date_from"]))
        if data["date_to"]:
            qs = qs.filter(created_at__lte=_day(data["date_to"], end=True))
    return form, qs


def _json_contains() -> bool:
    from django.db import connection
    return connection.features.supports_json_field_contains


@require_GET
@require_perm("view_auditevent")
def event_list(request):
    """The timeline, keyset-paginated on (created_at, id)."""
    form, qs = filtered_events(request.GET)
    before = request.GET.get("before")
    if before and before.isdigit():
        anchor = AuditEvent.objects.filter(pk=int(before)).first()
        if anchor is not None:
            qs = qs.filter(created_at__lte=anchor.created_at).exclude(created_at=anchor.created_at, id__gte=anchor.id)
    events = list(qs[: PAGE_SIZE + 1])
    masker = masker_for(request.user)
    for event in events if masker else ():
        event.reason = masker(event.reason)
    more = len(events) > PAGE_SIZE
    events = events[:PAGE_SIZE]
    params = request.GET.copy()
    params.pop("before", None)
    return render(request, "audit/list.html", {
        "form": form, "events": events, "next_before": events[-1].pk if more and events else None,
        "query": params.urlencode(), "paged": bool(before), "actions": AuditEvent.objects.order_by().values_list("action", flat=True).distinct(),
        "outcome_words": WRITE_OUTCOME_MEANINGS,
    })


@require_GET
@require_perm("view_auditevent")
def event_detail(request, pk):
    event = get_object_or_404(AuditEvent.objects.select_related("actor", "run"), pk=pk)
    masker = masker_for(request.user)
    plan, changes = masker.value(event.plan), masker.value(event.changes)
    event.reason = masker(event.reason)
    return render(request, "audit/detail.html", {
        "event": event, "plan": plan if isinstance(plan, dict) else {}, "changes": change_table(changes),
        "meaning": WRITE_OUTCOME_MEANINGS.get(event.outcome, ""),
        "plan_json": json.dumps(plan, indent=2, ensure_ascii=False),
        "changes_json": json.dumps(changes, indent=2, ensure_ascii=False),
    })


def _row(event: AuditEvent, masker: Masker) -> dict:
    """One exported event; ``masker`` masks secrets in the texts copied from stores
    (titles in move plans, reasons), as the pages do for the same user."""
    row = {name: getattr(event, name) for name in EXPORT_FIELDS}
    row["created_at"] = event.created_at.isoformat()
    for name in ("plan", "changes", "reason"):
        row[name] = masker.value(row[name])
    return row


@require_GET
@require_perm("view_auditevent")
def event_export(request, fmt):
    """The filtered events as CSV or JSON, streamed (never the whole table in memory)."""
    if fmt not in ("csv", "json"):
        raise Http404("Unknown export format")
    _, qs = filtered_events(request.GET)
    masker = masker_for(request.user)
    rows = (_row(e, masker) for e in qs.iterator(chunk_size=500))
    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    if fmt == "csv":
        response = StreamingHttpResponse(_csv(rows), content_type="text/csv; charset=utf-8")
    else:
        response = StreamingHttpResponse(_json(rows), content_type="application/json; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="hermes-admin-audit-{stamp}.{fmt}"'
    return response


class _Echo:
    def write(self, value):
        return value


def _csv_cell(value):
    if isinstance(value, (list, dict)):
        value = json.dumps(value, ensure_ascii=False)
    text = "" if value is None else str(value)
    # Spreadsheets run cells starting with these as formulas (CSV injection).
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def _csv(rows):
    writer = csv.writer(_Echo())
    yield writer.writerow(EXPORT_FIELDS)
    for row in rows:
        yield writer.writerow([_csv_cell(row[name]) for name in EXPORT_FIELDS])


def _json(rows):
    yield "["
    for n, row in enumerate(rows):
        yield ("," if n else "") + "\n" + json.dumps(row, ensure_ascii=False, default=str)
    yield "\n]\n"


@require_GET
@require_perm("view_dashboard")
def profile_history(request, profile):
    """Finding counts per severity over the check passes of one profile (inline SVG).

    Drawn from the dashboard's own records only, so it works while the store itself
    is busy or damaged (that is when its history matters most).
    """
    store = registry.get(profile)
    if store is None:
        raise Http404("No such profile")
    return render(request, "audit/history.html", {"store": store, "chart": health_chart(store.key)})
