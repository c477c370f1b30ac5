"""Checks on files beside the store (reference 1.3-1.5, 6.5, 10.25-10.27).

Ground rule 5: ``state.db``, ``-wal`` and ``-shm`` are never opened as plain
files here, only ``os.stat``-ed or listed; other files (``sessions/*.jsonl``, the
repair ledger JSON) may be read. Nothing is created, moved or deleted.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from ..stores.transcript import JSON_PREFIX
from .base import Check, capped, chunks, placeholders, plural

REPAIR_LEDGER_CAP = 3  # upstream stops automatic repair after 3 failures (reference 1.3)
# JSONL lines that are bookkeeping, not conversation (reference 1.5); system rows
# are left out because the store keeps the system prompt on the session row.
SKIP_ROLES = ("session_meta", "system")


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
    severity = "warning"
    scope = "store"
    title = "Write-ahead log is very large"
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
    upstream ``refuse_deleted_wal_generation`` does (reference 6.5).
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
    severity = "critical"
    scope = "store"
    title = "A write-ahead log generation was lost"
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
    severity = "warning"
    scope = "store"
    title = "Traces of failed repairs"
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
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict):
            return None
        failed = data.get("failed_attempts")
        return data if isinstance(failed, int) and failed >= REPAIR_LEDGER_CAP else None


# --------------------------------------------------------------------------- sessions/ files

@dataclass
class SessionFiles:
    """Files in ``sessions/`` that belong to one session id."""

    session_id: str
    jsonl: Path | None = None
    others: list[Path] = field(default_factory=list)  # <id>.json, request_dump_<id>_*.json


def session_id_of(name: str) -> tuple[str | None, str]:
    """``(session id, kind)`` of a ``sessions/`` file name; kind ``jsonl`` | ``other``.

    Upstream names (reference 1.4, hermes-agent 0.19.0 ``_remove_session_files``):
    ``<id>.jsonl``, ``<id>.json``, ``request_dump_<id>_<YYYYmmdd>_<HHMMSS>_<µs>.json``.
    """
    if name.startswith(".") or name == "sessions.json":
        return None, ""
    if name.startswith("request_dump_") and name.endswith(".json"):
        parts = name[len("request_dump_"):-len(".json")].rsplit("_", 3)
        return (parts[0], "other") if len(parts) == 4 and parts[0] else (None, "")
    if name.endswith(".jsonl"):
        return name[:-len(".jsonl")] or None, "jsonl"
    if name.endswith(".json"):
        return name[:-len(".json")] or None, "other"
    return None, ""


def scan_sessions_dir(ctx) -> dict[str, SessionFiles]:
    """Session files in ``sessions/`` keyed by session id (restricted runs: one id)."""
    def compute():
        folder = Path(ctx.store.profile.sessions_dir)
        found: dict[str, SessionFiles] = {}
        try:
            entries = list(os.scandir(folder))
        except OSError:
            return found
        for entry in entries:
            if not entry.is_file(follow_symlinks=False):
                continue
            sid, kind = session_id_of(entry.name)
            if sid is None or (ctx.session_id is not None and sid != ctx.session_id):
                continue
            files = found.setdefault(sid, SessionFiles(sid))
            if kind == "jsonl":
                files.jsonl = folder / entry.name
            else:
                files.others.append(folder / entry.name)
        return found

    return ctx.memo("sessions_dir", compute)


def existing_ids(ctx, ids: list[str]) -> set[str]:
    present: set[str] = set()
    for part in chunks(sorted(ids)):
        present.update(r[0] for r in ctx.conn.execute(
            f"SELECT id FROM sessions WHERE id IN ({placeholders(len(part))})", part))
    return present


def _normal_content(value) -> str:
    """Content in one comparable form: structured content (a list/dict, or the
    store's ``\\x00json:`` text) as canonical JSON, text as is, None as ''."""
    if value is None:
        return ""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str):
        if not value.startswith(JSON_PREFIX):
            return value
        try:
            value = json.loads(value[len(JSON_PREFIX):])
        except ValueError:
            return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def message_identity(role, content, tool_call_id) -> str:
    """Digest of what makes a message the same message: role, content, tool call id."""
    text = "\x1f".join((str(role or ""), _normal_content(content), str(tool_call_id or "")))
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()


