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


HIDDEN_SNIPPET = "… (this snippet touches a masked secret; open the message to read it masked) …"


def _indexed_texts(conn, columns, ids) -> dict[int, str]:
    """The text of each message the index may quote (content, tool calls), by id."""
    picked = [c for c in ("content", "tool_calls") if c in columns]
    if not ids or not picked:
        return {}
    marks = ",".join("?" * len(ids))
    rows = conn.execute(f"SELECT id, {', '.join(picked)} FROM messages WHERE id IN ({marks})", list(ids))
    return {row[0]: "\n".join(str(v) for v in row[1:] if v is not None) for row in rows}


def _core(text: str) -> str:
    # A snippet piece without the ellipses and padding snippet() adds at its ends.
    return text.strip().strip("…").strip()


WINDOW = 4096  # characters of the message masked around a snippet (secrets are far shorter)
WHOLE_LIMIT = 256 * 1024  # a snippet not found in its message: mask it whole up to this size


def _mask_hits(results, texts: dict[int, str]) -> None:
    """Mask snippets for users who see masked text.

    Masking the snippet alone is not enough: a snippet is a window of words that
    may cut a secret, and a cut secret no longer matches its pattern. So the text
    around the snippet's own place in the message is masked (a bounded window:
    masking a 2 MB tool output whole takes seconds), and a snippet shows only when
    each of its pieces is also text of the masked message; otherwise it is replaced
    by a notice. A hit whose matched words occur only inside secrets is left out,
    silently: prefix queries would otherwise tell how a secret begins, and so would
    a count of what was left out.
    """
    kept = []
    for hit in results.hits:
        plain = "".join(text for text, _ in hit.parts)
        core = _core(plain)
        full = texts.get(hit.id, "")
        at = full.find(core) if core else -1
        if at >= 0:
            window = full[max(0, at - WINDOW): at + len(core) + WINDOW]
        elif len(full) <= WHOLE_LIMIT:
            window = full
        else:  # cannot place it (e.g. a stale index entry): show nothing of it
            hit.parts = [(HIDDEN_SNIPPET, False)]
            kept.append(hit)
            continue
        masked = mask(window)
        if masked == window:  # no secret near it (as far as patterns tell)
            masked_plain = mask(plain)
            if masked_plain != plain:
                hit.parts = [(masked_plain, False)]
            kept.append(hit)
            continue
        matched = [_core(t) for t, is_match in hit.parts if is_match and _core(t)]
        if matched and not all(m in masked for m in matched):
            continue  # matched only inside a secret
        if all(_core(t) in masked for t, _ in hit.parts):
            pass  # the snippet quotes only text around the secrets
        elif _core(mask(plain)) in masked:
            hit.parts = [(mask(plain), False)]  # whole secrets inside, masked as in the message
        else:
            hit.parts = [(HIDDEN_SNIPPET, False)]  # it cuts a secret
        kept.append(hit)
    results.hits = kept
    for hit in results.hits:
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
            with store.read(budget=settings.HERMES_QUERY_BUDGET, lenient=True) as conn:
                caps = store.capabilities(conn)
                results = search(conn, caps.columns("messages"), caps.columns("sessions"), query,
                                 limit=size, before=before)
                masking = masking_for(request.user)
                texts = _indexed_texts(conn, caps.columns("messages"), [h.id for h in results.hits]) if masking else {}
        except ValueError:
            context["problem"] = SearchUnavailable("query", "Type at least one word (letters or digits).")
        except SearchUnavailable as exc:
            context["problem"] = exc
            status = 503 if exc.kind == "damaged" else 200
        else:
            if masking:
                _mask_hits(results, texts)
            context["results"] = results
    return render(request, "sessions/search.html", context, status=status)
