"""One copy of a session against the store's rows, message by message.

Matching is the JSONL import's (``stores.jsonl``): role, content, tool call id
and tool calls, the tool name too when both name one; ordered, as the longest
common subsequence of the copy's messages and the session's rows in
``messages.id`` order (ground rule 10), every row counted (a message matched by a
hidden row, rewound by /undo or compacted, is in the store, not lost; when a
visible row matches as well, as the copy a recovery wrote of a hidden original,
the visible one is taken).

Between two matched messages (an *anchor* pair) there is a *gap*: the copy's
unmatched messages there and the store's unmatched visible rows there.

- a copy user message equal to the store's consecutive user rows joined by a
  blank line (``"a\\n\\nb"`` against rows ``a``, ``b``) is the same turn: Hermes
  joins a dangling user message with the next one in memory after a failed or
  interrupted turn, while the store keeps both rows (docs/store.md, "Copies");
- a gap where only the copy has messages: they are **missing** from the store,
  and belong after the anchor's store row (``after_id``; None: before the first
  row);
- a gap where only the store has rows: they are **extra** (``where``: ``inside``
  the copy's span, or ``before``/``after`` it, i.e. older or newer than the copy);
- a gap where both have messages: **differing** (a copy rewrites content: Hermes
  redacts secrets in snapshots and dumps, cleans assistant content); reported,
  never recovered, since nothing tells which version is the conversation.
"""

from __future__ import annotations

import bisect
import hashlib
import sqlite3
from dataclasses import dataclass, field

from .. import jsonl
from ..copies.model import Copy, Entry, text_digest

MERGE_SEPARATOR = "\n\n"
MERGE_RUN = 8  # user rows a merged copy message may stand for


@dataclass(frozen=True, slots=True)  # slots: a session's rows are held whole (300k on the bench store)
class StoreMessage:
    """A message row of the session: ``id``, ``role``, match ``key``,
    ``tool_name``, ``visible`` (active or compacted), ``timestamp`` epoch s (or
    None), and for user rows the compared ``text`` (to recognise merged turns).
    ``key`` and ``text`` are None on rows read with ``keyed=False`` (see
    :func:`store_messages`)."""

    id: int
    role: str
    key: str | None
    tool_name: str | None
    visible: bool
    timestamp: float | None
    text: str | None = None


def store_messages(conn: sqlite3.Connection, caps, session_id: str, *, keyed: bool = True) -> list[StoreMessage]:
    """Every message row of ``session_id`` in ``messages.id`` order (read-only).

    ``keyed`` False: without the match keys and user texts (``key``, ``text`` None),
    content and tool calls not read: for a session no copy on disk is compared
    with, where only the rows' ids, roles and count are used. Computing a key
    (content and tool calls decoded, canonical JSON, sha256) for every row a whole
    pass reads was a third of the check pass (bench/analysis.md, issue 16)."""
    if caps.has("messages", "active"):
        compacted = " OR compacted = 1" if caps.has("messages", "compacted") else ""
        visible = f"(active IS NULL OR active != 0{compacted})"
    else:
        visible = "1"
    if not keyed:
        cur = conn.execute(
            f"SELECT id, CAST(role AS BLOB), CAST(tool_name AS BLOB), {visible}, timestamp "
            "FROM messages WHERE session_id = ? ORDER BY id", (session_id,))
        return [StoreMessage(mid, role.decode("utf-8", "replace") if type(role) is bytes else role, None,
                             name.decode("utf-8", "replace") if type(name) is bytes else name, bool(vis),
                             float(ts) if type(ts) in (int, float) else None)
                for mid, role, name, vis, ts in cur]
    # Text read as bytes and decoded leniently: one row of invalid UTF-8 (salvaged
    # pages, other writers) must not stop the analysis of the whole session.
    cur = conn.execute(
        f"SELECT id, CAST(role AS BLOB), CAST(content AS BLOB), CAST(tool_call_id AS BLOB), "
        f"CAST(tool_calls AS BLOB), CAST(tool_name AS BLOB), {visible}, timestamp "
        "FROM messages WHERE session_id = ? ORDER BY id", (session_id,))
    out = []
    for mid, role, content, call_id, calls, name, vis, ts in cur:
        role, content, call_id, calls, name = (
            v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in (role, content, call_id, calls, name))
        ts = float(ts) if isinstance(ts, (int, float)) and not isinstance(ts, bool) else None
        out.append(StoreMessage(mid, role, jsonl.message_key(role, content, call_id, calls), name, bool(vis), ts,
                                jsonl.normal_content(content) if role == "user" else None))
    return out


