"""``import_jsonl_transcript``: messages that exist only in ``sessions/<id>.jsonl``.

Issue 4 section 1, docs/store.md §1.3, §12.2 and §12.2. The file is parsed and aligned with
the session's rows by ``stores.jsonl`` (the same code the ``transcript_on_disk_only``
check uses), then, in one guarded write transaction after the backup:

1. the session row is created when missing (``id``, ``source`` from the file's
   ``session_meta`` lines else ``'unknown'``, ``started_at`` = the earliest message
   time, ``profile_name`` = the store's profile), as ``recreate_session_row`` does;
2. every message the store lacks is INSERTed into ``messages`` with the file's own
   timestamp, so the store's triggers keep FTS search (and display order) in sync;
3. readers order by ``messages.id`` (ground rule 10), so when missing messages come
   *before* rows the store already has, those later (visible) rows are superseded:
   written again after the imported ones, byte for byte (``INSERT … SELECT``; ids and
   display order are the store's own). The originals are kept and hidden with
   ``active = 0`` (and ``compacted = 0``: the rewound state, shown nowhere). On
   schemas without that column (before hermes-agent 0.17) hiding is impossible, so
   such an import is blocked by the rule ``recover_messages`` follows too
   (``transcript_order.blocked_on_schema``): only messages after the session's last
   row can be imported there;
4. ``message_count`` is recounted to the active rows and ``tool_call_count`` grows by
   the imported tool calls (what upstream appends do, docs/store.md §4.1).

Bad lines (broken JSON, a bare string, an unknown role, ``session_meta``, nesting
too deep, a lone surrogate) are reported with their line numbers and never
imported. The file is read only as ``stores.jsonl.open_transcript`` allows (a
regular file, no symlink, never the store's own files). The file itself is never
modified; after a verified import it is moved into ``<data>/archive/jsonl/`` when
``settings.HERMES_ARCHIVE_IMPORTED_JSONL`` is on (default off), never deleted, and
only while it is still exactly the file the plan was made from: a turn diverted into
it after the import committed would otherwise be archived unimported. A second run
finds nothing to import.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from ..stores import jsonl
from ..stores.liveness import idle_seconds_setting
from ..stores.transcript import JSON_PREFIX
from ..timefmt import human_duration
from .base import Action, Change, Changed, one
from .files import move_without_loss
from .session_rows import message_facts, recount_changes
from .transcript_order import SCHEMA_NEXT_STEP, blocked_on_schema, recount, write_in_order

# JSONL fields written to the column of the same name, by kind of value.
TEXT_FIELDS = ("tool_call_id", "tool_name", "finish_reason", "reasoning", "reasoning_content",
               "platform_message_id", "api_content", "display_kind", "effect_disposition")
JSON_FIELDS = ("tool_calls", "reasoning_details", "codex_reasoning_items", "codex_message_items", "display_metadata")
INT_FIELDS = ("token_count", "observed", "_compressed_summary", "active", "compacted")


def jsonl_path(store, session_id: str) -> Path | None:
    """``<profile home>/sessions/<session_id>.jsonl`` (docs/store.md §1.3), or None for an id
    that cannot name a file there (a path separator, a leading dot, a NUL)."""
    if not session_id or session_id.startswith(".") or any(c in session_id for c in "/\\\x00"):
        return None
    return Path(store.profile.sessions_dir) / f"{session_id}.jsonl"


def archive_dir() -> Path:
    return Path(settings.DATA_DIR) / "archive"


def _content(value):
    if value is None or isinstance(value, str):
        return value
    return JSON_PREFIX + json.dumps(value, ensure_ascii=False)


def row_values(data: dict, columns: tuple[str, ...]) -> tuple[dict, list[str]]:
    """Column values of one message line for a store with ``columns``, and the
    fields with a value this store has no column for (or a value of the wrong kind)."""
    values = {"role": data["role"], "content": _content(data.get("content"))}
    dropped = []
    for name in TEXT_FIELDS + JSON_FIELDS + INT_FIELDS:
        value = data.get(name)
        if value is None or (name in JSON_FIELDS and value in ([], {}, "")):
            continue
        if name in TEXT_FIELDS and not isinstance(value, str):
            value = str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        elif name in JSON_FIELDS and not isinstance(value, str):
            value = json.dumps(value, ensure_ascii=False)
        elif name in INT_FIELDS:  # SQLite integers are 64-bit: a bigger one is not kept
            value = int(value) if isinstance(value, (int, bool)) and -2**63 <= value < 2**63 else None
        if value is None or name not in columns:
            dropped.append(name)
            continue
        values[name] = value
    return values, dropped


def _tool_call_entries(data: dict) -> int:
    calls = data.get("tool_calls")
    if isinstance(calls, str):
        try:
            calls = json.loads(calls)
        except ValueError:
            return 0
    return len(calls) if isinstance(calls, list) else 0


@dataclass
class ImportAnalysis:
    """The file against the store: what to insert and which rows to supersede.

    ``operations`` are, in transcript order from the first missing message on,
    ``("insert", line index)`` and ``("copy", row index)`` (a visible row written
    again after the imported ones). Rows before the first missing message, and
    hidden rows anywhere, stay where they are.
    """

    file: jsonl.JsonlFile
    alignment: jsonl.Alignment
    session_exists: bool
    times: list[float]
    inferred_times: int

    @property
    def missing(self) -> list[int]:
        return self.alignment.missing

    @property
    def operations(self) -> list[tuple[str, int]]:
        merged = self.alignment.merged
        start = next((n for n, item in enumerate(merged) if item[0] == "line"), None)
        if start is None:
            return []
        rows = self.alignment.rows
        ops: list[tuple[str, int]] = []
        for item in merged[start:]:
            if item[0] == "line":
                ops.append(("insert", item[1]))
            else:
                j = item[-1]
                if rows[j].visible:
                    ops.append(("copy", j))
        return ops

    @property
    def matched_hidden(self) -> int:
        """File messages matched by a hidden (rewound) row: in the store, not shown."""
        rows = self.alignment.rows
        return sum(1 for _, j in self.alignment.pairs if not rows[j].visible)

    def digest(self) -> list:
        """What the plan depends on in the store: the rows' ids, keys and visibility."""
        h = json.dumps([[r.id, r.key, r.tool_name, r.visible] for r in self.alignment.rows])
        return [len(self.alignment.rows), hashlib.sha256(h.encode()).hexdigest()]


