"""Stores found locked: remembered for a few seconds, and every wait counted.

A store another process holds locked (a rollback-journal store in ``BEGIN
EXCLUSIVE``, a WAL store in ``locking_mode=EXCLUSIVE``) answers every read with
``SQLITE_BUSY`` after the connection's busy timeout. Paid per locked store on every
page, the full read timeout (``HERMES_READ_TIMEOUT``) made the overview and the
lists wait it once per locked store and view. So (docs/store.md §5.2, locked stores):

- a store's *own* pages and its own check pass wait the full read timeout;
- every other look at it (the overview, lists across profiles, another profile's
  page, the cross-store checks of another store) is a *glance*: a connection with a
  busy timeout of ``HERMES_BUSY_GLANCE`` seconds, skipped altogether while the store
  was found locked less than ``HERMES_BUSY_MEMORY`` seconds ago.

The memory is keyed by the store's path and file identity (``st_dev``, ``st_ino``
from ``os.stat``, which opens no descriptor: ground rule 5), so a store replaced by
another file is tried again at once. Any read that completes without a lock error
forgets it. Process-wide and thread-safe; nothing here touches a store.

Waits are counted per store (:func:`waits`) and logged at DEBUG on the
``sessions_app.stores.busy`` logger, one line per lock error with the timeout it
waited: what an admin (or a test) reads to see how often a page or a run waited.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

log = logging.getLogger("sessions_app.stores.busy")

_lock = threading.Lock()
_found: dict[str, "_Found"] = {}
_waits: dict[tuple[str, bool], int] = {}  # (path, full read timeout?) -> lock errors


@dataclass(frozen=True)
class _Found:
    identity: tuple | None  # (st_dev, st_ino) of state.db when found locked
    at: float  # time.monotonic()


def _key(path) -> str:
    return str(Path(path).absolute())


def identity(path) -> tuple | None:
    """``(st_dev, st_ino)`` of ``path``, or None when it cannot be stat'ed."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def is_full(timeout: float) -> bool:
    """Whether a busy timeout of ``timeout`` seconds is the full read timeout."""
    return timeout >= settings.HERMES_READ_TIMEOUT


def found_locked(path, timeout: float, reason: str) -> None:
    """Record that a read of ``path`` with a busy timeout of ``timeout`` seconds
    ended in a lock error (``reason``: the error text)."""
    key = _key(path)
    full = is_full(timeout)
    with _lock:
        _found[key] = _Found(identity(path), time.monotonic())
        _waits[(key, full)] = _waits.get((key, full), 0) + 1
    log.debug("store %s stayed locked through a busy timeout of %.2f s (%s): %s",
              key, timeout, "the full read timeout" if full else "a glance", reason)


def readable(path) -> None:
    """Forget that ``path`` was found locked: a read just went through."""
    key = _key(path)
    if key in _found:
        with _lock:
            _found.pop(key, None)


def recently_locked(path) -> float | None:
    """Seconds since ``path`` (the same file) was found locked, when less than
    ``HERMES_BUSY_MEMORY``; else None."""
    key = _key(path)
    found = _found.get(key)
    if found is None:
        return None
    age = time.monotonic() - found.at
    if age >= settings.HERMES_BUSY_MEMORY or found.identity != identity(path):
        with _lock:
            if _found.get(key) is found:
                del _found[key]
        return None
    return age


def waits(path=None, *, full: bool = True) -> int:
    """Lock errors counted for ``path`` (every store when None) on connections with
    the full read timeout (``full=True``) or with a glance's (``full=False``)."""
    key = None if path is None else _key(path)
    with _lock:
        return sum(n for (p, f), n in _waits.items() if f == full and (key is None or p == key))


def reset() -> None:
    """Forget every store found locked and every count (tests, benchmarks)."""
    with _lock:
        _found.clear()
        _waits.clear()
