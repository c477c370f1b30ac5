"""Transcript pages: messages of one session by id, keyset-paginated.

Rules mirrored from upstream (docs/store.md §4.2, §9.2):

- order is ``messages.id``, never ``timestamp`` (ground rule 10);
- ``active = 0`` rows are hidden unless asked for; ``compacted = 1`` marks rows
  archived by in-place compaction, ``compacted = 0`` rows rewound by /undo; an
  ``active IS NULL`` row counts as active (upstream heals it to 1 on open);
- content starting with ``"\\x00json:"`` is structured (list/dict) content;
  lengths are measured in bytes of UTF-8, since SQLite's character functions stop
  at that leading NUL (observed on every release's store);
- a tool row answers the tool call whose ``id`` or ``call_id`` equals its
  ``tool_call_id``.

Every page query is ``WHERE session_id = ? AND id > ? ORDER BY id LIMIT n``. Newest
stores index ``(session_id, id)`` and answer it directly. Releases up to 0.19.0 only
index ``(session_id, timestamp)``, so SQLite reads and sorts every row of the session
for each page: measured on a 1 M-message 0.19.0 store, 25-50 ms per page of a
300,000-message session. For such big sessions (more than COUNT_CAP rows) the pages
walk the rowid instead (``NOT INDEXED``: 0.04 ms there), which stays cheap as long as
the session is a noticeable share of the rows after the cursor; small sessions keep
the session index, where a rowid walk would cross the whole store. Page 3,000 of a
300,000-message session thus costs what page 1 does. Large
text columns are cut to ``TEXT_LIMIT`` characters inside SQLite, so a
multi-megabyte tool output never reaches Python on a page view.

Longer than most modules on purpose: the one reader of a transcript for pages and exports, with its damage markers.
"""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import dataclass, field

from .jsondecode import Undecodable, decode, limits

JSON_PREFIX = "\x00json:"
TEXT_LIMIT = 20_000  # bytes of a long text column shown on a page
COUNT_CAP = 10_000
RESULT_WINDOW = 500  # rows after a page searched for the answers to its tool calls
MESSAGE_COLUMNS = (
    "id", "role", "tool_call_id", "tool_calls", "tool_name", "timestamp", "token_count",
    "finish_reason", "platform_message_id", "active", "compacted", "_compressed_summary",
    "display_kind", "observed",
)
LONG_COLUMNS = ("content", "reasoning", "reasoning_content")
# Text columns an export writes (Transcript.text_damage looks at each).
TEXT_COLUMNS = ("role", "content", "tool_call_id", "tool_calls", "tool_name", "finish_reason", "reasoning",
                "reasoning_content", "platform_message_id", "display_kind")


def decode_content(raw) -> tuple[str, object | None]:
    """Split stored content into ``(text, structured)``.

    ``structured`` is the decoded JSON value for ``\\x00json:`` content, else None
    (and for a prefix whose JSON does not decode: a truncated page copy, say, or an
    :class:`~.jsondecode.Undecodable` value, see :func:`content_problem`).
    ``text`` is the plain text to show: the content itself, or the text parts of
    structured content joined by blank lines.
    """
    return _content_parts(raw)[:2]


def content_problem(raw, cut: bool = False) -> Undecodable | None:
    """Why structured (``\\x00json:``) content cannot be decoded, or None (plain
    text, or decodable). A page copy cut at TEXT_LIMIT (``cut``) is expected not
    to parse, so only its depth is judged then."""
    return _content_parts(raw, cut)[2]


def _content_parts(raw, cut: bool = False) -> tuple[str, object | None, Undecodable | None]:
    """``(text, structured, problem)``: :func:`decode_content` and
    :func:`content_problem` from one decode of the JSON (a page row needs both)."""
    if raw is None:
        return "", None, None
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    if not isinstance(raw, str):
        return str(raw), None, None
    if not raw.startswith(JSON_PREFIX):
        return raw, None, None
    value = decode(raw[len(JSON_PREFIX):])
    if isinstance(value, Undecodable):
        return raw[len(JSON_PREFIX):], None, None if cut and value.kind == "syntax" else value
    return structured_text(value), value, None