@dataclass(frozen=True)
class Missing:
    """Copy messages the store lacks, in order: ``after_id`` (the store row they
    follow; None: before the first row), ``indexes`` in the copy."""

    after_id: int | None
    indexes: tuple[int, ...]


@dataclass(frozen=True)
class Differing:
    """A gap where copy and store disagree: ``after_id``, the copy's ``indexes``
    and the store's ``row_ids`` there."""

    after_id: int | None
    indexes: tuple[int, ...]
    row_ids: tuple[int, ...]


@dataclass(frozen=True)
class Merged:
    """A copy user message that is the store's user rows ``row_ids`` joined."""

    index: int
    row_ids: tuple[int, ...]


@dataclass
class Comparison:
    """One copy against the store (module docstring). ``pairs``: ``(copy index,
    row id)`` matched in order; ``hidden``: copy indexes matched by hidden rows;
    ``extra``: ``{"id", "where"}`` for visible rows the copy lacks."""

    copy: Copy
    pairs: list[tuple[int, int]] = field(default_factory=list)
    hidden: list[int] = field(default_factory=list)
    merged: list[Merged] = field(default_factory=list)
    missing: list[Missing] = field(default_factory=list)
    differing: list[Differing] = field(default_factory=list)
    extra: list[dict] = field(default_factory=list)

    @property
    def missing_count(self) -> int:
        return sum(len(m.indexes) for m in self.missing)

    def statuses(self) -> dict[int, str]:
        """Copy index -> ``present`` | ``present_hidden`` | ``merged`` | ``missing`` | ``differing``."""
        out = {i: "present" for i, _ in self.pairs}
        out.update({i: "present_hidden" for i in self.hidden})
        out.update({m.index: "merged" for m in self.merged})
        out.update({i: "missing" for m in self.missing for i in m.indexes})
        out.update({i: "differing" for d in self.differing for i in d.indexes})
        return out


def _lcs(entries: list[Entry], rows: list[StoreMessage]) -> list[tuple[int, int]]:
    """``(entry position, row position)`` pairs of a longest common subsequence
    (Hunt-Szymanski, as ``stores.jsonl.align``)."""
    positions: dict[str, list[int]] = {}
    for j, row in enumerate(rows):
        positions.setdefault(row.key, []).append(j)
    thresholds: list[int] = []
    links: list[tuple] = []
    for i, entry in enumerate(entries):
        for j in reversed(positions.get(entry.key, ())):
            if entry.tool_name is not None and rows[j].tool_name not in (None, entry.tool_name):
                continue
            k = bisect.bisect_left(thresholds, j)
            link = (i, j, links[k - 1] if k else None)
            if k == len(thresholds):
                thresholds.append(j)
                links.append(link)
            elif j < thresholds[k]:
                thresholds[k] = j
                links[k] = link
    pairs = []
    node = links[-1] if links else None
    while node is not None:
        pairs.append((node[0], node[1]))
        node = node[2]
    pairs.reverse()
    return pairs


def _pairs(entries: list[Entry], rows: list[StoreMessage]) -> list[tuple[int, int]]:
    """The LCS pairs, visible rows preferred: a recovery or import hides the
    originals it writes again (``actions.transcript_order``), so a copy of the
    conversation matches both the hidden originals and their visible copies
    equally well; matched to the originals it would read as "in the store, hidden"
    only. Visible rows are matched first, then each gap's hidden rows; that result
    is taken unless it matches fewer messages than the plain LCS over every row."""
    full = _lcs(entries, rows)
    shown = [j for j, r in enumerate(rows) if r.visible]
    if len(shown) == len(rows):
        return full
    first = [(i, shown[k]) for i, k in _lcs(entries, [rows[j] for j in shown])]
    out: list[tuple[int, int]] = []
    for (pi, pj), (ni, nj) in zip([(-1, -1), *first], [*first, (len(entries), len(rows))]):
        hidden = [j for j in range(pj + 1, nj) if not rows[j].visible]
        if hidden and ni - pi > 1:
            out += [(pi + 1 + i, hidden[k]) for i, k in _lcs(entries[pi + 1:ni], [rows[j] for j in hidden])]
        if ni < len(entries):
            out.append((ni, nj))
    return out if len(out) >= len(full) else full


