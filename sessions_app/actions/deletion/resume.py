"""Finishing deletions and restores a killed process left halfway (the store is the truth).

A deletion commits in the store, then marks its trash entry ``deleted`` and moves
the session's files into it; a restore marks its entry ``restoring``, commits in
the store, then marks it ``restored`` and moves the files back. A process killed
between the commit and the end leaves an entry ``pending`` (rows exported, the
store already without them, the files still in ``sessions/``) or ``restoring``
(the rows back in the store, the files still in the entry). Left so, the next heal
would trash a deleted session's files as leftovers, and a retried restore would be
refused ("recreated meanwhile") while a purge later removed the only copy of the
files.

:func:`finish_unfinished` settles such entries by looking at the store: the
exported message rows (by ``messages.id`` and session) gone from it means the
deletion committed; all present means it did not; for a restore the reverse. It
then does what the interrupted process did not, as a file-only guarded write (its
own audit event; the store is only read), or gives the entry back its state. An
entry whose rows are partly in the store is left alone and reported: only an admin
can say what happened. Called at the start of every heal run and by the trash pages.
"""

from __future__ import annotations

import sqlite3
import time

from ... import trash
from ...stores.store import Store
from ..guarded import GuardedWriter, Outcome, Refused, Skip, Write, jsonable
from .apply import move_files_into
from .plan import DELETE_ACTION, RESTORE_ACTION, PARAM_CHUNK, _ph

UNFINISHED = ("pending", "restoring")


def exported(entry: trash.TrashEntry) -> tuple[list[str], list[tuple[int, str]]]:
    """``(session ids, [(message id, session id)])`` the entry's rows hold."""
    conn = sqlite3.connect(entry.rows_path.absolute().as_uri() + "?mode=ro", uri=True, detect_types=0)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        sessions = [r[0] for r in conn.execute("SELECT id FROM sessions")] if "sessions" in tables else []
        messages = [(r[0], r[1]) for r in conn.execute("SELECT id, session_id FROM messages")] \
            if "messages" in tables else []
    finally:
        conn.close()
    return sessions, messages


def in_store(conn, sessions: list[str], messages: list[tuple[int, str]]) -> tuple[int, int]:
    """How many of the exported rows the store holds: ``(present, of)``; message rows
    count by id and session, sessions (when no message was exported) by id."""
    if messages:
        present = 0
        for i in range(0, len(messages), PARAM_CHUNK):
            chunk = messages[i:i + PARAM_CHUNK]
            ids = [m for m, _ in chunk]
            found = dict(conn.execute(f"SELECT id, session_id FROM messages WHERE id IN {_ph(ids)}", ids).fetchall())
            present += sum(1 for m, sid in chunk if found.get(m) == sid)
        return present, len(messages)
    if not sessions:
        return 0, 0
    present = conn.execute(f"SELECT COUNT(*) FROM sessions WHERE id IN {_ph(sessions)}", sessions).fetchone()[0]
    return present, len(sessions)


def unfinished(store: Store) -> list[trash.TrashEntry]:
    """Entries of ``store`` left ``pending`` (with exported rows) or ``restoring``."""
    return [e for e in trash.list_entries() if e.state in UNFINISHED and e.manifest.get("store_path") == str(store.path)
            and e.rows_path.exists()]


class FinishEntry(Write):
    """Settle one unfinished entry (module docstring): a file-only write."""

    writes_store = False

    def __init__(self, entry: trash.TrashEntry):
        self.entry = entry
        self.deleting = entry.state == "pending"
        self.action = DELETE_ACTION if self.deleting else RESTORE_ACTION
        self.verb = "deleted" if self.deleting else "restored"
        self.settled = ""

    def check(self, ctx):
        if trash.owner_alive(self.entry):
            who = self.entry.manifest.get("owner") or {}
            raise Skip(f"trash entry {self.entry.id} is still being written by pid {who.get('pid')}; left alone")
        sessions, messages = exported(self.entry)
        present, total = in_store(ctx.conn, sessions, messages)
        if total == 0:
            self.settled = "empty"
        elif present == (0 if self.deleting else total):
            self.settled = "committed"
        elif present == (total if self.deleting else 0):
            self.settled = "not_committed"
        else:
            raise Refused(f"trash entry {self.entry.id}: {present} of {total} of its rows are in the store; "
                          "it was left as it is for an admin to look at")
        self.sessions = sessions
        # A session that exists again (an agent wrote to its id after the deletion)
        # keeps its files where they are: they are its own now.
        targets = list(self.entry.manifest.get("targets") or sessions)
        self.returned = [t for t in targets if ctx.conn.execute("SELECT 1 FROM sessions WHERE id = ?", (t,)).fetchone()]

    def execute(self, ctx):
        entry, outcome = self.entry, ctx.outcome
        outcome.entry = entry
        targets = list(entry.manifest.get("targets") or self.sessions)
        if self.deleting and self.settled == "committed":
            entry.update(state="deleted", deleted_at=entry.manifest.get("deleted_at") or time.time(),
                         targets=targets, finished_by_resume=True)
            moved, problems = move_files_into(ctx.store, _Targets([t for t in targets if t not in self.returned]), entry)
            entry.update(files=sorted(set(entry.manifest.get("files") or []) | set(moved)), file_problems=problems)
            outcome.counts, outcome.problems = {"files": len(moved)}, problems
            outcome.done = (f"finished the deletion of trash entry {entry.id} interrupted after its store commit: "
                            f"{len(targets)} session(s) out of the store, {len(moved)} file(s) moved into the entry"
                            + (f"; {', '.join(self.returned)} exist again (an agent wrote to the id since): their "
                               "files stay in sessions/" if self.returned else ""))
        elif self.deleting:
            trash.discard(entry)  # the store still holds every exported row: nothing was deleted
            outcome.done = f"trash entry {entry.id} of a deletion that never committed removed; the store keeps it all"
        elif self.settled == "committed":
            from .restore import move_files_back

            moved, kept, problems = move_files_back(ctx.store, entry)
            entry.update(state="restored", restored_at=time.time(), finished_by_resume=True,
                         restored_files=moved, restore_file_problems=problems)
            outcome.counts, outcome.problems = {"files": len(moved)}, problems
            outcome.done = (f"finished the restore of trash entry {entry.id} interrupted after its store commit: "
                            f"{len(moved)} file(s) moved back")
        else:
            entry.update(state="deleted")  # the restore never committed: restorable again
            outcome.done = f"trash entry {entry.id}: its restore never committed; it is restorable again"
        outcome.committed = True

    def audit_fields(self, store, outcome):
        targets = list(self.entry.manifest.get("targets") or [])
        return {"session_ids": targets, "changes": [],
                "plan": jsonable({"trash_entry": self.entry.id, "resumed": self.settled, "state": self.entry.state})}


class _Targets:
    """What ``move_files_into`` needs of a plan: its target ids."""

    def __init__(self, ids):
        self.target_ids = list(ids)


def finish_unfinished(store: Store, writer: GuardedWriter | None = None) -> list[Outcome]:
    """Settle every unfinished trash entry of ``store``; one outcome (and audit event) each."""
    writer = writer or GuardedWriter(actor_label="resume")
    return [writer.perform(store, FinishEntry(entry)) for entry in unfinished(store)]
