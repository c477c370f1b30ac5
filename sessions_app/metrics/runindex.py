"""Which runs a scrape needs, kept up to date incrementally (per process).

``watch_stores`` records a run every few minutes (a month: ~8,600 rows), and the
run kinds that happen rarely (a deletion, a repair) would make "the last run of
each kind" a scan of the whole table on every scrape. A finished run never
changes, so the index reads each row's small columns once: a scrape reads only
the rows added since the previous one and those still unfinished then. If rows
went away (the table was emptied: a test database rolled back), it starts over.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from django.db.models import Max

from ..models import HealRun
from ..notify.events import kind_of

FINISHED = (HealRun.Status.DONE, HealRun.Status.FAILED)
WHOLE_PASS_KINDS = ("check", "apply")


@dataclass
class RunRow:
    """The columns of a run a scrape uses (times are aware datetimes)."""

    pk: int
    kind: str
    status: str
    created_at: object
    started_at: object
    finished_at: object


@dataclass
class _State:
    next_pk: int = 0  # rows from here on are read on the next refresh
    last: dict[str, RunRow] = field(default_factory=dict)  # kind -> last finished run (highest id)
    whole: dict[int, RunRow] = field(default_factory=dict)  # finished whole passes (done)
    running: dict[int, RunRow] = field(default_factory=dict)  # unfinished runs at the last refresh


_state = _State()
_lock = threading.Lock()


def _read(state: _State) -> None:
    rows = (HealRun.objects.filter(pk__gte=state.next_pk).order_by("pk")
            .values_list("pk", "mode", "plans", "only", "trigger", "status", "created_at", "started_at",
                         "finished_at"))
    unfinished = []
    top = state.next_pk - 1
    for pk, mode, plans, only, trigger, status, created, started, finished in rows.iterator(chunk_size=2000):
        top = max(top, pk)
        row = RunRow(pk, kind_of(mode, plans, only, trigger), status, created, started, finished)
        state.running.pop(pk, None)
        if status in FINISHED and finished is not None:
            if row.kind not in state.last or state.last[row.kind].pk < pk:
                state.last[row.kind] = row
            if row.kind in WHOLE_PASS_KINDS and status == HealRun.Status.DONE:
                state.whole[pk] = row
        else:
            state.running[pk] = row
            unfinished.append(pk)
    state.next_pk = min(unfinished) if unfinished else top + 1


def refresh() -> _State:
    """A copy of the index, brought up to date with the dashboard's database (a
    copy: another thread's refresh never changes it under its reader)."""
    global _state
    with _lock:
        top = HealRun.objects.aggregate(top=Max("pk"))["top"] or 0
        known = {row.pk: row.finished_at for row in _state.last.values()}
        gone = top < _state.next_pk - 1 or (
            known and dict(HealRun.objects.filter(pk__in=known).values_list("pk", "finished_at")) != known)
        if gone:
            _state = _State()
        _read(_state)
        return _State(_state.next_pk, dict(_state.last), dict(_state.whole), dict(_state.running))


def running_by_kind(state: _State) -> dict[str, list[RunRow]]:
    """Unfinished runs of ``state`` (:func:`refresh`) by kind."""
    out: dict[str, list[RunRow]] = {}
    for row in state.running.values():
        out.setdefault(row.kind, []).append(row)
    return out


def whole_passes_newest_first(state: _State) -> list[RunRow]:
    """Finished whole check/heal passes, newest end first (the order ``health.latest`` reads)."""
    return sorted(state.whole.values(), key=lambda r: (r.finished_at, r.pk), reverse=True)


def reset() -> None:
    global _state
    with _lock:
        _state = _State()
