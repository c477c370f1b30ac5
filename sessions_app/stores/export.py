"""Streamed exports of a session (optionally its whole compression chain).

Formats:

- **JSON Lines** in the shape of Hermes' own transcript files (docs/store.md §12.2): for
  each session a ``{"role": "session_meta", ...}`` line (the bookkeeping role legacy
  files used) followed by one message dict per line with the store's columns;
  structured ``\\x00json:`` content is written as the decoded JSON value and
  ``tool_calls`` as parsed JSON. Re-importable by the transcript migration.
- **Markdown** for people: a heading per session and per message, every stored text
  inside a fence longer than any backtick run it contains, so HTML or script in a
  transcript stays inert text in any Markdown renderer.

Both are generators: memory stays bounded by one chunk of rows, whatever the
session's size. Each opens its own read-only connection (the response outlives the
request's Django connections) and closes it even when the client disconnects.

Both are complete whatever the rows hold (docs/store.md §5.2, values):
text that is not valid UTF-8 is exported with U+FFFD replacement characters, and
Markdown shows control characters (NUL included) as U+FFFD too (JSON Lines keeps
them, escaped by JSON); each session's header says how many messages were
affected. JSON that cannot be decoded (:mod:`.jsondecode`: broken, too large, too
deep) is written as the stored text, named in the line's ``_undecodable``.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import re
import sqlite3
from contextlib import nullcontext
from typing import Iterator

from ..secrets import mask, mask_value
from .lineage import Lineage
from .store import Store
from .jsondecode import Undecodable, decode
from .transcript import JSON_PREFIX, visible_text
from .transcript import for_store as transcript_for

META_COLUMNS = (
    "id", "source", "title", "parent_session_id", "started_at", "ended_at", "end_reason",
    "model", "profile_name", "session_key", "message_count",
)
ROW_FIELDS = (
    "id", "role", "content", "tool_call_id", "tool_calls", "tool_name", "timestamp",
    "token_count", "finish_reason", "reasoning", "reasoning_content", "platform_message_id",
    "active", "compacted", "_compressed_summary", "display_kind", "observed",
)


def _segments(store: Store, conn, session_id: str, lineage: bool) -> list[dict]:
    caps = store.capabilities(conn)
    walker = Lineage(conn, caps.columns("sessions"))
    if lineage:
        return walker.chain(session_id)
    row = walker.get(session_id)
    return [row] if row else []


def _json_value(raw, problems: dict | None = None, name: str = "content"):
    """Structured content decoded, other values as they are; undecodable JSON stays
    the stored text and its reason goes into ``problems[name]``."""
    if isinstance(raw, str) and raw.startswith(JSON_PREFIX):
        value = decode(raw[len(JSON_PREFIX):])
        if isinstance(value, Undecodable):
            if problems is not None:
                problems[name] = value.reason
            return raw
        return value
    return raw


def _row_dict(row: dict) -> dict:
    out, problems = {}, {}
    for name in ROW_FIELDS:
        value = row.get(name)
        if value is None:
            continue
        if name == "content":
            value = _json_value(value, problems)
        elif name == "tool_calls" and isinstance(value, str):
            decoded = decode(value)
            if isinstance(decoded, Undecodable):
                problems[name] = decoded.reason
            else:
                value = decoded
        out[name] = value
    if problems:
        out["_undecodable"] = problems
    return out


def _notes(damage: dict[str, int], markdown: bool) -> list[str]:
    """The header lines saying which stored text was exported altered."""
    notes = []
    if damage["invalid_utf8"]:
        notes.append(f"{damage['invalid_utf8']} message(s) hold text that is not valid UTF-8 (a salvaged page "
                     "or another writer): the invalid bytes are exported as U+FFFD replacement characters.")
    if markdown and damage["control"]:
        notes.append(f"{damage['control']} message(s) hold NUL or other control characters: shown as U+FFFD "
                     "replacement characters here (the JSON Lines export keeps them, escaped).")
    return notes


def _guarded(pieces: Iterator[str], marker) -> Iterator[str]:
    """Pass ``pieces`` through; if reading the store fails midway, end with
    ``marker(error)`` so a cut-short export never looks complete."""
    try:
        yield from pieces
    except sqlite3.Error as exc:
        yield marker(f"{exc.__class__.__name__}: {exc}")


def _jsonl_error(error: str) -> str:
    return json.dumps({"role": "export_error", "error": error}) + "\n"


def _markdown_error(error: str) -> str:
    return f"\n---\n\n**Export stopped early: {_inline(error)}**\n"


def _text(pairs: Iterator[tuple]) -> Iterator[str]:
    """The pieces of ``(position, piece)`` pairs; closing it closes ``pairs`` (and so
    the store connection) at once."""
    try:
        for _pos, piece in pairs:
            yield piece
    finally:
        pairs.close()


def jsonl(store: Store, session_id: str, lineage: bool = False, include_inactive: bool = False,
          masked: bool = False, conn: sqlite3.Connection | None = None) -> Iterator[str]:
    """JSON Lines (see :func:`_jsonl`); a read error ends it with an
    ``{"role": "export_error"}`` line. ``conn``: an open lenient read-only
    connection of ``store`` to use (bulk exports share one per store) instead of
    opening one."""
    return _guarded(_text(_jsonl(store, session_id, lineage, include_inactive, masked, conn)), _jsonl_error)


def markdown(store: Store, session_id: str, lineage: bool = False, include_inactive: bool = False,
             masked: bool = False, conn: sqlite3.Connection | None = None) -> Iterator[str]:
    """Markdown (see :func:`_markdown`); a read error ends it with a notice;
    ``conn`` as for :func:`jsonl`."""
    return _guarded(_text(_markdown(store, session_id, lineage, include_inactive, masked, conn)), _markdown_error)


def positioned(store: Store, session_id: str, fmt: str, lineage: bool = False, include_inactive: bool = False,
               masked: bool = False, start: tuple | None = None) -> Iterator[tuple]:
    """The export in ``fmt`` (``jsonl`` | ``md``) as ``(position, piece)`` pairs, to be
    resumed: a position is ``(segment index, message id)`` of the row the piece
    belongs to, ``(segment index, None)`` for a segment's header. ``start``: the
    position of the last piece already sent; the export goes on after it (the rest
    of that row's pieces are skipped too: cut only between positions). A read
    error ends it with ``(None, the format's error marker)``."""
    make, marker = (_jsonl, _jsonl_error) if fmt == "jsonl" else (_markdown, _markdown_error)
    try:
        yield from make(store, session_id, lineage, include_inactive, masked, None, start)
    except sqlite3.Error as exc:
        yield None, marker(f"{exc.__class__.__name__}: {exc}")


def _resume(start: tuple | None, index: int) -> tuple[bool, bool, int]:
    """``(skip the segment, skip its header, rows after this id)`` for segment ``index``."""
    if start is None or index > start[0]:
        return False, False, -1
    if index < start[0]:
        return True, True, -1
    return False, True, -1 if start[1] is None else int(start[1])


def _reading(store: Store, conn: sqlite3.Connection | None):
    """The given connection (left open), or a new lenient read-only one (closed after)."""
    return nullcontext(conn) if conn is not None else store.read(lenient=True)


def _jsonl(store: Store, session_id: str, lineage: bool = False, include_inactive: bool = False,
           masked: bool = False, conn: sqlite3.Connection | None = None,
           start: tuple | None = None) -> Iterator[tuple]:
    """JSON Lines text, one ``(position, line)`` per yield (each line ends with
    ``\\n``; positions and ``start`` as for :func:`positioned`); ``masked``
    replaces detected secrets in every text (``sessions_app.secrets``)."""
    with _reading(store, conn) as conn:
        caps = store.capabilities(conn)
        for index, seg in enumerate(_segments(store, conn, session_id, lineage)):
            skip, skip_header, after = _resume(start, index)
            if skip:
                continue
            transcript = transcript_for(conn, caps, seg["id"], include_inactive)
            if not skip_header:
                meta = {k: seg.get(k) for k in META_COLUMNS if seg.get(k) is not None}
                if masked:
                    meta = mask_value(meta)
                header = {"role": "session_meta", "session": meta}
                notes = _notes(transcript.text_damage(), markdown=False)
                if notes:
                    header["export_notes"] = notes
                yield (index, None), json.dumps(header, ensure_ascii=False) + "\n"
            for row in transcript.iter_rows(after=after):
                line = _row_dict(row)
                if masked:
                    line = mask_value(line)
                line["session_id"] = seg["id"]
                yield (index, row["id"]), json.dumps(line, ensure_ascii=False) + "\n"


def _fence(text) -> str:
    text = text if isinstance(text, str) else str(text)
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    bar = "`" * max(3, longest + 1)
    return f"{bar}text\n{text}\n{bar}\n"


def _when(value) -> str:
    if isinstance(value, (int, float)):
        return dt.datetime.fromtimestamp(value, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return "?"


def _inline(value) -> str:
    """A value made safe for a Markdown heading or list line (no HTML, one line,
    control characters as U+FFFD)."""
    text = visible_text(html.escape(str(value), quote=False).replace("\n", " "))
    return re.sub(r"([\\`*_\[\]#|])", r"\\\1", text)


def _markdown(store: Store, session_id: str, lineage: bool = False, include_inactive: bool = False,
              masked: bool = False, conn: sqlite3.Connection | None = None,
              start: tuple | None = None) -> Iterator[tuple]:
    """Markdown text in ``(position, piece)`` pairs (as :func:`_jsonl`); ``masked``
    as for :func:`jsonl`."""
    masker = mask if masked else (lambda text: text)

    def hide(text):
        return visible_text(masker(text))

    with _reading(store, conn) as conn:
        caps = store.capabilities(conn)
        for index, seg in enumerate(_segments(store, conn, session_id, lineage)):
            skip, skip_header, after = _resume(start, index)
            if skip:
                continue
            transcript = transcript_for(conn, caps, seg["id"], include_inactive)
            if not skip_header:
                for piece in _markdown_header(seg, transcript, hide):
                    yield (index, None), piece
            for row in transcript.iter_rows(after=after):
                for piece in _markdown_row(row, hide):
                    yield (index, row["id"]), piece


def _markdown_header(seg: dict, transcript, hide) -> Iterator[str]:
    title = hide(seg.get("title")) or seg["id"]
    yield f"# {_inline(title)}\n\n"
    for key in ("id", "source", "parent_session_id", "end_reason", "message_count"):
        if seg.get(key) is not None:
            yield f"- {key}: {_inline(seg[key])}\n"
    yield f"- started: {_when(seg.get('started_at'))}\n- ended: {_when(seg.get('ended_at'))}\n\n"
    for note in _notes(transcript.text_damage(), markdown=True):
        yield f"> **Note:** {_inline(note)}\n\n"


def _markdown_row(row: dict, hide) -> Iterator[str]:
    """One message's Markdown pieces (its heading, content, tool call, reasoning)."""
    state = ""
    if row.get("active") == 0:
        state = " (compacted)" if row.get("compacted") == 1 else " (rewound)"
    yield f"## #{row['id']} {_inline(row.get('role') or '?')}{state} · {_when(row.get('timestamp'))}\n\n"
    problems: dict = {}
    content = _json_value(row.get("content"), problems)
    for name, why in problems.items():
        yield f"{name} is undecodable JSON ({_inline(why)}); exported as stored.\n\n"
    if content not in (None, ""):
        if not isinstance(content, str):
            content = json.dumps(content, ensure_ascii=False, indent=2)
        yield _fence(hide(content))
    if row.get("tool_call_id"):
        yield f"\nresult of tool call {_inline(row['tool_call_id'])} ({_inline(row.get('tool_name') or '?')})\n"
    if row.get("tool_calls"):
        yield "\ntool calls:\n\n" + _fence(hide(row["tool_calls"]))
    for key in ("reasoning", "reasoning_content"):
        if row.get(key):
            yield f"\n{key}:\n\n" + _fence(hide(row[key]))
    yield "\n"
