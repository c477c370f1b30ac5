"""Checks on files beside the store (docs/store.md §1.2-§12.2, §5.3, §13 row 25-§13 row 27).

Ground rule 5: ``state.db``, ``-wal`` and ``-shm`` are never opened as plain
files here, only ``os.stat``-ed or listed; other files (``sessions/*.jsonl``, the
repair ledger JSON) may be read. Nothing is created, moved or deleted.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from .. import trash
from ..stores import copies, jsonl, session_files
from ..stores.jsondecode import read_json_file
from .base import Check, capped, chunks, placeholders, plural

REPAIR_LEDGER_CAP = 3  # upstream stops automatic repair after 3 failures (docs/store.md §1.2)
LEDGER_MAX_BYTES = 1024 * 1024  # the ledger is three fields; anything bigger is not one


def _size(path: Path) -> int | None:
    try:
        return os.stat(path).st_size
    except OSError:
        return None


def _listdir(path: Path) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


class WalOversized(Check):
    code = "wal_oversized"
    light = True
    severity = "warning"
    scope = "store"
    title = "Write-ahead log is very large"
    next_step = (
        "Find the process that keeps a read open (often an idle gateway or a long export; 'hermes doctor' "
        "names the holders) and restart it; Hermes' next checkpoint then shrinks the WAL. Never delete or "
        "truncate the -wal by hand."
    )
    explanation = (
        "The store's -wal file has grown past the threshold. Hermes checkpoints it regularly and "
        "caps it at 64 MiB, so a big WAL means checkpoints cannot finish: usually some process "
        "keeps a read open for a long time. Reads get slower and disk use grows until it stops."
    )

    def run(self, ctx):
        wal = Path(f"{ctx.store.path}-wal")
        size = _size(wal)
        limit = ctx.thresholds.wal_oversized_bytes
        if size is not None and size > limit:
            yield self.finding(None, 1, f"{wal.name} is {size / 2**20:.1f} MiB (threshold {limit / 2**20:.0f} MiB)",
                               {"path": str(wal), "wal_bytes": size, "threshold_bytes": limit})


def deleted_sidecar_holders(db_path: Path) -> list[dict]:
    """Processes holding an unlinked ``-wal``/``-shm`` of ``db_path`` (Linux only).

    psutil's ``open_files()`` drops descriptors whose file was deleted, so the
    descriptors are read from ``/proc/<pid>/fd`` (readlink, never open) as
    upstream ``refuse_deleted_wal_generation`` does (docs/store.md §5.3).
    """
    if sys.platform != "linux":
        return []
    real = os.path.realpath(db_path)
    targets = {f"{real}-wal (deleted)": "-wal", f"{real}-shm (deleted)": "-shm"}
    holders = []
    for proc in psutil.process_iter(["pid", "name"]):
        fd_dir = f"/proc/{proc.info['pid']}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"{fd_dir}/{fd}")
            except OSError:
                continue
            if link in targets:
                holders.append({"pid": proc.info["pid"], "name": proc.info["name"], "file": targets[link]})
                break
    return holders


class WalGenerationSplit(Check):
    code = "wal_generation_split"
    light = True
    severity = "critical"
    scope = "store"
    title = "A write-ahead log generation was lost"
    next_step = (
        "Quit every Hermes process of this profile, run 'hermes doctor' (and 'hermes doctor --fix'), then "
        "inspect the retired capture with 'hermes sessions recover --source <retired-wal> --inspect-only' "
        "before installing what it recovers. Never delete the -wal by hand."
    )
    explanation = (
        "Hermes found its -wal file replaced or deleted under a running process and saved the "
        "orphaned generation aside (state.db.retired-wal-*), or a process still holds a deleted "
        "-wal/-shm right now. Writes from that generation are not in the store. Quit every Hermes "
        "process of this profile, run 'hermes doctor', and recover the retired capture with "
        "'hermes sessions recover'. Never delete the -wal by hand."
    )

    def run(self, ctx):
        db = Path(ctx.store.path)
        captures = [n for n in _listdir(db.parent) if n.startswith(f"{db.name}.retired-wal-")]
        holders = deleted_sidecar_holders(db)
        if not captures and not holders:
            return
        parts = []
        if captures:
            parts.append(f"{plural(len(captures), 'retired WAL capture')} beside the store ({', '.join(captures[:3])})")
        if holders:
            parts.append("held deleted by " + ", ".join(f"pid {h['pid']} ({h['name']}, {h['file']})" for h in holders))
        yield self.finding(None, len(captures) + len(holders), "; ".join(parts),
                           {"retired_captures": captures, "deleted_sidecar_holders": holders})


class RepairLeftovers(Check):
    code = "repair_leftovers"
    light = True
    severity = "warning"
    scope = "store"
    title = "Traces of failed repairs"
    next_step = (
        "Look for what the damage cost (history_lost and orphan_messages findings of this profile) and "
        "recover it while the files are still there; then move the files into an archive outside the "
        "profile. A repair ledger at its limit means Hermes stopped repairing: fix the cause first."
    )
    explanation = (
        "Files Hermes leaves when it met a damaged store: forensic copies of a malformed database, "
        "quarantined empty or non-SQLite files, an unfinished repair scratch copy, or a repair "
        "ledger that reached its failure limit (Hermes then stops repairing automatically). "
        "The store was damaged at some point; check that nothing is missing, then archive them."
    )

    PATTERNS = ("malformed-backup-", "zeroed-", "notadb-", "repair-scratch", "backup-staging-")

    def run(self, ctx):
        db = Path(ctx.store.path)
        names = _listdir(db.parent)
        leftovers = [n for n in names if any(n.startswith(f"{db.name}.{p}") for p in self.PATTERNS)]
        ledger = self._ledger(db.parent / f"{db.name}.repair-attempts.json")
        if not leftovers and ledger is None:
            return
        parts = []
        if leftovers:
            parts.append(f"{plural(len(leftovers), 'leftover file')} ({', '.join(leftovers[:3])}{'…' if len(leftovers) > 3 else ''})")
        if ledger is not None:
            parts.append(f"repair ledger at {ledger.get('failed_attempts')} failed attempts: automatic repair is off")
        yield self.finding(None, len(leftovers) + (ledger is not None), "; ".join(parts),
                           {"files": capped(leftovers), "repair_ledger": ledger})

    @staticmethod
    def _ledger(path: Path) -> dict | None:
        """The ledger when it is at its failure cap; an unreadable ledger is ignored."""
        try:
            data = read_json_file(path, max_bytes=LEDGER_MAX_BYTES)
        except OSError:
            return None
        if not isinstance(data, dict):  # also an Undecodable: broken, huge or too deep
            return None
        failed = data.get("failed_attempts")
        return data if isinstance(failed, int) and failed >= REPAIR_LEDGER_CAP else None


# --------------------------------------------------------------------------- sessions/ files

@dataclass
class SessionFiles:
    """Files in ``sessions/`` that belong to one session id (``stores.session_files``):
    ``files`` all of them; ``jsonl`` its ``<id>.jsonl``; ``others`` the rest
    (snapshots ``session_<id>.json``, request dumps, ``<id>.json``)."""

    session_id: str
    jsonl: Path | None = None
    others: list[Path] = field(default_factory=list)
    files: list[session_files.SessionFile] = field(default_factory=list)


def session_id_of(name: str) -> tuple[str | None, str]:
    """``(session id, kind)`` of a ``sessions/`` file name; kind ``jsonl`` | ``other``.

    Kept for callers that only have a name; ``stores.session_files`` is the lister
    (it also maps 0.19.0's sanitised names back to the ids a store knows, and
    refuses store files under any name). ``session_<id>.json`` is session ``<id>``'s
    snapshot (0.19.0 ``_save_session_log``), never a file of a session ``session_<id>``.
    """
    parts = session_files.parse_name(name)
    if parts is None:
        return None, ""
    return parts.component, "jsonl" if parts.kind == "jsonl" else "other"


def known_ids(ctx) -> list[str]:
    """Ids the store knows (session rows, and message rows whose session is gone),
    to map sanitised file names back; in a restricted run, the one session."""
    if ctx.session_id is not None:
        return [ctx.session_id]

    def compute():
        ids = [r[0] for r in ctx.conn.execute("SELECT id FROM sessions")]
        ids += [r[0] for r in ctx.conn.execute(
            "SELECT DISTINCT session_id FROM messages WHERE session_id NOT IN (SELECT id FROM sessions)")]
        return [i for i in ids if isinstance(i, str)]

    return ctx.memo("known_ids", compute)


def guard_paths(ctx) -> list[Path]:
    """``state.db`` of this store and of every other known store (the store-file guard):
    every store the registry knows, busy ones too (the guard only ``stat``s them;
    ``ctx.other_stores`` may leave out stores found locked)."""
    from ..stores import registry

    known = {str(s.path): s for s in [*ctx.other_stores, *registry.stores()] if s.path != ctx.store.path}
    return session_files.store_paths_of(ctx.store, known.values())


def scan_sessions_dir(ctx) -> dict[str, SessionFiles]:
    """Session files in ``sessions/`` keyed by session id (restricted runs: one id)."""
    def compute():
        listed = session_files.list_session_files(
            ctx.store.profile.sessions_dir, store_paths=guard_paths(ctx), known_ids=known_ids(ctx),
            only_ids=None if ctx.session_id is None else [ctx.session_id])
        found: dict[str, SessionFiles] = {}
        for f in listed:
            files = found.setdefault(f.session_id, SessionFiles(f.session_id))
            files.files.append(f)
            if f.kind == "jsonl":
                files.jsonl = f.path
            else:
                files.others.append(f.path)
        return found

    return ctx.memo("sessions_dir", compute)


def json_copies(ctx, files: SessionFiles) -> list:
    """The snapshot / dump / ``<id>.json`` copies among ``files``, read once per pass:
    ``[(SessionFile, Copy or None, error)]``."""
    def compute():
        out = []
        for f in files.files:
            if f.kind == "jsonl":
                continue
            try:
                out.append((f, copies.read_file_copy(f, store_paths=guard_paths(ctx)), ""))
            except copies.CopyError as exc:
                out.append((f, None, str(exc)))
        return out

    return ctx.memo(f"json_copies:{files.session_id}", compute)


def existing_ids(ctx, ids: list[str]) -> set[str]:
    present: set[str] = set()
    for part in chunks(sorted(ids)):
        present.update(r[0] for r in ctx.conn.execute(
            f"SELECT id FROM sessions WHERE id IN ({placeholders(len(part))})", part))
    return present


def ids_with_messages(ctx, ids: list[str]) -> set[str]:
    present: set[str] = set()
    for part in chunks(sorted(ids)):
        present.update(r[0] for r in ctx.conn.execute(
            f"SELECT DISTINCT session_id FROM messages WHERE session_id IN ({placeholders(len(part))})", part))
    return present


@dataclass
class JsonlGap:
    """A session's JSONL file against its rows (``stores.jsonl``): the parsed file,
    the rows in the store, and the ordered alignment of the two."""

    file: jsonl.JsonlFile
    rows: int
    alignment: jsonl.Alignment

    @property
    def missing(self) -> int:
        return len(self.alignment.missing)


def jsonl_gap(ctx, files: SessionFiles) -> JsonlGap:
    """The file of ``files`` aligned with its session's rows (memoized per pass)."""
    def compute():
        parsed = jsonl.read_file(files.jsonl, files.session_id, store_path=ctx.store.path)
        rows = jsonl.store_rows(ctx.conn, ctx.caps, files.session_id) if parsed.messages else []
        return JsonlGap(parsed, len(rows), jsonl.align(parsed.messages, rows))

    return ctx.memo(f"jsonl:{files.session_id}", compute)