@dataclass
class JsonlSummary:
    """A JSONL transcript read line by line. ``identities`` counts message digests."""

    messages: int = 0
    malformed_lines: int = 0
    skipped_lines: int = 0
    identities: Counter = field(default_factory=Counter)


def read_jsonl(path: Path) -> JsonlSummary:
    """Parse ``path`` one line at a time; malformed lines are counted, never fatal."""
    summary = JsonlSummary()
    try:
        fh = open(path, "rb")
    except OSError:
        return summary
    with fh:
        for raw in fh:
            line = raw.strip()
            if not line:
                continue
            try:
                obj = json.loads(line.decode("utf-8", "replace"))
            except ValueError:
                summary.malformed_lines += 1
                continue
            role = obj.get("role") if isinstance(obj, dict) else None
            if not isinstance(role, str) or not role or role in SKIP_ROLES:
                summary.skipped_lines += 1
                continue
            summary.messages += 1
            summary.identities[message_identity(role, obj.get("content"), obj.get("tool_call_id"))] += 1
    return summary


def store_identities(ctx, session_id: str) -> Counter:
    """Digests of every row of the session (active or not: a rewound or compacted
    row is still in the store). Streams one row at a time."""
    counts: Counter = Counter()
    cur = ctx.conn.execute(
        "SELECT role, CAST(content AS BLOB), tool_call_id FROM messages WHERE session_id = ? ORDER BY id", (session_id,))
    for role, content, call_id in cur:
        counts[message_identity(role, content, call_id)] += 1
    return counts


def jsonl_gap(ctx, files: SessionFiles) -> tuple[JsonlSummary, int, int]:
    """``(summary, rows in store, messages the store lacks)`` for a session's JSONL."""
    def compute():
        summary = read_jsonl(files.jsonl)
        if not summary.messages:
            return summary, 0, 0
        stored = store_identities(ctx, files.session_id)
        missing = sum(max(0, n - stored.get(d, 0)) for d, n in summary.identities.items())
        return summary, sum(stored.values()), missing

    return ctx.memo(f"jsonl:{files.session_id}", compute)


class TranscriptOnDiskOnly(Check):
    code = "transcript_on_disk_only"
    severity = "critical"
    heal = "import_jsonl_transcript"
    title = "Messages exist only in a JSONL file"
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
            summary, stored, missing = jsonl_gap(ctx, files)
            if missing <= 0:
                continue
            where = "the store has " + plural(stored, "row") if sid in present else "the session does not exist in the store"
            yield self.finding(sid, missing, f"{files.jsonl.name} holds {plural(missing, 'message')} the store lacks "
                                             f"({summary.messages} in the file; {where})", {
                "path": str(files.jsonl), "file_messages": summary.messages, "store_rows": stored,
                "missing": missing, "malformed_lines": summary.malformed_lines,
                "skipped_lines": summary.skipped_lines, "session_exists": sid in present,
            })


class LeftoverFiles(Check):
    code = "leftover_files"
    severity = "info"
    heal = "remove_leftover_files"
    title = "Files of a deleted session"
    explanation = (
        "Files in sessions/ (JSON dumps, request dumps, an empty transcript) belong to a session "
        "that no longer exists, and hold no message that could be imported. Hermes removes them "
        "when it deletes a session itself; these were left by another path. They may still hold "
        "private data; removing them moves them into the dashboard's trash."
    )

    def run(self, ctx):
        scanned = scan_sessions_dir(ctx)
        if not scanned:
            return
        present = existing_ids(ctx, list(scanned))
        for sid, files in sorted(scanned.items()):
            if sid in present:
                continue
            if files.jsonl is not None and jsonl_gap(ctx, files)[0].messages:
                continue  # messages to import: transcript_on_disk_only reports it
            names = sorted(p.name for p in files.others + ([files.jsonl] if files.jsonl else []))
            yield self.finding(sid, len(names), f"{plural(len(names), 'file')} of a session that no longer exists: {', '.join(names[:3])}",
                               {"files": names, "sessions_dir": str(ctx.store.profile.sessions_dir)})
