"""Bulk export of the sessions a list filter selects: one streamed ZIP, or a CSV.

The ZIP holds, under one top folder, ``<profile>/<session>.jsonl`` (Hermes'
transcript shape, :func:`.export.jsonl`) and ``<profile>/<session>.md``
(:func:`.export.markdown`) for every selected session, then ``sessions.csv`` (the
list rows) and ``export-notes.txt`` (what was selected, what was left out and
why). The CSV alone is those list rows.

Memory stays bounded whatever the count: the sessions are walked page by page with
the list's own keyset cursors (:func:`.listing.list_sessions`), each transcript is
a generator, the ZIP is written by the standard library's ``zipfile`` onto a
non-seekable sink that is drained after every piece (entries carry data
descriptors, ZIP64 sizes), the CSV rows wait in a spooled temporary file (memory
up to ``SPOOL_BYTES``, then disk) and so do the central directory's entries
(:class:`_SpooledInfos`), both written at the end (measured in
``docs/benchmarks.md``).

Listing reads each store at a glance (a locked store is left out and named in the
notes); the transcripts are read with the full read timeout (the export is those
sessions' own page). A store that fails midway ends that file with its error line
(:func:`.export.jsonl`), never a silently short file.
"""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import io
import pickle
import re
import sqlite3
import tempfile
import zipfile
from contextlib import ExitStack
from typing import Iterator

from ..csv_safe import Echo, cell
from ..secrets import mask
from . import export
from .listing import Filters, list_sessions
from .store import Store

PAGE = 200  # sessions per list page
DRAIN = 64 * 1024  # bytes gathered before a chunk is handed to the response
SPOOL_BYTES = 1024 * 1024  # CSV rows kept in memory before they spill to a temporary file
CSV_FIELDS = ("profile", "id", "title", "source", "state", "end_reason", "message_count", "started_at",
              "started_utc", "last_activity", "last_activity_utc", "parent_session_id", "model")


def safe_name(text: str) -> str:
    """A file name for a store value (session ids may hold ``/`` or anything): the
    harmless characters kept, plus a short hash of the original when any was
    replaced, so two ids never share a name."""
    text = str(text)
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:100].strip(".") or "session"
    if name != text:
        name += "-" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return name


def selected(stores: list[Store], filters: Filters, errors: dict | None = None) -> Iterator[dict]:
    """Every list row ``filters`` select across ``stores``, in the list's order, one
    page at a time. Stores that could not be read go into ``errors`` (profile key ->
    ``(status, reason)``)."""
    after = None
    while True:
        page = list_sessions(stores, filters, limit=PAGE, after=after)
        if errors is not None:
            errors.update(page.errors)
        yield from page.rows
        if page.next_cursor is None:
            return
        after = page.next_cursor


