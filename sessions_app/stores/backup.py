"""Backups of a store before the first write of a run (ground rule 4).

A backup is one step of SQLite's online backup API (``pages=-1``: the whole file
inside a single read transaction, so a busy agent cannot starve it, django-practice.md
2c), taken from a read-only connection into the dashboard's own data folder, then
verified with ``PRAGMA integrity_check`` and hashed. The live file is never opened
with plain file I/O (ground rule 5); only the copy is hashed.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import secrets
import shutil
import sqlite3
from dataclasses import asdict, dataclass
from pathlib import Path

from django.conf import settings

from .connection import ro_uri
from .store import Store


FREE_MARGIN_BYTES = 256 * 1024 * 1024


def _size(path: Path) -> int:
    try:
        return path.stat().st_size  # stat, not open (ground rule 5)
    except OSError:
        return 0


class BackupError(Exception):
    """The copy could not be made or did not verify; nothing may be written then."""


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
    folder = backups_dir() / "-".join(p for p in (stamp, _slug(store.key), _slug(label), unique) if p)
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
        raise BackupError(f"not enough free space for a backup in {backups_dir()} ({free} bytes free, {int(need)} needed)")
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
        raise BackupError(f"backup of {store.path} failed integrity_check ({result[:3]}); copy left in {folder}")
    digest = hashlib.sha256()
    with open(target, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return BackupRecord(str(target), target.stat().st_size, digest.hexdigest())
