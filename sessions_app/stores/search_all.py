"""One search across several profiles: message text through each store's own
full-text index, plus session ids and titles; hits grouped by compression lineage
and session, counted per profile and in all.

Per store (each a glance, :func:`.registry.glances`: a busy or damaged store is
reported for that profile and the others are searched): the newest ``limit``
matching messages (:func:`.search.search`), a count of all matches stopped at
``search.COUNT_CAP`` (as the sessions list counts), the sessions whose id or title holds
every word, and what the index does not cover (:mod:`.coverage`), so the page can
offer a bounded scan (:mod:`.scan`) of that profile. Every query runs under the
store's query budget.

Grouping: each hit's session goes under the root of its compression chain
(:meth:`.lineage.Lineage.chain`; only compression edges join segments into one
conversation, docs/architecture.md §4), so one conversation split by compression
reads as one group; hits within a session newest first (by message id).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

from django.conf import settings

from .connection import classify_error
from .coverage import Coverage, coverage
from .lineage import Lineage
from .scan import like_pattern
from .search import Hit, SearchUnavailable, count_hits, fts_expression, search, terms
from .store import Store

TITLE_LIMIT = 20


@dataclass
class SessionGroup:
    """Hits of one session; ``session`` its row (None when the row is missing)."""

    session_id: str | None
    session: dict | None
    hits: list[Hit] = field(default_factory=list)


@dataclass
class LineageGroup:
    """Sessions of one compression chain with hits; ``root`` the chain's first
    segment (a dict of session columns, or None for orphan rows), ``segments`` how
    many sessions the chain has."""

    root: dict | None
    segments: int
    sessions: list[SessionGroup] = field(default_factory=list)

    @property
    def hit_count(self) -> int:
        return sum(len(s.hits) for s in self.sessions)


@dataclass
class ProfileResults:
    """One profile's answer. ``status``: ``ok``, or the store's status (``busy``,
    ``corrupt``…) with ``reason``; ``problem``: why messages could not be searched
    (a :class:`.search.SearchUnavailable`) while titles still could; ``hits`` the
    newest matches, ``groups`` the same by lineage; ``count`` matching messages
    (``count_capped``: more than that); ``more``: older matches exist; ``titles``:
    sessions whose id or title matches (``titles_more``: more than shown);
    ``budget_spent``: the store's query budget ran out after the hits (the count
    is then a lower bound, titles possibly unsearched); ``coverage``: what the index misses; ``texts``: id -> indexed text of each hit
    (for masking)."""

    key: str
    status: str = "ok"
    reason: str = ""
    problem: SearchUnavailable | None = None
    hits: list[Hit] = field(default_factory=list)
    groups: list[LineageGroup] = field(default_factory=list)
    count: int = 0
    count_capped: bool = False
    more: bool = False
    stale: int = 0
    superseded: int = 0  # hidden originals of recovered messages left out (search.Results.superseded)
    titles: list[dict] = field(default_factory=list)
    titles_more: bool = False
    coverage: Coverage | None = None
    texts: dict[int, str] = field(default_factory=dict)
    budget_spent: bool = False  # the query budget ran out: count a lower bound, titles maybe not searched


@dataclass
class Everywhere:
    """All profiles' answers, in discovery order; ``count`` the matching messages in
    all (a lower bound when ``count_capped``)."""

    query: str
    profiles: list[ProfileResults] = field(default_factory=list)

    @property
    def count(self) -> int:
        return sum(p.count for p in self.profiles)

    @property
    def count_capped(self) -> bool:
        return any(p.count_capped for p in self.profiles)

    @property
    def title_count(self) -> int:
        return sum(len(p.titles) for p in self.profiles)


def title_matches(conn: sqlite3.Connection, columns, text: str, limit: int = TITLE_LIMIT) -> tuple[list[dict], bool]:
    """Sessions whose id or title holds every word (LIKE, ASCII case folded), newest
    started first; a full read of ``sessions`` (one row per session, no messages)."""
    present = set(columns)
    words = [w for w, _ in terms(text)]
    if not words:
        return [], False
    fields = ["id"] + (["title"] if "title" in present else [])
    clauses, params = [], []
    for word in words:
        clauses.append("(" + " OR ".join(f"{f} LIKE ? ESCAPE '\\'" for f in fields) + ")")
        params += [like_pattern(word)] * len(fields)
    wanted = [c for c in ("id", "title", "source", "started_at", "ended_at", "parent_session_id") if c in present]
    order = "CASE WHEN typeof(started_at) IN ('integer', 'real') THEN started_at END DESC, id DESC" \
        if "started_at" in present else "id DESC"
    rows = conn.execute(f"SELECT {', '.join(wanted)} FROM sessions WHERE {' AND '.join(clauses)} "
                        f"ORDER BY {order} LIMIT ?", (*params, limit + 1)).fetchall()
    found = [dict(zip(wanted, row)) for row in rows]
    return found[:limit], len(found) > limit


def group_by_lineage(conn: sqlite3.Connection, columns, hits: list[Hit]) -> list[LineageGroup]:
    """Hits grouped by compression chain, then session; groups in the order of their
    newest hit (hits arrive newest first)."""
    lineage = Lineage(conn, columns)
    groups: dict[object, LineageGroup] = {}
    sessions: dict[object, SessionGroup] = {}
    roots: dict[str, tuple[dict | None, int]] = {}
    for hit in hits:
        sid = hit.session_id
        if sid is not None and sid not in roots:
            chain = lineage.chain(sid) if hit.session is not None else []
            roots[sid] = (chain[0], len(chain)) if chain else (hit.session, 1)
        root, segments = roots.get(sid, (None, 1)) if sid is not None else (None, 1)
        root_key = root["id"] if root else ("orphan", sid)
        group = groups.get(root_key)
        if group is None:
            group = groups[root_key] = LineageGroup(root=root, segments=segments)
        session = sessions.get(sid)
        if session is None:
            session = sessions[sid] = SessionGroup(session_id=sid, session=hit.session)
            group.sessions.append(session)
        session.hits.append(hit)
    return list(groups.values())


def indexed_texts(conn: sqlite3.Connection, columns, ids) -> dict[int, str]:
    """The text the index may quote for each message (content and tool calls), by
    id: what snippet masking reads (``views.search``)."""
    picked = [c for c in ("content", "tool_calls") if c in set(columns)]
    if not ids or not picked:
        return {}
    rows = conn.execute(f"SELECT id, {', '.join(picked)} FROM messages WHERE id IN ({','.join('?' * len(ids))})",
                        list(ids))
    return {row[0]: "\n".join(str(v) for v in row[1:] if v is not None) for row in rows}


def search_store(store: Store, text: str, limit: int = 20, texts: bool = False) -> ProfileResults:
    """One store's answer (see :class:`ProfileResults`); never raises for a store
    problem. ``texts``: also read the hits' texts for masking."""
    out = ProfileResults(store.key)
    status = store.preflight()
    if status is not None:
        out.status, out.reason = status.status, status.reason
        return out
    try:
        with store.read(budget=settings.HERMES_QUERY_BUDGET, lenient=True) as conn:
            caps = store.capabilities(conn)
            unusable = store.unbrowsable(caps)
            if unusable is not None:
                out.status, out.reason = unusable.status, unusable.reason
                return out
            out.coverage = coverage(conn, caps)
            try:
                results = search(conn, caps.columns("messages"), caps.columns("sessions"), text, limit=limit)
            except SearchUnavailable as exc:
                out.problem = exc
            else:
                out.hits, out.more, out.stale = results.hits, results.next_before is not None, results.stale
                out.superseded = results.superseded
                out.groups = group_by_lineage(conn, caps.columns("sessions"), out.hits)
                if texts:
                    out.texts = indexed_texts(conn, caps.columns("messages"), [h.id for h in out.hits])
                out.count, out.count_capped = len(out.hits), out.more
                try:
                    # The profile search's own count (hidden originals a recovery
                    # wrote again left out, as search() leaves them out of the hits).
                    out.count, _, out.count_capped = count_hits(conn, text, columns=caps.columns("messages"))
                except sqlite3.OperationalError as exc:
                    if str(exc) != "interrupted":
                        raise
                    out.budget_spent = out.count_capped = True  # the hits stand; the count is a lower bound
            if not out.budget_spent:
                try:
                    out.titles, out.titles_more = title_matches(conn, caps.columns("sessions"), text)
                except sqlite3.OperationalError as exc:
                    if str(exc) != "interrupted":
                        raise
                    out.budget_spent = True
    except (OSError, sqlite3.Error) as exc:  # OutsideRoot is an sqlite3.Error too
        out.status, out.reason = classify_error(exc)
        out.hits, out.groups, out.titles = [], [], []
    return out


def search_everywhere(stores: list[Store], text: str, limit: int = 20, texts: bool = False) -> Everywhere:
    """Every store's answer for ``text`` (see the module docstring). Raises
    ValueError when ``text`` has no searchable word."""
    expression = fts_expression(text)  # ValueError before any store is opened
    found = Everywhere(query=expression)
    for store in stores:
        found.profiles.append(search_store(store, text, limit=limit, texts=texts))
    return found

