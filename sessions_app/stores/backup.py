"""Backups of a store before the first write of a run (ground rule 4).

A backup is one step of SQLite's online backup API (``pages=-1``: the whole file
inside a single read transaction, so a busy agent cannot starve it; docs/architecture.md
§2, rule 4), taken from a read-only connection into the dashboard's own data folder, then
verified with ``PRAGMA integrity_check`` and hashed. The live file is never opened
with plain file I/O (ground rule 5); only the copy is hashed.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import secrets
import shutil
import sqlite3
from dataclasses import asdict, dataclass
from pathlib import Path

from django.conf import settings

from .connection import ro_uri
from .jsondecode import read_json_file
from .store import Store


FREE_MARGIN_BYTES = 256 * 1024 * 1024


def _size(path: Path) -> int:
    try:
        return path.stat().st_size  # stat, not open (ground rule 5)
    except OSError:
        return 0


class BackupError(Exception):
    """The copy could not be made or did not verify; nothing may be written then.
    ``no_space``: the data folder's disk lacks the room (retrying in the same run is
    pointless)."""

    def __init__(self, message: str, no_space: bool = False):
        super().__init__(message)
        self.no_space = no_space


@dataclass(frozen=True)
class BackupRecord:
    """Where a verified copy lies: ``path``, ``size`` in bytes, ``sha256`` hex."""

    path: str
    size: int
    sha256: str

    def as_dict(self) -> dict:
        return asdict(self)


def backups_dir() -> Path:
    return Path(settings.DATA_DIR) / "backups"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.@-]+", "_", text)[:80]


def backup_store(store: Store, label: str = "") -> BackupRecord:
    """Copy ``store`` into ``<data>/backups/<UTC stamp>-<profile>[-label]/state.db``.

    Raises :class:`BackupError` when the copy fails or ``integrity_check`` is not ok
    (the partial copy is kept for inspection, never used).
    """
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    unique = f"{os.getpid()}-{secrets.token_hex(3)}"
    final = backups_dir() / "-".join(p for p in (stamp, _slug(store.key), _slug(label), unique) if p)
    # Written under a ".partial" name and renamed once verified and described: a
    # process killed mid-copy leaves a folder purge_backups knows for garbage.
    folder = final.with_name(final.name + PARTIAL)
    try:
        folder.mkdir(parents=True, exist_ok=False)
    except OSError as exc:
        raise BackupError(f"cannot create the backup folder {folder}: {exc.strerror or exc}") from exc
    # The data folder often shares a disk with the Hermes home: filling it would make
    # Hermes' own writes fail. Ask for the store's size (plus its WAL) and a margin.
    need = sum(_size(p) for p in (store.path, Path(f"{store.path}-wal"))) * 1.1 + FREE_MARGIN_BYTES
    free = shutil.disk_usage(folder).free
    if free < need:
        folder.rmdir()
        raise BackupError(f"not enough free space for a backup in {backups_dir()} ({free} bytes free, "
                          f"{int(need)} needed)", no_space=True)
    target = folder / "state.db"
    try:
        source = sqlite3.connect(ro_uri(store.path), uri=True, timeout=settings.HERMES_READ_TIMEOUT)
        try:
            dest = sqlite3.connect(target)
            try:
                source.backup(dest, pages=-1)
                # The copy is ours: keep it a single self-contained file.
                dest.execute("PRAGMA journal_mode=DELETE")
                result = dest.execute("PRAGMA integrity_check").fetchall()
            finally:
                dest.close()
        finally:
            source.close()
    except sqlite3.Error as exc:
        shutil.rmtree(folder, ignore_errors=True)  # a partial copy is no backup
        raise BackupError(f"backup of {store.path} failed: {exc}") from exc
    if result != [("ok",)]:
        # Kept for inspection: the store itself may be damaged; say where it is.
        kept = final.with_name(final.name + ".unverified")
        try:
            os.rename(folder, kept)
        except OSError:
            kept = folder
        raise BackupError(f"backup of {store.path} failed integrity_check ({result[:3]}); copy left in {kept}")
    digest = hashlib.sha256()
    with open(target, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    record = BackupRecord(str(final / "state.db"), target.stat().st_size, digest.hexdigest())
    _write_manifest(folder, store, record)
    try:
        os.rename(folder, final)
    except OSError as exc:
        raise BackupError(f"the verified backup could not be put in place ({exc.strerror or exc}); "
                          f"it is in {folder}") from exc
    return record


MANIFEST = "backup.json"
PARTIAL = ".partial"  # suffix of a backup folder still being written
MANIFEST_MAX_BYTES = 1024 * 1024  # a manifest is a few fields; a bigger one is not ours


def _write_manifest(folder: Path, store: Store, record: BackupRecord) -> None:
    # Which store a copy is of, for retention per store (folder names are slugs and
    # profile keys may contain "-", so the name cannot be parsed back reliably).
    data = {"version": 1, "profile": store.key, "store_path": str(store.path),
            "created_at": dt.datetime.now(dt.timezone.utc).timestamp(), **record.as_dict()}
    (folder / MANIFEST).write_text(json.dumps(data, indent=1))


@dataclass(frozen=True)
class Backup:
    """One backup folder: ``path`` (the folder), ``store_path`` (the store it copies,
    ``""`` when unknown), ``profile`` key, ``created_at`` (epoch seconds; the folder's
    mtime when it has no manifest), ``size`` in bytes of its files, ``verified``
    (False for a copy left behind by a failed ``integrity_check`` or an older format)."""

    path: str
    store_path: str
    profile: str
    created_at: float
    size: int
    verified: bool


def list_backups(known: dict[str, tuple[str, str]] | None = None) -> list[Backup]:
    """Every folder under :func:`backups_dir`, oldest first. Never raises for a
    folder it cannot read: that one is listed as unverified, with its mtime.

    ``known`` maps a backup file path (``…/state.db``) to ``(store path, profile)``
    for copies recorded elsewhere as verified (the audit trail of runs older than
    the manifests); such a folder counts as a verified copy of that store."""
    known = known or {}
    root = backups_dir()
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    found = []
    for name in names:
        folder = root / name
        if not folder.is_dir() or folder.is_symlink():
            continue
        if name.endswith(PARTIAL):  # a copy still being taken, or one a killed process left
            try:
                found.append(Backup(str(folder), "", "", folder.stat().st_mtime,
                                    sum(_size(p) for p in folder.iterdir() if p.is_file()), False))
            except OSError:
                pass
            continue
        size = sum(_size(p) for p in folder.iterdir() if p.is_file())
        try:
            meta = read_json_file(folder / MANIFEST, max_bytes=MANIFEST_MAX_BYTES)  # Undecodable: TypeError below
            found.append(Backup(str(folder), str(meta["store_path"]), str(meta["profile"]),
                                float(meta["created_at"]), size, True))
        except (OSError, ValueError, KeyError, TypeError):
            try:
                mtime = folder.stat().st_mtime
            except OSError:
                continue
            store_path, profile = known.get(str(folder / "state.db"), ("", ""))
            found.append(Backup(str(folder), store_path, profile, mtime, size, bool(store_path)))
    found.sort(key=lambda b: (b.created_at, b.path))
    return found


GRACE_SECONDS = 3600  # never removed younger than this: a copy may still be being taken


def expired_backups(now: float | None = None, older_than_days: float | None = None,
                    keep: int | None = None, known: dict | None = None) -> list[Backup]:
    """What a purge removes: backups older than the retention
    (``HERMES_BACKUP_RETENTION_DAYS``), except the newest ``keep``
    (``HERMES_BACKUP_KEEP``, at least 1) verified copies of each store, whatever
    their age, so a store that is seldom repaired keeps its last good copies.
    Folders of no known store (failed copies) go by age alone. Nothing younger than
    :data:`GRACE_SECONDS` is removed: a deletion from the browser takes its backup
    outside the run lock, and its folder has no manifest until the copy verified.
    Raises ValueError for a negative retention."""
    now = dt.datetime.now(dt.timezone.utc).timestamp() if now is None else now
    days = settings.HERMES_BACKUP_RETENTION_DAYS if older_than_days is None else float(older_than_days)
    keep = max(1, settings.HERMES_BACKUP_KEEP if keep is None else int(keep))
    if days < 0:
        raise ValueError(f"the backup retention must be 0 days or more, not {days:g}")
    limit = min(now - days * 86400, now - GRACE_SECONDS)
    backups = list_backups(known)
    kept: set[str] = set()
    by_store: dict[str, list[Backup]] = {}
    for b in backups:
        if b.verified:
            by_store.setdefault(b.store_path, []).append(b)
    for copies in by_store.values():
        kept.update(b.path for b in copies[-keep:])
    # A ".partial" folder older than the grace is what a killed backup left: garbage,
    # whatever the retention (it never held a verified copy).
    partial_limit = now - GRACE_SECONDS
    return [b for b in backups if b.path not in kept and (
        b.created_at <= limit or (b.path.endswith(PARTIAL) and b.created_at <= partial_limit))]
