"""Recovery planning: what the copies of a session can bring back, and where.

Pure and read-only: from the store's rows (``compare.store_messages``) and the
copies (``stores.copies``) it computes a :class:`RecoveryPlan`; it writes nothing.
The repair that applies a plan (``recover_messages``, on the guarded write path)
inserts each :class:`Insertion` after its ``after_id`` row, in plan order, and
re-writes the visible rows that follow it as the JSONL import does.

Several copies (docs/store.md, "Copies"): each copy's missing messages are
grouped by the store row they follow. At one position, copies that propose the
same messages, or where one proposal is the start of another (an older copy holds
less), agree: the longest proposal is taken, and the copy it comes from is named.
Copies that propose different messages at one position are a :class:`Conflict`:
reported side by side, nothing is planned there; every other position is
recovered. A copy's messages that differ from rows the store has are reported
(``differences``), never inserted.

Times: a copy message's own timestamp is kept when it fits between its
neighbours in the store; otherwise (snapshots and request dumps carry none) it is
estimated, evenly spaced between the rows before and after it (before the first
row: between the session's start and that row when the start is known and earlier,
else counted back from it one second a message; after the last: forward), and
``timestamp_estimated`` says so. Times are shown, never used for order (rows are
inserted at their position among the ids).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..copies.model import Copy, CopyError, CopyMessage, Provenance
from .compare import Comparison, StoreMessage, compare, rows_digest

# Which copy to name when several propose the same messages (most faithful first):
# the store's own rows, then the files Hermes writes from the same in-memory list.
KIND_PREFERENCE = ("backup", "trash", "jsonl", "snapshot", "json", "request_dump")
ESTIMATE_STEP = 1.0  # seconds between estimated times before the first / after the last row


@dataclass(frozen=True)
class Insertion:
    """One message to insert: ``after_id`` (the store row it follows; None: before
    the session's first row), ``order`` (0, 1, … among insertions after the same
    row), ``message`` (:class:`CopyMessage`; ``message.row_dict()`` is what the
    JSONL import's ``row_values`` takes), ``source`` (the copy's provenance),
    ``timestamp`` epoch seconds and whether it is ``timestamp_estimated``."""

    after_id: int | None
    order: int
    message: CopyMessage
    source: Provenance
    timestamp: float
    timestamp_estimated: bool


@dataclass(frozen=True)
class Proposal:
    """What one copy holds at a position: its ``source`` and message ``summaries``
    (``{"index", "role", "digest"}``)."""

    source: Provenance
    summaries: tuple[dict, ...]


@dataclass(frozen=True)
class Conflict:
    """Copies that disagree about what follows row ``after_id``; nothing is planned there."""

    after_id: int | None
    proposals: tuple[Proposal, ...]


@dataclass
class RecoveryPlan:
    """Everything a repair needs (module docstring).

    ``insertions`` in transcript order; ``conflicts``; ``differences``
    (``{"source", "after_id", "indexes", "row_ids"}``); ``comparisons``: one per
    copy; ``store_rows`` and ``rows_digest`` (the plan's guard: the rows it was
    made against); ``errors``: copies that could not be read again.
    """

    session_id: str
    insertions: list[Insertion] = field(default_factory=list)
    conflicts: list[Conflict] = field(default_factory=list)
    differences: list[dict] = field(default_factory=list)
    comparisons: list[Comparison] = field(default_factory=list)
    store_rows: int = 0
    rows_digest: str = ""
    errors: list[str] = field(default_factory=list)

    @property
    def recoverable(self) -> bool:
        return bool(self.insertions)

    @property
    def sources(self) -> list[Provenance]:
        """The copies insertions come from, each once, in first-use order."""
        seen, out = set(), []
        for ins in self.insertions:
            if ins.source.path not in seen:
                seen.add(ins.source.path)
                out.append(ins.source)
        return out

    def repaired_by(self, session_exists: bool) -> str | None:
        """The check whose repair brings this plan's messages back, or None when none
        does: the one rule the session page's *Copies on disk* panel and the
        ``history_lost`` check share, so the page never links a repair the check
        then denies. None without insertions or without the session row (recovery
        writes into an existing session only); ``transcript_on_disk_only`` (its
        JSONL import) when only ``sessions/<id>.jsonl`` holds what the store lacks
        (docs/store.md §12.2); else ``history_lost`` (``recover_messages``)."""
        if not self.insertions or not session_exists:
            return None
        if {p.kind for p, _ in self.holding_missing()} == {"jsonl"}:
            return "transcript_on_disk_only"
        return "history_lost"

    def holding_missing(self) -> list[tuple[Provenance, int]]:
        """``(copy, messages it holds that the store lacks)`` for every such copy."""
        return [(c.copy.provenance, c.missing_count) for c in self.comparisons if c.missing_count]


def _rank(copy: Copy) -> tuple:
    kind = KIND_PREFERENCE.index(copy.kind) if copy.kind in KIND_PREFERENCE else len(KIND_PREFERENCE)
    return (not copy.complete, kind, -copy.mtime, str(copy.path))


def _is_prefix(short: tuple, long: tuple) -> bool:
    return len(short) <= len(long) and long[:len(short)] == short


def plan_recovery(session_id: str, rows: list[StoreMessage], copies: list[Copy],
                  started_at: float | None = None) -> RecoveryPlan:
    """Compare every copy with ``rows`` and plan the insertions (module docstring).
    ``started_at``: the session's start (epoch seconds), the earliest estimated time.
    Full messages are read again only for what is inserted; a copy that changed
    or vanished since it was read gives an ``errors`` entry and no insertion."""
    if copies and rows and rows[0].key is None:
        raise ValueError("rows read without match keys cannot be compared with copies")
    plan = RecoveryPlan(session_id, store_rows=len(rows), rows_digest=rows_digest(rows))
    ordered = sorted(copies, key=_rank)
    plan.comparisons = [compare(rows, c) for c in ordered]
    proposals: dict[int | None, list[tuple[Comparison, tuple[int, ...]]]] = {}
    for comp in plan.comparisons:
        for m in comp.missing:
            proposals.setdefault(m.after_id, []).append((comp, m.indexes))
        for d in comp.differing:
            plan.differences.append({"source": comp.copy.provenance, "after_id": d.after_id,
                                     "indexes": list(d.indexes), "row_ids": list(d.row_ids)})
    chosen: dict[int | None, tuple[Comparison, tuple[int, ...]]] = {}
    for after_id, options in proposals.items():
        keyed = [(comp, idx, tuple(comp.copy.entries[i].key for i in idx)) for comp, idx in options]
        longest = max(keyed, key=lambda k: len(k[2]))  # first (best ranked) of the longest
        if all(_is_prefix(k[2], longest[2]) for k in keyed):
            chosen[after_id] = (longest[0], longest[1])
        else:
            plan.conflicts.append(Conflict(after_id, tuple(
                Proposal(comp.copy.provenance, tuple(_summary(comp.copy, i) for i in idx)) for comp, idx, _ in keyed)))
    wanted: dict[int, tuple[Comparison, set[int]]] = {}
    for comp, idx in chosen.values():
        wanted.setdefault(id(comp), (comp, set()))[1].update(idx)
    loaded: dict[int, dict[int, CopyMessage]] = {}
    for key, (comp, idx) in wanted.items():
        try:
            loaded[key] = comp.copy.messages_at(idx)
        except CopyError as exc:
            plan.errors.append(str(exc))
    row_ids = [r.id for r in rows]
    times = {r.id: r.timestamp for r in rows}
    for after_id in sorted(chosen, key=lambda a: -1 if a is None else row_ids.index(a)):
        comp, idx = chosen[after_id]
        messages = loaded.get(id(comp))
        if messages is None:
            continue
        before = times.get(after_id) if after_id is not None else None
        position = row_ids.index(after_id) + 1 if after_id is not None else 0
        after = next((rows[p].timestamp for p in range(position, len(rows)) if rows[p].timestamp is not None), None)
        if after_id is None and type(started_at) in (int, float) and (after is None or started_at <= after):
            before = float(started_at)  # nothing precedes the first row but the session's start
        stamps = _times([messages[i].timestamp for i in idx], before, after, comp.copy.mtime)
        for order, (i, (ts, estimated)) in enumerate(zip(idx, stamps)):
            plan.insertions.append(Insertion(after_id, order, messages[i], comp.copy.provenance, ts, estimated))
    return plan


def _summary(copy: Copy, index: int) -> dict:
    e = copy.entries[index]  # entries are in index order, indexes contiguous from 0
    return {"index": e.index, "role": e.role, "digest": e.digest[:16]}


def _times(own: list[float | None], before: float | None, after: float | None,
           fallback: float) -> list[tuple[float, bool]]:
    """A time per inserted message and whether it is estimated (module docstring);
    ``fallback`` (the copy's modification time) when the session has no timed row."""
    n = len(own)
    out: list[tuple[float, bool]] = []
    last = before
    for k, t in enumerate(own):
        fits = t is not None and (last is None or t >= last) and (after is None or t <= after)
        if fits:
            out.append((t, False))
            last = t
            continue
        if before is not None and after is not None:
            est = before + (after - before) * (k + 1) / (n + 1)
        elif after is not None:
            est = after - ESTIMATE_STEP * (n - k)
        elif last is not None:
            est = last + ESTIMATE_STEP
        else:
            est = fallback - ESTIMATE_STEP * (n - k)
        est = max(est, last) if last is not None else est
        out.append((est, True))
        last = est
    return out
