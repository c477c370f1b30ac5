"""Restoring a trash entry into its store on the guarded write.

A restore puts back the rows a deletion exported (same ids, same bytes), then
the entry's files, unless one of its session ids, message ids or titles was
taken meanwhile, or an agent holds one of the sessions it inserts or
re-attaches (live): refused, the trash entry kept. Liveness is judged before the
transaction and again inside it with the rows back in place (a lease on a
lineage root then covers the segments it reaches). Once the store committed,
the entry says ``restored`` before its files move back, so a retry is refused
instead of inserting twice.
"""

from __future__ import annotations

import os
import sqlite3
import time

from ... import trash
from ...stores import liveness as live_mod
from ..files import ensure_sessions_dir, move_without_loss
from ..guarded import Mismatch, Refused, Write
from ..rowcopy import quote
from .apply import deletion_audit
from .plan import NOT_RESTORED, PARAM_CHUNK, RESTORE_ACTION, _ph


def detached_pairs(entry) -> list[tuple[str, str]]:
    """``(child, parent)`` of the children the deletion detached (trash table ``_detached``)."""
    rows = sqlite3.connect(entry.rows_path.absolute().as_uri() + "?mode=ro", uri=True, detect_types=0)
    try:
        if not rows.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_detached'").fetchone():
            return []
        return [(a, b) for a, b in rows.execute("SELECT a, b FROM _detached")]
    finally:
        rows.close()

def to_reattach(conn, caps, children: list[tuple[str, str]]) -> list[str]:
    """The detached children a restore re-attaches: still there, still without a parent."""
    ids = [c for c, _p in children]
    if not ids or not caps.has("sessions", "parent_session_id"):
        return []
    return [r[0] for r in conn.execute(
        f"SELECT id FROM sessions WHERE id IN {_ph(ids)} AND parent_session_id IS NULL ORDER BY id", ids)]

def refuse_live_restore(store, conn, caps, ids: list[str], inside: bool = False) -> None:
    """Ground rule 6 for a restore: an agent that holds a session it inserts (a
    registry entry, a lease or lock, a gateway route naming the id) or a child it
    re-attaches would race the restore; anything but ``not_live`` (a maybe-live
    verdict too: recent activity, an unreadable registry) -> :class:`Refused`,
    nothing written. ``inside``: in the write transaction, the store's own
    evidence only (the registry file was read before the lock: guarded.py, step 6)."""
    now = time.time()
    for sid in dict.fromkeys(ids):
        found = live_mod.evidence_for(store, conn, caps, sid, now, closed_counts=False, registry=not inside)
        if found.live:
            why = "; ".join(f"{e.source}: {e.detail}" for e in found.evidence if e.blocks)
            raise Refused(f"an agent holds {sid} (live: {why}); nothing restored, the trash entry is kept")
        # What the restore itself brings back proves nothing either way: the rows' own
        # recent activity, a routing entry on a store without gateway heartbeats (as
        # for deletion's override). A registry entry, an unreadable registry do.
        doubts = [e for e in found.evidence
                  if e.source != "activity" and not (e.source == "gateway" and not e.blocks)]
        if found.verdict != "not_live" and doubts:
            why = "; ".join(f"{e.source}: {e.detail}" for e in doubts)
            raise Refused(f"an agent may hold {sid} (maybe live: {why}); nothing restored, the trash entry is "
                          "kept; retry once it is quiet")


