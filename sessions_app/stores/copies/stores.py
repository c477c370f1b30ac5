"""Copies of a session held in other SQLite files: the dashboard's verified backups
(``<data>/backups/*/state.db``) and the dashboard's trash (``rows.sqlite3`` of an
entry, the rows a deletion removed). Both are the dashboard's own files, written
once and never held by Hermes.

Each is read through a ``file:…?mode=ro`` connection with ``query_only`` (ground
rule 1); its sha256 is the one recorded when the copy was made (a backup's
``backup.json``), or hashed here before any connection to it is open (a trash
entry's ``rows.sqlite3``), never while one is (ground rule 5). The rows taken are
the session's visible rows (active, or compacted) in ``messages.id`` order.

Hermes' own copies beside the store are listed, not read (:func:`hermes_copies`):
``state.db.malformed-backup-*`` are raw forensic images of a damaged database,
``state-snapshots/*/state.db`` are WAL-mode images that a read-only connection
would give fresh ``-wal``/``-shm`` sidecars (the dashboard never creates
sidecars), and ``state.db.zeroed-*``/``state.db.notadb-*`` are files that were
not SQLite at all. ``hermes sessions recover`` and ``hermes backup`` restore them.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from ... import trash
from ..backup import list_backups
from ..connection import ro_uri
from .model import Copy, CopyError, CopyMessage, FIELDS, message_from_row


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _visible(columns: set[str]) -> str:
    if "active" not in columns:
        return "1"
    compacted = " OR compacted = 1" if "compacted" in columns else ""
    return f"(active IS NULL OR active != 0{compacted})"


def _read_rows(db: Path, session_id: str, wanted_ids=None) -> tuple[list[CopyMessage], set[str]]:
    """The session's visible message rows of the SQLite file ``db`` (read-only)."""
    try:
        conn = sqlite3.connect(ro_uri(db), uri=True, timeout=2.0, detect_types=0, isolation_level=None)
    except sqlite3.Error as exc:
        raise CopyError(f"{db} cannot be opened ({exc})") from exc
    try:
        conn.execute("PRAGMA query_only=1")
        columns = {r[1] for r in conn.execute("PRAGMA table_info(messages)")}
        if not {"id", "session_id", "role"} <= columns:
            raise CopyError(f"{db} holds no messages table")
        cols = ["id", "role", *(c for c in ("content", "timestamp", *FIELDS) if c in columns)]
        select = ", ".join(f'"{c}"' if c != "content" else 'CAST(content AS TEXT) AS content' for c in cols)
        cur = conn.execute(f"SELECT {select} FROM messages WHERE session_id = ? AND {_visible(columns)} ORDER BY id",
                           (session_id,))
        messages, index = [], 0
        for values in cur:
            row = dict(zip(cols, values))
            if row["role"] in ("system", "session_meta"):
                continue
            if wanted_ids is None or index in wanted_ids:
                messages.append(message_from_row(row, index))
            index += 1
        return messages, columns
    except sqlite3.Error as exc:
        raise CopyError(f"{db} cannot be read ({exc.__class__.__name__}: {exc})") from exc
    finally:
        conn.close()


def _store_copy(db: Path, kind: str, session_id: str, sha256: str, meta: dict) -> Copy:
    try:
        st = os.stat(db)
    except OSError as exc:
        raise CopyError(f"{db} is gone ({exc.strerror or exc})") from exc
    messages, _ = _read_rows(db, session_id)
    copy = Copy(db, kind, session_id, st.st_mtime, st.st_size, sha256, meta=meta)
    # Index = position among visible rows, so a re-read can find them again.
    copy.entries = [m.entry() for m in messages]
    refs = {m.index: m.ref for m in messages}

    def loader(wanted: set[int]) -> dict[int, CopyMessage]:
        again, _ = _read_rows(db, session_id, wanted)
        found = {m.index: m for m in again}
        if any(found[i].ref != refs.get(i) for i in found):
            raise CopyError(f"{db} changed since it was read")
        return found

    copy.loader = loader
    return copy


