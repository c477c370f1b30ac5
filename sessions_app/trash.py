"""The dashboard's trash for deleted sessions: what a deletion removed, kept for restore.

Each deletion (one session with its delegate children, or one compression lineage)
gets its own entry folder::

    <data>/trash/sessions/<UTC stamp>-<profile>-<session id>-<nonce>/
        manifest.json     who, when, which store, which sessions, counts, state
        rows.sqlite3      every row the deletion removed, one table per store table
        files/            the session's files moved out of the profile's sessions/

``rows.sqlite3`` holds the rows exactly as the store had them: it is filled by
SQLite itself (``INSERT … SELECT`` from the store, attached read-only), into
tables whose columns have no declared type, so no value is converted on the way
(storage class, bytes of TEXT and BLOB, REAL bits all kept). Restore reads them
back the same way. Nothing here opens ``state.db`` as a plain file (ground rule 5).

An entry is ``pending`` while its deletion runs, ``deleted`` once the store
transaction committed, ``restoring`` while a restore runs, ``restored`` after it;
when the deletion does not happen the entry is removed. An entry a killed process
left ``pending`` or ``restoring`` is settled by the next heal run from what the
store holds (``actions/deletion/resume.py``). Entries older than the retention
(``HERMES_TRASH_RETENTION_DAYS``) are removed by ``manage.py purge_trash``, as
are the leftover-file folders ``trash/files/<stamp>/`` of ``remove_leftover_files``;
never an unfinished entry holding rows, and a ``pending`` one without rows only once
it is also older than ``PENDING_GRACE_DAYS``, so ``--older-than 0`` never removes
the entry of a deletion that is still running.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import secrets
import shutil
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from .stores.connection import ro_uri

MANIFEST = "manifest.json"
ROWS = "rows.sqlite3"
FILES = "files"
ENTRY_RE = re.compile(r"^\d{8}-\d{6}-[A-Za-z0-9_.@-]{1,160}$")
STAMP_RE = re.compile(r"^(\d{8}-\d{6})")
DEFAULT_RETENTION_DAYS = 30.0
# A pending entry younger than this may belong to a deletion still running (they
# take seconds): never purged, whatever the retention asked for.
PENDING_GRACE_DAYS = 1.0


def trash_root() -> Path:
    return Path(settings.DATA_DIR) / "trash"


def sessions_trash() -> Path:
    return trash_root() / "sessions"


def retention_days() -> float:
    """``settings.HERMES_TRASH_RETENTION_DAYS`` (env ``HERMES_ADMIN_TRASH_RETENTION_DAYS``, default 30)."""
    value = getattr(settings, "HERMES_TRASH_RETENTION_DAYS", None)
    if value is None:
        value = os.environ.get("HERMES_ADMIN_TRASH_RETENTION_DAYS") or DEFAULT_RETENTION_DAYS
    return float(value)


def _slug(text: str, limit: int = 60) -> str:
    return re.sub(r"[^A-Za-z0-9_.@-]+", "_", text)[:limit].strip(".") or "x"


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass
class TrashEntry:
    """One trash entry (a folder); ``manifest`` is its parsed ``manifest.json``."""

    id: str
    path: Path
    manifest: dict

    @property
    def rows_path(self) -> Path:
        return self.path / ROWS

    @property
    def files_dir(self) -> Path:
        return self.path / FILES

    @property
    def state(self) -> str:
        return self.manifest.get("state", "pending")

    @property
    def profile(self) -> str:
        return self.manifest.get("profile", "")

    @property
    def deleted_at(self) -> float | None:
        return self.manifest.get("deleted_at") or self.manifest.get("created_at")

    @property
    def expires_at(self) -> float | None:
        start = self.deleted_at
        return None if start is None else start + retention_days() * 86400

    def save(self) -> None:
        """Write the manifest atomically (temp file + rename in the entry folder)."""
        tmp = self.path / f".{MANIFEST}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(self.manifest, indent=2, sort_keys=True, default=str))
        os.replace(tmp, self.path / MANIFEST)

    def update(self, **fields) -> None:
        self.manifest.update(fields)
        self.save()


def new_entry(profile: str, label: str, now: float | None = None, **manifest) -> TrashEntry:
    """Create an empty ``pending`` entry for a deletion about to happen (``label``:
    the session id, part of the folder name)."""
    now = time.time() if now is None else now
    stamp = dt.datetime.fromtimestamp(now, dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    name = f"{stamp}-{_slug(profile, 40)}-{_slug(label, 80)}-{secrets.token_hex(3)}"
    path = sessions_trash() / name
    path.mkdir(parents=True, exist_ok=False)
    entry = TrashEntry(name, path, {"version": 1, "state": "pending", "profile": profile,
                                    "created_at": now, "owner": owner(), **manifest})
    entry.save()
    return entry


def owner() -> dict:
    """Who is writing an entry now: ``{"pid", "started" (epoch seconds), "host"}``."""
    import socket

    import psutil

    try:
        started = psutil.Process().create_time()
    except psutil.Error:
        started = None
    return {"pid": os.getpid(), "started": started, "host": socket.gethostname()}


def owner_alive(entry: TrashEntry) -> bool:
    """Whether the process that last took ``entry`` (a deletion or a restore in
    progress) still runs on this host; any doubt counts as alive."""
    import socket

    import psutil

    who = entry.manifest.get("owner")
    if not isinstance(who, dict) or not isinstance(who.get("pid"), int):
        return False  # entries made before owners were recorded
    if who.get("host") != socket.gethostname():
        return True  # another host's process: not ours to judge
    if who["pid"] == os.getpid():
        return True
    try:
        proc = psutil.Process(who["pid"])
        started = who.get("started")
        return proc.status() != psutil.STATUS_ZOMBIE and (
            started is None or abs(proc.create_time() - float(started)) < 1.0)
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True


def get_entry(entry_id: str) -> TrashEntry | None:
    """The entry named ``entry_id`` (validated: a folder name, never a path), or None."""
    if not isinstance(entry_id, str) or not ENTRY_RE.match(entry_id):
        return None
    path = sessions_trash() / entry_id
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return TrashEntry(entry_id, path, manifest if isinstance(manifest, dict) else {})


def list_entries(profile: str | None = None) -> list[TrashEntry]:
    """Every readable entry, newest first (optionally of one profile)."""
    try:
        names = sorted(os.listdir(sessions_trash()), reverse=True)
    except OSError:
        return []
    found = []
    for name in names:
        entry = get_entry(name)
        if entry is not None and (profile is None or entry.profile == profile):
            found.append(entry)
    return found


def holds_rows(entry: TrashEntry) -> bool:
    """Whether the entry's export happened (it names its targets and has its rows file)."""
    return bool(entry.manifest.get("targets")) and entry.rows_path.exists()