def restore_conflicts(conn, entry, targets) -> None:
    """Refuse when a session id, a message id or a title was taken meanwhile."""
    taken = [r[0] for r in conn.execute(f"SELECT id FROM sessions WHERE id IN {_ph(targets)}", targets)]
    if taken:
        raise Refused("recreated meanwhile, nothing restored: " + ", ".join(taken)
                      + " (an agent wrote to this id after the deletion; the trash entry is kept)")
    rows = sqlite3.connect(entry.rows_path.absolute().as_uri() + "?mode=ro", uri=True, detect_types=0)
    try:
        message_ids = [r[0] for r in rows.execute("SELECT id FROM messages")]
        titles = [r[0] for r in rows.execute("SELECT title FROM sessions WHERE title IS NOT NULL")] \
            if "title" in [c[1] for c in rows.execute("PRAGMA table_info(sessions)")] else []
    finally:
        rows.close()
    for i in range(0, len(message_ids), PARAM_CHUNK):
        chunk = message_ids[i:i + PARAM_CHUNK]
        clash = conn.execute(f"SELECT MIN(id) FROM messages WHERE id IN {_ph(chunk)}", chunk).fetchone()[0]
        if clash is not None:
            raise Refused(f"message id {clash} is in use again; nothing restored")
    if titles:
        clash = conn.execute(f"SELECT id, title FROM sessions WHERE title IN {_ph(titles)}", titles).fetchone()
        if clash:
            raise Refused(f"the title {clash[1]!r} is now used by session {clash[0]}; nothing restored")

def insert_back(conn, caps) -> tuple[dict[str, int], dict]:
    """Inside the write transaction: insert the trash rows back; counts and notes.

    Column and table names come from the store and the trash file: always quoted.
    """
    saved = {n: tuple(c[1] for c in conn.execute(f"PRAGMA trash.table_info({quote(n)})"))
             for (n,) in conn.execute("SELECT name FROM trash.sqlite_master WHERE type = 'table'").fetchall()}
    counts: dict[str, int] = {}
    report: dict = {}

    def common(table):
        cols = [c for c in saved.get(table, ()) if caps.has(table, c)]
        lost = [c for c in saved.get(table, ()) if not caps.has(table, c)]
        if lost:
            report.setdefault("columns_the_store_lacks", {})[table] = lost
        return cols

    def insert(table, verb="INSERT", select=None, order=""):
        if table not in saved or not caps.has_table(table):
            return
        cols = common(table)
        names = ", ".join(quote(c) for c in cols)
        chosen = select(cols) if select else names
        expected = conn.execute(f"SELECT COUNT(*) FROM trash.{quote(table)}").fetchone()[0]
        n = conn.execute(f"{verb} INTO main.{quote(table)} ({names}) "
                         f"SELECT {chosen} FROM trash.{quote(table)} AS t{order}").rowcount
        counts[table] = n
        if n != expected:
            report[f"{table}_not_restored"] = expected - n

    insert("system_prompts", "INSERT OR IGNORE")
    # An ignored prompt is there again already: content-addressed, so identical.
    report.pop("system_prompts_not_restored", None)

    # A prompt missing from the store and from the entry (entries made before every
    # referenced prompt was exported, when another deletion collected it since)
    # would fail the foreign key: the link is dropped and reported instead.
    prompt_known = ("t.system_prompt_hash IS NULL "
                    "OR EXISTS (SELECT 1 FROM main.system_prompts p WHERE p.hash = t.system_prompt_hash)")
    check_prompts = caps.has("sessions", "system_prompt_hash") and caps.has_table("system_prompts") \
        and "system_prompt_hash" in saved.get("sessions", ())

    def session_select(cols):
        out = []
        for c in cols:
            if c == "parent_session_id":
                out.append("CASE WHEN t.parent_session_id IS NULL "
                           "OR EXISTS (SELECT 1 FROM main.sessions m WHERE m.id = t.parent_session_id) "
                           "OR EXISTS (SELECT 1 FROM trash.sessions t2 WHERE t2.id = t.parent_session_id) "
                           "THEN t.parent_session_id END")
            elif c == "system_prompt_hash" and check_prompts:
                out.append(f"CASE WHEN {prompt_known} THEN t.system_prompt_hash END")
            else:
                out.append(f"t.{quote(c)}")
        return ", ".join(out)

    if check_prompts:
        missing = conn.execute(f"SELECT COUNT(*) FROM trash.sessions t WHERE NOT ({prompt_known})").fetchone()[0]
        if missing:
            report["system_prompt_links_dropped"] = missing

    dropped = conn.execute(
        "SELECT COUNT(*) FROM trash.sessions t WHERE t.parent_session_id IS NOT NULL "
        "AND NOT EXISTS (SELECT 1 FROM main.sessions m WHERE m.id = t.parent_session_id) "
        "AND NOT EXISTS (SELECT 1 FROM trash.sessions t2 WHERE t2.id = t.parent_session_id)").fetchone()[0] \
        if caps.has("sessions", "parent_session_id") else 0
    if dropped:
        report["parent_links_dropped"] = dropped
    insert("sessions", select=session_select)
    # Sessions first: the newest shape's FTS triggers read the session row.
    insert("messages", order=" ORDER BY t.id")
    if caps.has("messages", "display_order") and "display_order" in saved.get("messages", ()):
        # The insert trigger fills a NULL display_order; put the saved value back.
        conn.execute("UPDATE main.messages SET display_order = (SELECT t.display_order FROM trash.messages t "
                     "WHERE t.id = main.messages.id) WHERE id IN (SELECT id FROM trash.messages) "
                     "AND display_order IS NOT (SELECT t.display_order FROM trash.messages t "
                     "WHERE t.id = main.messages.id)")
    insert("session_model_usage", "INSERT OR IGNORE")
    insert("telegram_dm_topic_bindings", "INSERT OR IGNORE")
    insert("gateway_routing", "INSERT OR IGNORE")
    for table in NOT_RESTORED:
        if table in saved:
            n = conn.execute(f"SELECT COUNT(*) FROM trash.{table}").fetchone()[0]
            if n:
                report[f"{table}_not_restored"] = f"{n} (stale holds are not brought back)"
    if "_detached" in saved and caps.has("sessions", "parent_session_id"):
        counts["reattached"] = conn.execute(
            "UPDATE main.sessions SET parent_session_id = (SELECT b FROM trash._detached WHERE a = main.sessions.id) "
            "WHERE id IN (SELECT a FROM trash._detached) AND parent_session_id IS NULL").rowcount
        total = conn.execute("SELECT COUNT(*) FROM trash._detached").fetchone()[0]
        if counts["reattached"] != total:
            report["children_not_reattached"] = total - counts["reattached"]
    expected = conn.execute("SELECT COUNT(*) FROM trash.sessions").fetchone()[0]
    if counts.get("sessions") != expected:
        raise Mismatch(f"restored {counts.get('sessions')} of {expected} session rows")
    return counts, report


