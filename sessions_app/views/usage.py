"""Usage and cost across profiles (``/usage/``) and its CSV (``/usage/export.csv``).

The figures come from :mod:`..stores.usage_report`; this module parses the period
and grouping, formats the numbers once (the template only lays them out) and draws
the chart with :func:`..charts.bar_chart`. Usage figures are metadata (numbers,
model names, sources), so the page needs ``view_dashboard`` only.
"""

from __future__ import annotations

import csv
import datetime as dt

from django import forms
from django.http import HttpResponseBadRequest, StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from ..bidi import isolate
from ..charts import bar_chart
from ..checks.damage import damaged_keys
from ..csv_safe import Echo, cell
from ..stores import registry
from ..stores.listing import distinct_sources
from ..stores.usage import FIGURES, NAMES
from ..stores.usage_report import BUCKETS, GROUPS, MAIN_TASK, Period, build, day_date
from .common import require_perm

DEFAULT_DAYS = 30
METRICS = {"tokens": "total tokens", "cost": "estimated cost (USD)", "calls": "API calls"}
QUICK = (("7", 7), ("30", 30), ("90", 90), ("365", 365))


class UsageForm(forms.Form):
    """The usage page's GET parameters; choices filled from the known stores."""

    profile = forms.MultipleChoiceField(required=False)
    source = forms.ChoiceField(required=False)
    date_from = forms.DateField(required=False, label="started from", widget=forms.DateInput(attrs={"type": "date"}))
    date_to = forms.DateField(required=False, label="started to", widget=forms.DateInput(attrs={"type": "date"}))
    group = forms.ChoiceField(required=False, label="group by", choices=list(GROUPS.items()))
    bucket = forms.ChoiceField(required=False, label="chart by", choices=[(b, b) for b in BUCKETS])
    metric = forms.ChoiceField(required=False, label="chart of", choices=list(METRICS.items()))

    def __init__(self, *args, profiles=(), sources=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["profile"].choices = [(p, isolate(p)) for p in profiles]
        self.fields["profile"].widget.attrs["size"] = min(max(len(profiles), 2), 8)
        self.fields["source"].choices = [("", "any source")] + [(s, isolate(s)) for s in sources]

    def clean(self):
        data = super().clean()
        start, end = data.get("date_from"), data.get("date_to")
        if start and end and start > end:
            raise forms.ValidationError("The period starts after it ends: swap the two dates.")
        return data


def _params(request):
    """The form, and its data with the default period (the last DEFAULT_DAYS UTC
    days) when the query names no dates at all; empty dates mean an open end;
    ``days`` (one of QUICK) means the last that many days."""
    data = request.GET.copy()
    today = timezone.now().date()
    days = data.pop("days", [None])[-1]
    if days in {label for label, _ in QUICK}:
        data["date_from"] = (today - dt.timedelta(days=int(days) - 1)).isoformat()
        data["date_to"] = today.isoformat()
    elif "date_from" not in data and "date_to" not in data:
        data["date_from"] = (today - dt.timedelta(days=DEFAULT_DAYS - 1)).isoformat()
        data["date_to"] = today.isoformat()
    stores = registry.glances()
    form = UsageForm(data, profiles=[s.key for s in stores], sources=distinct_sources(stores))
    return form, stores


def _report(form, stores):
    data = form.cleaned_data
    chosen = set(data.get("profile") or ())
    picked = [s for s in stores if not chosen or s.key in chosen]
    period = Period(data.get("date_from"), data.get("date_to"))
    return period, build(picked, period, data.get("source") or None, data.get("group") or "profile",
                         data.get("bucket") or "day")


def _number(name: str, value) -> str:
    if value is None:
        return "—"
    if name.endswith("_usd"):
        return f"${value:,.4f}" if value < 100 else f"${value:,.2f}"
    return f"{int(value):,}"


def _cells(line) -> list[str]:
    cells = [_number(n, line.values[n]) for n in NAMES]
    if not line.actual_known and line.values["actual_cost_usd"] in (0, None):
        cells[NAMES.index("actual_cost_usd")] = "—"  # nothing reported, not "free"
    return cells


def _metric(line, metric: str):
    if metric == "cost":
        return line.values["estimated_cost_usd"]
    if metric == "calls":
        return line.values["api_call_count"]
    return line.total_tokens


@require_GET
@require_perm("view_dashboard")
def usage_page(request):
    """Tokens, API calls and cost by profile, model, source, task or time, for a
    period of session start days; stores read at a glance (a busy one is listed as
    busy and the rest shown)."""
    form, stores = _params(request)
    context = {"form": form, "report": None, "quick": QUICK, "metrics": METRICS,
               "figures": [label for _, label in FIGURES]}
    if form.is_valid():
        period, report = _report(form, stores)
        metric = form.cleaned_data.get("metric") or "tokens"
        context.update(
            report=report, period=period, metric=metric,
            lines=[(line, _number("", line.total_tokens), _cells(line)) for line in report.lines],
            total=(report.total, _number("", report.total.total_tokens), _cells(report.total)),
            chart=bar_chart([(day_date(day).isoformat()[5:] if report.bucket == "day" else line.key[:8],
                              line.key, _metric(line, metric)) for day, line in report.series], METRICS[metric]),
            missing=[(dict(FIGURES)[name], keys) for name, keys in report.missing.items()],
            group_label=GROUPS[report.group],
            export_query=request.GET.urlencode(),
            # Read, but its latest pass found the file damaged: its figures may be incomplete.
            damaged=damaged_keys([s for s in stores if s.key in report.profiles]),
        )
    return render(request, "usage/usage.html", context)


CSV_FIELDS = ("profile", "day", "source", "model", "task", "sessions", *NAMES, "total_tokens", "actual_cost_reported")


def _csv(report):
    writer = csv.writer(Echo())
    yield writer.writerow(CSV_FIELDS)
    for key, row in sorted(report.rows, key=lambda kr: (kr[1].day, kr[0], kr[1].source, kr[1].model, kr[1].task)):
        yield writer.writerow([cell(v) for v in (
            key, day_date(row.day).isoformat(), row.source, row.model, row.task or MAIN_TASK, row.sessions,
            *(row.values[n] for n in NAMES), row.total_tokens, row.actual_known)])


@require_GET
@require_perm("view_dashboard")
def usage_export(request):
    """The page's figures at full detail (one line per profile, UTC day, source,
    model and task) as CSV; a figure a store does not record is an empty cell."""
    form, stores = _params(request)
    if not form.is_valid():
        errors = "; ".join(f"{name}: {', '.join(e)}" for name, e in form.errors.items())
        return HttpResponseBadRequest(f"Bad usage query ({errors}); nothing was exported.", content_type="text/plain")
    _, report = _report(form, stores)
    response = StreamingHttpResponse(_csv(report), content_type="text/csv; charset=utf-8")
    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    response["Content-Disposition"] = f'attachment; filename="hermes-usage-{stamp}.csv"'
    return response
