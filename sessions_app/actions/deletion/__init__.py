"""Deleting sessions and restoring them from the trash (docs/architecture.md §5; docs/store.md §10).

The package by step: ``plan.py`` (what goes, read-only), ``tokens.py`` (signed,
single-use confirmations), ``apply.py`` (the deletion as a guarded write),
``restore.py`` (the restore as a guarded write), ``bulk.py`` (the background jobs
of deletions and restores). :class:`Deleter` is the writer the views and jobs use.
"""

from __future__ import annotations

from ... import trash
from ...models import AuditEvent
from ...stores.store import Store
from ..guarded import GuardedWriter, Outcome
from ..files import move_without_loss  # noqa: F401
from .apply import DeleteWrite, decide, export_and_delete, verify_deleted  # noqa: F401
from .bulk import run_bulk_delete, run_restore  # noqa: F401
from .plan import (  # noqa: F401
    DELETE_ACTION, RESTORE_ACTION, DeletePlan, Target, build_plan, describe_change, judge, plan_for, session_files,
)
from .restore import RestoreWrite
from .tokens import TOKEN_MAX_AGE, TokenMismatch, sign, token_item, unsign, used_by  # noqa: F401


class Deleter(GuardedWriter):
    """Deletes and restores for one request or job: one backup per store, one
    :class:`~sessions_app.models.AuditEvent` per deletion or restore."""

    backup_label = "delete"

    def delete(self, store: Store, item: dict, override: str | None = None, may_override: bool = False) -> Outcome:
        """Apply one confirmed deletion; never raises for store problems.

        ``item`` is one entry of a confirmation token. ``override`` is the text
        the admin typed to override a maybe-live verdict (None: no override asked);
        ``may_override`` whether the actor holds ``override_live``.
        """
        write = DeleteWrite(item, override, may_override)
        return self.perform(store, write, Outcome(nonce=write.nonce))

    def restore(self, store: Store | None, entry: trash.TrashEntry) -> Outcome:
        """Put a trash entry back into its store; never raises for store problems."""
        return self.perform(store, RestoreWrite(entry), Outcome(entry=entry))

    def refuse(self, store: Store | None, session_ids: list[str], reason: str) -> AuditEvent:
        """Audit a deletion request refused before it ran (a token for another
        session, profile or user, a forged token, an override typed without the
        permission): outcome ``refused``, nothing written."""
        return self.note(store, DELETE_ACTION, session_ids, "refused", reason)
