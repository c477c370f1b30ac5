"""Writing audit events: the one helper every action uses.

Actions record their own events (never through signals), so raw-SQL repairs, cron
runs, deletions, restores, imports and moves are covered alike (issue 6).
"""

from __future__ import annotations

from .models import AuditEvent
from .vocabulary import WRITE_OUTCOMES


def record(event: AuditEvent | None = None, *, backup=None, **fields) -> AuditEvent:
    """Create an AuditEvent, or complete ``event`` (created before the action wrote).

    ``backup`` (a ``stores.backup.BackupRecord`` or None) fills the backup path,
    size in bytes and sha256; every other keyword is an ``AuditEvent`` field.
    ``outcome`` must be one of ``vocabulary.WRITE_OUTCOMES`` (``ValueError``
    otherwise: a new word would split the trail's vocabulary from the runs').
    """
    if "outcome" in fields and fields["outcome"] not in WRITE_OUTCOMES:
        raise ValueError(f"unknown audit outcome {fields['outcome']!r}; one of {', '.join(WRITE_OUTCOMES)}")
    if event is None or backup is not None:  # completing an event keeps its backup unless given one
        fields.update(
            backup_path=backup.path if backup else "",
            backup_size=backup.size if backup else None,
            backup_sha256=backup.sha256 if backup else "",
        )
    if event is None:
        return AuditEvent.objects.create(**fields)
    for name, value in fields.items():
        setattr(event, name, value)
    event.save()
    return event
