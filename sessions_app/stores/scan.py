"""A bounded LIKE scan of one store's messages, for rows its full-text index misses.

Used where :mod:`.coverage` names a gap: the scan reads the gap's rows (or every
row, when no index can be trusted) newest first, in chunks of ids, and stops at
whichever comes first: ``limit`` hits, a row budget (``rows`` message ids looked
at) or a time budget (``seconds``; a statement still running at the deadline is
interrupted, its chunk not counted). It says where it stopped, so the next request
goes on from there (``before``). Read-only, one connection.

Matching is SQLite's ``LIKE``: every word must occur somewhere in the content, tool
name or tool calls, as a substring (also inside longer words), ASCII letters
without regard to case. Structured ``\\x00json:`` content is matched after its
leading NUL (``LIKE`` would otherwise stop there, docs/store.md, messages).
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass, field

from .search import Hit, terms
from .transcript import visible_text

CHUNK = 1000  # message ids per statement
SNIPPET_CHARS = 96  # characters either side of the first match
MASK_WINDOW = 4096  # characters either side read for masking (views.search)
# Content with structured JSON reads from after its leading NUL.
TEXT = ("CASE WHEN instr(content, char(0)) = 1 THEN CAST(substr(CAST(content AS BLOB), 2) AS TEXT) "
        "ELSE content END")


@dataclass
class Scan:
    """What one scan request did.

    ``hits``: :class:`.search.Hit` newest first; ``texts``: id -> text around the
    hit (for masking); ``top``/``bottom``: the id range looked at (``bottom <= id <
    top``); ``examined``: ids in that range; ``stopped``: ``end`` (nothing older),
    ``hits``, ``rows`` or ``time``; ``next_before``: where the next request starts
    (None at the end); ``budget_rows``/``budget_seconds``: the budgets applied.
    """

    hits: list[Hit] = field(default_factory=list)
    texts: dict[int, str] = field(default_factory=dict)
    top: int | None = None
    bottom: int | None = None
    examined: int = 0
    stopped: str = "end"
    next_before: int | None = None
    budget_rows: int = 0
    budget_seconds: float = 0.0
    elapsed: float = 0.0


def like_pattern(word: str) -> str:
    """``%word%`` with LIKE's wildcards in ``word`` escaped (escape char ``\\``)."""
    return "%" + word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _matcher(columns: set[str], patterns: list[str]) -> tuple[str, list]:
    fields = [TEXT] + [c for c in ("tool_name", "tool_calls") if c in columns]
    clauses, params = [], []
    for pattern in patterns:
        clauses.append("(" + " OR ".join(f"{f} LIKE ? ESCAPE '\\'" for f in fields) + ")")
        params += [pattern] * len(fields)
    return " AND ".join(clauses), params


def scan(conn: sqlite3.Connection, columns, text: str, where: str = "1", where_params: tuple = (),
         before: int | None = None, rows: int = 200_000, seconds: float = 3.0, limit: int = 50) -> Scan:
    """Scan messages with ``id < before`` (all when None) matching ``where`` for the
    words of ``text``; see the module docstring. Raises ValueError for a query with
    no words, ``sqlite3.Error`` for a busy store (an interrupted statement is the
    time budget, not an error)."""
    words = [w for w, _ in terms(text)]
    if not words:
        raise ValueError("nothing to search for")
    columns = set(columns)
    matcher, match_params = _matcher(columns, [like_pattern(w) for w in words])
    out = Scan(budget_rows=rows, budget_seconds=seconds)
    low, high = conn.execute("SELECT MIN(id), MAX(id) FROM messages").fetchone()
    if high is None:
        return out
    top = min(before, high + 1) if before is not None else high + 1
    out.top = out.bottom = top
    start = time.monotonic()
    deadline = start + seconds
    conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 10_000)
    try:
        hi = top
        while True:
            if hi <= low:
                out.stopped = "end"
                break
            if out.examined >= rows:
                out.stopped = "rows"
                break
            if time.monotonic() > deadline:
                out.stopped = "time"
                break
            lo = max(low, hi - CHUNK, hi - (rows - out.examined))
            try:
                found = [r[0] for r in conn.execute(
                    f"SELECT id FROM messages WHERE id >= ? AND id < ? AND ({where}) AND {matcher} ORDER BY id DESC",
                    (lo, hi, *where_params, *match_params))]
            except sqlite3.OperationalError as exc:
                if str(exc) != "interrupted":
                    raise
                out.stopped = "time"
                break
            room = limit - len(out.hits)
            if len(found) >= room:
                taken = found[:room]
                out.hits += [Hit(id=i, session_id=None, role=None, timestamp=None, state="active", parts=[])
                             for i in taken]
                # The rest of this chunk is below the last hit taken: the next request starts there.
                out.examined += hi - taken[-1]
                hi = taken[-1]
                out.stopped = "hits" if hi > low or len(found) > room else "end"
                break
            out.hits += [Hit(id=i, session_id=None, role=None, timestamp=None, state="active", parts=[])
                         for i in found]
            out.examined += hi - lo
            hi = lo
        out.bottom = hi
        out.next_before = hi if out.stopped != "end" else None
    finally:
        conn.set_progress_handler(None, 0)
        out.elapsed = time.monotonic() - start
    if out.hits:
        _describe(conn, columns, out, words)
    return out


