"""Full-text search over one profile's messages, through the store's own FTS5 index.

Every release writes ``messages_fts`` (docs/store.md §6): inline ``fts5(content)``
filled by triggers with ``content || tool_name || tool_calls`` up to 0.19.0,
external-content ``fts5(content, tool_name, tool_calls)`` over the view
``messages_fts_src`` in the newest shape. Both answer the same query, read-only:

    SELECT rowid, snippet(messages_fts, -1, …) FROM messages_fts
    WHERE messages_fts MATCH ? [AND rowid < ?] ORDER BY rowid DESC LIMIT ?

Newest matches first (``rowid`` is ``messages.id``, ground rule 10), keyset pages
by ``rowid`` (never OFFSET), and no relevance ranking: ``ORDER BY rank`` scores
every matching row, so a common word costs as much as the whole index, whereas
``ORDER BY rowid DESC LIMIT n`` stops after ``n`` matches (FTS5 walks doclists in
rowid order). Snippets are computed for those ``n`` rows only; the matched rows'
sessions are read afterwards by primary key.

The user's text is never handed to FTS5 as syntax: each word becomes a quoted
string (``"word"``), a trailing ``*`` a prefix query, so no input can raise a
query syntax error or reach a column filter. Problems are typed
(:class:`SearchUnavailable`): no index, a damaged index (the rest of the store may
be fine: the page says so instead of the store error page), a query past its
time budget.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass, field

from .connection import classify_error, replacing_text
from .transcript import visible_text

OPEN, CLOSE = "\x02", "\x03"  # snippet markers: control bytes no tokenizer keeps
SNIPPET_TOKENS = 24
MAX_TERMS = 12
JSON_PREFIX = "\x00json:"
_TOKEN_RE = re.compile(r'"([^"]*)"|(\S+)')


class SearchUnavailable(Exception):
    """Why a search could not run: ``kind`` is ``no_index``, ``damaged``, ``budget``
    or ``query``; ``str(exc)`` says it in plain language."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


@dataclass
class Hit:
    """One matching message. ``parts`` is the snippet as ``(text, matched)`` pieces
    (plain text, to be escaped by the template); ``session`` is None when the
    message's session row is missing (orphan rows stay searchable)."""

    id: int
    session_id: str | None
    role: str | None
    timestamp: object
    state: str  # "active", "compacted" or "rewound"
    parts: list[tuple[str, bool]]
    session: dict | None = None

    @property
    def visible(self) -> bool:
        return self.state == "active"


@dataclass
class Results:
    query: str  # the FTS5 expression actually run
    hits: list[Hit] = field(default_factory=list)
    next_before: int | None = None  # rowid for the next (older) page, None at the end
    stale: int = 0  # index rows whose message no longer exists
    superseded: int = 0  # hidden originals a recovery or import wrote again (not shown: the live copy is the hit)


def terms(text: str) -> list[tuple[str, bool]]:
    """The user's words and ``"quoted phrases"`` as ``(text, prefix)`` pairs, at
    most MAX_TERMS; a word ending in ``*`` is a prefix. Words without a letter or
    digit are dropped (FTS5 would drop them too)."""
    found = []
    for match in _TOKEN_RE.finditer(text or ""):
        phrase, word = match.group(1), match.group(2)
        prefix = False
        if word is not None:
            prefix = word.endswith("*")
            phrase = word.rstrip("*").strip('"')
        phrase = (phrase or "").replace(OPEN, "").replace(CLOSE, "").strip()
        if not phrase or not re.search(r"\w", phrase):
            continue
        found.append((phrase, prefix))
        if len(found) >= MAX_TERMS:
            break
    return found


def fts_expression(text: str) -> str:
    """The user's words as a safe FTS5 expression: every word (or ``"quoted
    phrase"``) a string, all required; ``word*`` a prefix. Raises ValueError when
    nothing searchable is left."""
    found = terms(text)
    if not found:
        raise ValueError("nothing to search for")
    return " ".join('"' + phrase.replace('"', '""') + '"' + ("*" if prefix else "") for phrase, prefix in found)


def split_snippet(snippet: str | None) -> list[tuple[str, bool]]:
    """``"a \\x02b\\x03 c"`` -> ``[("a ", False), ("b", True), (" c", False)]``;
    other control characters as U+FFFD (``transcript.visible_text``)."""
    text = (snippet or "").replace("\x00", "")
    if text.startswith("json:"):
        text = text[5:]
    parts: list[tuple[str, bool]] = []
    marked = False
    for piece in re.split(f"([{OPEN}{CLOSE}])", text):
        if piece == OPEN:
            marked = True
        elif piece == CLOSE:
            marked = False
        elif piece:
            parts.append((visible_text(piece), marked))
    return parts