def unfinished_targets(store_path) -> set[str]:
    """Session ids of ``store_path``'s entries left ``pending`` (with rows) or
    ``restoring`` by an interrupted process: their files are not leftovers."""
    found: set[str] = set()
    for entry in list_entries():
        if entry.manifest.get("store_path") == str(store_path) and (
                entry.state == "restoring" or (entry.state == "pending" and holds_rows(entry))):
            found.update(entry.manifest.get("targets") or ())
    return found


def discard(entry: TrashEntry) -> None:
    """Remove an entry whose deletion did not happen (nothing of the store is in it)."""
    shutil.rmtree(entry.path, ignore_errors=True)


# --------------------------------------------------------------------------- rows

def export_rows(entry: TrashEntry, store_path: Path, tables: dict[str, tuple],
                sets: dict[str, list[str]], extra: dict[str, list[tuple]] | None = None,
                timeout: float = 5.0) -> dict[str, int]:
    """Copy rows of the store into ``rows.sqlite3``; returns rows copied per table.

    ``tables`` maps a trash table to ``(columns, where)`` or ``(columns, where,
    store table)`` (default: the store table of the same name): ``where`` is an SQL
    condition on that table that may use the temp tables named in ``sets``
    (``temp.<name>(v)``, filled with the given values). ``extra`` adds tables of
    our own (``name -> rows``; two untyped columns ``a``, ``b``).

    The store is attached read-only to a connection of the trash file, so the
    copy is SQLite to SQLite, one read transaction (a consistent snapshot), and
    committed (durable) before this returns. The caller holds the store's write
    lock meanwhile, so the snapshot is exactly what it is about to delete.
    """
    conn = sqlite3.connect(entry.rows_path.absolute().as_uri(), uri=True, isolation_level=None,
                           timeout=timeout, detect_types=0)
    try:
        conn.execute("ATTACH DATABASE ? AS store", (ro_uri(store_path),))
        conn.execute("BEGIN")
        for name, values in sets.items():
            conn.execute(f"CREATE TEMP TABLE {_quote(name)} (v PRIMARY KEY)")
            conn.executemany(f"INSERT OR IGNORE INTO temp.{_quote(name)} (v) VALUES (?)", [(v,) for v in values])
        counts: dict[str, int] = {}
        for table, spec in tables.items():
            columns, where = spec[0], spec[1]
            source = spec[2] if len(spec) > 2 else table
            cols = ", ".join(_quote(c) for c in columns)
            conn.execute(f"CREATE TABLE main.{_quote(table)} ({cols})")
            order = " ORDER BY id" if table == "messages" else ""
            cur = conn.execute(f"INSERT INTO main.{_quote(table)} ({cols}) SELECT {cols} FROM store.{_quote(source)} "
                               f"WHERE {where}{order}")
            counts[table] = cur.rowcount
        for name, rows in (extra or {}).items():
            conn.execute(f"CREATE TABLE main.{_quote(name)} (a, b)")
            conn.executemany(f"INSERT INTO main.{_quote(name)} (a, b) VALUES (?, ?)", rows)
        conn.execute("COMMIT")
        conn.execute("DETACH DATABASE store")
    finally:
        conn.close()
    return counts