def _describe(conn: sqlite3.Connection, columns: set[str], out: Scan, words: list[str]) -> None:
    """Session, role, time, state and a snippet around the first match of each hit,
    reading only windows of the text (a tool output may be megabytes)."""
    state_cols = [c if c in columns else f"NULL AS {c}" for c in ("active", "compacted")]
    calls = "tool_calls" if "tool_calls" in columns else "NULL"
    first = words[0].lower()
    for hit in out.hits:
        row = conn.execute(
            f"SELECT session_id, role, timestamp, {', '.join(state_cols)}, instr(lower({TEXT}), ?), "
            f"instr(lower(COALESCE({calls}, '')), ?) FROM messages WHERE id = ?", (first, first, hit.id)).fetchone()
        if row is None:
            continue
        sid, role, ts, active, compacted, at_text, at_calls = row
        hit.session_id, hit.role, hit.timestamp = sid, role, ts
        hit.state = "active" if active in (None, 1) else ("compacted" if compacted == 1 else "rewound")
        source, at = (TEXT, at_text) if at_text else (f"COALESCE({calls}, '')", at_calls or 1)
        snippet, window = conn.execute(
            f"SELECT substr({source}, ?, ?), substr({source}, ?, ?) FROM messages WHERE id = ?",
            (max(1, at - SNIPPET_CHARS), 2 * SNIPPET_CHARS + len(first),
             max(1, at - MASK_WINDOW), 2 * MASK_WINDOW + len(first), hit.id)).fetchone()
        hit.parts = marked(snippet or "", words)
        out.texts[hit.id] = window or ""
    sids = sorted({h.session_id for h in out.hits if h.session_id is not None})
    if sids:
        present = {r[1] for r in conn.execute("PRAGMA table_info(sessions)")}
        wanted = [c for c in ("id", "title", "source", "started_at", "ended_at") if c in present]
        found = {}
        for row in conn.execute(f"SELECT {', '.join(wanted)} FROM sessions WHERE id IN ({','.join('?' * len(sids))})",
                                sids):
            found[row[0]] = dict(zip(wanted, row))
        for hit in out.hits:
            hit.session = found.get(hit.session_id)


def marked(text: str, words: list[str]) -> list[tuple[str, bool]]:
    """``text`` as ``(piece, matched)`` parts, each occurrence of a word (ASCII case
    folded, as LIKE matches) marked; control characters as U+FFFD."""
    low = text.lower()
    spans = []
    for word in words:
        w = word.lower()
        at = low.find(w)
        while at >= 0 and w:
            spans.append((at, at + len(w)))
            at = low.find(w, at + len(w))
    spans.sort()
    parts, pos = [], 0
    for begin, end in spans:
        if begin < pos:
            continue
        if begin > pos:
            parts.append((visible_text(text[pos:begin]), False))
        parts.append((visible_text(text[begin:end]), True))
        pos = end
    if pos < len(text):
        parts.append((visible_text(text[pos:]), False))
    return parts