def analyse(conn: sqlite3.Connection, caps, session_id: str, path: Path, store_path) -> ImportAnalysis:
    """Read the file (``store_path``: the store's ``state.db``, never opened as a
    file) and align it with the session's rows (read-only)."""
    parsed = jsonl.read_file(path, session_id, store_path=store_path)
    rows = jsonl.store_rows(conn, caps, session_id)
    exists = bool(one(conn, "SELECT 1 FROM sessions WHERE id = ?", (session_id,)))
    times, inferred = jsonl.message_times(parsed.messages, parsed.mtime)
    return ImportAnalysis(parsed, jsonl.align(parsed.messages, rows), exists, times, inferred)


class ImportJsonlTranscript(Action):
    """Import the messages only ``sessions/<id>.jsonl`` holds (module docstring).

    ``params``: ``path``, ``imported`` (lines), ``superseded`` (row ids),
    ``rows_before``, ``matched_hidden``, ``session`` (values of a row to create, or None), ``bad_lines``
    (``[{"line", "problem"}]``), ``other_lines`` (``session_meta`` and ``system``
    lines, same shape), ``notes`` (plain-language remarks for the preview).
    """

    name = "import_jsonl_transcript"
    permission = "run_heal"

    def plan(self, ctx, finding):
        sid = finding.session_id
        path = jsonl_path(ctx.store, sid) or Path(ctx.store.profile.sessions_dir) / ".invalid-session-id.jsonl"
        a = analyse(ctx.conn, ctx.caps, sid, path, ctx.store.path)
        parsed, rows, ops = a.file, a.alignment.rows, a.operations
        columns = ctx.caps.columns("messages")
        changes, notes, dropped = [], [], {}
        session = None
        if not a.session_exists and parsed.messages:
            source = parsed.source() or "unknown"
            session = {"id": sid, "source": source, "started_at": min(a.times)}
            if ctx.caps.has("sessions", "profile_name"):
                session["profile_name"] = ctx.store.profile.name
            changes.append(Change("insert", "sessions", {"id": sid}, after=session))
            notes.append(f"The session row does not exist: it is created with source '{source}' "
                         f"({'from the file' if source != 'unknown' else 'no session_meta line names one'}) "
                         "and the earliest message time.")
        imported, superseded = [], []
        for op, index in ops:
            if op == "insert":
                line = parsed.messages[index]
                values, lost = row_values(line.data, columns)
                for name in lost:
                    dropped[name] = dropped.get(name, 0) + 1
                imported.append(index)
                changes.append(Change("insert", "messages", {"jsonl_line": line.number}, after={
                    "role": line.role, "timestamp": a.times[index],
                    "content_chars": len(values["content"] or ""),
                }))
            else:
                row = rows[index]
                superseded.append(row.id)
                changes.append(Change("insert", "messages", {"copy_of": row.id}, after="after the imported messages"))
                changes.append(Change("update", "messages", {"id": row.id}, "active", 1, 0))
        before = message_facts(ctx.conn, ctx.caps, sid)
        if superseded:
            notes.append(f"{len(superseded)} later row(s) already in the store are written again after the imported "
                         "messages so that the session reads in transcript order; the originals stay in the store, "
                         "hidden with active = 0.")
        for name, count in sorted(dropped.items()):
            notes.append(f"Field '{name}' of {count} line(s) is not kept: this store has no such column "
                         "(or the value is of the wrong kind).")
        untimed = [parsed.messages[i].number for i in imported
                   if jsonl.parse_time(parsed.messages[i].data.get("timestamp")) is None]
        if untimed:
            notes.append(f"{len(untimed)} line(s) carry no usable timestamp (line "
                         + ", ".join(map(str, untimed[:10])) + (" …" if len(untimed) > 10 else "")
                         + "): each takes the previous message's time.")
        bad = [{"line": b.number, "problem": b.problem} for b in parsed.bad]
        if bad:
            notes.append(f"{len(bad)} bad line(s) are not imported: "
                         + "; ".join(f"line {b['line']}: {b['problem']}" for b in bad[:10])
                         + (" …" if len(bad) > 10 else "") + ".")
        other = sorted(({"line": x.number, "problem": x.problem} for x in parsed.meta + parsed.skipped),
                       key=lambda x: x["line"])
        if other:
            notes.append("Not messages, never imported: "
                         + "; ".join(f"line {x['line']}: {x['problem']}" for x in other[:10])
                         + (" …" if len(other) > 10 else "") + ".")
        calls = sum(_tool_call_entries(parsed.messages[i].data) for i in imported)
        # The recount (step 4): each superseded row is hidden and written again, so the
        # active rows grow by the imported messages. Listed after the session row, before
        # the messages: a preview shows the first changes of a long import only.
        at = 1 if session is not None else 0
        changes[at:at] = recount_changes(ctx.conn, ctx.caps, sid, before["active_rows"] + len(imported), calls)
        where = ("before the store's later rows" if superseded else "after the store's rows") if rows else "into a new session"
        summary = (f"Import {len(imported)} message(s) from {path.name} {where}"
                   + (f", superseding {len(superseded)} row(s)" if superseded else "")
                   + (f"; {len(bad)} bad line(s) reported, not imported" if bad else "") + "; recount.")
        plan = self.new_plan(ctx, finding, summary, changes=changes, params={
            "path": str(path), "imported": [parsed.messages[i].number for i in imported], "superseded": superseded,
            "rows_before": before["rows"], "matched_hidden": a.matched_hidden, "session": session,
            "tool_calls": calls, "bad_lines": bad, "other_lines": other, "notes": notes,
            "file_identity": jsonl.file_identity(path, store_path=ctx.store.path),
        })
        plan.blocked = self._blocked(ctx, a, path)
        if not plan.blocked:
            plan.blocked = blocked_on_schema(ctx.caps, superseded, "importing", "imported")
            plan.next_step = SCHEMA_NEXT_STEP if plan.blocked else ""
        plan.guard = self.state(ctx.conn, ctx.caps, plan)
        return plan

    @staticmethod
    def _blocked(ctx, a: ImportAnalysis, path: Path) -> str:
        if a.file.error:
            return f"the file cannot be read ({a.file.error})"
        if not a.missing:
            return "the store already holds every message of the file"
        idle = idle_seconds_setting()
        age = ctx.now - a.file.mtime
        if age < idle:
            return (f"{path.name} was written {human_duration(age)} ago: an agent may still be diverting turns into it "
                    f"(it can be imported once it has been quiet for {human_duration(idle)})")
        return ""

    def validate(self, store, plan):
        """A plan may only read this session's own ``sessions/<id>.jsonl`` and create
        only the row ``recreate_session_row`` would."""
        p = plan.params
        path = jsonl_path(store, plan.session_id)
        if path is None or str(path) != p.get("path"):
            raise ValueError("the file must be this session's own sessions/<id>.jsonl")
        row = p.get("session") or {}
        if set(row) - {"id", "source", "started_at", "profile_name"} or (row and row.get("id") != plan.session_id):
            raise ValueError("a created session row carries its id, source, start time and owner only")
        if row.get("profile_name") not in (None, store.profile.name):
            raise ValueError("the owner must be this store's profile")

    def state(self, conn, caps, plan):
        """Cheap on purpose (it is read again inside the write transaction): the file's
        ``[size, mtime_ns, inode]`` by ``lstat``, the session's rows and counters. The
        file itself is read before the transaction (:meth:`load`)."""
        path = Path(plan.params["path"])
        try:
            st = path.lstat()
            stat_id = [st.st_size, st.st_mtime_ns, st.st_ino]
        except OSError:
            stat_id = None
        rows = jsonl.store_rows(conn, caps, plan.session_id)
        digest = json.dumps([[r.id, r.key, r.tool_name, r.visible] for r in rows])
        return {"file": stat_id, "session_exists": bool(one(conn, "SELECT 1 FROM sessions WHERE id = ?",
                                                           (plan.session_id,))),
                "rows": [len(rows), hashlib.sha256(digest.encode()).hexdigest()],
                "messages": message_facts(conn, caps, plan.session_id)}

    def load(self, store, conn, caps, plan):
        """Before the write transaction: parse the file once and check it is, byte for
        byte, the file the plan was made from (``params["file_identity"]``)."""
        p = plan.params
        identity = jsonl.file_identity(Path(p["path"]), store_path=plan.store_path)
        if identity is None or identity != p.get("file_identity"):
            raise Changed("the file changed since the import was planned")
        return analyse(conn, caps, plan.session_id, Path(p["path"]), plan.store_path)

    def write(self, conn, caps, plan, loaded=None):
        p, sid = plan.params, plan.session_id
        if loaded is None:
            a = analyse(conn, caps, sid, Path(p["path"]), plan.store_path)
        else:  # the file as read before the lock, aligned with the rows as they are now
            a = loaded
            a.alignment = jsonl.align(a.file.messages, jsonl.store_rows(conn, caps, sid))
            a.session_exists = bool(one(conn, "SELECT 1 FROM sessions WHERE id = ?", (sid,)))
        ops = a.operations
        imported = [a.file.messages[i].number for op, i in ops if op == "insert"]
        superseded = [a.alignment.rows[j].id for op, j in ops if op == "copy"]
        if imported != p["imported"] or superseded != p["superseded"]:
            raise sqlite3.IntegrityError("the file or the session no longer matches the plan")
        changed = 0
        if p["session"] and not a.session_exists:
            values = p["session"]
            conn.execute(f"INSERT INTO sessions ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})",
                         tuple(values.values()))
            changed += 1
        columns = caps.columns("messages")

        def values_of(index):
            values, _ = row_values(a.file.messages[index].data, columns)
            return dict(values, timestamp=a.times[index])

        ops = [(op, i if op == "insert" else a.alignment.rows[i].id) for op, i in ops]
        changed += write_in_order(conn, caps, sid, ops, values_of)
        recount(conn, caps, sid, p["tool_calls"])
        return changed

    def verify(self, conn, caps, plan):
        p = plan.params
        a = analyse(conn, caps, plan.session_id, Path(p["path"]), plan.store_path)
        if a.missing:
            return f"{len(a.missing)} message(s) of the file are still missing"
        expected = p["rows_before"] + len(p["imported"]) + len(p["superseded"])
        if len(a.alignment.rows) != expected:
            return f"the session has {len(a.alignment.rows)} rows, expected {expected}"
        visible = [r for r in a.alignment.rows if r.visible]
        in_order = len(jsonl.align(a.file.messages, visible).pairs)
        if in_order < len(a.file.messages) - a.matched_hidden:
            return "the session does not read back in the file's order"
        return None

    def after_verify(self, plan) -> str:
        """Archive the file when the setting says so; returns a note for the outcome."""
        p = plan.params
        notes = [f"imported {len(p['imported'])} message(s)"]
        if p["bad_lines"]:
            notes.append("lines not imported (unreadable), by line number: "
                         + ", ".join(str(b["line"]) for b in p["bad_lines"][:20]))
        if getattr(settings, "HERMES_ARCHIVE_IMPORTED_JSONL", False):
            notes.append(self._archive(plan, Path(p["path"])))
        return "; ".join(notes)

    @staticmethod
    def _archive(plan, source: Path) -> str:
        """Move the imported file into the archive, but only the very file the plan
        (and so the import) was made from: its identity (size, mtime, sha256) must
        still equal the plan's guard, re-checked on the archived copy too, since an
        agent diverting turns may append between the import's COMMIT and the move.
        A changed file stays (or is put back) in ``sessions/``, for the next run."""
        guard = plan.params.get("file_identity")
        if guard is None or jsonl.file_identity(source, store_path=plan.store_path) != guard:
            return (f"{source.name} not archived: it changed after the import was planned (a turn may have been "
                    "diverted into it); it stays in place for the next run")
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
        target = archive_dir() / "jsonl" / stamp / plan.profile / "sessions" / source.name
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            final = move_without_loss(source, target)
        except OSError as exc:
            return f"{source.name} not archived ({exc}); it stays in place"
        if jsonl.file_identity(final, store_path=plan.store_path) == guard:
            return f"{source.name} archived to {final}"
        try:  # appended to during the move itself: put it back unless the name was taken meanwhile
            if source.exists() or source.is_symlink():
                raise FileExistsError(f"{source.name} exists again")
            move_without_loss(final, source)
        except OSError as exc:
            return f"{source.name} changed while it was being archived ({exc}): check {final} by hand"
        return f"{source.name} not archived: it changed while it was being archived; put back in place"
