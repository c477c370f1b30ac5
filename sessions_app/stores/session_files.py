"""A profile's ``sessions/`` files: which session each belongs to, and of what kind.

The one lister of session files (checks, recovery, and the trash/move/delete
actions use it), so that every part of the dashboard agrees on what a file is.

File names, as Hermes writes them (hermes-agent 0.19.0; docs/store.md, "Copies of
a conversation outside state.db"):

=================  ==================================================  =====================================
kind               name                                                writer
=================  ==================================================  =====================================
``snapshot``       ``session_<sid>.json``                              ``run_agent.py`` ``_save_session_log``
``request_dump``   ``request_dump_<sid>_<YYYYmmdd_HHMMSS_ffffff>.json`` ``agent_runtime_helpers.py``
                                                                       ``dump_api_request_debug``
``jsonl``          ``<id>.jsonl``                                      legacy gateway transcripts, divert spool
``json``           ``<id>.json``                                       legacy per-session dumps (removed by
                                                                       ``SessionDB._remove_session_files``)
=================  ==================================================  =====================================

``<sid>`` is the id after :func:`safe_component` (0.19.0's
``_safe_session_filename_component``: every character outside ``[A-Za-z0-9_-]``
becomes ``_``, leading/trailing ``.``/``_`` are stripped, at most 96 characters,
and when that changed the id a ``_`` plus the first 12 hex digits of the id's
sha256 are appended). Releases before 0.19.0 used the raw id. So a name is mapped
to a session by comparing its component with the components of the ids the store
knows (``known_ids``); a component no known id produces is taken as the id itself
(the session is gone, or never reached the store).

A name could be read two ways: ``session_abc.json`` is the snapshot of ``abc`` or
the ``<id>.json`` of a session called ``session_abc``. A known id wins; otherwise
it is a snapshot (what 0.19.0 writes).

The store-file guard (ground rule 5, docs/store.md §1.2): a
path is never listed when it is not a regular file (symlinks are not followed),
when its name is a store's or a sidecar's (``state.db*``, ``*-wal``, ``*-shm``,
``*-journal``), or when it is one of the known stores' ``state.db``/``-wal``/
``-shm``/``-journal`` under another name (same ``st_dev``/``st_ino``: a hard link).
Everything is decided with ``os.lstat``/``os.stat``: this module never opens a file.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

KINDS = ("snapshot", "request_dump", "jsonl", "json")
STORE_SUFFIXES = ("", "-wal", "-shm", "-journal")
SIDECAR_SUFFIXES = ("-wal", "-shm", "-journal")
# Names Hermes keeps in sessions/ that are no session's file (docs/store.md).
NOT_SESSION_FILES = ("sessions.json",)
_STAMP_RE = re.compile(r"^(.+)_(\d{8}_\d{6}_\d{6})$")
_UNSAFE = re.compile(r"[^\w-]")


def safe_component(session_id: str) -> str:
    """The file-name component Hermes 0.19.0 derives from ``session_id``
    (``run_agent._safe_session_filename_component``, reproduced exactly: the
    ``\\w`` class is Python's Unicode one, as upstream's)."""
    raw = str(session_id or "").strip()
    sanitized = _UNSAFE.sub("_", raw).strip("._")
    sanitized = sanitized[:96] or "session"
    if raw and sanitized == raw:
        return sanitized
    digest = hashlib.sha256(raw.encode("utf-8", errors="surrogatepass")).hexdigest()[:12]
    return f"{sanitized}_{digest}"


def components(session_id: str) -> tuple[str, ...]:
    """Every component a file of ``session_id`` may carry: the sanitised one
    (0.19.0) and the raw id (earlier releases, and ``<id>.jsonl``/``<id>.json``)."""
    safe = safe_component(session_id)
    return (safe,) if safe == session_id else (safe, session_id)


@dataclass(frozen=True)
class NameParts:
    """What a file name says: ``kind``, the id ``component`` in it, and for a
    request dump its ``stamp`` (``YYYYmmdd_HHMMSS_ffffff``, local time)."""

    kind: str
    component: str
    stamp: str = ""

    def alternatives(self) -> list["NameParts"]:
        """Other readings of the same name (a ``session_x.json`` is also the
        ``<id>.json`` of a session ``session_x``)."""
        if self.kind == "snapshot":
            return [NameParts("json", f"session_{self.component}")]
        return []


def is_sidecar_name(name: str) -> bool:
    """A store's or a sidecar's name: never a session file, whatever it holds."""
    return name.startswith("state.db") or name.endswith(SIDECAR_SUFFIXES)


def parse_name(name: str) -> NameParts | None:
    """The kind and id component of a ``sessions/`` file name, or None for a
    name that is no session's file (hidden, ``sessions.json``, a sidecar name,
    another extension, an empty id)."""
    if not name or name.startswith(".") or name in NOT_SESSION_FILES or "/" in name or is_sidecar_name(name):
        return None
    if name.endswith(".jsonl"):
        sid = name[:-len(".jsonl")]
        return NameParts("jsonl", sid) if sid else None
    if not name.endswith(".json"):
        return None
    stem = name[:-len(".json")]
    if stem.startswith("request_dump_"):
        match = _STAMP_RE.match(stem[len("request_dump_"):])
        if match:
            return NameParts("request_dump", match.group(1), match.group(2))
    if stem.startswith("session_") and len(stem) > len("session_"):
        return NameParts("snapshot", stem[len("session_"):])
    return NameParts("json", stem) if stem else None


def stamp_time(stamp: str) -> float | None:
    """Epoch seconds of a request dump's stamp (naive local time, as Hermes'
    ``datetime.now().strftime`` wrote it), or None."""
    try:
        return dt.datetime.strptime(stamp, "%Y%m%d_%H%M%S_%f").timestamp()
    except (ValueError, OverflowError, OSError):
        return None


def store_identities(store_paths: Iterable) -> set[tuple[int, int]]:
    """``(st_dev, st_ino)`` of every existing ``state.db``/``-wal``/``-shm``/
    ``-journal`` of the given stores (``os.stat`` only, no descriptor)."""
    found = set()
    for db in store_paths:
        for suffix in STORE_SUFFIXES:
            try:
                st = os.stat(f"{db}{suffix}")
            except OSError:
                continue
            found.add((st.st_dev, st.st_ino))
    return found


@dataclass(frozen=True)
class SessionFile:
    """One listed file: ``path``, ``name``, ``kind`` (:data:`KINDS`), the
    ``session_id`` it belongs to, the ``component`` its name carries, ``size``
    in bytes, ``mtime`` epoch seconds, and for request dumps ``stamp``."""

    path: Path
    name: str
    kind: str
    session_id: str
    component: str
    size: int
    mtime: float
    stamp: str = ""


class Resolver:
    """Maps name components to session ids (module docstring)."""

    def __init__(self, known_ids: Iterable[str] = ()):
        self.by_component: dict[str, str] = {}
        for sid in known_ids:
            for comp in components(sid):
                # The raw id wins over another id's sanitised form.
                if comp == sid or comp not in self.by_component:
                    self.by_component[comp] = sid

    def resolve(self, parts: NameParts) -> tuple[NameParts, str]:
        """``(reading, session id)`` of a parsed name."""
        for reading in [parts, *parts.alternatives()]:
            sid = self.by_component.get(reading.component)
            if sid is not None:
                if reading is parts or reading.component == sid:
                    return reading, sid
        return parts, parts.component


def refusal(path: Path, identities: set[tuple[int, int]]) -> str:
    """Why ``path`` must not be listed ('' when it may): not a regular file, a
    sidecar name, or a known store's file under another name."""
    if is_sidecar_name(path.name):
        return "a store or sidecar name"
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"cannot stat it ({exc.strerror or exc})"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if (st.st_dev, st.st_ino) in identities:
        return "a store's own database file under another name"
    return ""