def _utc(value) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return dt.datetime.fromtimestamp(value, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        except (OverflowError, OSError, ValueError):
            return ""
    return ""


def csv_values(row: dict, title_mask=None) -> list:
    """One list row as CSV values (see CSV_FIELDS); ``title_mask`` masks the title."""
    title = row.get("title")
    if title_mask is not None:
        title = title_mask(title)
    values = (row.get("profile"), row.get("id"), title, row.get("source"),
              "ended" if row.get("ended_at") is not None else "open", row.get("end_reason"),
              row.get("message_count"), row.get("started_at"), _utc(row.get("started_at")), row.get("activity"),
              _utc(row.get("activity")), row.get("parent_session_id"), row.get("model"))
    return [cell(v) for v in values]


class _SpooledInfos:
    """Stands in for ``ZipFile.filelist``, the central directory's entries, which
    the format writes only at the end: each ``ZipInfo`` is pickled into a temporary
    file when its member is done and read back once, when ``zipfile`` writes the
    directory. ``zipfile`` only appends to that list, takes its length and iterates
    it (``_write_end_record``); so the export's memory does not grow with the number
    of files. Our own temporary file, never a store."""

    def __init__(self):
        self._file = tempfile.TemporaryFile()
        self._count = 0

    def append(self, info: zipfile.ZipInfo) -> None:
        self._file.seek(0, io.SEEK_END)
        pickle.dump(info, self._file, protocol=pickle.HIGHEST_PROTOCOL)
        self._count += 1

    def __len__(self) -> int:
        return self._count

    def __iter__(self):
        self._file.seek(0)
        for _ in range(self._count):
            yield pickle.load(self._file)

    def close(self) -> None:
        self._file.close()


class _Sink(io.RawIOBase):
    """A write-only, non-seekable stream collecting bytes until drained (``tell``
    raises, so ``zipfile`` writes data descriptors instead of seeking back)."""

    def __init__(self):
        super().__init__()
        self._parts: list[bytes] = []
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self._parts.append(bytes(data))
        self.size += len(data)
        return len(data)

    def drain(self) -> bytes:
        out = b"".join(self._parts)
        self._parts, self.size = [], 0
        return out


def zip_stream(stores: list[Store], full: dict[str, Store], filters: Filters, masked: bool,
               include_inactive: bool = False, describe: str = "") -> Iterator[bytes]:
    """The ZIP described in the module docstring, as chunks of bytes.

    ``stores``: what the list reads (glances); ``full``: profile key -> the store
    transcripts are read from; ``masked``: secrets masked as in single exports;
    ``describe``: the filters in words, for the notes.
    """
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    top = f"hermes-sessions-{stamp}"
    sink = _Sink()
    errors: dict = {}
    count = 0
    spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES, mode="w+", newline="", encoding="utf-8")
    # One read-only connection per store for all its sessions: opening one (path
    # checks, schema parse) was half the time per session. Autocommit, so no read
    # snapshot is held between statements.
    opened = ExitStack()
    conns: dict[str, sqlite3.Connection] = {}
    infos = _SpooledInfos()
    try:
        rows = csv.writer(spool)
        rows.writerow(CSV_FIELDS)
        with zipfile.ZipFile(sink, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
            zf.filelist = infos
            for row in selected(stores, filters, errors):
                store = full.get(row["profile"])
                if store is None:
                    continue
                conn = conns.get(store.key)
                if conn is None:
                    try:
                        conn = conns[store.key] = opened.enter_context(store.read(lenient=True))
                    except sqlite3.Error:
                        conn = None  # each export opens its own and ends with its error
                folder = f"{top}/{safe_name(row['profile'])}/{safe_name(row['id'])}"
                for ext, pieces in (
                        ("jsonl", export.jsonl(store, row["id"], False, include_inactive, masked=masked, conn=conn)),
                        ("md", export.markdown(store, row["id"], False, include_inactive, masked=masked,
                                               conn=conn))):
                    with zf.open(f"{folder}.{ext}", "w", force_zip64=True) as fh:
                        for piece in pieces:
                            fh.write(piece.encode("utf-8", "surrogatepass"))
                            if sink.size >= DRAIN:
                                yield sink.drain()
                    zf.NameToInfo.pop(f"{folder}.{ext}", None)  # a name index only reading needs
                rows.writerow(csv_values(row, mask if masked else None))
                count += 1
                if sink.size >= DRAIN:
                    yield sink.drain()
            spool.seek(0)
            with zf.open(f"{top}/sessions.csv", "w", force_zip64=True) as fh:
                while True:
                    text = spool.read(DRAIN)
                    if not text:
                        break
                    fh.write(text.encode("utf-8", "surrogatepass"))
                    if sink.size >= DRAIN:
                        yield sink.drain()
            zf.writestr(f"{top}/export-notes.txt", _notes(count, errors, masked, include_inactive, describe))
        yield sink.drain()
    finally:
        opened.close()
        infos.close()
        spool.close()


def _notes(count: int, errors: dict, masked: bool, include_inactive: bool, describe: str) -> str:
    lines = [f"hermes-admin export of {count} session(s), "
             f"{dt.datetime.now(dt.timezone.utc).strftime('%Y-%m-%d %H:%M:%S')} UTC.",
             f"Filters: {describe or 'none (every session)'}.",
             "Each session: <profile>/<session>.jsonl (a session_meta line, then one message per line, "
             "in messages.id order) and <profile>/<session>.md; sessions.csv lists them.",
             "Rewound and compacted rows: " + ("included." if include_inactive else "left out (visible rows only)."),
             "Secrets: " + ("masked." if masked else "as stored (not masked).")]
    for key, (status, reason) in sorted(errors.items()):
        lines.append(f"Profile {key} was left out: {status}: {reason}")
    return "\n".join(lines) + "\n"


def csv_stream(stores: list[Store], filters: Filters, masked: bool) -> Iterator[str]:
    """The selected list rows as CSV lines (see CSV_FIELDS); a store left out (busy,
    damaged) ends the file with a ``# profile … left out`` line."""
    writer = csv.writer(Echo())
    errors: dict = {}
    yield writer.writerow(CSV_FIELDS)
    buffer, size = [], 0
    for row in selected(stores, filters, errors):
        line = writer.writerow(csv_values(row, mask if masked else None))
        buffer.append(line)
        size += len(line)
        if size >= DRAIN:
            yield "".join(buffer)
            buffer, size = [], 0
    if buffer:
        yield "".join(buffer)
    for key, (status, reason) in sorted(errors.items()):
        yield writer.writerow([f"# profile {key} left out: {status}: {reason}"])