def index_state(conn: sqlite3.Connection) -> str:
    """``ok``, ``missing`` (no ``messages_fts``) or ``damaged`` (it exists but
    SQLite cannot load it)."""
    row = conn.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'messages_fts'").fetchone()
    if row is None or "fts5" not in (row[0] or "").lower():
        return "missing"
    try:
        conn.execute("SELECT rowid FROM messages_fts LIMIT 0").fetchall()
    except sqlite3.OperationalError as exc:
        if "no such module" in str(exc).lower():
            return "missing"
        raise
    except sqlite3.DatabaseError:
        return "damaged"
    return "ok"


def _problem(exc: sqlite3.Error) -> SearchUnavailable | None:
    """Map an error of the FTS query to a typed problem; None means "re-raise"
    (busy stores get the store's own busy page)."""
    text = str(exc).lower()
    if text == "interrupted":
        return SearchUnavailable("budget", "The search ran past its time budget. Add a word to narrow it.")
    if isinstance(exc, sqlite3.OperationalError):
        if "fts5" in text and "syntax" in text:
            return SearchUnavailable("query", f"The search index did not understand the query ({exc}).")
        status, _ = classify_error(exc)
        if status == "busy":
            return None
        if "no such table" in text or "no such module" in text:
            return SearchUnavailable("no_index", "This store has no full-text index.")
    status, reason = classify_error(exc)
    if status == "busy":
        return None
    return SearchUnavailable("damaged", f"The full-text index of this store is damaged: {reason}")


def search(conn: sqlite3.Connection, columns, session_columns, text: str, limit: int = 50,
           before: int | None = None) -> Results:
    """Newest ``limit`` messages matching ``text`` (older than message ``before``).

    ``columns`` / ``session_columns``: the store's ``messages`` / ``sessions`` columns
    (ground rule 8). Raises ValueError for a query with no words,
    :class:`SearchUnavailable` for the problems above, ``sqlite3.Error`` for a busy
    store.
    """
    expression = fts_expression(text)
    # Snippets and titles of text that is not valid UTF-8 (salvaged pages, other
    # writers) read with U+FFFD: such a row is a hit, not an "index damaged".
    previous, conn.text_factory = conn.text_factory, replacing_text
    try:
        return _search(conn, columns, session_columns, expression, limit, before)
    finally:
        conn.text_factory = previous


def _search(conn, columns, session_columns, expression: str, limit: int, before: int | None) -> Results:
    state = index_state(conn)
    if state == "missing":
        raise SearchUnavailable("no_index", "This store has no full-text index; search sessions by id or "
                                            "title in the sessions list instead.")
    if state == "damaged":
        raise SearchUnavailable("damaged", "The full-text index of this store is damaged (SQLite cannot load "
                                           "it), so messages cannot be searched. See the profile's health "
                                           "page; Hermes rebuilds the index itself.")
    where, params = "", [expression]
    if before is not None:
        where, params = " AND rowid < ?", [expression, before]
    try:
        rows = conn.execute(
            f"SELECT rowid, snippet(messages_fts, -1, '{OPEN}', '{CLOSE}', '…', {SNIPPET_TOKENS}) "
            f"FROM messages_fts WHERE messages_fts MATCH ?{where} ORDER BY rowid DESC LIMIT ?",
            (*params, limit + 1)).fetchall()
    except sqlite3.Error as exc:
        problem = _problem(exc)
        if problem is None:
            raise
        raise problem from exc
    results = Results(query=expression)
    if len(rows) > limit:
        rows = rows[:limit]
        results.next_before = rows[-1][0]
    if not rows:
        return results
    present = set(columns)
    state_cols = [c if c in present else f"NULL AS {c}" for c in ("active", "compacted")]
    ids = [r[0] for r in rows]
    marks = ",".join("?" * len(ids))
    found = {r[0]: r for r in conn.execute(
        f"SELECT id, session_id, role, timestamp, {', '.join(state_cols)} FROM messages WHERE id IN ({marks})", ids)}
    wanted = [c for c in ("id", "title", "source", "started_at", "ended_at") if c in set(session_columns)]
    sids = sorted({r[1] for r in found.values() if r[1] is not None})
    sessions = {}
    if sids:
        smarks = ",".join("?" * len(sids))
        for row in conn.execute(f"SELECT {', '.join(wanted)} FROM sessions WHERE id IN ({smarks})", sids):
            sessions[row[0]] = dict(zip(wanted, row))
    superseded = _superseded(conn, present, [i for i, r in found.items() if r[4] not in (None, 1) and r[5] != 1],
                             expression)
    for rowid, snippet in rows:
        if rowid in superseded:
            results.superseded += 1
            continue
        msg = found.get(rowid)
        if msg is None:
            results.stale += 1
            continue
        _, sid, role, ts, active, compacted = msg
        state = "active" if active in (None, 1) else ("compacted" if compacted == 1 else "rewound")
        results.hits.append(Hit(id=rowid, session_id=sid, role=role, timestamp=ts, state=state,
                                parts=split_snippet(snippet), session=sessions.get(sid)))
    return results