# C0 controls but tab, newline and carriage return; DEL; C1 controls. Shown as
# U+FFFD on pages (a NUL or an escape sequence is no text to read, and a browser
# would drop or mangle it silently).
CONTROL_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
REPLACEMENT = "\ufffd"


def visible_text(value):
    """``value`` with control characters (:data:`CONTROL_RE`) as U+FFFD; non-strings
    as they are. Invalid UTF-8 is already U+FFFD by then (``_text``, or a lenient
    connection)."""
    if not isinstance(value, str):
        return value
    # Every character CONTROL_RE matches is a control (Unicode Cc), which
    # isprintable() refuses: a printable value has nothing to replace (most short
    # columns of a row; a text with a newline takes the expression).
    return value if value.isprintable() else CONTROL_RE.sub(REPLACEMENT, value)


def _text_damage(*values) -> int:
    """SQL function for :meth:`Transcript.text_damage`: bit 1 when a value is not
    valid UTF-8, bit 2 when one holds a control character."""
    bits = 0
    for value in values:
        if not isinstance(value, bytes) or not value:
            continue
        try:
            text = value.decode("utf-8")
        except UnicodeDecodeError:
            bits |= 1
            text = value.decode("utf-8", "replace")
        if CONTROL_RE.search(text, len(JSON_PREFIX) if text.startswith(JSON_PREFIX) else 0):
            bits |= 2
    return bits


def _text(value, cut: bool = False):
    """Bytes cut by SQLite back to text; a character split by the cut is dropped."""
    if not isinstance(value, bytes):
        return value
    text = value.decode("utf-8", "replace")
    return text[:-1] if cut and text.endswith("\ufffd") else text


def structured_text(value) -> str:
    """Readable text of structured content: text parts kept, other parts summarised."""
    parts = value if isinstance(value, list) else [value]
    out = []
    for part in parts:
        if isinstance(part, str):
            out.append(part)
        elif isinstance(part, dict):
            kind = part.get("type", "part")
            if isinstance(part.get("text"), str):
                out.append(part["text"])
            elif kind in ("image_url", "image", "input_image"):
                url = part.get("image_url")
                url = url.get("url") if isinstance(url, dict) else url
                label = str(url or "")
                if label.startswith("data:"):
                    label = label.split(",", 1)[0] + f",… ({len(str(url))} chars)"
                out.append(f"[{kind}: {label[:200]}]")
            else:
                out.append(f"[{kind}]")
        else:
            out.append(json.dumps(part, ensure_ascii=False))
    return "\n\n".join(out)


def tool_call_entries(raw) -> list[dict]:
    """The entries of a ``tool_calls`` value that are objects; undecodable JSON
    (:mod:`.jsondecode`: broken, too large, too deep), or JSON that is not a list,
    reads as ``[]`` (as upstream does for what it cannot parse)."""
    return _entries(raw, _decoded_calls(raw))


def tool_calls_problem(raw) -> Undecodable | None:
    """Why a stored ``tool_calls`` value cannot be read as a list of calls, or None
    (empty, or a list). Shown on the session page in place of the calls."""
    return _calls_problem(raw, _decoded_calls(raw))


def _decoded_calls(raw):
    """``raw`` decoded (:func:`.jsondecode.decode`) when it is non-empty text or bytes,
    else None: the one decode :func:`_entries` and :func:`_calls_problem` share."""
    return decode(raw) if raw and isinstance(raw, (str, bytes)) else None


def _entries(raw, value) -> list[dict]:
    if not raw or not isinstance(raw, (str, bytes)):
        return []
    return [entry for entry in value if isinstance(entry, dict)] if isinstance(value, list) else []


def _calls_problem(raw, value) -> Undecodable | None:
    if raw in (None, "", b""):
        return None
    if not isinstance(raw, (str, bytes)):
        return Undecodable("syntax", f"a {type(raw).__name__} ({str(raw)[:40]}), not a JSON list of tool calls")
    if isinstance(value, Undecodable):
        return value
    if value in (None, [], {}):
        return None
    if not isinstance(value, list):
        return Undecodable("syntax", f"JSON {type(value).__name__}, not a list of tool calls")
    return None