def bad_lines_text(bad: list) -> str:
    """``"line 7: broken JSON; line 9: unknown role 'narrator'"`` (first five)."""
    shown = "; ".join(f"line {b.number}: {b.problem}" for b in bad[:5])
    return shown + (f"; … ({len(bad)} in all)" if len(bad) > 5 else "")


class TranscriptOnDiskOnly(Check):
    code = "transcript_on_disk_only"
    severity = "critical"
    heal = "import_jsonl_transcript"
    title = "Messages exist only in a JSONL file"
    next_step = (
        "Use the repair. A file or line over the size limits (HERMES_ADMIN_JSONL_MAX_FILE_BYTES, "
        "HERMES_ADMIN_JSONL_MAX_LINE_BYTES) is never imported: raise the limit for this run, or keep the "
        "file as the record."
    )
    explanation = (
        "sessions/<id>.jsonl holds messages that are not in the store: a legacy gateway transcript "
        "that was never fully migrated (old Hermes loaded whichever copy was longer), or messages "
        "Hermes diverted to disk when the store was replaced or corrupt. Current Hermes reads only "
        "the store, so these messages are invisible until they are imported."
    )

    def run(self, ctx):
        scanned = scan_sessions_dir(ctx)
        with_jsonl = {sid: f for sid, f in scanned.items() if f.jsonl is not None}
        if not with_jsonl:
            return
        present = existing_ids(ctx, list(with_jsonl))
        for sid, files in sorted(with_jsonl.items()):
            gap = jsonl_gap(ctx, files)
            parsed = gap.file
            if gap.missing <= 0:
                if parsed.unread:  # a size limit kept part of it unread: it may hold messages
                    yield self.finding(sid, 1, f"{files.jsonl.name} was not read whole: {parsed.unread}; it may hold "
                                               "messages the store lacks, which are not imported", {
                        "path": str(files.jsonl), "file_bytes": parsed.size, "unread": parsed.unread,
                        "oversized_lines": capped(parsed.oversized), "session_exists": sid in present,
                    }, heal=None)
                continue
            where = "the store has " + plural(gap.rows, "row") if sid in present else "the session does not exist in the store"
            detail = (f"{files.jsonl.name} holds {plural(gap.missing, 'message')} the store lacks "
                      f"({len(parsed.messages)} in the file; {where})")
            if parsed.bad:
                detail += f"; {plural(len(parsed.bad), 'bad line')} will not be imported ({bad_lines_text(parsed.bad)})"
            yield self.finding(sid, gap.missing, detail, {
                "path": str(files.jsonl), "file_messages": len(parsed.messages), "store_rows": gap.rows,
                "missing": gap.missing, "malformed_lines": len(parsed.bad),
                "skipped_lines": len(parsed.meta) + len(parsed.skipped), "session_exists": sid in present,
                "bad_lines": capped([{"line": b.number, "problem": b.problem} for b in parsed.bad]),
            })