def _superseded(conn, present: set, ids: list[int], expression: str) -> set[int]:
    """Of the rewound rows ``ids``, those a recovery or JSONL import wrote again:
    ``actions.transcript_order`` copies a later row byte for byte (every column but
    ``id`` and the display ones) and hides the original, so the original has a
    visible twin after it in its session with the same role, content, tool calls
    and timestamp. That twin is the live message and a hit of its own; the
    original is not shown as a second one. A row rewound by /undo has no such twin
    (a retyped question has its own timestamp) and stays a "rewound" hit."""
    if not ids:
        return set()
    marks = ",".join("?" * len(ids))
    return {r[0] for r in conn.execute(f"SELECT m.id FROM messages m WHERE m.id IN ({marks}) AND {_twin(present)}",
                                       (*ids, expression))}


def _twin(present) -> str:
    """SQL: message ``m`` has a visible byte-identical twin after it that the index
    finds for the same query (:func:`_superseded`); one ``?``, the FTS5 expression.
    A twin the index lacks (an ``fts_incomplete`` store, docs/store.md §6) is no
    hit, so the original stays one: the message is then still found once."""
    same = " AND ".join(f"v.{c} IS m.{c}" for c in ("role", "content", "tool_calls", "tool_name", "timestamp")
                        if c in present)
    # MATCH with rowid = …: FTS5 seeks that rowid in the doclist (the index itself;
    # a bare rowid lookup on an external-content table would read the content view).
    return ("EXISTS (SELECT 1 FROM messages v WHERE v.session_id = m.session_id AND v.id > m.id "
            f"AND (v.active IS NULL OR v.active = 1) AND {same} "
            "AND EXISTS (SELECT 1 FROM messages_fts WHERE messages_fts MATCH ? AND messages_fts.rowid = v.id))")


COUNT_CAP = 10_000  # matches counted at most (as the sessions list counts its rows)


def count_hits(conn: sqlite3.Connection, text: str, cap: int = COUNT_CAP, columns=()) -> tuple[int, int, bool]:
    """``(messages, sessions, capped)`` matching ``text``: index rows whose message
    exists, counted up to ``cap`` (a doclist walk that stops there, then one primary
    key lookup per row), and the distinct sessions they belong to; ``capped`` True
    when more than ``cap`` rows match (both counts are then lower bounds). Raises
    ValueError for a query with no words, ``sqlite3.OperationalError``
    ("interrupted") past the read's query budget."""
    # The subquery walks the index (stopping past ``cap``); messages are joined by
    # primary key so stale index rows (no message any more) are not counted as hits.
    # With ``columns`` (the store's messages columns) holding ``active``, the hidden
    # originals search leaves out (:func:`_superseded`) are not counted either.
    present = set(columns)
    expression = fts_expression(text)
    twins, params = "0", [expression, cap + 1]
    if "active" in present:
        rewound = "m.active = 0" + (" AND (m.compacted IS NULL OR m.compacted != 1)" if "compacted" in present else "")
        twins = f"COALESCE(SUM(CASE WHEN {rewound} AND {_twin(present)} THEN 1 ELSE 0 END), 0)"
        params.insert(0, expression)
    matched, n, sessions, superseded = conn.execute(
        f"SELECT COUNT(*), COUNT(m.id), COUNT(DISTINCT m.session_id), {twins} FROM "
        "(SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? LIMIT ?) AS f "
        "LEFT JOIN messages m ON m.id = f.rowid", params).fetchone()
    return min(n - superseded, cap), sessions, matched > cap