def call_ids(entry: dict) -> list[str]:
    """A tool call's ids, ``id`` then ``call_id`` (Codex entries carry both)."""
    return [i for i in (entry.get("id"), entry.get("call_id")) if isinstance(i, str) and i]


def parse_tool_calls(raw) -> list[dict]:
    """Tool calls as ``[{"id", "ids", "name", "arguments"}]`` (:func:`tool_call_entries`);
    ``id`` is the first of :func:`call_ids`."""
    return _calls_of(tool_call_entries(raw))


def _calls_of(entries: list[dict]) -> list[dict]:
    calls = []
    for entry in entries:
        fn = entry.get("function") if isinstance(entry.get("function"), dict) else {}
        args = fn.get("arguments", entry.get("arguments", ""))
        if not isinstance(args, str):
            args = json.dumps(args, ensure_ascii=False)
        else:
            value = decode(args)
            if not isinstance(value, Undecodable):
                args = json.dumps(value, ensure_ascii=False, indent=2)
            elif value.kind != "syntax":
                args = f"{value.marker}\n{args[:TEXT_LIMIT]}"
        ids = call_ids(entry)
        calls.append({"id": ids[0] if ids else "", "ids": ids, "name": fn.get("name") or entry.get("name") or "?", "arguments": args})
    return calls