def list_session_files(sessions_dir, *, store_paths: Iterable, known_ids: Iterable[str] = (),
                       only_ids: Iterable[str] | None = None) -> list[SessionFile]:
    """Session files in ``sessions_dir``, sorted by session id, kind, name.

    ``store_paths``: every known store's ``state.db`` (at least the profile's own);
    their files are refused under any name (the store-file guard). ``known_ids``:
    the store's session ids, to map sanitised names back. ``only_ids``: keep files
    of these sessions only. A missing or unreadable folder lists nothing.
    """
    folder = Path(sessions_dir)
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    # The guard's identities (four stats per known store) are taken when a name first
    # needs them: a session page's folder mostly holds no file of its session.
    identities = None
    resolver = Resolver(known_ids)
    wanted = set(only_ids) if only_ids is not None else None
    # A file resolves to a session only through a component of that session's id
    # (Resolver: a known id's component, or the name's own component taken as the id),
    # and both readings keep the component inside the name. So a name holding none of
    # the wanted ids' components is no file of theirs: skipped before it is parsed (a
    # session page's own files among 26,000 snapshots were ~90 ms of parsing).
    needles = None if wanted is None else {c for sid in wanted for c in components(sid)}
    found = []
    for name in names:
        if needles is not None and not any(n in name for n in needles):
            continue
        parts = parse_name(name)
        if parts is None:
            continue
        reading, sid = resolver.resolve(parts)
        if wanted is not None and sid not in wanted:
            continue
        path = folder / name
        if identities is None:
            identities = store_identities(store_paths)
        if refusal(path, identities):
            continue
        try:
            st = os.lstat(path)
        except OSError:
            continue
        found.append(SessionFile(path, name, reading.kind, sid, reading.component, st.st_size, st.st_mtime,
                                 reading.stamp))
    found.sort(key=lambda f: (f.session_id, KINDS.index(f.kind), f.name))
    return found


def files_of(sessions_dir, session_id: str, *, store_paths: Iterable) -> list[SessionFile]:
    """The files of one session (its id resolves its own sanitised names)."""
    return list_session_files(sessions_dir, store_paths=store_paths, known_ids=[session_id], only_ids=[session_id])


def belongs_to(name: str, session_id: str) -> bool:
    """Whether the file name ``name`` is one of ``session_id``'s files."""
    parts = parse_name(name)
    if parts is None:
        return False
    reading, sid = Resolver([session_id]).resolve(parts)
    return sid == session_id


def store_paths_of(store, others: Iterable = ()) -> list[Path]:
    """``state.db`` paths for the guard: ``store``'s and the ``others``' (Store objects)."""
    # Store.path is a Path already (a profile's, computed once): kept as it is, not
    # parsed again (a whole check pass asked for these twice per session analysed).
    return [_as_path(store.path), *(_as_path(o.path) for o in others)]


def _as_path(value) -> Path:
    return value if isinstance(value, Path) else Path(value)