def backup_copies(store, session_id: str) -> list[Copy]:
    """The session as every verified dashboard backup of ``store`` holds it (only
    backups that hold at least one of its rows). A backup that cannot be read is
    skipped; its error is in the returned copy list as an empty, incomplete copy."""
    found = []
    for b in list_backups():
        if not b.verified or b.store_path != str(store.path):
            continue
        db = Path(b.path) / "state.db"
        try:
            meta = json.loads((Path(b.path) / "backup.json").read_text())
            sha = str(meta.get("sha256") or "")
        except (OSError, ValueError):
            sha = ""
        try:
            copy = _store_copy(db, "backup", session_id, sha, {"created_at": b.created_at})
        except CopyError as exc:
            found.append(Copy(db, "backup", session_id, b.created_at, b.size, sha, complete=False, error=str(exc)))
            continue
        if copy.entries:
            found.append(copy)
    return found


def trash_copies(store, session_id: str) -> list[Copy]:
    """The session as every trash entry of ``store`` that names it holds it."""
    found = []
    for entry in trash.list_entries():
        m = entry.manifest
        if m.get("store_path") not in (None, str(store.path)) or session_id not in (m.get("targets") or []):
            continue
        db = entry.rows_path
        if not db.is_file() or db.is_symlink():
            continue
        try:
            sha = _sha256_file(db)  # no connection to it is open yet
            copy = _store_copy(db, "trash", session_id, sha, {"entry": entry.id, "state": entry.state,
                                                               "deleted_at": entry.deleted_at})
        except (CopyError, OSError) as exc:
            found.append(Copy(db, "trash", session_id, 0.0, 0, "", complete=False, error=str(exc)))
            continue
        if copy.entries:
            found.append(copy)
    return found


@dataclass(frozen=True)
class UnreadCopy:
    """A copy of the store that exists but is not read: ``path``, ``kind``
    (``malformed_backup`` | ``state_snapshot`` | ``quarantined``), ``mtime`` epoch
    seconds, ``size`` bytes, and ``reason`` in words."""

    path: str
    kind: str
    mtime: float
    size: int
    reason: str


REASONS = {
    "malformed_backup": ("a raw forensic image Hermes took of a damaged database before repairing it; "
                         "not read here (it may not open, and would need its own sidecars)"),
    "state_snapshot": ("a Hermes quick snapshot (hermes backup --quick); not read here: opening a WAL-mode image "
                       "creates -wal/-shm files beside it, which the dashboard never does; "
                       "restore it with Hermes' own tools"),
    "quarantined": "a file Hermes moved aside because it was empty or not SQLite at all: it holds no messages",
}


def hermes_copies(store) -> list[UnreadCopy]:
    """Hermes' own copies of ``store`` (module docstring), listed by name and
    ``stat`` only: never opened."""
    db = Path(store.path)
    home = db.parent
    found = []
    candidates: list[tuple[Path, str]] = []
    try:
        names = sorted(os.listdir(home))
    except OSError:
        names = []
    for name in names:
        if not name.startswith(f"{db.name}.") or name.endswith(("-wal", "-shm", "-journal")):
            continue
        rest = name[len(db.name) + 1:]
        if rest.startswith("malformed-backup-"):
            candidates.append((home / name, "malformed_backup"))
        elif rest.startswith(("zeroed-", "notadb-")):
            candidates.append((home / name, "quarantined"))
    snaps = home / "state-snapshots"
    try:
        for name in sorted(os.listdir(snaps)):
            if not name.endswith(".partial"):
                candidates.append((snaps / name / "state.db", "state_snapshot"))
    except OSError:
        pass
    for path, kind in candidates:
        try:
            st = os.lstat(path)
        except OSError:
            continue
        found.append(UnreadCopy(str(path), kind, st.st_mtime, st.st_size, REASONS[kind]))
    return found
