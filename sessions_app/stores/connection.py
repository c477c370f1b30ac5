"""Read-only connections to Hermes stores: Django aliases and plain sqlite3.

Ground rules 1, 5 and 7 (docs/architecture.md §2) live here:

- every connection opened by this module is ``file:…?mode=ro`` plus
  ``PRAGMA query_only=1``; writes are the actions' business, not the browser's;
- ``detect_types`` is 0: Django's converters would otherwise turn epoch floats in
  a column declared ``timestamp`` into ``None`` (docs/architecture.md §2, rule 7);
- nothing here opens ``state.db``, ``-wal`` or ``-shm`` as a plain file.

Every lock error a store connection meets (plain or Django) is reported to
:mod:`.busy` with the busy timeout it waited, and a plain read that ends without
one clears the store's "found locked" memory (docs/store.md §5.2, locked stores).

Note (observed with SQLite 3.40 on this machine): a ``mode=ro`` connection to a WAL
store whose ``-wal``/``-shm`` do not exist creates them (SQLite needs the shared
memory index to read a WAL database) and leaves them in place; this is SQLite's own
doing, the same files a Hermes reader creates, never ours.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import weakref
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from django.conf import settings
from django.db import connections
from django.db.backends.signals import connection_created

from . import busy
from .discovery import Profile

GLANCE_SUFFIX = "_glance"
# Plain read connections open right now, so a process told to stop (``watch_stores``
# on SIGTERM) can abort their running statements at once (:func:`interrupt_all`).
_open_reads: "weakref.WeakSet[sqlite3.Connection]" = weakref.WeakSet()
_open_reads_lock = threading.Lock()
# Set by :func:`interrupt_all`; only in a process that asked for it
# (:func:`make_reads_stoppable`) does every later statement then stop at once too.
_stopping = threading.Event()
_stoppable = False
# Django alias -> (store path, busy timeout in seconds), for counting lock errors.
_alias_stores: dict[str, tuple[Path, float]] = {}


def ro_uri(db_path: Path) -> str:
    """SQLite URI opening ``db_path`` read-only (percent-encoded, so any file name works)."""
    return Path(db_path).absolute().as_uri() + "?mode=ro"


def alias_settings(profile: Profile, timeout: float | None = None) -> dict:
    """A complete Django DATABASES entry for a store's read-only alias
    (``timeout``: busy timeout in seconds, default ``HERMES_READ_TIMEOUT``).

    Complete because Django only fills defaults when the handler is first
    configured; a partial dict added later fails with ``KeyError: 'TIME_ZONE'``. ``MIGRATE: False`` and the router keep migrations away.
    """
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": ro_uri(profile.db_path),
        "OPTIONS": {
            "detect_types": 0,
            "timeout": settings.HERMES_READ_TIMEOUT if timeout is None else timeout,
            "init_command": "PRAGMA query_only=1",
        },
        "ATOMIC_REQUESTS": False,
        "AUTOCOMMIT": True,
        "CONN_MAX_AGE": 0,
        "CONN_HEALTH_CHECKS": False,
        "TIME_ZONE": None,
        "USER": "",
        "PASSWORD": "",
        "HOST": "",
        "PORT": "",
        "TEST": {"CHARSET": None, "COLLATION": None, "MIGRATE": False, "MIRROR": None, "NAME": None},
    }


def ensure_alias(profile: Profile, glance: bool = False) -> str:
    """Register the read-only alias of ``profile`` (idempotent); returns the alias.

    ``glance``: the alias whose busy timeout is ``HERMES_BUSY_GLANCE`` (reads of
    this store from other pages, see :mod:`.busy`), a second alias of the same file.
    """
    alias = profile.alias + (GLANCE_SUFFIX if glance else "")
    if alias not in connections.settings:
        timeout = settings.HERMES_BUSY_GLANCE if glance else settings.HERMES_READ_TIMEOUT
        connections.settings[alias] = alias_settings(profile, timeout)
        _alias_stores[alias] = (profile.db_path, timeout)
    return alias


def forget_alias(profile: Profile) -> None:
    """Close and unregister a store's aliases (used when the registry is reset)."""
    for alias in (profile.alias, profile.alias + GLANCE_SUFFIX):
        _alias_stores.pop(alias, None)
        if alias in connections.settings:
            try:
                connections[alias].close()
                del connections[alias]
            except AttributeError:
                pass
            del connections.settings[alias]


