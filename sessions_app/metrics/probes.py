"""The figures ``/metrics`` reads that cost more than a ``stat``, cached per process.

A scrape must stay cheap whatever the store's size (issue 18): sessions and
messages counted, live sessions judged, trash and backup folders listed at most
once per ``HERMES_METRICS_PROBE_SECONDS`` (default 60) per process; every scrape
in between reuses them. File and WAL sizes and the file-level status come from
``Store.preflight`` and ``os.stat`` on each scrape (no descriptor is opened on a
store file: docs/architecture.md §2, rule 5). A store is read through its glance
(short busy timeout), so a locked store is reported busy at once, never waited for.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

from .. import trash
from ..stores.backup import list_backups
from ..stores.connection import classify_error
from ..stores.liveness import live_sessions

_lock = threading.Lock()
_store_cache: dict[str, tuple[float, "StoreProbe"]] = {}
_folder_cache: dict[str, tuple[float, object]] = {}


def ttl() -> float:
    return float(getattr(settings, "HERMES_METRICS_PROBE_SECONDS", 60.0))


def stat_size(path: Path) -> int | None:
    """Size in bytes from ``os.stat`` (no descriptor), None when absent."""
    try:
        return os.stat(path).st_size
    except OSError:
        return None


@dataclass
class StoreProbe:
    """What one probe of a store found: ``status`` (``StoreStatus.status``),
    ``sessions``/``messages`` counts (None when unknown; ``messages_exact`` False
    when the count ran past its budget and the highest id stands in), live
    sessions by verdict, and ``taken_at`` (epoch seconds)."""

    status: str
    reason: str = ""
    sessions: int | None = None
    messages: int | None = None
    messages_exact: bool = True
    live: dict[str, int] = field(default_factory=dict)
    taken_at: float = 0.0


def _probe(store) -> StoreProbe:
    glance = store.glance()
    status = glance.probe()
    result = StoreProbe(status.status, status.reason, status.sessions, status.messages, status.messages_exact,
                        taken_at=time.time())
    if status.ok:
        try:
            with glance.read(budget=settings.HERMES_QUERY_BUDGET) as conn:
                caps = glance.capabilities(conn)
                index = live_sessions(glance, conn, caps, time.time())
            verdicts = [index.verdict(sid) for sid in index]
            result.live = {v: verdicts.count(v) for v in ("live", "maybe_live")}
        except sqlite3.Error as exc:  # liveness unknown this time; counts stand
            result.reason = classify_error(exc)[1]
    return result


def store_probe(store) -> StoreProbe:
    """The cached probe of ``store`` (re-taken once older than :func:`ttl`)."""
    key = str(store.path)
    now = time.monotonic()
    with _lock:
        cached = _store_cache.get(key)
    if cached is not None and now - cached[0] < ttl():
        return cached[1]
    probe = _probe(store)
    with _lock:
        _store_cache[key] = (now, probe)
    return probe


def _cached(name: str, compute):
    now = time.monotonic()
    with _lock:
        cached = _folder_cache.get(name)
    if cached is not None and now - cached[0] < ttl():
        return cached[1]
    value = compute()
    with _lock:
        _folder_cache[name] = (now, value)
    return value


def _tree_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (our own data folder; ``lstat`` only)."""
    total = 0
    for folder, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                continue
    return total


def trash_by_profile() -> dict[str, tuple[int, int]]:
    """``profile -> (entries, bytes)`` of the trash's session entries (any state)."""
    def compute():
        out: dict[str, tuple[int, int]] = {}
        for entry in trash.list_entries():
            count, size = out.get(entry.profile, (0, 0))
            out[entry.profile] = (count + 1, size + _tree_bytes(entry.path))
        return out
    return _cached("trash", compute)


def backups_by_profile() -> dict[str, tuple[int, int]]:
    """``profile -> (backups, bytes)`` of ``<data>/backups`` (``""``: profile unknown)."""
    def compute():
        out: dict[str, tuple[int, int]] = {}
        for backup in list_backups():
            count, size = out.get(backup.profile, (0, 0))
            out[backup.profile] = (count + 1, size + backup.size)
        return out
    return _cached("backups", compute)


def reset() -> None:
    """Forget every cached probe (tests; a settings change)."""
    with _lock:
        _store_cache.clear()
        _folder_cache.clear()
