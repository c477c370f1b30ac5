"""Whether a backup or a trash entry still holds rows its store lost (design: copies on
disk are never removed while they hold something the store lacks).

A row is *lost* when its session still exists in the store but the store no longer
has that message row (same ``messages.id`` and session): history that went missing
under a live session (docs/store.md §10.3), not a session an admin deleted (its row is
gone too, and retention may remove its last copy). Both copies and the store are read
through read-only SQLite connections; the store is attached ``mode=ro``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from .connection import ro_uri

LOST_ROWS = (
    "SELECT COUNT(*) FROM copy.messages m JOIN main.sessions s ON s.id = m.session_id "
    "WHERE NOT EXISTS (SELECT 1 FROM main.messages x WHERE x.id = m.id AND x.session_id = m.session_id)"
)


def lost_rows(copy_path, store_path, timeout: float = 5.0) -> int:
    """How many message rows of ``copy_path`` (a backup's ``state.db`` or a trash
    entry's ``rows.sqlite3``) belong to sessions ``store_path`` still has but are
    missing from it. 0 when either cannot be read (nothing to protect can be told;
    callers purge by age then)."""
    if not Path(copy_path).is_file() or not Path(store_path).is_file():
        return 0
    try:
        conn = sqlite3.connect(ro_uri(Path(store_path)), uri=True, timeout=timeout, detect_types=0)
    except sqlite3.Error:
        return 0
    try:
        conn.execute("PRAGMA query_only=1")
        conn.execute("ATTACH DATABASE ? AS copy", (ro_uri(Path(copy_path)),))
        return conn.execute(LOST_ROWS).fetchone()[0]
    except sqlite3.Error:
        return 0
    finally:
        conn.close()