@dataclass
class Message:
    """One displayed row. Long texts are cut at TEXT_LIMIT characters; ``*_length`` is
    the full stored length in characters."""

    row: dict
    text: str = ""
    structured: object | None = None
    content_length: int = 0
    tool_calls: list[dict] = field(default_factory=list)
    results: dict[str, "Message"] = field(default_factory=dict)  # call id -> tool row
    nested: bool = False  # rendered under its call rather than on its own
    # ``(field, marker text)`` for stored values that could not be decoded
    # (:mod:`.jsondecode`), shown in place of the value.
    undecodable: list[tuple[str, str]] = field(default_factory=list)

    def __getattr__(self, name):
        try:
            return self.row[name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def compressed_summary(self) -> bool:
        return self.row.get("_compressed_summary") == 1

    @property
    def truncated(self) -> bool:
        return self.content_length > TEXT_LIMIT

    @property
    def state(self) -> str:
        """``active``, ``compacted`` (archived by compaction) or ``rewound``."""
        if self.row.get("active") in (None, 1):
            return "active"
        return "compacted" if self.row.get("compacted") == 1 else "rewound"


@dataclass
class TranscriptPage:
    messages: list[Message]
    first_id: int | None
    last_id: int | None
    has_prev: bool
    has_next: bool
    total: int  # rows matching the visibility filter, counted up to COUNT_CAP + 1
    total_capped: bool = False


class Transcript:
    """Reads one session's messages over an open read-only connection.

    ``columns`` is the set of ``messages`` columns the store has (ground rule 8);
    ``has_id_index`` whether an index starts with ``(session_id, id)``.
    Use :func:`for_store` to build one from a store's capabilities.
    """

    def __init__(self, conn: sqlite3.Connection, columns, session_id: str, include_inactive: bool = False,
                 has_id_index: bool = False):
        self.conn = conn
        self.present = set(columns)
        self.session_id = session_id
        self.visible = "" if include_inactive or "active" not in self.present else " AND (active IS NULL OR active != 0)"
        self.source = "messages"
        self._counted = None  # the visible count the first count() returns, when known here
        if not has_id_index:
            rows, self._counted = self._both_counts()
            if rows > COUNT_CAP:
                self.source = "messages NOT INDEXED"

    def _both_counts(self) -> tuple[int, int | None]:
        """``(rows, visible)``: every row of the session counted up to COUNT_CAP + 1
        (whether pages walk the rowid) and, from the same statement, the visible
        ones as :meth:`count` counts them, or None when that statement cannot tell
        (more rows than the cap, fewer of them visible than the cap allows)."""
        if not self.visible:
            rows = self._count_upto(COUNT_CAP + 1, visible=False)
            return rows, rows
        rows, shown = self.conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(CASE WHEN active IS NULL OR active != 0 THEN 1 ELSE 0 END), 0) "
            "FROM (SELECT active FROM messages WHERE session_id = ? LIMIT ?)",
            (self.session_id, COUNT_CAP + 1)).fetchone()
        # Within the cap the rows read are all of them; past it, a full cap of
        # visible rows among them is already what the capped count says.
        return rows, shown if rows <= COUNT_CAP or shown > COUNT_CAP else None

    def _count_upto(self, cap: int, visible: bool = True) -> int:
        where = self.visible if visible else ""
        return self.conn.execute(
            f"SELECT COUNT(*) FROM (SELECT 1 FROM messages WHERE session_id = ?{where} LIMIT ?)",
            (self.session_id, cap),
        ).fetchone()[0]

    def _select(self, limit_text: bool = True) -> str:
        cols = [c if c in self.present else f"NULL AS {c}" for c in MESSAGE_COLUMNS]
        if limit_text and "tool_calls" in self.present:
            # A tool_calls value past the JSON size limit stays in SQLite: NULL and
            # its length (bytes) instead, shown as undecodable (docs/store.md
            # §5.2, values).
            limit = limits()[0]
            cols[MESSAGE_COLUMNS.index("tool_calls")] = (
                f"CASE WHEN length(CAST(tool_calls AS BLOB)) > {limit} THEN NULL ELSE tool_calls END AS tool_calls")
            cols.append(f"CASE WHEN length(CAST(tool_calls AS BLOB)) > {limit} "
                        "THEN length(CAST(tool_calls AS BLOB)) END AS tool_calls_length")
        for c in LONG_COLUMNS:
            if c not in self.present:
                cols += [f"NULL AS {c}", f"0 AS {c}_length"]
            elif limit_text:
                # On BLOB casts: SQLite's text functions stop at a NUL byte, and
                # structured content starts with one ("\x00json:"), so length() and
                # substr() on the TEXT value would see an empty string. Bytes it is.
                cols += [
                    f"substr(CAST({c} AS BLOB), 1, {TEXT_LIMIT + 1}) AS {c}",
                    f"length(CAST({c} AS BLOB)) AS {c}_length",
                ]
            else:
                cols += [c, f"length(CAST({c} AS BLOB)) AS {c}_length"]
        return ", ".join(cols)

    def _query(self, where: str, params: tuple, order: str, limit: int) -> list[dict]:
        sql = (
            f"SELECT {self._select()} FROM {self.source} WHERE session_id = ?{self.visible} {where} "
            f"ORDER BY id {order} LIMIT ?"
        )
        cur = self.conn.execute(sql, (self.session_id, *params, limit))
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r)) for r in cur.fetchall()]

    def count(self) -> int:
        """Visible rows, counted up to COUNT_CAP + 1 so a huge session costs no more
        (the first call: from the constructor's statement when that one could tell)."""
        counted, self._counted = self._counted, None
        return counted if counted is not None else self._count_upto(COUNT_CAP + 1)

    def page(self, size: int = 100, after: int | None = None, before: int | None = None, at: int | None = None) -> TranscriptPage:
        """A page of ``size`` rows: from the start, after/before an id, or starting at
        the page that holds ``at``; ``before=-1`` means the last page."""
        if at is not None:
            rows = self._query("AND id >= ?", (at,), "ASC", size + 1)
        elif before is not None:
            where, params = ("", ()) if before < 0 else ("AND id < ?", (before,))
            rows = list(reversed(self._query(where, params, "DESC", size + 1)))
            extra = len(rows) > size
            rows = rows[1:] if extra else rows
            # Nothing before a non-negative id (``before=0``, or ids below the first):
            # no page follows either; the page offers the first and the last instead.
            return self._finish(rows, has_prev=extra, has_next=before >= 0 and bool(rows))
        elif after is not None:
            rows = self._query("AND id > ?", (after,), "ASC", size + 1)
        else:  # from the start: no lower bound (a hand-made row may have id 0 or below)
            rows = self._query("", (), "ASC", size + 1)
        has_next = len(rows) > size
        rows = rows[:size]
        # A page from the start (no ``after``, no ``at``) holds the first visible row:
        # nothing comes before it. On a store without a ``(session_id, id)`` index the
        # question walks the rowid down past every row of other sessions before this
        # session's first (1 ms on the 1 M-message bench store), for an answer known here.
        from_start = at is None and after is None
        has_prev = bool(rows) and not from_start and self._exists_before(rows[0]["id"])
        return self._finish(rows, has_prev=has_prev, has_next=has_next)

    def _exists_before(self, msg_id: int) -> bool:
        return bool(self._query("AND id < ?", (msg_id,), "DESC", 1))

    def _finish(self, rows: list[dict], has_prev: bool, has_next: bool) -> TranscriptPage:
        messages = [self._message(r) for r in rows]
        self._pair_tools(messages)
        total = self.count()
        return TranscriptPage(
            messages=messages,
            first_id=messages[0].id if messages else None,
            last_id=messages[-1].id if messages else None,
            has_prev=has_prev,
            has_next=has_next,
            total=min(total, COUNT_CAP),
            total_capped=total > COUNT_CAP,
        )

    @staticmethod
    def _message(row: dict) -> Message:
        for c in LONG_COLUMNS:
            row[c] = _text(row.get(c), cut=(row.get(f"{c}_length") or 0) > TEXT_LIMIT)
        for name, value in row.items():
            # visible_text() inline (a call per column of every row was ~4 µs a row):
            # a printable string, or no string at all, is kept as it is.
            if type(value) is str and not value.isprintable() and name != "content" and name != "tool_calls":
                row[name] = CONTROL_RE.sub(REPLACEMENT, value)
        length = row.get("content_length") or 0
        # Content and tool calls are each decoded once for what is shown and its marker.
        text, structured, problem = _content_parts(row.get("content"), cut=length > TEXT_LIMIT)
        msg = Message(row=row, text=visible_text(text), structured=structured, content_length=length)
        if problem is not None:
            msg.undecodable.append(("content", problem.marker))
        calls = row.get("tool_calls")
        calls_length = row.pop("tool_calls_length", None)
        decoded = None
        if calls is None and calls_length:
            # Cut in SQLite (see _select): a value this large never reaches Python.
            msg.undecodable.append(("tool_calls", Undecodable(
                "size", f"{calls_length:,} bytes of JSON, past the {limits()[0]:,}-byte limit "
                        "(HERMES_ADMIN_JSON_MAX_BYTES)", calls_length).marker))
        elif row.get("role") == "assistant" or calls not in (None, "", b""):
            decoded = _decoded_calls(calls)
            problem = _calls_problem(calls, decoded)
            if problem is not None:
                msg.undecodable.append(("tool_calls", problem.marker))
        if row.get("role") == "assistant":
            # ``decoded`` is set unless the value stayed in SQLite (no entries then).
            msg.tool_calls = [{**call, "name": visible_text(call["name"]), "arguments": visible_text(call["arguments"])}
                              for call in _calls_of(_entries(calls, decoded))]
        return msg

    def _pair_tools(self, messages: list[Message]) -> None:
        """Attach each tool result to the call it answers.

        Results on this page are nested under their call; results on a later page
        are fetched with one bounded query so every call on the page shows its answer.
        """
        by_call: dict[str, Message] = {}
        for msg in messages:
            for call in msg.tool_calls:
                for cid in call["ids"]:
                    by_call.setdefault(cid, msg)
        if not by_call:
            return
        for msg in messages:
            if msg.role == "tool" and msg.tool_call_id in by_call and by_call[msg.tool_call_id].id < msg.id:
                owner = by_call[msg.tool_call_id]
                owner.results.setdefault(msg.tool_call_id, msg)
                msg.nested = True
        pending = [cid for cid, owner in by_call.items() if cid not in owner.results]
        if pending and "tool_call_id" in self.present:
            self._fetch_results(by_call, pending, messages[-1].id)
        for msg in messages:
            for call in msg.tool_calls:
                call["result"] = next((msg.results[i] for i in call["ids"] if i in msg.results), None)

    def _fetch_results(self, by_call: dict[str, Message], pending: list[str], last_id: int) -> None:
        """Results of ``pending`` calls among the RESULT_WINDOW rows after the page.

        The window keeps an unanswered call from scanning the rest of a huge session.
        """
        marks = ",".join("?" * len(pending))
        window = f"AND id IN (SELECT id FROM {self.source} WHERE session_id = ? AND id > ? ORDER BY id LIMIT ?)"
        rows = self._query(
            f"{window} AND role = 'tool' AND tool_call_id IN ({marks})",
            (self.session_id, last_id, RESULT_WINDOW, *pending),
            "ASC",
            len(pending) * 2,
        )
        for row in rows:
            result = self._message(row)
            owner = by_call.get(result.tool_call_id)
            if owner is not None and owner.id < result.id:
                owner.results.setdefault(result.tool_call_id, result)

    def message(self, msg_id: int) -> dict | None:
        """One row with full-length texts (for the raw view), or None."""
        sql = f"SELECT {self._select(limit_text=False)} FROM messages WHERE session_id = ? AND id = ?"
        cur = self.conn.execute(sql, (self.session_id, msg_id))
        row = cur.fetchone()
        return dict(zip([d[0] for d in cur.description], row)) if row else None

    def text_damage(self) -> dict[str, int]:
        """How many visible rows hold text that is not valid UTF-8 (``invalid_utf8``)
        and how many hold control characters (``control``, :data:`CONTROL_RE`; the
        leading NUL of structured content excepted), over every text column.
        One statement; each value passes through Python once as bytes (a
        registered function), so an export can say so in its header before
        streaming the rows."""
        names = [c for c in TEXT_COLUMNS if c in self.present]
        if not names:
            return {"invalid_utf8": 0, "control": 0}
        self.conn.create_function("hermes_text_damage", -1, _text_damage, deterministic=True)
        args = ", ".join(f"CAST({c} AS BLOB)" for c in names)
        counts = {0: 0, 1: 0, 2: 0, 3: 0}
        for bits, n in self.conn.execute(
                f"SELECT hermes_text_damage({args}) AS bits, COUNT(*) FROM {self.source} "
                f"WHERE session_id = ?{self.visible} GROUP BY bits", (self.session_id,)):
            counts[bits] = n
        return {"invalid_utf8": counts[1] + counts[3], "control": counts[2] + counts[3]}

    def iter_rows(self, chunk: int = 200, after: int = -1):
        """Every visible row with full texts, in id order, ``chunk`` rows per query;
        ``after``: only rows whose id is greater (an export resumed; order is
        ``messages.id``, docs/store.md §4.2).

        Each chunk is its own short statement (no read snapshot held across the
        whole export), stepped one row at a time, so memory holds one row.
        """
        last = after
        sql = (
            f"SELECT {self._select(limit_text=False)} FROM {self.source} WHERE session_id = ?{self.visible} "
            "AND id > ? ORDER BY id LIMIT ?"
        )
        while True:
            cur = self.conn.execute(sql, (self.session_id, last, chunk))
            names = [d[0] for d in cur.description]
            seen = 0
            # Stepped row by row: a multi-megabyte tool output is the most held at once.
            for r in cur:
                seen += 1
                last = r[0]
                yield dict(zip(names, r))
            if seen < chunk:
                return


def for_store(conn: sqlite3.Connection, caps, session_id: str, include_inactive: bool = False) -> Transcript:
    """A :class:`Transcript` configured from a store's capabilities."""
    return Transcript(
        conn, caps.columns("messages"), session_id, include_inactive,
        has_id_index=caps.has_index("messages", "session_id", "id"),
    )
