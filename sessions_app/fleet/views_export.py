"""The fleet sessions list's rows as CSV: ``/fleet/sessions/export.csv``.

Takes the fleet list's own query string (profile, order, source, state, q), so
"these sessions" means what ``/fleet/sessions/`` shows of the remote hosts. Each
host is read page by page through its ``sessions`` read (``fleet/reads.py``, one
task of at most :data:`PAGE` rows each, resumed after the previous page's keyset
cursor), host after host; the rows are written with the one-host export's CSV
columns (``stores.bulk_export.csv_values``), titles masked here for users who
see masked text. A host that is unreachable, or lost midway, ends its part with a
``# host … left out`` line, as a store left out does in the one-host export.
"""

from __future__ import annotations

import csv

from django.http import StreamingHttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET

from ..csv_safe import Echo
from ..secrets import mask, masking_for
from ..stores.bulk_export import CSV_FIELDS, csv_values
from ..views.common import require_perm
from . import client, split_key
from .views import ORDERS, _fleet_on

PAGE = 200  # rows of one read task (reads.MAX_LIMIT)


def _host_pages(view, filters: dict, errors: list):
    """Every row of one host the filters select, one list of rows per read task."""
    after = None
    while True:
        answer = client.ask(view, "sessions", filters=filters, limit=PAGE, after=after)
        if not answer.ok:
            errors.append(f"host {view.name} left out: {answer.error}")
            return
        data = answer.data
        errors += [f"profile {k} left out: {s}: {r}" for k, (s, r) in sorted(data["errors"].items())]
        yield data["rows"]
        if data["next"] is None:
            return
        after = data["next"]


@require_GET
@require_perm("view_dashboard")
def export_csv(request):
    """The remote sessions the fleet list's filters select, as CSV (see module docstring)."""
    _fleet_on()
    profile = request.GET.get("profile") or ""
    filters = {"order": request.GET.get("order") if request.GET.get("order") in ORDERS else "started",
               "q": (request.GET.get("q") or "")[:200], "source": (request.GET.get("source") or "")[:100],
               "state": request.GET.get("state") if request.GET.get("state") in ("open", "ended") else "",
               "profiles": [profile] if profile else []}
    wanted = split_key(profile)[1] if split_key(profile) else None
    views = [h for h in client.hosts() if not profile or h.name == wanted]
    title_mask = mask if masking_for(request.user) else None

    def lines():
        writer = csv.writer(Echo())
        yield writer.writerow(CSV_FIELDS)
        errors: list[str] = []
        for view in views:
            for rows in _host_pages(view, filters, errors):
                yield "".join(writer.writerow(csv_values(row, title_mask)) for row in rows)
        for line in errors:
            yield writer.writerow([f"# {line}"])

    response = StreamingHttpResponse(lines(), content_type="text/csv; charset=utf-8")
    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    response["Content-Disposition"] = f'attachment; filename="hermes-fleet-sessions-{stamp}.csv"'
    return response
