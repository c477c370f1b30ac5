"""Streamed exports of a session (optionally its whole compression chain).

Formats:

- **JSON Lines** in the shape of Hermes' own transcript files (reference 1.5): for
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
"""

from __future__ import annotations

import datetime as dt
import html
import json
import re
import sqlite3
from typing import Iterator

from ..secrets import mask, mask_value
from .lineage import Lineage
from .store import Store
from .transcript import JSON_PREFIX
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


def _json_value(raw):
    if isinstance(raw, str) and raw.startswith(JSON_PREFIX):
        try:
            return json.loads(raw[len(JSON_PREFIX):])
        except ValueError:
            return raw
    return raw


def _row_dict(row: dict) -> dict:
    out = {}
    for name in ROW_FIELDS:
        value = row.get(name)
        if value is None:
            continue
        if name == "content":
            value = _json_value(value)
        elif name == "tool_calls":
            try:
                value = json.loads(value)
            except (ValueError, TypeError):
                pass
        out[name] = value
    return out


def _guarded(pieces: Iterator[str], marker) -> Iterator[str]:
    """Pass ``pieces`` through; if reading the store fails midway, end with
    ``marker(error)`` so a cut-short export never looks complete."""
    try:
        yield from pieces
    except sqlite3.Error as exc:
        yield marker(f"{exc.__class__.__name__}: {exc}")


def jsonl(store: Store, session_id: str, lineage: bool = False, include_inactive: bool = False,
          masked: bool = False) -> Iterator[str]:
    """JSON Lines (see :func:`_jsonl`); a read error ends it with an
    ``{"role": "export_error"}`` line."""
    return _guarded(_jsonl(store, session_id, lineage, include_inactive, masked),
                    lambda error: json.dumps({"role": "export_error", "error": error}) + "\n")


def markdown(store: Store, session_id: str, lineage: bool = False, include_inactive: bool = False,
             masked: bool = False) -> Iterator[str]:
    """Markdown (see :func:`_markdown`); a read error ends it with a notice."""
    return _guarded(_markdown(store, session_id, lineage, include_inactive, masked),
                    lambda error: f"\n---\n\n**Export stopped early: {_inline(error)}**\n")


def _jsonl(store: Store, session_id: str, lineage: bool = False, include_inactive: bool = False,
           masked: bool = False) -> Iterator[str]:
    """JSON Lines text, one line per yield (each ends with ``\\n``); ``masked``
    replaces detected secrets in every text (``sessions_app.secrets``)."""
    with store.read() as conn:
        caps = store.capabilities(conn)
        for seg in _segments(store, conn, session_id, lineage):
            meta = {k: seg.get(k) for k in META_COLUMNS if seg.get(k) is not None}
            if masked:
                meta = mask_value(meta)
            yield json.dumps({"role": "session_meta", "session": meta}, ensure_ascii=False) + "\n"
            rows = transcript_for(conn, caps, seg["id"], include_inactive).iter_rows()
            for row in rows:
                line = _row_dict(row)
                if masked:
                    line = mask_value(line)
                line["session_id"] = seg["id"]
                yield json.dumps(line, ensure_ascii=False) + "\n"


def _fence(text: str) -> str:
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    bar = "`" * max(3, longest + 1)
    return f"{bar}text\n{text}\n{bar}\n"


def _when(value) -> str:
    if isinstance(value, (int, float)):
        return dt.datetime.fromtimestamp(value, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return "?"


def _inline(value) -> str:
    """A value made safe for a Markdown heading or list line (no HTML, one line)."""
    text = html.escape(str(value), quote=False).replace("\n", " ")
    return re.sub(r"([\\`*_\[\]#|])", r"\\\1", text)


def _markdown(store: Store, session_id: str, lineage: bool = False, include_inactive: bool = False,
              masked: bool = False) -> Iterator[str]:
    """Markdown text in pieces; ``masked`` as for :func:`jsonl`."""
    hide = mask if masked else (lambda text: text)
    with store.read() as conn:
        caps = store.capabilities(conn)
        for seg in _segments(store, conn, session_id, lineage):
            title = hide(seg.get("title")) or seg["id"]
            yield f"# {_inline(title)}\n\n"
            for key in ("id", "source", "parent_session_id", "end_reason", "message_count"):
                if seg.get(key) is not None:
                    yield f"- {key}: {_inline(seg[key])}\n"
            yield f"- started: {_when(seg.get('started_at'))}\n- ended: {_when(seg.get('ended_at'))}\n\n"
            for row in transcript_for(conn, caps, seg["id"], include_inactive).iter_rows():
                state = ""
                if row.get("active") == 0:
                    state = " (compacted)" if row.get("compacted") == 1 else " (rewound)"
                yield f"## #{row['id']} {_inline(row.get('role') or '?')}{state} · {_when(row.get('timestamp'))}\n\n"
                content = _json_value(row.get("content"))
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
