"""The session page's *Copies on disk* panel (an htmx fragment, also a page of its own)."""

from __future__ import annotations

from django.shortcuts import render
from django.views.decorators.http import require_GET

from ..secrets import masking_for
from ..stores import registry
from ..stores.recovery.panel import copies_panel
from .common import require_perm, store_view


@require_GET
@require_perm("view_dashboard")
@store_view
def session_copies(request, store, session_id):
    """Every copy of the session on disk and how it compares with the store; message
    previews only for viewers who may read transcripts."""
    panel = copies_panel(store, session_id, others=[s for s in registry.stores() if s.key != store.key],
                         previews=request.user.has_perm("sessions_app.view_transcripts"),
                         masked=masking_for(request.user))
    template = "sessions/_copies.html" if request.htmx else "sessions/copies.html"
    return render(request, template, {"panel": panel, "store": store, "session_id": session_id})
