"""Search across profiles (``/search/?q=``) and the bounded scan of one profile's
rows its full-text index misses (``/p/<profile>/search/scan/?q=``).

Snippets are message content: both need ``view_transcripts``. Masking follows the
profile search page exactly (``presenters.search.mask_hits``); for users who see masked
text, counts are of the hits shown (a count of every index match would tell how
many matched only inside secrets) and a title matching only inside a secret is
left out.
"""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.shortcuts import render
from django.views.decorators.http import require_GET

from ..bidi import isolate
from ..checks.damage import damaged_keys
from ..secrets import masking_for
from ..stores import registry
from ..stores.coverage import coverage
from ..stores.scan import scan
from ..stores.search import SearchUnavailable, terms
from ..stores.search_all import search_everywhere
from .common import require_perm, store_view
from ..presenters.search import mask_hits, mask_profile_results
from .search import MAX_QUERY

SIZES = (10, 20, 50)


class EverywhereForm(forms.Form):
    q = forms.CharField(required=False, max_length=MAX_QUERY, label="words")
    profile = forms.MultipleChoiceField(required=False)
    size = forms.TypedChoiceField(required=False, coerce=int, choices=[(n, n) for n in SIZES], empty_value=20,
                                  label="per profile")

    def __init__(self, *args, profiles=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["profile"].choices = [(p, isolate(p)) for p in profiles]
        self.fields["profile"].widget.attrs["size"] = min(max(len(profiles), 2), 8)


@require_GET
@require_perm("view_transcripts")
def search_everywhere_page(request):
    """Message text, session ids and titles across every profile (or the chosen
    ones), each store read at a glance: a busy or damaged one says so in its own
    section and the others are searched."""
    stores = registry.glances()
    form = EverywhereForm(request.GET or None, profiles=[s.key for s in stores])
    context = {"form": form, "results": None, "problem": None,
               "scan_rows": settings.HERMES_SCAN_ROWS, "scan_seconds": settings.HERMES_SCAN_SECONDS}
    if form.is_bound and form.is_valid() and (form.cleaned_data.get("q") or "").strip():
        data = form.cleaned_data
        chosen = set(data.get("profile") or ())
        picked = [s for s in stores if not chosen or s.key in chosen]
        masking = masking_for(request.user)
        try:
            results = search_everywhere(picked, data["q"].strip(), limit=data.get("size") or 20, texts=masking)
        except ValueError:
            context["problem"] = SearchUnavailable("query", "Type at least one word (letters or digits).")
        else:
            if masking:
                words = [w for w, _ in terms(data["q"])]
                for found in results.profiles:
                    mask_profile_results(found, words)
            # A store the latest pass found damaged may still answer its index: "ok"
            # would say more than the search knows.
            context.update(results=results, masking=masking, q=data["q"].strip(),
                           damaged=set(damaged_keys(picked)))
    return render(request, "search/all.html", context)


@require_GET
@require_perm("view_transcripts")
@store_view
def profile_scan(request, store):
    """A bounded LIKE scan of the rows the profile's index misses (every row with
    ``all=1``, or when the index is missing, damaged or stale); newest first, going
    on from ``before``. The budgets are settings (HERMES_SCAN_ROWS, _SECONDS)."""
    query = (request.GET.get("q") or "").strip()[:MAX_QUERY]
    whole = request.GET.get("all") == "1"
    try:
        before = int(request.GET.get("before") or 0) or None
    except ValueError:
        before = None
    if before is not None and not 0 < before < 2**63:
        before = None
    context = {"store": store, "q": query, "whole": whole, "result": None, "problem": None, "coverage": None,
               "rows": settings.HERMES_SCAN_ROWS, "seconds": settings.HERMES_SCAN_SECONDS}
    with store.read(lenient=True) as conn:  # the scan keeps its own time budget
        caps = store.capabilities(conn)
        found = coverage(conn, caps)
        context["coverage"] = found
        where, params = ("1", ()) if whole else found.scan_where()
        if query and not whole and found.complete:
            context["problem"] = SearchUnavailable(
                "complete", "The index of this profile covers every message: its search finds them all.")
        elif query:
            try:
                result = scan(conn, caps.columns("messages"), query, where, params, before=before,
                              rows=settings.HERMES_SCAN_ROWS, seconds=settings.HERMES_SCAN_SECONDS)
            except ValueError:
                context["problem"] = SearchUnavailable("query", "Type at least one word (letters or digits).")
            else:
                if masking_for(request.user):
                    mask_hits(result, result.texts)
                result.texts = {}
                context["result"] = result
    return render(request, "search/scan.html", context)
