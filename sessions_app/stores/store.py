"""One profile's store: status probe, capabilities, read access.

The probe is what the overview shows and what every page checks before reading:
``ok``, ``missing`` (profile has no ``state.db`` yet), ``busy``, ``unreadable`` or
``corrupt``, each with a reason (ground rule 9). Errors are logged once per store
and status change, not once per request.

A :class:`Store` waits the full read timeout for a lock; its :meth:`Store.glance`
is the same store as the overview, the lists and other profiles' pages read it:
a short busy timeout, and no try at all while it was found locked moments ago
(:mod:`.busy`; docs/store.md §5.2, locked stores).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

from .. import memo
from . import busy
from .connection import classify_error, ensure_alias, open_ro
from .discovery import Profile, store_outside_reason
from .schema import Capabilities, read_capabilities

log = logging.getLogger("sessions_app.stores")

_logged: dict[str, tuple[str, str]] = {}
_logged_lock = threading.Lock()
_caps_cache: dict[str, tuple[tuple, Capabilities]] = {}
# Stores found browsable, by path: the file state they were found in (Store.readiness).
_browsable: dict[str, tuple] = {}
# Store path -> (file signature, headline counts of an ``ok`` probe): the overview
# counted every store's messages on each view (~26 ms for the 1 M-message store,
# docs/benchmarks.md); the counts only change when the store is written.
_counts_cache: dict[str, tuple[tuple, tuple]] = {}
COUNTED = ("sessions", "messages", "messages_exact", "last_activity")


def _log_once(path: Path, status: str, reason: str) -> None:
    """Log a store problem once per (store, status, reason) change."""
    key = str(path)
    with _logged_lock:
        previous = _logged.get(key)
        if previous == (status, reason) or (previous is None and status == "ok"):
            return
        _logged[key] = (status, reason)
    if status == "ok":
        log.info("store %s is readable again", key)
    else:
        log.warning("store %s is %s: %s", key, status, reason)


@dataclass
class StoreStatus:
    """What the overview shows for one store.

    Sizes are bytes; ``last_activity`` is epoch seconds (float) or None.
    ``messages_exact`` is False when the message count ran past the query budget
    and ``messages`` is the highest message id instead (an upper bound).
    """

    status: str
    reason: str = ""
    schema_version: int | None = None
    newer_than_known: bool = False
    journal_mode: str | None = None
    file_size: int | None = None
    wal_size: int | None = None
    sessions: int | None = None
    messages: int | None = None
    messages_exact: bool = True
    last_activity: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def orphaned_sidecars_reason(path: Path, suffixes: list[str]) -> str:
    """The explanation for ``-wal``/``-shm`` files whose ``state.db`` is gone
    (docs/store.md §1.2, §5.2): a ``-wal`` may hold the newest
    committed rows, so nothing is created there; sizes from ``os.stat``."""
    parts = []
    for suffix in suffixes:
        size = _stat_size(Path(f"{path}{suffix}"))
        parts.append(f"{path.name}{suffix}" + (f" ({size:,} bytes)" if size is not None else ""))
    text = (f"state.db is gone but {' and '.join(parts)} remain{'s' if len(parts) == 1 else ''}: Hermes' main "
            "database file was deleted or moved away while its sidecar stayed behind")
    if "-wal" in suffixes:
        text += ", and the newest conversation rows may exist only in that write-ahead log"
    else:
        text += " (a process may still have the deleted store open)"
    return text + (". The dashboard creates no store here and opens nothing. If the state.db was moved or "
                   "renamed, put that same file back; otherwise copy the sidecars aside before any Hermes "
                   "process opens this profile (a new store created beside them would not hold those rows) "
                   "and run 'hermes doctor'.")


def _stat_size(path: Path) -> int | None:
    # os.stat opens no descriptor, so it cannot drop SQLite's POSIX locks (rule 5).
    try:
        return path.stat().st_size
    except OSError:
        return None


class OutsideRoot(sqlite3.OperationalError):
    """The store's files lead out of its root (a symlink planted after discovery);
    raised before any connection exists. An ``sqlite3.Error`` so every caller's
    store-error handling reports it ("cannot open", unreadable)."""

    # What SQLite would have said: classify_error reads the name, never the path
    # quoted in the message.
    sqlite_errorname = "SQLITE_CANTOPEN"


class Unavailable(Exception):
    """A store that cannot be browsed now; ``status`` says why (a :class:`StoreStatus`)."""

    def __init__(self, status: "StoreStatus"):
        super().__init__(status.reason)
        self.status = status


class Store:
    """Read access to one profile's ``state.db``.

    ``glancing``: reads use the busy timeout ``HERMES_BUSY_GLANCE`` and fail at once
    (busy) while the store was found locked less than ``HERMES_BUSY_MEMORY`` seconds
    ago; otherwise they wait up to ``HERMES_READ_TIMEOUT``. Make one with :meth:`glance`.
    """

    def __init__(self, profile: Profile, glancing: bool = False):
        self.profile = profile
        self.glancing = glancing

    def __repr__(self) -> str:
        return f"<Store {self.profile.key} {self.profile.db_path}{' (glance)' if self.glancing else ''}>"

    def glance(self) -> "Store":
        """This store as seen from a page that is not its own (see the class doc)."""
        return self if self.glancing else Store(self.profile, glancing=True)

    @property
    def key(self) -> str:
        return self.profile.key

    @property
    def path(self) -> Path:
        return self.profile.db_path

    @property
    def alias(self) -> str:
        """The Django alias (registered on first use) for ORM reads of this store
        (a glance has its own, with the glance's busy timeout)."""
        return ensure_alias(self.profile, glance=self.glancing)

    @property
    def busy_timeout(self) -> float:
        """Seconds a read waits for another process's lock."""
        return settings.HERMES_BUSY_GLANCE if self.glancing else settings.HERMES_READ_TIMEOUT

    def outside_reason(self) -> str | None:
        """Why ``state.db`` or a sidecar now resolves outside the profile's root, or
        None (``lstat``/``readlink`` only; docs/store.md §1.2, §5.2: symlinks)."""
        return store_outside_reason(self.path, self.profile.root)

    def read(self, budget: float | None = None, lenient: bool = False):
        """Context manager yielding a plain read-only sqlite3 connection
        (``lenient``: invalid UTF-8 reads as U+FFFD, for pages and exports; see
        ``connection.open_ro``).

        Raises :class:`OutsideRoot` (before connecting) when the store's files lead
        out of its root, and ``sqlite3.OperationalError`` ("database is locked …")
        at once, without opening anything, for a glance at a store found locked
        moments ago."""
        why = self.outside_reason()
        if why:
            raise OutsideRoot(f"unable to open the store: {why}; never opened")
        return self._open(budget, lenient)

    def _open(self, budget: float | None = None, lenient: bool = False):
        """:meth:`read` without its root check, for :meth:`browse` and :meth:`probe`,
        whose :meth:`preflight` made that very check just before (its ``lstat`` and
        ``realpath`` of eight paths were a visible share of a ten-profile list)."""
        if self.glancing and busy.recently_locked(self.path) is not None:
            # SQLite's own words: the reason shown (and logged once) is the same
            # whether this look waited or remembered.
            raise sqlite3.OperationalError("database is locked")
        return open_ro(self.path, timeout=self.busy_timeout, budget=budget, lenient=lenient)

    def capabilities(self, conn: sqlite3.Connection) -> Capabilities:
        """Capabilities, re-read only when SQLite's schema cookie or the file changes."""
        cookie = conn.execute("PRAGMA schema_version").fetchone()[0]
        try:
            st = self.path.stat()
            ident = (cookie, st.st_ino, st.st_dev)
        except OSError:
            ident = (cookie, None, None)
        cached = _caps_cache.get(str(self.path))
        if cached and cached[0] == ident:
            return cached[1]
        caps = read_capabilities(conn)
        _caps_cache[str(self.path)] = (ident, caps)
        return caps

    def signature(self) -> tuple:
        """What changes whenever the store is written: inode, size and mtime (ns) of
        ``state.db`` and ``state.db-wal``, from ``os.stat`` (no descriptor, rule 5).
        For caching facts read from the store; ``()`` parts where a file is absent."""
        parts = []
        for path in (self.path, Path(f"{self.path}-wal")):
            try:
                st = path.stat()
                parts.append((st.st_ino, st.st_size, st.st_mtime_ns))
            except OSError:
                parts.append(())
        return tuple(parts)

    @staticmethod
    def settled(signature: tuple) -> bool:
        """Whether an answer read under ``signature`` (:meth:`signature`) may be kept:
        its files' mtimes are more than ``memo.RACY_SECONDS`` old, so a later write
        cannot leave the same size and mtime (the racy-clean rule, docs/architecture.md §11)."""
        return memo.settled(part[2] for part in signature if part)

    def changed_at(self) -> float | None:
        """When the store was last written, epoch seconds: the newest mtime of
        ``state.db`` and ``state.db-wal`` (a commit in WAL mode writes the -wal, a
        checkpoint the main file), from ``os.stat`` only (no descriptor, rule 5);
        None when neither file exists. Readers change neither: ``-shm`` is left out
        (every reader touches it), and so is an empty ``-wal`` (the first connection
        to a WAL store creates it empty, a read-only check pass included)."""
        times = []
        for path in (self.path, Path(f"{self.path}-wal")):
            try:
                st = path.stat()
            except OSError:
                continue
            if st.st_size or path == self.path:
                times.append(st.st_mtime)
        return max(times) if times else None

    def preflight(self) -> StoreStatus | None:
        """File-level problems found without opening SQLite, or None when it may open."""
        path = self.path
        why = self.outside_reason()
        if why:
            return StoreStatus("unreadable", f"{why}; never opened")
        if not path.exists():
            if path.is_symlink():
                return StoreStatus("unreadable", "state.db is a dangling symlink")
            orphans = [s for s in ("-wal", "-shm") if os.path.lexists(f"{path}{s}")]
            if orphans:
                return StoreStatus("corrupt", orphaned_sidecars_reason(path, orphans))
            return StoreStatus("missing", "this profile has no state.db yet")
        if path.is_dir():
            return StoreStatus("unreadable", "state.db is a directory, not a file")
        size = _stat_size(path)
        if size == 0:
            return StoreStatus("unreadable", "state.db is empty (0 bytes)", file_size=0)
        if not os.access(path, os.R_OK):
            return StoreStatus("unreadable", "permission denied: the dashboard's user cannot read state.db", file_size=size)
        return None

    def readiness(self, remembered: bool = False) -> StoreStatus | None:
        """Why this store cannot be browsed right now, or None when it can.

        Cheaper than :meth:`probe` (no counts): file checks, then the schema
        (cached) for the columns browsing needs. Never raises for store problems.
        ``remembered`` (a page about to read the store itself): a store found
        browsable in the same :meth:`file_state` is not opened again; a problem
        is never remembered, and the page's own reads still meet any that
        arises without a change to the files (a lock), through the same checks.
        """
        state = self.file_state() if remembered else None
        if remembered and _browsable.get(str(self.path)) == state:
            return None
        try:
            with self.browse():
                pass
        except Unavailable as exc:
            _browsable.pop(str(self.path), None)
            return exc.status
        if remembered:
            _browsable[str(self.path)] = state
        return None

    def file_state(self) -> tuple:
        """What changes when the store's files are written, replaced, emptied,
        re-linked or re-permissioned: the ``lstat`` and ``stat`` of ``state.db``
        (inode, device, size, mtime and ctime in ns, mode) and of its ``-wal`` (inode,
        device, size, mtime: SQLite touches its ctime whenever a connection
        closes), ``()`` for an absent one (``os.stat`` only, rule 5)."""
        parts = []
        for path, follow in ((self.path, False), (self.path, True), (Path(f"{self.path}-wal"), True)):
            try:
                st = os.stat(path, follow_symlinks=follow)
                part = (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns)
                parts.append(part if path != self.path else (*part, st.st_ctime_ns, st.st_mode))
            except OSError:
                parts.append(())
        return (self.glancing, str(self.profile.root), *parts)

    @contextmanager
    def browse(self):
        """One read-only connection to a store that can be browsed, as
        ``(conn, capabilities)``. Raises :class:`Unavailable` with the status
        when it cannot (file checks, not a Hermes store, or an SQLite error, also
        one raised inside the block: busy, corrupt…)."""
        status = self.preflight()
        if status is not None:
            raise Unavailable(status)
        try:
            with self._open() as conn:
                caps = self.capabilities(conn)
                status = self.unbrowsable(caps)
                if status is not None:
                    raise Unavailable(status)
                yield conn, caps
        except sqlite3.Error as exc:
            raise Unavailable(StoreStatus(*classify_error(exc))) from exc

    @staticmethod
    def unbrowsable(caps: Capabilities) -> StoreStatus | None:
        """Why a store with these capabilities cannot be browsed, or None."""
        missing = caps.missing_required()
        if missing:
            return StoreStatus("unreadable", "not a Hermes session store (lacks " + ", ".join(missing) + ")")
        return None

    def probe(self) -> StoreStatus:
        """Status, schema facts and headline counts; never raises for store problems."""
        status = self.preflight()
        if status is not None:
            if status.status != "missing":
                _log_once(self.path, status.status, status.reason)
            return status
        status = StoreStatus("ok", file_size=_stat_size(self.path), wal_size=_stat_size(Path(f"{self.path}-wal")))
        try:
            with self._open(budget=settings.HERMES_QUERY_BUDGET) as conn:  # preflight checked the root
                caps = self.capabilities(conn)
                status.schema_version = caps.schema_version
                status.newer_than_known = caps.newer_than_known
                status.journal_mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
                missing = caps.missing_required()
                if missing:
                    status.status = "unreadable"
                    status.reason = "not a Hermes session store (lacks " + ", ".join(missing) + ")"
                else:
                    self._cached_counts(conn, caps, status)
        except sqlite3.Error as exc:
            status.status, status.reason = classify_error(exc)
        if status.newer_than_known and status.ok:
            status.notes.append(
                f"schema {status.schema_version} is newer than this dashboard knows; browsing uses the columns present"
            )
        _log_once(self.path, status.status, status.reason)
        return status

    def _cached_counts(self, conn: sqlite3.Connection, caps: Capabilities, status: StoreStatus) -> None:
        """:meth:`_counts`, or the counts of the last probe while the store's files
        are unchanged (:meth:`signature`, read after the connection has read the
        schema: a lock is still found by that read, and a store written since, even
        in its WAL only, has another signature). Counts read while the files are
        less than a second old are not kept (:meth:`settled`)."""
        key, signature = str(self.path), self.signature()
        cached = _counts_cache.get(key)
        if cached is not None and cached[0] == signature:
            for name, value in zip(COUNTED, cached[1]):
                setattr(status, name, value)
            return
        self._counts(conn, caps, status)
        if self.settled(signature):
            _counts_cache[key] = (signature, tuple(getattr(status, name) for name in COUNTED))

    def _counts(self, conn: sqlite3.Connection, caps: Capabilities, status: StoreStatus) -> None:
        status.sessions = conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
        try:
            status.messages = conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
        except sqlite3.OperationalError as exc:
            if str(exc) != "interrupted":
                raise
            # Past the budget on a huge store: the highest id bounds the count.
            conn.set_progress_handler(None, 0)
            status.messages = conn.execute("SELECT MAX(id) FROM messages").fetchone()[0] or 0
            status.messages_exact = False
        # The newest session's last activity with the sessions list's own expression
        # (built once, in stores.listing; imported here since listing imports this
        # module), not the newest start.
        from .listing import newest_activity_statement

        candidates = [
            conn.execute(*newest_activity_statement(self, caps)).fetchone()[0],
            # The newest message row by id (rule 10: id order, not timestamps).
            conn.execute("SELECT timestamp FROM messages ORDER BY id DESC LIMIT 1").fetchone(),
        ]
        values = []
        for value in candidates:
            if isinstance(value, tuple):
                value = value[0] if value else None
            if isinstance(value, (int, float)):
                values.append(float(value))
        status.last_activity = max(values) if values else None