def rows_tables(entry: TrashEntry) -> dict[str, tuple[str, ...]]:
    """Tables of an entry's ``rows.sqlite3`` and their columns."""
    conn = sqlite3.connect(entry.rows_path.absolute().as_uri() + "?mode=ro", uri=True, detect_types=0)
    try:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {n: tuple(c[1] for c in conn.execute(f"PRAGMA table_info({_quote(n)})")) for n in names}
    finally:
        conn.close()


# --------------------------------------------------------------------------- purge

@dataclass
class Purged:
    """One thing purge removed (or would remove): ``kind`` is ``entry`` or ``files``."""

    kind: str
    path: str
    profile: str
    age_days: float
    state: str = ""
    session_ids: tuple = ()


def _stamp_time(name: str) -> float | None:
    match = STAMP_RE.match(name)
    if not match:
        return None
    try:
        return dt.datetime.strptime(match.group(1), "%Y%m%d-%H%M%S").replace(tzinfo=dt.timezone.utc).timestamp()
    except ValueError:
        return None


def expired(now: float | None = None, older_than_days: float | None = None) -> list[Purged]:
    """What a purge removes: entries (and leftover-file folders) older than the retention;
    ``pending`` entries only when also older than :data:`PENDING_GRACE_DAYS`."""
    now = time.time() if now is None else now
    days = retention_days() if older_than_days is None else float(older_than_days)
    limit = now - days * 86400
    pending_limit = min(limit, now - PENDING_GRACE_DAYS * 86400)
    found: list[Purged] = []
    for entry in list_entries():
        # An unfinished entry holding exported rows is settled by the next heal run
        # (actions/deletion/resume.py), never purged: it may hold the only copy of a
        # session's rows or files. A pending entry past the grace without rows
        # belongs to a deletion interrupted before its export: it holds nothing.
        if entry.state == "restoring" or (entry.state == "pending" and holds_rows(entry)):
            continue
        start = entry.deleted_at
        if start is not None and start <= (pending_limit if entry.state == "pending" else limit):
            found.append(Purged("entry", str(entry.path), entry.profile, (now - start) / 86400, entry.state,
                                tuple(entry.manifest.get("targets", ()))))
    files_root = trash_root() / "files"
    try:
        stamps = sorted(os.listdir(files_root))
    except OSError:
        stamps = []
    for name in stamps:
        when = _stamp_time(name)
        if when is not None and when <= limit and (files_root / name).is_dir():
            found.append(Purged("files", str(files_root / name), "", (now - when) / 86400))
    return found
