"""What the copies of a session on disk can bring back into the store.

Public API::

    store_messages(conn, caps, session_id, *, keyed=True) -> list[StoreMessage]
    compare(rows, copy) -> Comparison
    plan_recovery(session_id, rows, copies) -> RecoveryPlan
    analyse(store, conn, caps, session_id, *, others=(), store_copies=True) -> Analysis

Read-only throughout; the repair that applies a plan lives on the guarded write path.
"""

from .analysis import Analysis, analyse
from .compare import Comparison, Differing, Merged, Missing, StoreMessage, compare, rows_digest, store_messages
from .plan import Conflict, Insertion, Proposal, RecoveryPlan, plan_recovery

__all__ = ["Analysis", "Comparison", "Conflict", "Differing", "Insertion", "Merged", "Missing", "Proposal",
           "RecoveryPlan", "StoreMessage", "analyse", "compare", "plan_recovery", "rows_digest", "store_messages"]
