"""The dashboard's data folder is private to the user it runs as.

The data folder (``HERMES_ADMIN_DATA``) holds session keys and password hashes
(``hermes_admin.sqlite3``), the secret key, the first admin's password, whole
store backups and deleted transcripts (the trash). Another local account that can
read any of it can log in as an admin or read every conversation.

So every process of the dashboard (``manage.py``, WSGI/ASGI, gunicorn: they all
import the settings first) runs with umask ``077`` (:func:`apply_umask`): every
folder and file it creates is ``0700`` / ``0600``, whatever umask the shell or the
service manager gave it. SQLite creates a new database with mode ``0644`` masked
by the umask (so ``0600``), and its ``-wal``/``-shm``/``-journal`` with the mode of
their database, so a Hermes store's sidecars keep the store's own mode.

Files moved in from a Hermes home (a deleted session's ``sessions/`` files, a
leftover file, an archived JSONL transcript) keep their owner and mode, so that a
restore puts them back exactly as they were; the ``0700`` folders above them keep
other users out. :func:`loose_paths` therefore leaves files under those folders
(:data:`MOVED_IN`) to their folders' check.

This module imports nothing from Django: the settings call it before anything
else is set up.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

PRIVATE_UMASK = 0o077
DIR_MODE = 0o700
FILE_MODE = 0o600
# Checked entries at most per start: a data folder may hold a large trash.
WALK_LIMIT = 20_000
# Relative folders whose files come from a Hermes home and keep their mode
# (``trash/files/<stamp>/…``, ``trash/sessions/<entry>/files/…``, ``archive/…``).
MOVED_IN = (("trash", "files"), ("trash", "sessions", "*", "files"), ("archive",))


def apply_umask() -> int:
    """Set the process umask to ``077``; returns the previous one."""
    return os.umask(PRIVATE_UMASK)


def make_private_dir(path: Path) -> None:
    """Create ``path`` (and missing parents) as ``0700`` folders. An existing
    folder keeps its mode (a looser one is reported by :func:`loose_paths`);
    raises ``OSError`` when it cannot be created."""
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to a new file ``path`` created ``0600`` (never readable by
    others, not even for a moment); raises ``FileExistsError`` when it exists."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), FILE_MODE)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


@dataclass(frozen=True)
class Loose:
    """A folder or file in the data folder that the group or others can access."""

    path: Path
    mode: int  # permission bits, e.g. 0o644
    is_dir: bool

    def __str__(self) -> str:
        return f"{self.path} ({'folder' if self.is_dir else 'file'}, mode {self.mode:04o})"


def _moved_in(relative: tuple[str, ...]) -> bool:
    for prefix in MOVED_IN:
        if len(relative) > len(prefix) and all(p == "*" or p == r for p, r in zip(prefix, relative)):
            return True
    return False


def loose_paths(root: Path, limit: int = WALK_LIMIT) -> tuple[Loose | None, list[Loose], bool]:
    """Group/world-accessible entries of the data folder ``root``.

    Returns ``(root itself if loose, loose entries inside, truncated)``: folders
    and files (symlinks are not followed and not judged) whose mode has any
    group or other bit; files moved in from a Hermes home (:data:`MOVED_IN`) are
    left to their folders, and ``cache/`` (installed hermes-agent releases) is not
    looked at. At most ``limit`` entries are looked at
    (``truncated`` then says so). A missing ``root`` gives ``(None, [], False)``.
    """
    try:
        st = os.lstat(root)
    except FileNotFoundError:
        return None, [], False
    top = Loose(root, stat.S_IMODE(st.st_mode), True) if st.st_mode & 0o077 else None
    found: list[Loose] = []
    seen = 0
    for folder, dirs, files in os.walk(root, followlinks=False, onerror=lambda exc: None):
        base = Path(folder)
        relative = base.relative_to(root).parts
        if relative == ():
            # cache/: the hermes-agent release venvs the demo and the tests install
            # (public code pip writes with its own modes; nothing of a user's in it).
            dirs[:] = [d for d in dirs if d != "cache"]
        for name, is_dir in [(d, True) for d in dirs] + [(f, False) for f in files]:
            seen += 1
            if seen > limit:
                return top, found, True
            if not is_dir and _moved_in(relative + (name,)):
                continue
            try:
                st = os.lstat(base / name)
            except OSError:
                continue  # gone meanwhile
            if stat.S_ISLNK(st.st_mode):
                continue
            if st.st_mode & 0o077:
                found.append(Loose(base / name, stat.S_IMODE(st.st_mode), stat.S_ISDIR(st.st_mode)))
    return top, found, False
