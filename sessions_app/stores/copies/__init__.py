"""Every copy of a session on disk, read into one shape (``model``).

Public API::

    copies_of(store, session_id, *, others=(), store_copies=True) -> CopySet
    read_file_copy(session_file, *, store_paths) -> Copy          # one sessions/ file
    read_json_copy(path, kind, session_id, *, store_paths) -> Copy
    read_jsonl_copy(path, session_id, *, store_path) -> Copy
    backup_copies(store, session_id) -> list[Copy]
    trash_copies(store, session_id) -> list[Copy]
    hermes_copies(store) -> list[UnreadCopy]
    Copy, CopyMessage, Entry, Provenance, CopyError, UnreadCopy

Everything here is read-only: no copy is ever modified, moved or created.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import session_files
from .files import read_json_copy, read_jsonl_copy
from .model import COPY_KINDS, Copy, CopyError, CopyMessage, Entry, Provenance
from .stores import UnreadCopy, backup_copies, hermes_copies, trash_copies

__all__ = ["COPY_KINDS", "Copy", "CopyError", "CopyMessage", "CopySet", "Entry", "Provenance", "UnreadCopy",
           "backup_copies", "copies_of", "hermes_copies", "read_file_copy", "read_json_copy", "read_jsonl_copy",
           "trash_copies"]


def read_file_copy(f: session_files.SessionFile, *, store_paths) -> Copy:
    """The copy in one listed ``sessions/`` file. Raises :class:`CopyError`."""
    store_paths = list(store_paths)
    if f.kind == "jsonl":
        copy = read_jsonl_copy(f.path, f.session_id, store_path=store_paths[0])
    else:
        copy = read_json_copy(f.path, f.kind, f.session_id, store_paths=store_paths)
    if f.stamp:
        copy.meta.setdefault("stamp", f.stamp)
    return copy


@dataclass
class CopySet:
    """What the disk holds of one session: ``copies`` (read; possibly incomplete),
    ``failed`` (``{"path", "kind", "error"}`` for files that could not be read at
    all), ``unread`` (Hermes' own store copies, listed with the reason they are
    not read)."""

    session_id: str
    copies: list[Copy] = field(default_factory=list)
    failed: list[dict] = field(default_factory=list)
    unread: list[UnreadCopy] = field(default_factory=list)


def copies_of(store, session_id: str, *, others=(), store_copies: bool = True,
              files: list[session_files.SessionFile] | None = None) -> CopySet:
    """Every copy of ``session_id`` of ``store``: its ``sessions/`` files (``files``
    when the caller listed them already), and with ``store_copies`` the
    dashboard's backups and trash entries, plus Hermes' own store copies listed as
    unread. ``others``: the other known stores, whose files the guard refuses too."""
    paths = session_files.store_paths_of(store, others)
    if files is None:
        files = session_files.files_of(store.profile.sessions_dir, session_id, store_paths=paths)
    result = CopySet(session_id)
    for f in files:
        try:
            result.copies.append(read_file_copy(f, store_paths=paths))
        except CopyError as exc:
            result.failed.append({"path": str(f.path), "kind": f.kind, "error": str(exc)})
    if store_copies:
        for copy in backup_copies(store, session_id) + trash_copies(store, session_id):
            if copy.error and not copy.entries:
                result.failed.append({"path": str(copy.path), "kind": copy.kind, "error": copy.error})
            else:
                result.copies.append(copy)
        result.unread = hermes_copies(store)
    return result
