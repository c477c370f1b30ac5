"""Sessions list (all profiles), session page, raw message, export."""

from __future__ import annotations

import hashlib
import re
from dataclasses import fields

from django.conf import settings
from django.contrib import messages as flash
from django.core import signing
from django.http import Http404, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.utils.functional import SimpleLazyObject
from django.views.decorators.http import require_GET

from ..checks.registry import choices as check_choices
from ..forms import SessionFilterForm, session_filters
from ..presenters import NotFound
from ..presenters.session_list import list_choices, list_page
from ..presenters.session_page import raw_message, session_page
from ..secrets import masking_for
from ..stores import export, session_info
from ..stores.listing import COUNT_CAP, DESCENDING, TEXT_ORDERS
from .common import require_perm, store_view
from .deletion import deleted_session_page

CURSOR_SALT = "sessions-list-cursor"
PAGE_SIZES = (25, 50, 100, 200)
TRANSCRIPT_SIZES = (50, 100, 200, 500)


def _int(value, default=None):
    """An integer parameter within SQLite's 64-bit range, else ``default``."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        return default
    return number if -(2**63) <= number < 2**63 else default


def _salt(filters) -> str:
    # Order and direction are part of the salt: a cursor of one order means nothing in another.
    return f"{CURSOR_SALT}:{filters.order}:{'down' if filters.walks_down else 'up'}"


STALE = object()  # a page link that no longer verifies (_cursor)


def _cursor(request, name, filters):
    """``((sort, profile key, session id), position)`` of a signed page link,
    ``(None, None)`` without one, ``(STALE, None)`` for one that no longer verifies;
    ``position`` is the 1-based place of that page's first row."""
    raw = request.GET.get(name)
    if not raw:
        return None, None
    try:
        value = signing.loads(raw, salt=_salt(filters))
        sort = str(value[0]) if filters.order in TEXT_ORDERS else float(value[0])
        return (sort, str(value[1]), str(value[2])), max(int(value[3]), 1)
    except (signing.BadSignature, TypeError, ValueError, IndexError):
        return STALE, None


EXPORT_CHUNK = 64 * 1024  # characters per write of a streamed export


def _batched(pieces):
    """Join streamed pieces (one per message row) into writes of about EXPORT_CHUNK
    characters: one write per row made the 300k-row export twice as slow as its
    generator (docs/benchmarks.md). Memory stays bounded by a chunk plus one row."""
    buffer, size = [], 0
    for piece in pieces:
        buffer.append(piece)
        size += len(piece)
        if size >= EXPORT_CHUNK:
            yield "".join(buffer)
            buffer, size = [], 0
    if buffer:
        yield "".join(buffer)


def _token(cursor, filters, position):
    return signing.dumps([*cursor, position], salt=_salt(filters)) if cursor else None


# The sortable columns (listing.ORDERS), in the table's order.
SORTABLE = ("title", "source", "messages", "started", "activity")


def _sort_links(request, filters) -> dict:
    """Per sortable column: its header link (the list sorted by it, the active column
    reversed) and its ``aria-sort`` when it is the active one."""
    base = _query_without(request, "after", "before", "order", "dir")
    links = {}
    for order in SORTABLE:
        active = filters.order == order
        down = (not filters.walks_down) if active else order in DESCENDING
        query = f"order={order}&dir={'desc' if down else 'asc'}"
        links[order] = {
            "url": f"?{base}&{query}" if base else f"?{query}",
            "aria": ("descending" if filters.walks_down else "ascending") if active else "",
            "arrow": ("↓" if filters.walks_down else "↑") if active else "",
        }
    return links


def _query_without(request, *names) -> str:
    params = request.GET.copy()
    for name in names:
        params.pop(name, None)
    return params.urlencode()


