"""Profiles overview and the per-profile page."""

from django.conf import settings
from django.shortcuts import render
from django.views.decorators.http import require_GET

from ..presenters.overview import overview_rows
from .common import render_store_error, require_perm, store_view


@require_GET
@require_perm("view_dashboard")
def overview(request):
    """Every profile of every root with its store status; rescans on each load.
    A locked store shows busy at a glance, never after its full read timeout."""
    found, rows = overview_rows()
    context = {"discovery": found, "rows": rows}
    if settings.FLEET:  # fleet mode (issue 17): every host's profiles on the same page
        from ..fleet.views import fleet_context
        context.update(fleet_context(request))
    return render(request, "sessions/overview.html", context)


@require_GET
@require_perm("view_dashboard")
@store_view
def profile_detail(request, store):
    """One profile: its store's facts, or its error page when it cannot be read."""
    status = store.probe()
    if not status.ok:
        return render_store_error(request, store, status)
    return render(request, "sessions/profile.html", {"store": store, "status": status})
