"""Full-text search of one profile's messages: the store's FTS query, then the
snippets masked for users who see masked text (``/p/<profile>/search/``)."""

from __future__ import annotations

import hashlib
import sqlite3
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache

from ..secrets import mask, mask_remembered, masking_for
from ..stores.search import Results, SearchUnavailable, count_hits, search

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


def mask_hits(results, texts: dict[int, str]) -> None:
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
        masked = mask_remembered(window)
        if masked == window:  # no secret near it (as far as patterns tell)
            masked_plain = mask_remembered(plain)
            if masked_plain != plain:
                hit.parts = [(masked_plain, False)]
            kept.append(hit)
            continue
        matched = [_core(t) for t, is_match in hit.parts if is_match and _core(t)]
        if matched and not all(m in masked for m in matched):
            continue  # matched only inside a secret
        if all(_core(t) in masked for t, _ in hit.parts):
            pass  # the snippet quotes only text around the secrets
        elif _core(mask_remembered(plain)) in masked:
            hit.parts = [(mask_remembered(plain), False)]  # whole secrets inside, masked as in the message
        else:
            hit.parts = [(HIDDEN_SNIPPET, False)]  # it cuts a secret
        kept.append(hit)
    results.hits = kept
    # A session's row is one dict shared by all of its hits: its title is masked once.
    sessions = {id(hit.session): hit.session for hit in results.hits if hit.session}
    for session in sessions.values():
        if session.get("title"):
            session["title"] = mask_remembered(session["title"])


@dataclass
class HitCount:
    """How many messages match and in how many sessions. ``capped``: more than
    ``messages`` match (both lower bounds); ``page_only``: the counts are of this
    page's hits (users who see masked text: a count of every index match would tell
    how many matched only inside secrets); ``unknown``: the query budget ran out."""

    messages: int = 0
    sessions: int = 0
    capped: bool = False
    page_only: bool = False
    unknown: bool = False

    @property
    def more(self) -> bool:
        """More than ``messages`` match in all (said as "more than")."""
        return self.capped and not self.page_only


@dataclass
class SearchPage:
    """``results`` (None without a query or on a problem), ``problem`` (a
    :class:`SearchUnavailable`), ``count`` (a :class:`HitCount` with the results),
    and the HTTP ``status`` (503 for a damaged index)."""

    results: Results | None = None
    problem: SearchUnavailable | None = None
    status: int = 200
    count: HitCount | None = None


def search_page(store, query: str, *, user, size: int = 50, before: int | None = None) -> SearchPage:
    """The newest ``size`` messages matching ``query`` (older than message ``before``).
    A store without a usable index gives a ``problem``; a busy store raises
    ``sqlite3.Error`` (the store's busy page)."""
    if not query:
        return SearchPage()
    try:
        with store.read(budget=settings.HERMES_QUERY_BUDGET, lenient=True) as conn:
            caps = store.capabilities(conn)
            results = search(conn, caps.columns("messages"), caps.columns("sessions"), query, limit=size,
                             before=before)
            masking = masking_for(user)
            texts = _indexed_texts(conn, caps.columns("messages"), [h.id for h in results.hits]) if masking else {}
            count = None if masking else _count(store, conn, query)
    except ValueError:
        return SearchPage(problem=SearchUnavailable("query", "Type at least one word (letters or digits)."))
    except SearchUnavailable as exc:
        return SearchPage(problem=exc, status=503 if exc.kind == "damaged" else 200)
    if masking:
        mask_hits(results, texts)
        count = HitCount(len(results.hits), len({h.session_id for h in results.hits}),
                         capped=results.next_before is not None, page_only=True)
    return SearchPage(results=results, count=count)


COUNT_TTL = 300  # seconds; the cache key also changes with every write to the store


def _count(store, conn, query: str) -> HitCount:
    """The query's :class:`HitCount`, cached per store under its file signature
    (:meth:`Store.signature`, taken before counting): counting walks up to 10,001
    index rows (several ms for a common word, the page's largest query), and every
    "older" page of the same search would count them again. A count the query
    budget interrupted is not cached."""
    signature = store.signature()
    key = "hitcount:" + hashlib.sha256(repr((str(store.path), signature, query)).encode()).hexdigest()
    found = cache.get(key)
    if found is None:
        try:
            found = count_hits(conn, query, columns=store.capabilities(conn).columns("messages"))
        except sqlite3.OperationalError as exc:
            if str(exc) != "interrupted":
                raise
            return HitCount(unknown=True)  # the hits stand; only their count is missing
        if store.settled(signature):
            cache.set(key, found, COUNT_TTL)
    messages, sessions, capped = found
    return HitCount(messages, sessions, capped)


def _visible(words, *texts) -> bool:
    low = " ".join(t.lower() for t in texts if t)
    return all(w.lower() in low for w in words)


def mask_profile_results(found, words) -> None:
    """Mask one profile's answer of a search across profiles in place
    (``stores.search_all.ProfileResults``; ``words`` the query's words): hits as
    :func:`mask_hits`, counts of the hits shown (a count of every index match would
    tell how many matched only inside secrets), a title matching only inside a
    secret left out. Used by the search across profiles and a fleet worker's search."""
    if found.hits:
        mask_hits(found, found.texts)
        kept = {h.id for h in found.hits}
        for group in found.groups:
            for session in group.sessions:
                session.hits = [h for h in session.hits if h.id in kept]
            group.sessions = [s for s in group.sessions if s.hits]
            if group.root and group.root.get("title"):
                group.root["title"] = mask(group.root["title"])
        found.groups = [g for g in found.groups if g.sessions]
    found.count, found.count_capped = len(found.hits), found.more
    titles = []
    for row in found.titles:
        row["title"] = mask(row.get("title"))
        if _visible(words, row.get("id"), row.get("title")):
            titles.append(row)
    found.titles = titles
    found.texts = {}
