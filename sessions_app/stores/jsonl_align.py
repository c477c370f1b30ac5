"""Aligning a transcript copy with a session's rows (``stores/jsonl.py`` reads the file).

Matching keys (role, normalised content, tool call id and tool calls), the session's
rows in ``messages.id`` order, the longest common subsequence between the two, and
the times of messages that carry none (docs/store.md §12.2). Shared by the JSONL
import, the ``transcript_on_disk_only`` check and the recovery comparison.
"""

from __future__ import annotations

import bisect
import datetime as dt
import hashlib
import json
import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .jsondecode import Undecodable, decode
from .transcript import JSON_PREFIX

if TYPE_CHECKING:
    from .jsonl import JsonlLine

MAX_DEPTH = 64
SANE_EPOCH = (946_684_800.0, 4_102_444_800.0)


def normal_content(value) -> str:
    """Content in one comparable form: structured content (a list/dict, or the
    store's ``\\x00json:`` text) as canonical JSON, text as is, None as ''."""
    if value is None:
        return ""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str):
        if not value.startswith(JSON_PREFIX):
            return value
        decoded = decode(value[len(JSON_PREFIX):], max_depth=MAX_DEPTH)
        if isinstance(decoded, Undecodable):
            return value
        value = decoded
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def normal_tool_calls(value) -> str:
    """Tool calls as canonical JSON; NULL, '', ``[]`` and unparseable-empty all read as ''."""
    if value in (None, "", b""):
        return ""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str):
        decoded = decode(value, max_depth=MAX_DEPTH)
        if isinstance(decoded, Undecodable):
            return value
        value = decoded
    if value in ([], {}, None):
        return ""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def message_key(role, content, tool_call_id, tool_calls) -> str:
    """Digest of what makes a message the same message (tool name compared apart)."""
    text = "\x1f".join((str(role or ""), normal_content(content), str(tool_call_id or ""),
                        normal_tool_calls(tool_calls)))
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()


def line_key(line: JsonlLine) -> tuple[str, str | None]:
    """``(key, tool_name or None)`` of a message line."""
    d = line.data
    name = d.get("tool_name")
    return (message_key(d.get("role"), d.get("content"), d.get("tool_call_id"), d.get("tool_calls")),
            name if isinstance(name, str) and name else None)


@dataclass(frozen=True)
class StoreRow:
    """A message row of the session: ``id``, match ``key``, ``tool_name``, and whether
    it is visible (active, or compacted; every row on stores without ``active``)."""

    id: int
    key: str
    tool_name: str | None
    visible: bool


def store_rows(conn: sqlite3.Connection, caps, session_id: str) -> list[StoreRow]:
    """Every message row of ``session_id`` in ``messages.id`` order (active or not)."""
    if caps.has("messages", "active"):
        compacted = " OR compacted = 1" if caps.has("messages", "compacted") else ""
        visible = f"(active IS NULL OR active != 0{compacted})"
    else:
        visible = "1"
    cur = conn.execute(
        f"SELECT id, role, CAST(content AS BLOB), tool_call_id, tool_calls, tool_name, {visible} "
        "FROM messages WHERE session_id = ? ORDER BY id", (session_id,))
    return [StoreRow(mid, message_key(role, content, call_id, calls), name, bool(vis))
            for mid, role, content, call_id, calls, name, vis in cur]


# --------------------------------------------------------------------------- alignment

@dataclass
class Alignment:
    """Messages of a file aligned with a session's rows.

    ``pairs``: ``(line index, row index)`` matched, increasing in both;
    ``missing``: indexes of file messages the store lacks; ``merged``: the
    transcript order as ``("line", i)``, ``("row", j)`` or ``("both", i, j)``
    items: matched anchors in order, and in each gap between anchors the store's
    own rows first, then the file's missing messages (the store's order and the
    file's order are each kept; in a gap nothing tells which came first, and
    store-first rewrites the fewest rows).
    """

    lines: list[JsonlLine]
    rows: list[StoreRow]
    pairs: list[tuple[int, int]]

    @property
    def missing(self) -> list[int]:
        matched = {i for i, _ in self.pairs}
        return [i for i in range(len(self.lines)) if i not in matched]

    @property
    def merged(self) -> list[tuple]:
        out: list[tuple] = []
        i = j = 0
        for pi, pj in [*self.pairs, (len(self.lines), len(self.rows))]:
            out.extend(("row", r) for r in range(j, pj))
            out.extend(("line", n) for n in range(i, pi))
            if pi < len(self.lines):
                out.append(("both", pi, pj))
            i, j = pi + 1, pj + 1
        return out


def align(lines: list[JsonlLine], rows: list[StoreRow]) -> Alignment:
    """Longest common subsequence of ``lines`` (message lines) and ``rows``
    (Hunt-Szymanski: O((matches + n) log n), so a long transcript against a long
    session stays cheap unless nearly every message is identical)."""
    positions: dict[str, list[int]] = {}
    for j, row in enumerate(rows):
        positions.setdefault(row.key, []).append(j)
    thresholds: list[int] = []  # thresholds[k]: smallest row index ending a common run of length k+1
    links: list[tuple] = []     # links[k]: (i, j, link of length k) for that run
    for i, line in enumerate(lines):
        key, name = line_key(line)
        candidates = positions.get(key, ())
        for j in reversed(candidates):
            if name is not None and rows[j].tool_name not in (None, name):
                continue
            k = bisect.bisect_left(thresholds, j)
            link = (i, j, links[k - 1] if k else None)
            if k == len(thresholds):
                thresholds.append(j)
                links.append(link)
            elif j < thresholds[k]:
                thresholds[k] = j
                links[k] = link
    pairs: list[tuple[int, int]] = []
    node = links[-1] if links else None
    while node is not None:
        pairs.append((node[0], node[1]))
        node = node[2]
    pairs.reverse()
    return Alignment(lines, rows, pairs)


# --------------------------------------------------------------------------- times

def parse_time(value) -> float | None:
    """Epoch seconds from a line's ``timestamp``: a number, a numeric string, or an ISO
    8601 text (naive times are local, as Python's ``datetime.now()`` wrote them).
    None when absent, unusable or outside the sane epoch window: never raises, since
    the check, the plan and the import all call it on every line (an integer too
    large for a float, a year datetime cannot place, NaN are just "no timestamp":
    the message keeps its content and takes its neighbour's time, said in the plan)."""
    if isinstance(value, bool):
        return None
    try:
        if isinstance(value, (int, float)):
            seconds = float(value)
        elif isinstance(value, str) and value.strip():
            text = value.strip()
            try:
                seconds = float(text)
            except ValueError:
                seconds = dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
        else:
            return None
    except (ValueError, OverflowError, OSError):
        return None
    if seconds > 1e11:  # milliseconds
        seconds /= 1000.0
    return seconds if SANE_EPOCH[0] <= seconds <= SANE_EPOCH[1] else None


def message_times(lines: list[JsonlLine], fallback: float) -> tuple[list[float], int]:
    """A time for every message line and how many were inferred: a line without a
    usable ``timestamp`` takes the previous message's time (the next one's at the
    start of the file), else ``fallback`` (the file's modification time)."""
    own = [parse_time(line.data.get("timestamp")) for line in lines]
    first = next((t for t in own if t is not None), fallback)
    times, last = [], first
    for t in own:
        last = t if t is not None else last
        times.append(last)
    return times, sum(t is None for t in own)