class LeftoverFiles(Check):
    code = "leftover_files"
    severity = "info"
    heal = "remove_leftover_files"
    title = "Files of a deleted session"
    next_step = (
        "Use the repair; a file that still holds messages is kept on purpose and is not moved."
    )
    explanation = (
        "Files in sessions/ (JSON dumps, request dumps, an empty transcript) belong to a session "
        "that no longer exists, and hold no message that could be imported. Hermes removes them "
        "when it deletes a session itself; these were left by another path. They may still hold "
        "private data; removing them moves them into the dashboard's trash. A file that still "
        "holds messages (a snapshot, a request dump, a transcript) is never among them: the store "
        "lacks every one of those messages, so that file is the only record of the conversation."
    )

    def run(self, ctx):
        scanned = scan_sessions_dir(ctx)
        if not scanned:
            return
        present = existing_ids(ctx, list(scanned)) | ids_with_messages(ctx, list(scanned))
        # A deletion or restore a killed process left halfway owns its sessions' files
        # until the next heal run finishes it (actions/deletion/resume.py).
        unfinished = trash.unfinished_targets(ctx.store.path)
        for sid, files in sorted(scanned.items()):
            if sid in present or sid in unfinished:
                continue  # a row, or messages whose row may come back (orphan_messages)
            if files.jsonl is not None and (jsonl_gap(ctx, files).file.messages or jsonl_gap(ctx, files).file.unread):
                continue  # messages to import, or lines too large to read: transcript_on_disk_only reports it
            kept = self._holding(ctx, files)
            names = sorted(f.name for f in files.files if f.name not in kept)
            if not names:
                continue
            detail = f"{plural(len(names), 'file')} of a session that no longer exists: {', '.join(names[:3])}"
            if kept:
                detail += (f"; {plural(len(kept), 'other file')} kept in place, holding messages the store lacks "
                           f"({', '.join(sorted(kept)[:3])})")
            yield self.finding(sid, len(names), detail, {
                "files": names, "sessions_dir": str(ctx.store.profile.sessions_dir),
                "kept": [{"file": n, "why": why} for n, why in sorted(kept.items())],
            })

    @staticmethod
    def _holding(ctx, files: SessionFiles) -> dict[str, str]:
        """File name -> why it stays: a copy holding messages (the session has no
        rows, so the store lacks all of them), or one that could not be read (it
        may hold some; nothing is moved on a guess)."""
        kept = {}
        for f, copy, error in json_copies(ctx, files):
            if copy is None:
                kept[f.name] = f"could not be read, so it may hold messages ({error})"
            elif copy.entries:
                kept[f.name] = (f"a {f.kind.replace('_', ' ')} holding {plural(copy.message_count, 'message')} "
                                "the store lacks (the session has no rows)")
            elif not copy.complete:
                kept[f.name] = f"damaged ({copy.error}); it may hold messages"
        return kept