def _merged_runs(entries: list[Entry], rows: list[StoreMessage]) -> tuple[list[Merged], set[int], set[int]]:
    """Copy user messages in a gap that equal consecutive user rows of the gap
    joined by a blank line (up to :data:`MERGE_RUN` rows); returns them (positions
    in the gap) and the entry / row positions used. Linear in the gap's size."""
    runs: dict[str, tuple[int, int]] = {}
    for r0, row in enumerate(rows):
        if row.role != "user":
            continue
        texts = [row.text or ""]
        for r1 in range(r0 + 1, min(len(rows), r0 + MERGE_RUN)):
            if rows[r1].role != "user":
                break
            texts.append(rows[r1].text or "")
            runs.setdefault(text_digest(MERGE_SEPARATOR.join(texts)), (r0, r1))
    found, used_e, used_r = [], set(), set()
    for e_pos, entry in enumerate(entries):
        span = runs.get(entry.digest) if entry.role == "user" else None
        if span is None or used_r.intersection(range(span[0], span[1] + 1)):
            continue
        found.append(Merged(e_pos, tuple(range(span[0], span[1] + 1))))
        used_e.add(e_pos)
        used_r.update(range(span[0], span[1] + 1))
    return found, used_e, used_r


def compare(rows: list[StoreMessage], copy: Copy) -> Comparison:
    """``copy`` against the session's ``rows`` (module docstring)."""
    entries = copy.entries
    result = Comparison(copy)
    pairs = _pairs(entries, rows)
    for i, j in pairs:
        result.pairs.append((entries[i].index, rows[j].id))
        if not rows[j].visible:
            result.hidden.append(entries[i].index)
    bounds = [(-1, -1), *pairs, (len(entries), len(rows))]
    for (pi, pj), (ni, nj) in zip(bounds, bounds[1:]):
        gap_entries = entries[pi + 1:ni]
        gap_rows = [r for r in rows[pj + 1:nj] if r.visible]
        after_id = rows[pj].id if pj >= 0 else None
        if gap_entries and gap_rows:
            merged, used_e, used_r = _merged_runs(gap_entries, gap_rows)
            for m in merged:
                result.merged.append(Merged(gap_entries[m.index].index, tuple(gap_rows[r].id for r in m.row_ids)))
            gap_entries = [e for n, e in enumerate(gap_entries) if n not in used_e]
            gap_rows = [r for n, r in enumerate(gap_rows) if n not in used_r]
        if gap_entries and gap_rows:
            result.differing.append(Differing(after_id, tuple(e.index for e in gap_entries),
                                              tuple(r.id for r in gap_rows)))
        elif gap_entries:
            result.missing.append(Missing(after_id, tuple(e.index for e in gap_entries)))
        elif gap_rows:
            if not pairs or ni >= len(entries):
                where = "after"   # newer than anything the copy holds
            elif pi < 0:
                where = "before"  # older than the copy's first message
            else:
                where = "inside"
            result.extra.extend({"id": r.id, "where": where} for r in gap_rows)
    return result


def rows_digest(rows: list[StoreMessage]) -> str:
    """What a plan made against ``rows`` depends on: their ids, keys, visibility.
    ``""`` for rows read without keys: no digest of keyed rows equals it, so a
    write guarded by it refuses (and nothing is planned from such rows)."""
    if rows and rows[0].key is None:
        return ""
    h = hashlib.sha256()
    for r in rows:
        h.update(f"{r.id}\x1f{r.key}\x1f{r.tool_name}\x1f{int(r.visible)}\n".encode())
    return h.hexdigest()
