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
    (``copyset``), and the ``plan``."""

    session_id: str
    rows: list[StoreMessage]
    copyset: CopySet
    plan: RecoveryPlan


def analyse(store, conn, caps, session_id: str, *, others=(), store_copies: bool = True,
            files=None, rows=None) -> Analysis:
    """Read ``session_id``'s copies (``stores.copies.copies_of``) and its rows
    through ``conn`` (read-only), and plan what the copies can bring back.

    The rows carry match keys only when a copy was found (``store_messages``'s
    ``keyed``): without a copy, nothing compares them and every caller uses their
    count alone. ``rows``: a callable ``rows(keyed) -> list[StoreMessage]`` giving
    rows read by ``compare.store_messages`` on ``conn`` (and not changed), for a
    caller that reads them once for several analyses."""
    copyset = copies_of(store, session_id, others=others, store_copies=store_copies, files=files)
    keyed = bool(copyset.copies)
    found = rows(keyed) if rows is not None else store_messages(conn, caps, session_id, keyed=keyed)
    started = None
    if keyed:  # only a plan with copies estimates times; the start bounds them (plan module docstring)
        row = conn.execute("SELECT started_at FROM sessions WHERE id = ?", (session_id,)).fetchone()
        started = row[0] if row else None
    return Analysis(session_id, found, copyset, plan_recovery(session_id, found, copyset.copies, started_at=started))
