"""Sessions list (all profiles), session page, raw message, export."""

from __future__ import annotations

import hashlib
import re
from dataclasses import replace

from django.conf import settings
from django.contrib import messages as flash
from django.core import signing
from django.http import Http404, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from ..checks import Finding, run_store_checks
from ..checks.registry import BY_CODE as CHECKS
from ..forms import SessionFilterForm
from ..health import latest
from ..secrets import mask, mask_value, masking_for
from ..models import AgentSession, SessionModelUsage
from ..stores import export, registry
from ..stores.lineage import Lineage
from ..stores.listing import COUNT_CAP, distinct_sources, list_sessions
from ..stores.transcript import for_store as transcript_for
from .common import require_perm, store_view

CURSOR_SALT = "sessions-list-cursor"
PAGE_SIZES = (25, 50, 100, 200)
TRANSCRIPT_SIZES = (50, 100, 200, 500)
# A session's own checks read every row of it (seconds for 300,000 rows): above this
# many rows the session page shows the latest pass's findings unless asked to check
# now (docs/benchmarks.md).
LIVE_CHECK_ROWS = COUNT_CAP


def _int(value, default=None):
    """An integer parameter within SQLite's 64-bit range, else ``default``."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        return default
    return number if -(2**63) <= number < 2**63 else default


def _cursor(request, name, order):
    raw = request.GET.get(name)
    if not raw:
        return None
    try:
        # The order is part of the salt: a cursor of one order means nothing in the other.
        value = signing.loads(raw, salt=f"{CURSOR_SALT}:{order}")
        return (float(value[0]), str(value[1]), str(value[2]))
    except (signing.BadSignature, TypeError, ValueError, IndexError):
        flash.warning(request, "That page link is no longer valid; showing the first page.")
        return None


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


def _token(cursor, order):
    return signing.dumps(list(cursor), salt=f"{CURSOR_SALT}:{order}") if cursor else None


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
    stores = registry.glances()
    profiles, sources = [s.key for s in stores], distinct_sources(stores)
    form = SessionFilterForm(request.GET or None, profiles=profiles, sources=sources, checks=sorted(CHECKS))
    filters = form.filters()
    health = latest([s.key for s in stores])
    badges = {key: h.by_session() for key, h in health.items()}
    if filters.check:
        filters.with_findings = {
            key: {sid for sid, items in by_sid.items() if any(f["check"] == filters.check for f in items)}
            for key, by_sid in badges.items()
        }
    limit = _int(request.GET.get("size"), 50)
    limit = limit if limit in PAGE_SIZES else 50
    page = list_sessions(
        stores, filters, limit=limit,
        after=_cursor(request, "after", filters.order), before=_cursor(request, "before", filters.order),
    )
    masking = masking_for(request.user)
    for row in page.rows:
        if masking:
            row["title"] = mask(row.get("title"))
        # Badges looked up here once, not by chained template filters on every row.
        items = badges.get(row["profile"], {}).get(row["id"]) or ()
        shown = items[:3]
        if masking:  # details may quote store text (titles, JSONL lines)
            shown = [{**f, "detail": mask(f["detail"])} for f in shown]
        row["findings"], row["more_findings"] = shown, max(len(items) - 3, 0)
    base = _query_without(request, "after", "before")
    context = {
        "form": form,
        # The filter form's HTML depends only on the query and the choices; Django's
        # widget templates cost a few ms per view, so it is a cached fragment.
        "form_key": hashlib.sha256(repr((base, profiles, sources)).encode()).hexdigest(),
        "page": page,
        "count_cap": COUNT_CAP,
        "checked": {key for key, h in health.items() if h.run is not None},
        "base_query": base,
        "order": filters.order,
        "single_profile": filters.profiles[0] if len(filters.profiles) == 1 else None,
        "next_token": _token(page.next_cursor, filters.order),
        "prev_token": _token(page.prev_cursor, filters.order),
    }
    template = "sessions/list.html#session-table" if request.htmx else "sessions/list.html"
    return render(request, template, context)


def _session_row(store, caps, session_id):
    present = [f.column for f in AgentSession._meta.concrete_fields if caps.has("sessions", f.column)]
    names = [f.attname for f in AgentSession._meta.concrete_fields if caps.has("sessions", f.column)]
    row = AgentSession.objects.for_store(store, caps).filter(pk=session_id).values(*names).first()
    if row is None:
        return None
    # Keep the store's own column names (parent_id -> parent_session_id).
    return {col: row[name] for col, name in zip(present, names)}


METADATA_HIDDEN = {"system_prompt", "model_config", "origin_json", "tool_names"}
KEY_FIELDS = (
    "id", "title", "source", "profile_name", "model", "started_at", "ended_at", "end_reason",
    "last_activity_at", "message_count", "tool_call_count", "parent_session_id", "session_key",
    "user_id", "chat_id", "cwd", "archived", "pinned", "hidden",
)
USAGE_COLUMNS = (
    "api_call_count", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
    "reasoning_tokens", "estimated_cost_usd", "actual_cost_usd", "cost_status",
)


@require_GET
@require_perm("view_dashboard")
@store_view
def session_detail(request, store, session_id):
    """Metadata, usage, lineage and one page of the transcript."""
    include_inactive = request.GET.get("inactive") == "1"
    size = _int(request.GET.get("size"), 100)
    size = size if size in TRANSCRIPT_SIZES else 100
    with store.read(lenient=True) as conn:
        caps = store.capabilities(conn)
        session = _session_row(store, caps, session_id)
        transcript = transcript_for(conn, caps, session_id, include_inactive)
        lineage = Lineage(conn, caps.columns("sessions"))
        if session is None:
            # Messages may outlive their session row (FK orphans); show them, marked.
            if not transcript.page(size=1).messages:
                raise Http404("No such session in this profile")
        can_read = request.user.has_perm("sessions_app.view_transcripts")
        page = None
        if can_read:  # without the content permission: metadata, counts and findings only
            at = _int(request.GET.get("at"))
            page = transcript.page(
                size=size,
                after=_int(request.GET.get("after")),
                before=_int(request.GET.get("before")),
                at=at,
            )
            if at is not None and (not page.messages or page.messages[0].id != at):
                flash.info(request, f"Message #{at} is not among this session's visible messages; "
                                    "showing the page that follows it.")
        parent = lineage.parent(session) if session else None
        children = lineage.children(session_id)  # children may outlive a deleted parent row
        chain = lineage.chain(session_id) if session else []
        system_prompt = None
        if session and can_read:
            system_prompt = session.get("system_prompt")
            if not system_prompt and session.get("system_prompt_hash") and caps.has_table("system_prompts"):
                found = conn.execute("SELECT prompt FROM system_prompts WHERE hash = ?", (session["system_prompt_hash"],)).fetchone()
                system_prompt = found[0] if found else None
        # Rows counted up to COUNT_CAP + 1 (the page already counted them).
        counted = page.total + page.total_capped if page is not None else transcript.count()
        huge = counted > LIVE_CHECK_ROWS
    findings_run, stored = None, huge and request.GET.get("recheck") != "1"
    if stored:
        health = latest([store.key])[store.key]
        findings_run = health.run
        findings = [Finding(**f) for f in health.by_session().get(session_id, [])]
    else:
        findings = run_store_checks(store, session_id=session_id).findings
    if masking_for(request.user):
        _mask_page(session, page)
        system_prompt = mask(system_prompt)
        # Details may quote store text; the findings box and the markers in the
        # transcript both show them.
        findings = [replace(f, detail=mask(f.detail)) for f in findings]
        for row in [parent or {}, *children, *chain]:  # titles of the lineage too
            if row.get("title"):
                row["title"] = mask(row["title"])
    usage_rows = []
    if caps.has_table("session_model_usage"):
        usage_fields = [f.attname for f in SessionModelUsage._meta.concrete_fields
                        if caps.has("session_model_usage", f.column)]
        usage_rows = list(SessionModelUsage.objects.for_store(store, caps).filter(session_id=session_id)
                          .values(*usage_fields))
    shown = session or {}
    metadata = [(k, shown[k]) for k in KEY_FIELDS if k in shown]
    more_metadata = [
        (k, v) for k, v in shown.items() if k not in KEY_FIELDS and k not in METADATA_HIDDEN and k not in USAGE_COLUMNS
    ]
    usage = [(k, session.get(k)) for k in USAGE_COLUMNS if session and k in session]
    nav = _query_without(request, "after", "before", "at", "recheck")
    context = {
        "store": store,
        "session_id": session_id,
        "session": session,
        "metadata": metadata,
        "more_metadata": more_metadata,
        "usage": usage,
        "usage_rows": usage_rows,
        "model_config": (session or {}).get("model_config"),
        "system_prompt": system_prompt,
        "parent": parent,
        "children": children,
        "chain": chain if len(chain) > 1 else [],
        "page": page,
        "can_read": can_read,
        "include_inactive": include_inactive,
        "has_active_column": caps.has("messages", "active"),
        "nav_query": nav,
        "size": size,
        "sizes": TRANSCRIPT_SIZES,
        "findings": [(f, CHECKS.get(f.check)) for f in findings],
        "markers": message_markers(findings),
        "findings_stored": stored,
        "findings_run": findings_run,
        "live_check_rows": LIVE_CHECK_ROWS,
    }
    return render(request, "sessions/detail.html", context)


def _mask_page(session, page) -> None:
    """Mask secrets in everything a session page shows from the store's texts."""
    if session:
        session["title"] = mask(session.get("title"))
    if page is None:
        return
    seen = set()
    for msg in page.messages + [c["result"] for m in page.messages for c in m.tool_calls if c.get("result")]:
        if id(msg) in seen:
            continue
        seen.add(id(msg))
        msg.text = mask(msg.text)
        msg.structured = mask_value(msg.structured)
        for key in ("reasoning", "reasoning_content"):
            msg.row[key] = mask(msg.row.get(key))
        for call in msg.tool_calls:
            call["arguments"] = mask(call["arguments"])