def is_lock_error(exc: BaseException) -> bool:
    """Whether ``exc`` (sqlite3 or Django-wrapped) is SQLite's "locked by another
    connection" (SQLITE_BUSY / SQLITE_LOCKED and their extended codes)."""
    exc = sqlite_cause(exc)
    if not isinstance(exc, sqlite3.Error):
        return False
    name = getattr(exc, "sqlite_errorname", "") or ""
    # "database is locked", "database table is locked", "database schema is locked"
    return name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "is locked" in str(exc)


_execute, _executemany, _executescript = (
    sqlite3.Connection.execute, sqlite3.Connection.executemany, sqlite3.Connection.executescript)


class ReadConnection(sqlite3.Connection):
    """A plain read-only connection that reports its lock errors to :mod:`.busy`.

    ``db_path`` and ``busy_timeout`` (seconds) are set by :func:`open_ro`;
    ``met_lock`` is True once a statement failed with a lock error.
    """

    db_path: Path
    busy_timeout: float
    met_lock = False
    progress = None  # the progress handler open_ro installed (budget, stop request)

    def _locked(self, exc: sqlite3.Error) -> None:
        if is_lock_error(exc):
            self.met_lock = True
            busy.found_locked(self.db_path, self.busy_timeout, str(exc))

    # Explicit signatures and unbound base methods: these run for every statement
    # of a check pass, so the wrapper stays about a microsecond.
    def execute(self, sql, parameters=()):
        try:
            return _execute(self, sql, parameters)
        except sqlite3.OperationalError as exc:
            self._locked(exc)
            raise

    def executemany(self, sql, parameters):
        try:
            return _executemany(self, sql, parameters)
        except sqlite3.OperationalError as exc:
            self._locked(exc)
            raise

    def executescript(self, script):
        try:
            return _executescript(self, script)
        except sqlite3.OperationalError as exc:
            self._locked(exc)
            raise


def _count_lock_errors(execute, sql, params, many, context):
    """Django execute wrapper on store aliases: lock errors of ORM reads go to :mod:`.busy`."""
    try:
        return execute(sql, params, many, context)
    except Exception as exc:
        found = _alias_stores.get(context["connection"].alias)
        if found is not None and is_lock_error(exc):
            busy.found_locked(found[0], found[1], str(sqlite_cause(exc)))
        raise


def _on_connection(sender, connection, **kwargs):
    if connection.alias in _alias_stores and _count_lock_errors not in connection.execute_wrappers:
        connection.execute_wrappers.append(_count_lock_errors)


connection_created.connect(_on_connection, dispatch_uid="sessions_app.stores.busy")


def replacing_text(data: bytes) -> str:
    """``text_factory`` reading TEXT that is not valid UTF-8 (salvaged pages, other
    writers) with U+FFFD replacement characters instead of raising."""
    return data.decode("utf-8", "replace")


@contextmanager
def open_ro(db_path: Path, timeout: float | None = None, budget: float | None = None,
            lenient: bool = False) -> Iterator[sqlite3.Connection]:
    """A plain read-only sqlite3 connection, closed on exit.

    ``timeout`` is the busy timeout in seconds (default: settings.HERMES_READ_TIMEOUT).
    ``budget``, when given, aborts any statement still running after that many
    seconds with ``sqlite3.OperationalError('interrupted')`` (Datasette's
    ``sqlite_timelimit`` idea), so one huge store cannot hang a page.
    ``lenient`` reads invalid UTF-8 with replacement characters
    (:func:`replacing_text`): for pages and exports, which show text; never for
    code that copies values into a store (types come through untouched, rule 7),
    where Python's default raises ``OperationalError`` instead.
    Raises ``sqlite3.Error`` subclasses from SQLite unchanged. The connection is a
    :class:`ReadConnection`: lock errors are counted, and a block that ends without
    one clears the store's "found locked" memory.
    """
    timeout = settings.HERMES_READ_TIMEOUT if timeout is None else timeout
    conn = sqlite3.connect(ro_uri(db_path), uri=True, timeout=timeout, detect_types=0, isolation_level=None,
                           factory=ReadConnection)
    conn.db_path, conn.busy_timeout = Path(db_path), timeout
    with _open_reads_lock:
        _open_reads.add(conn)
    if lenient:
        conn.text_factory = replacing_text
    try:
        conn.execute("PRAGMA query_only=1")
        handler = None
        if budget is not None:
            deadline = time.monotonic() + budget
            if _stoppable:
                handler = lambda: 1 if _stopping.is_set() or time.monotonic() > deadline else 0  # noqa: E731
            else:
                handler = lambda: 1 if time.monotonic() > deadline else 0  # noqa: E731
        elif _stoppable:
            handler = _stopping.is_set
        conn.progress = handler
        restore_progress(conn)
        yield conn
        if not conn.met_lock:
            busy.readable(db_path)
    finally:
        with _open_reads_lock:
            _open_reads.discard(conn)
        conn.close()


