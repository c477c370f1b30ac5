"""Full-text search across one profile's messages (``/p/<profile>/search/?q=``)."""

from __future__ import annotations

from django.shortcuts import render
from django.views.decorators.http import require_GET

from ..presenters.search import search_page
from .common import require_perm, store_view

SIZES = (20, 50, 100)
MAX_QUERY = 200


def _int(value):
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if 0 < number < 2**63 else None


@require_GET
@require_perm("view_transcripts")
@store_view
def profile_search(request, store):
    """Newest messages of the profile matching ``q``; ``before`` pages to older ones.

    Snippets are message content, hence the transcript permission. A store without
    a usable index gets a plain explanation on this page (its other pages still
    work); a busy store gets the store's busy page.
    """
    query = (request.GET.get("q") or "").strip()[:MAX_QUERY]
    size = _int(request.GET.get("size"))
    size = size if size in SIZES else 50
    before = _int(request.GET.get("before"))
    found = search_page(store, query, user=request.user, size=size, before=before)
    context = {"store": store, "q": query, "size": size, "sizes": SIZES, "results": found.results,
               "problem": found.problem, "before": before, "count": found.count}
    return render(request, "sessions/search.html", context, status=found.status)