def message_markers(findings) -> dict[int, list]:
    """Findings keyed by the message ids their evidence names, to mark rows in place.

    Any evidence entry named ``*message_ids``/``*_ids`` (a list of ids) or
    ``*message_id`` (one id) points at messages; ``unanswered_turn`` marks where
    the missing reply should be.
    """
    marks: dict[int, list] = {}
    for finding in findings:
        ids: set[int] = set()
        for key, value in (finding.evidence or {}).items():
            if key in ("first_message_id", "last_message_id"):
                continue  # ranges (orphan rows): the whole transcript is concerned
            if (key.endswith("_ids") or key == "hide") and isinstance(value, list):
                ids.update(v for v in value if isinstance(v, int))
            elif key.endswith("message_id") and isinstance(value, int):
                ids.add(value)
        for msg_id in ids:
            marks.setdefault(msg_id, []).append(finding)
    return marks


@require_GET
@require_perm("view_transcripts")
@store_view
def message_raw(request, store, session_id, message_id):
    """One message's full content as plain text (long tool outputs are cut on pages)."""
    with store.read(lenient=True) as conn:
        caps = store.capabilities(conn)
        row = transcript_for(conn, caps, session_id, include_inactive=True).message(message_id)
    if row is None:
        raise Http404("No such message")
    field = request.GET.get("field", "content")
    if field not in ("content", "reasoning", "reasoning_content"):
        raise Http404("No such field")
    body = row.get(field) or ""
    if masking_for(request.user):
        body = mask(body)
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
    with store.read() as conn:
        if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is None:
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