def stop_requested() -> bool:
    """Whether this process was told to stop its reads (see :func:`make_reads_stoppable`);
    a check that installs a progress handler of its own ends on it too."""
    return _stoppable and _stopping.is_set()


def restore_progress(conn: sqlite3.Connection) -> None:
    """Put back the progress handler :func:`open_ro` gave ``conn`` (its budget, the
    stop request), after a check replaced it with its own for one statement."""
    handler = getattr(conn, "progress", None)
    conn.set_progress_handler(handler, 20_000) if handler is not None else conn.set_progress_handler(None, 0)


def make_reads_stoppable() -> None:
    """From now on, every plain read connection of this process checks, every
    20,000 SQLite instructions, whether :func:`interrupt_all` was called, and ends
    its statement then (``watch_stores``, which must stop within a second; the
    runner reports a store whose statement was cut so as busy, "retry", never
    damaged, and the watcher discards that pass)."""
    global _stoppable
    _stoppable = True


def resume_reads() -> None:
    """Undo :func:`make_reads_stoppable` and a stop request (a process that goes on
    reading after a stop: tests)."""
    global _stoppable
    _stoppable = False
    _stopping.clear()


def interrupt_all() -> int:
    """Abort the statement running on every plain read connection of this process
    (``sqlite3.Connection.interrupt``, callable from any thread): each raises
    ``OperationalError('interrupted')`` in its own thread; after
    :func:`make_reads_stoppable`, so does every statement started later that runs
    past 20,000 SQLite instructions (short ones finish). For a
    process that must stop within a second (``watch_stores`` on SIGTERM) while a
    check pass runs a long ``quick_check``. Returns how many connections were open."""
    _stopping.set()
    with _open_reads_lock:
        conns = list(_open_reads)
    for conn in conns:
        try:
            conn.interrupt()
        except sqlite3.ProgrammingError:  # closed meanwhile
            pass
    return len(conns)


def sqlite_cause(exc: BaseException) -> BaseException:
    """The underlying sqlite3 exception of a Django-wrapped database error."""
    while not isinstance(exc, sqlite3.Error) and exc.__cause__ is not None:
        exc = exc.__cause__
    return exc


def classify_error(exc: BaseException) -> tuple[str, str]:
    """Map a SQLite error to a store status and a reason an admin can act on.

    Returns ``(status, reason)`` with status one of ``busy``, ``corrupt``,
    ``unreadable``; any exception is accepted (an ``OSError`` is classified by its
    text). Classification follows SQLite's extended error names where Python
    exposes them (3.11+), else the message text, in the spirit of upstream
    ``classify_persistence_error`` (docs/store.md §5.4).
    """
    exc = sqlite_cause(exc)
    name = getattr(exc, "sqlite_errorname", "") or ""
    text = str(exc)
    low = text.lower()
    # SQLite's own error name, when it raised the error, settles a lock: the text may
    # quote a path (".../locked-copies/state.db") that says nothing about one.
    locked = name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) if name else ("locked" in low or "busy" in low)
    if locked:
        return "busy", f"store is locked by another process; retry later ({text})"
    if "malformed database schema" in low:
        return "corrupt", f"SQLite refuses the schema: {text}"
    if name.startswith("SQLITE_CORRUPT") or "malformed" in low:
        return "corrupt", f"structural damage: {text}"
    if name == "SQLITE_NOTADB" or "not a database" in low:
        return "unreadable", "file is not an SQLite database"
    if name.startswith("SQLITE_CANTOPEN") or "unable to open" in low:
        return "unreadable", f"cannot open the file ({text})"
    if name.startswith(("SQLITE_PERM", "SQLITE_AUTH")):
        return "unreadable", f"permission denied ({text})"
    if low == "interrupted":
        return "busy", "query ran past its time budget; retry later"
    return "unreadable", text or exc.__class__.__name__
