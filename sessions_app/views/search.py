"""Full-text search across one profile's messages (``/p/<profile>/search/?q=``)."""

from __future__ import annotations

from django.conf import settings
from django.shortcuts import render
from django.views.decorators.http import require_GET

from ..secrets import mask, masking_for
from ..stores.search import SearchUnavailable, search
from .common import require_perm, store_view

SIZES = (20, 50, 100)
MAX_QUERY = 200


def _int(value):
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if 0 < number < 2**63 else None


def _mask_hits(results) -> None:
    for hit in results.hits:
        plain = "".join(text for text, _ in hit.parts)
        masked = mask(plain)
        if masked != plain:  # a secret inside: show it masked, without highlights
            hit.parts = [(masked, False)]
        if hit.session and hit.session.get("title"):
            hit.session["title"] = mask(hit.session["title"])


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
    context = {"store": store, "q": query, "size": size, "sizes": SIZES, "results": None, "problem": None,
               "before": before}
    status = 200
    if query:
        try:
            with store.read(budget=settings.HERMES_QUERY_BUDGET) as conn:
                caps = store.capabilities(conn)
                results = search(conn, caps.columns("messages"), caps.columns("sessions"), query,
                                 limit=size, before=before)
        except ValueError:
            context["problem"] = SearchUnavailable("query", "Type at least one word (letters or digits).")
        except SearchUnavailable as exc:
            context["problem"] = exc
            status = 503 if exc.kind == "damaged" else 200
        else:
            if masking_for(request.user):
                _mask_hits(results)
            context["results"] = results
    return render(request, "sessions/search.html", context, status=status)
