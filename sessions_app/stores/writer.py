"""The only write path into a store: short ``BEGIN IMMEDIATE`` transactions.

Ground rule 2: one transaction per unit of work, with a busy timeout, and the
caller re-checks inside the transaction that what it planned against still holds.
Like Hermes' own writers (reference 2.8), connections run with
``foreign_keys=ON`` and autocommit off only inside the explicit transaction; the
journal mode is never touched, and nothing here checkpoints or vacuums.
"""

from __future__ import annotations

import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from django.conf import settings

from .store import Store

# Seconds a write waits for Hermes' own writers before giving up (Hermes gives its
# routine writes 20 s of retries; the dashboard yields sooner and reports busy).
WRITE_TIMEOUT = 5.0


class StoreBusy(Exception):
    """The store stayed locked past the write budget; retry later."""


@contextmanager
def writer(store: Store) -> Iterator[sqlite3.Connection]:
    """A read-write connection, closed on exit. Use :func:`transaction` on it."""
    timeout = getattr(settings, "HERMES_WRITE_TIMEOUT", WRITE_TIMEOUT)
    # mode=rw: a store that vanished is an error, never a new empty database.
    uri = Path(store.path).absolute().as_uri() + "?mode=rw"
    conn = sqlite3.connect(uri, uri=True, timeout=timeout, isolation_level=None, detect_types=0)
    try:
        conn.execute("PRAGMA foreign_keys=ON")
        yield conn
    finally:
        conn.close()


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` … ``COMMIT``; rolls back on any exception.

    Raises :class:`StoreBusy` when the write lock cannot be had within the timeout.
    """
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            raise StoreBusy(str(exc)) from exc
        raise
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    else:
        conn.execute("COMMIT")