@require_GET
@require_perm("view_dashboard")
def session_list(request):
    """Sessions of every profile, newest first (started or last activity), keyset-paginated.
    Stores are read at a glance: a locked one is listed as busy without holding up the rest."""
    if settings.FLEET:  # fleet mode (issue 17): one list of every host's sessions
        from ..fleet.views import session_list as fleet_list
        return fleet_list(request)
    stores, profiles, sources = list_choices()
    checks = check_choices()
    filters = session_filters(request.GET, profiles=profiles, sources=sources, checks=checks)
    # Built only when the filter form's cached fragment is rendered anew.
    form = SimpleLazyObject(lambda: SessionFilterForm(request.GET or None, profiles=profiles, sources=sources,
                                                      checks=checks))
    limit = _int(request.GET.get("size"), 50)
    limit = limit if limit in PAGE_SIZES else 50
    after, after_at = _cursor(request, "after", filters)
    before, before_at = _cursor(request, "before", filters)
    if after is STALE or before is STALE:  # said once, when both links are stale too
        flash.warning(request, "That page link is no longer valid; showing the first page.")
        after = None if after is STALE else after
        before = None if before is STALE else before
    shown = list_page(stores, filters, user=request.user, limit=limit, after=after, before=before)
    page = shown.page
    # Position as carried by the page links (the list may have changed since the first
    # page was read); a page with nothing before it is the first, whatever the link said.
    start = (after_at or 1) if after is not None else (before_at or 1) if before is not None else 1
    if page.prev_cursor is None:
        start = 1
    base = _query_without(request, "after", "before")
    context = {
        "form": form,
        # The filter form's HTML depends only on the query and the choices; Django's
        # widget templates cost a few ms per view, so it is a cached fragment.
        "form_key": hashlib.sha256(repr((base, profiles, sources)).encode()).hexdigest(),
        "page": page,
        "count_cap": COUNT_CAP,
        "checked": shown.checked,
        # Every profile asked for failed: say so, rather than "no match" (and the
        # other way round: readable profiles with no match are not blamed on one that failed).
        "none_read": bool(page.errors) and len(page.errors) >= len(
            [s for s in stores if not filters.profiles or s.key in filters.profiles]),
        "base_query": base,
        "order": filters.order,
        "sort_links": _sort_links(request, filters),
        "first_row": start,
        "last_row": start + len(page.rows) - 1,
        "single_profile": filters.profiles[0] if len(filters.profiles) == 1 else None,
        "next_token": _token(page.next_cursor, filters, start + len(page.rows)),
        "prev_token": _token(page.prev_cursor, filters, max(start - limit, 1)),
    }
    template = "sessions/list.html#session-table" if request.htmx else "sessions/list.html"
    return render(request, template, context)


@require_GET
@require_perm("view_dashboard")
@store_view
def session_detail(request, store, session_id):
    """Metadata, usage, lineage and one page of the transcript (``presenters.session_page``)."""
    size = _int(request.GET.get("size"), 100)
    try:
        shown = session_page(
            store, session_id, user=request.user, size=size if size in TRANSCRIPT_SIZES else 100,
            after=_int(request.GET.get("after")), before=_int(request.GET.get("before")),
            at=_int(request.GET.get("at")), include_inactive=request.GET.get("inactive") == "1",
            recheck=request.GET.get("recheck") == "1")
    except NotFound:
        # Not in the store: a real page (still 404) saying where it went, if the dashboard knows.
        return deleted_session_page(request, store, session_id)
    if shown.notice:
        flash.info(request, shown.notice)
    context = {
        **{f.name: getattr(shown, f.name) for f in fields(shown)},
        "store": store,
        "session_id": session_id,
        "copies": shown.other_copies,
        "nav_query": _query_without(request, "after", "before", "at", "recheck"),
        "size": size if size in TRANSCRIPT_SIZES else 100,
        "sizes": TRANSCRIPT_SIZES,
    }
    return render(request, "sessions/detail.html", context)


@require_GET
@require_perm("view_transcripts")
@store_view
def message_raw(request, store, session_id, message_id):
    """One message's full content as plain text (long tool outputs are cut on pages)."""
    try:
        body = raw_message(store, session_id, message_id, request.GET.get("field", "content"), user=request.user)
    except NotFound as exc:
        raise Http404(str(exc)) from exc
    response = HttpResponse(body, content_type="text/plain; charset=utf-8")
    response["Content-Disposition"] = "inline"
    return response


def _safe_filename(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:120] or "session"


@require_GET
@require_perm("view_transcripts")
@store_view
def session_export(request, store, session_id, fmt):
    """Stream the session (``?lineage=1``: its whole compression chain) as JSONL or Markdown."""
    if fmt not in ("jsonl", "md"):
        raise Http404("Unknown export format")
    lineage = request.GET.get("lineage") == "1"
    include_inactive = request.GET.get("inactive") == "1"
    if not session_info.exists(store, session_id):
        raise Http404("No such session in this profile")
    if fmt == "jsonl":
        body = export.jsonl(store, session_id, lineage, include_inactive, masked=masking_for(request.user))
        content_type, ext = "application/x-ndjson; charset=utf-8", "jsonl"
    else:
        body = export.markdown(store, session_id, lineage, include_inactive, masked=masking_for(request.user))
        content_type, ext = "text/markdown; charset=utf-8", "md"
    response = StreamingHttpResponse(_batched(body), content_type=content_type)
    name = _safe_filename(f"{store.profile.name}-{session_id}{'-lineage' if lineage else ''}")
    response["Content-Disposition"] = f'attachment; filename="{name}.{ext}"'
    return response
