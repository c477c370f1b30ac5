"""One streamed walk over the active message rows, shared by the transcript checks.

Tool-call pairing, back-to-back user rows, duplicate writes inside a turn and
timestamps running backwards can only be seen by walking rows in order
(ground rule 10: by ``messages.id``). The walk reads

    SELECT … FROM messages WHERE <active> AND (session_id, id) > (?, ?)
    ORDER BY session_id, id LIMIT <chunk>

in keyset chunks: memory stays constant (one session's open tool-call window and
current turn), and no read snapshot is held across the whole pass, so live
writers can still checkpoint. On stores with ``idx_messages_session_id`` the
scan is index-ordered; older stores sort each session's rows through
``idx_messages_session`` (a temp b-tree per session, not per store).

Content is never pulled whole: rows carry their byte length and first 64 bytes
(``CAST(content AS BLOB)``: SQLite's text functions stop at the NUL byte that
starts structured ``\\x00json:`` content). Duplicate candidates are confirmed
afterwards by comparing the full values inside SQLite.

Rules mirrored from upstream (docs/store.md §9.2/§9.2, §13 row 12-§13 row 15):

- a ``tool`` row answers a call of the nearest preceding assistant tool-call
  window (``id`` or ``call_id``); a user row closes the window; consecutive
  assistant rows with nothing in between merge (Pass 0), so their windows merge;
- compaction/handoff summaries (``_compressed_summary = 1``, or content starting
  with Hermes' summary prefixes on stores without that column) are not turns;
- ``observed = 1`` rows are passively observed input, not turns;
- ``system`` / ``developer`` / ``session_meta`` rows are not conversation turns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from ..stores.transcript import call_ids as transcript_call_ids, tool_call_entries
from .base import EVIDENCE_CAP, CheckContext

CHUNK = 2000
HEAD_BYTES = 64
# Prefixes of compaction summaries (hermes-agent 0.19.0 agent/context_compressor.py
# SUMMARY_PREFIX and LEGACY_SUMMARY_PREFIX), for stores without _compressed_summary.
SUMMARY_PREFIXES = (b"[CONTEXT COMPACTION", b"[CONTEXT SUMMARY]")
CONVERSATION_ROLES = ("user", "assistant", "tool")
# Timestamps outside [2000-01-01, now + 1 day] are garbage (docs/store.md §13 row 21).
EPOCH_MIN = 946684800.0
FUTURE_SLACK = 86400.0
# A step back along ids smaller than this is jitter between concurrent writers.
BACKWARD_TOLERANCE = 1.0


@dataclass
class SessionWalk:
    """What the walk found in one session. Id lists are capped at EVIDENCE_CAP;
    the ``n_*`` counters are exact."""

    session_id: str
    orphan_results: list[dict] = field(default_factory=list)   # {id, tool_call_id, reason, first_result_id?}
    unanswered_calls: list[dict] = field(default_factory=list)  # {assistant_id, call_id, trailing}
    duplicate_pairs: list[tuple[int, int]] = field(default_factory=list)  # (earlier id, later id), unconfirmed
    user_pairs: list[tuple[int, int]] = field(default_factory=list)  # back-to-back user rows
    # Back-to-back user rows whose second one is a duplicate candidate of the first:
    # user_pairs after all when the full values differ (_confirm_duplicates).
    user_pairs_if_differing: list[tuple[int, int]] = field(default_factory=list)
    backwards: list[dict] = field(default_factory=list)  # {id, previous_id, seconds_back}
    bad_timestamps: list[int] = field(default_factory=list)
    last: dict | None = None  # last conversational row {id, role}, when it is user or tool
    n_backwards: int = 0
    n_bad_timestamps: int = 0

    def noteworthy(self) -> bool:
        return bool(self.orphan_results or self.unanswered_calls or self.duplicate_pairs or self.user_pairs
                    or self.backwards or self.bad_timestamps or self.last)


class WalkRow(NamedTuple):
    """One active row as the walk reads it: ``summary`` (a compaction summary, by
    column or prefix), ``observed`` (bool) and ``key`` (:func:`_row_key`) derived,
    the rest as stored. A tuple, not a dict: one is built per row of the store
    (a dict per row was a quarter of the check pass, bench/analysis.md, issue 16)."""

    id: int
    session_id: str | None
    role: str | None
    tool_call_id: str | None
    tool_calls: str | None
    pmid: object
    timestamp: object
    ts_type: str
    summary: bool
    observed: bool
    key: tuple | None


def _add(items: list, item) -> None:
    if len(items) < EVIDENCE_CAP:
        items.append(item)


class _Walker:
    """Per-session state machine; ``feed`` one row at a time, then ``finish``."""

    def __init__(self, session_id: str, now: float):
        self.out = SessionWalk(session_id)
        self.now = now
        self.calls: list[dict] = []  # current window: {assistant_id, ids, answered_by}
        self.prev_role: str | None = None  # previous conversational row's role (for merging)
        self.prev_user: tuple | None = None  # (id, key, pmid) of the previous conversational row if it was a user row
        self.last: dict | None = None
        self.turn_keys: dict[tuple, tuple[int, object]] = {}
        self.prev_ts: tuple[int, float, bool] | None = None

    # -- tool-call window

    def _close(self, trailing: bool) -> None:
        for call in self.calls:
            if call["answered_by"] is None:
                _add(self.out.unanswered_calls, {"assistant_id": call["assistant_id"],
                                                 "call_id": call["ids"][0] if call["ids"] else "",
                                                 "trailing": trailing})
        self.calls = []

    def _find_call(self, call_id: str) -> dict | None:
        for call in self.calls:
            if call_id in call["ids"]:
                return call
        return None

    # -- rows

    def feed(self, row: WalkRow) -> None:
        mid, _, role, call_id, tool_calls, pmid, ts, ts_type, summary, observed, key = row
        self._timestamps(mid, ts, ts_type, summary)
        if role not in CONVERSATION_ROLES:
            return
        if summary:
            # A summary restarts the conversation: closes the window (it is a user
            # message to upstream's Pass 1), ends the turn, is not a turn itself.
            self._close(trailing=False)
            self.turn_keys = {}
            self.prev_role, self.prev_user, self.last = None, None, None
            return
        if role == "user":
            self._close(trailing=False)
            duplicate = False
            prev = self.prev_user
            if prev is not None and prev[1] == key and key is not None and _pmids_compatible(prev[2], pmid):
                _add(self.out.duplicate_pairs, (prev[0], mid))
                if not observed:
                    _add(self.out.user_pairs_if_differing, (prev[0], mid))
                duplicate = True
            if not duplicate:
                if prev is not None and not observed:
                    _add(self.out.user_pairs, (prev[0], mid))
                self.turn_keys = {}
            if observed:
                return  # passive input: neither a turn nor an unanswered prompt
            self.prev_user = (mid, key, pmid)
            self.prev_role = "user"
            self.last = {"id": mid, "role": "user"}
            return
        self.prev_user = None
        self._same_turn_duplicate(mid, pmid, key)
        if role == "assistant":
            calls = call_ids(tool_calls)
            if self.prev_role != "assistant":
                self._close(trailing=False)
            for ids in calls:
                self.calls.append({"assistant_id": mid, "ids": ids, "answered_by": None})
            self.prev_role = "assistant"
            self.last = None
            return
        # tool row
        if not call_id:
            _add(self.out.orphan_results, {"id": mid, "tool_call_id": call_id, "reason": "no_call_id"})
        else:
            call = self._find_call(call_id)
            if call is None:
                _add(self.out.orphan_results, {"id": mid, "tool_call_id": call_id, "reason": "no_matching_call"})
            elif call["answered_by"] is not None:
                _add(self.out.orphan_results, {"id": mid, "tool_call_id": call_id, "reason": "second_result",
                                               "first_result_id": call["answered_by"]})
            else:
                call["answered_by"] = mid
        self.prev_role = "tool"
        self.last = {"id": mid, "role": "tool"}

    def _same_turn_duplicate(self, mid: int, pmid, key) -> None:
        """Assistant/tool rows identical to an earlier row of the same turn."""
        if key is None:
            return
        seen = self.turn_keys.get(key)
        if seen is not None and _pmids_compatible(seen[1], pmid):
            _add(self.out.duplicate_pairs, (seen[0], mid))
        else:
            self.turn_keys[key] = (mid, pmid)

    def _timestamps(self, mid: int, ts, kind: str, summary: bool) -> None:
        if kind not in ("real", "integer") or ts < EPOCH_MIN or ts > self.now + FUTURE_SLACK:
            self.out.n_bad_timestamps += 1
            _add(self.out.bad_timestamps, mid)
            return
        prev = self.prev_ts
        # Rows carried after a summary keep their original (older) timestamps.
        if prev is not None and not prev[2] and ts < prev[1] - BACKWARD_TOLERANCE:
            self.out.n_backwards += 1
            _add(self.out.backwards, {"id": mid, "previous_id": prev[0], "seconds_back": round(prev[1] - ts, 3)})
        self.prev_ts = (mid, float(ts), summary)

    def finish(self) -> SessionWalk:
        self._close(trailing=True)
        self.out.last = self.last
        return self.out


def call_ids(raw) -> list[list[str]]:
    """The ids of each tool call in an assistant row's ``tool_calls``, read as the
    transcript reads them (``stores.transcript``) without formatting the arguments
    for display: the walk only pairs ids."""
    if not raw:  # most assistant rows of a store call no tool: nothing to decode
        return []
    return [transcript_call_ids(entry) for entry in tool_call_entries(raw)]


def _pmids_compatible(a, b) -> bool:
    """Two rows with different platform message ids are two real messages."""
    return a in (None, "") or b in (None, "") or a == b


def _row_key(role: str, tool_call_id, tool_calls, length, head) -> tuple | None:
    """Identity of a row for duplicate detection; None for blank rows.

    The tool calls enter as Python's ``hash()`` of the text: equal texts always give
    equal keys, and a rare equal hash of two different texts is a candidate the
    confirmation in SQLite (full values compared) drops. A key per row of a turn is
    kept while the turn lasts, so not the text itself (a long turn of large calls),
    and not a SHA-1 of its UTF-8 bytes either (an encode and a digest per assistant
    row: 0.4 s of a pass over the 1M bench store)."""
    if not length and not tool_calls and not tool_call_id:
        return None
    calls = hash(tool_calls) if tool_calls else None
    return (role, tool_call_id or None, calls, length or 0, bytes(head or b""))


def _select(ctx: CheckContext) -> str:
    summary = "_compressed_summary" if ctx.has("messages", "_compressed_summary") else "0"
    observed = "observed" if ctx.has("messages", "observed") else "0"
    pmid = "platform_message_id" if ctx.has("messages", "platform_message_id") else "NULL"
    return (
        "SELECT id, session_id, role, tool_call_id, "
        "CASE WHEN role = 'assistant' THEN tool_calls END, "
        f"{pmid}, timestamp, typeof(timestamp), length(CAST(content AS BLOB)), "
        f"substr(CAST(content AS BLOB), 1, {HEAD_BYTES}), {summary}, {observed} FROM messages"
    )


def _as_row(row) -> WalkRow:
    mid, sid, role, call_id, calls, pmid, ts, ts_type, length, head, summary, observed = row
    head = bytes(head) if head is not None else b""
    return WalkRow(mid, sid, role, call_id, calls, pmid, ts, ts_type,
                   bool(summary) or head.startswith(SUMMARY_PREFIXES), bool(observed),
                   _row_key(role, call_id, calls, length, head))


def iter_active_rows(ctx: CheckContext):
    """Active rows as :class:`WalkRow` tuples, ordered by (session_id, id), fetched in chunks.

    A chunk never resumes inside a session: keyset chunks through one
    300,000-row session cost quadratic time (docs/benchmarks.md). Without an index
    starting with ``(session_id, id)`` (every release up to 0.19.0, docs/store.md
    §3.4) SQLite re-sorted the session's remainder for each chunk; with it, the
    row-value range ``(session_id, id) > (?, ?)`` only narrows on ``session_id``,
    so each chunk re-read the session from its start. Instead, the last session of
    a full chunk is finished in one query ordered by id, stepped row by row (one
    row in Python; SQLite's sorter spills to disk), and the next chunk starts after
    that session; a session-scoped walk is that one query. No read snapshot is held
    across the whole pass: each statement is its own read, the longest being the
    tail of the biggest session (seconds for 300,000 rows).
    """
    base = _select(ctx) + f" WHERE {ctx.active()}"
    where, params = ctx.session_filter("session_id")
    base += where
    if ctx.session_id is not None:
        for row in ctx.conn.execute(base + " ORDER BY id", params):
            yield _as_row(row)
        return
    after: str | None = None  # resume after this session (its rows are all out)
    nulls_done = False  # rows with a NULL session_id (damaged stores only) sort first
    while True:
        if after is not None:
            sql, args = base + " AND session_id > ? ORDER BY session_id, id LIMIT ?", (*params, after, CHUNK)
        elif nulls_done:
            sql, args = base + " AND session_id IS NOT NULL ORDER BY session_id, id LIMIT ?", (*params, CHUNK)
        else:
            sql, args = base + " ORDER BY session_id, id LIMIT ?", (*params, CHUNK)
        rows = ctx.conn.execute(sql, args).fetchall()
        for row in rows:
            yield _as_row(row)
        if len(rows) < CHUNK:
            return
        sid, last = rows[-1][1], rows[-1][0]
        if sid is None:
            # "session_id = NULL" matches nothing: finish the NULL rows by IS NULL,
            # or the walk would start over from the first chunk forever.
            tail, tail_args = base + " AND session_id IS NULL AND id > ? ORDER BY id", (*params, last)
        else:
            tail, tail_args = base + " AND session_id = ? AND id > ? ORDER BY id", (*params, sid, last)
        for row in ctx.conn.execute(tail, tail_args):
            yield _as_row(row)
        if sid is None:
            nulls_done = True
        else:
            after = sid


def walk(ctx: CheckContext) -> dict[str, SessionWalk]:
    """Walk every active row (or one session's); returns noteworthy sessions only,
    with duplicate candidates already confirmed against the full values."""
    found: dict[str, SessionWalk] = {}
    walker: _Walker | None = None
    for row in iter_active_rows(ctx):
        if walker is None or walker.out.session_id != row[1]:
            if walker is not None:
                _keep(found, walker.finish())
            walker = _Walker(row[1], ctx.now)
        walker.feed(row)
    if walker is not None:
        _keep(found, walker.finish())
    for result in found.values():
        _confirm_duplicates(ctx, result)
    return found


def _keep(found: dict, result: SessionWalk) -> None:
    if result.noteworthy():
        found[result.session_id] = result


def same_row_values(ctx: CheckContext, a: int, b: int) -> bool:
    """Do rows ``a`` and ``b`` hold the same role, content (bytes), tool calls and call id?"""
    row = ctx.conn.execute(
        "SELECT x.role IS y.role AND CAST(x.content AS BLOB) IS CAST(y.content AS BLOB) "
        "AND x.tool_calls IS y.tool_calls AND x.tool_call_id IS y.tool_call_id "
        "FROM messages x, messages y WHERE x.id = ? AND y.id = ?", (a, b)).fetchone()
    return bool(row and row[0])


def _confirm_duplicates(ctx: CheckContext, result: SessionWalk) -> None:
    confirmed = [pair for pair in result.duplicate_pairs if same_row_values(ctx, *pair)]
    result.duplicate_pairs = confirmed
    dup_ids = {b for _, b in confirmed}
    # A confirmed duplicate is not also a "second result" or a "user;user" prompt.
    result.orphan_results = [o for o in result.orphan_results if o["id"] not in dup_ids]
    result.user_pairs = [p for p in result.user_pairs if p[1] not in dup_ids]
    # Two user rows the key took for one (same length, same first bytes) that differ
    # after all are two prompts back to back, in id order with the others.
    differing = [p for p in result.user_pairs_if_differing if p[1] not in dup_ids]
    if differing:
        result.user_pairs = sorted(result.user_pairs + differing, key=lambda p: p[1])[:EVIDENCE_CAP]
    result.user_pairs_if_differing = []
