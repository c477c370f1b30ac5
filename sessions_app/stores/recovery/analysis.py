"""One call that reads a session's rows and every copy of it, and plans recovery.

Used by the ``history_lost`` check, the session page's *Copies on disk* panel and
the ``recover_messages`` repair alike, so that what is reported is what is
recovered.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..copies import CopySet, copies_of
from .compare import StoreMessage, store_messages
from .plan import RecoveryPlan, plan_recovery


@dataclass
class Analysis:
    """``rows`` of the session (``messages.id`` order), what the disk holds
    (``copyset``), and the ``plan``. ``rows`` is None when they were not read
    (:func:`analyse` with ``count``): ``plan.store_rows`` counts them either way."""

    session_id: str
    rows: list[StoreMessage] | None
    copyset: CopySet
    plan: RecoveryPlan


def analyse(store, conn, caps, session_id: str, *, others=(), store_copies: bool = True,
            files=None, rows=None, count: int | None = None) -> Analysis:
    """Read ``session_id``'s copies (``stores.copies.copies_of``) and its rows
    through ``conn`` (read-only), and plan what the copies can bring back.

    The rows carry match keys only when a copy was found (``store_messages``'s
    ``keyed``): without a copy, nothing compares them and every caller uses their
    count alone. ``rows``: a callable ``rows(keyed) -> list[StoreMessage]`` giving
    rows read by ``compare.store_messages`` on ``conn`` (and not changed), for a
    caller that reads them once for several analyses.

    ``count``: the session's row count, when the caller has just counted it (a whole
    pass's ``history_lost``, from its grouped count of every session). Without a
    copy the rows are then not read at all (``Analysis.rows`` None, the plan counting
    ``count`` rows): nothing would compare them, and such a plan recovers nothing.
    Reading them only to count was most of ``history_lost`` in a whole pass: ~11,000
    sessions with counter gaps and no copy on the 1M bench home (docs/benchmarks.md)."""
    copyset = copies_of(store, session_id, others=others, store_copies=store_copies, files=files)
    keyed = bool(copyset.copies)
    if not keyed and count is not None:
        return Analysis(session_id, None, copyset, RecoveryPlan(session_id, store_rows=count))
    found = rows(keyed) if rows is not None else store_messages(conn, caps, session_id, keyed=keyed)
    started = None
    if keyed:  # only a plan with copies estimates times; the start bounds them (plan module docstring)
        row = conn.execute("SELECT started_at FROM sessions WHERE id = ?", (session_id,)).fetchone()
        started = row[0] if row else None
    return Analysis(session_id, found, copyset, plan_recovery(session_id, found, copyset.copies, started_at=started))