def move_files_back(store, entry) -> tuple[list[str], list[str], list[str]]:
    """Move the entry's files back into the profile's ``sessions/``: ``(moved, kept
    in the trash because the name is taken, problems)``; never an overwrite."""
    moved, kept, problems = [], [], []
    folder = store.profile.sessions_dir
    if entry.files_dir.is_dir():
        for name in sorted(os.listdir(entry.files_dir)):
            if os.path.lexists(folder / name):
                kept.append(name)
                continue
            try:
                ensure_sessions_dir(folder)
                # A name taken since the check gets a free name: never an overwrite.
                moved.append(move_without_loss(entry.files_dir / name, folder / name).name)
            except OSError as exc:
                problems.append(f"file {name} not moved back (still in the trash entry): {exc}")
    return moved, kept, problems


class RestoreWrite(Write):
    """Put ``entry`` back into ``store`` (its own store, where it was deleted from)."""

    action = RESTORE_ACTION
    verb = "restored"

    def __init__(self, entry: trash.TrashEntry):
        self.entry = entry
        self.targets = list(entry.manifest.get("targets") or [])
        self.children: list[tuple[str, str]] = []
        self.attach = (str(entry.rows_path), "trash")

    def authorize(self, writer, store, outcome):
        entry, targets = self.entry, self.targets
        outcome.entry = entry
        self.actor_label = writer.actor_label
        if entry.state in ("pending", "restoring") and trash.owner_alive(entry):
            raise Refused("this trash entry is still being written by another deletion or restore; try again "
                          "in a moment")
        if entry.state == "pending" and targets and store is not None:
            # Interrupted after the export: restorable only if the deletion committed.
            with store.read() as conn:
                present = conn.execute(f"SELECT COUNT(*) FROM sessions WHERE id IN {_ph(targets)}", targets).fetchone()[0]
            if present:
                raise Refused("this deletion did not complete (its sessions are still in the store); nothing to restore")
        elif entry.state != "deleted":
            raise Refused(f"this trash entry is {entry.state}, not restorable")
        if store is None or str(store.path) != entry.manifest.get("store_path"):
            raise Refused("the profile's store is no longer where the session was deleted from")
        if not entry.rows_path.exists():
            raise Refused("the entry's rows are missing")
        self.children = detached_pairs(entry)

    def check(self, ctx):
        restore_conflicts(ctx.conn, self.entry, self.targets)
        if not ctx.inside:
            refuse_live_restore(ctx.store, ctx.conn, ctx.caps,
                                self.targets + to_reattach(ctx.conn, ctx.caps, self.children))
            # Said before the store is written: a process killed after the commit
            # leaves "restoring", which the next run settles by the store
            # (resume.py) instead of a "deleted" entry whose rows are back.
            self.previous_state = self.entry.state
            self.entry.update(state="restoring", owner=trash.owner())

    def discard(self, outcome):
        if self.entry.state == "restoring":
            self.entry.update(state=getattr(self, "previous_state", "deleted"))

    def execute(self, ctx):
        reattach = to_reattach(ctx.conn, ctx.caps, self.children)
        ctx.outcome.counts, ctx.outcome.report = insert_back(ctx.conn, ctx.caps)
        # Judged again with the rows back in place; live -> Refused, rolled back.
        refuse_live_restore(ctx.store, ctx.conn, ctx.caps, self.targets + reattach, inside=True)

    def after_commit(self, writer, store, outcome):
        entry, targets, report = self.entry, self.targets, outcome.report
        outcome.changes = [{"op": "insert", "table": t, "key": {"session_id": targets}, "after": n}
                           for t, n in outcome.counts.items() if t != "reattached" and n]
        outcome.done = (f"restored from the trash ({entry.id}): {len(targets)} session(s), "
                        f"{outcome.counts.get('messages', 0)} message row(s)")
        entry.update(state="restored", restored_at=time.time(), restored_by=writer.actor_label, restore_report=report)
        moved, kept, problems = move_files_back(store, entry)
        folder = store.profile.sessions_dir
        outcome.counts["files"] = len(moved)
        outcome.changes += [{"op": "move", "table": "file", "key": {"name": n}, "before": str(entry.files_dir / n),
                             "after": str(folder / n)} for n in moved]
        outcome.problems += problems
        if kept:
            report["files_kept_in_trash"] = kept
        entry.update(restore_report=report, restored_files=moved, restore_file_problems=problems)
        notes = "; ".join(f"{k.replace('_', ' ')}: {', '.join(map(str, v)) if isinstance(v, list) else v}"
                          for k, v in report.items())  # words, not a list's repr
        outcome.done += f", {len(moved)} file(s)" + (f"; {notes}" if notes else "")

    def verify(self, store, outcome):
        targets = self.targets
        with store.read() as conn:
            present = conn.execute(f"SELECT COUNT(*) FROM sessions WHERE id IN {_ph(targets)}", targets).fetchone()[0]
        return f"verify: {present} of {len(targets)} sessions present" if present != len(targets) else None

    def settle(self, outcome):
        outcome.rows_changed = sum(v for v in outcome.counts.values() if isinstance(v, int))
        super().settle(outcome)

    def audit_fields(self, store, outcome):
        fields = deletion_audit(outcome, self.entry.manifest.get("session_id", ""), self.targets, entry=self.entry)
        fields["session_ids"] = list(self.targets)
        if store is None:
            fields.update(profile=self.entry.profile, store_path=self.entry.manifest.get("store_path", ""))
        return fields
