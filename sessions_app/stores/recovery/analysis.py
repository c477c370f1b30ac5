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
            files=None, rows: list[StoreMessage] | None = None) -> Analysis:
    """Read ``session_id``'s rows through ``conn`` (read-only; ``rows``: already read
    by ``compare.store_messages`` on it, and not changed) and its copies
    (``stores.copies.copies_of``), and plan what they can bring back."""
    if rows is None:
        rows = store_messages(conn, caps, session_id)
    copyset = copies_of(store, session_id, others=others, store_copies=store_copies, files=files)
    return Analysis(session_id, rows, copyset, plan_recovery(session_id, rows, copyset.copies))
