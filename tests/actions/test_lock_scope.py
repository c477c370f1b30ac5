"""The write lock is held for the store's statements only (docs/architecture.md §5.1,
"The guarded write", step 6): every guarded write reads the active-session registry
(``runtime/active_sessions.json``) and lists ``sessions/`` before ``BEGIN
IMMEDIATE``, never while it holds the store's write lock, and still re-checks the
store inside the transaction.

Each file the process opens or lists is seen by a Python audit hook, which asks
the real store, with a second connection and no wait, whether its write lock is
taken at that moment. Real-release stores, real writes.
"""

import json
import subprocess
import os
import sqlite3
import sys

import psutil
import pytest

from sessions_app import trash
from sessions_app.actions import deletion
from sessions_app.actions.engine import Applier, plan_for
from sessions_app.actions.flags import Flagger
from sessions_app.actions.prune_run import Pruner, run_prune
from sessions_app.checks import run_store_checks
from sessions_app.stores.retention import Criteria
from tests.checks.helpers import damage, dead_pid
from tests.conftest import ids

from .conftest import store
from .delete_helpers import confirm

pytestmark = pytest.mark.django_db

_watch = []  # the one active watch; an audit hook cannot be removed, so it is installed once


def _hook(event, args):
    if _watch and event in ("open", "os.listdir", "os.scandir"):
        _watch[-1].seen(event, args[0] if args else None)


sys.addaudithook(_hook)


class LockWatch:
    """What was opened or listed under the profile home, and whether the store's
    write lock was held right then."""

    def __init__(self, s):
        self.home = str(s.profile.home)
        self.probe = sqlite3.connect(s.path.absolute().as_uri() + "?mode=rw", uri=True, timeout=0,
                                     isolation_level=None)
        self.events: list[tuple[str, str, bool]] = []
        self.busy = False

    def seen(self, event, path):
        path = path.decode() if isinstance(path, bytes) else str(path) if path is not None else ""
        if self.busy or not path.startswith(self.home) or path.endswith(("state.db", "-wal", "-shm", "-journal")):
            return
        self.busy = True
        try:
            try:
                self.probe.execute("BEGIN IMMEDIATE")
                self.probe.execute("ROLLBACK")
                locked = False
            except sqlite3.OperationalError as exc:
                assert "locked" in str(exc) or "busy" in str(exc), exc
                locked = True
            self.events.append((event, path, locked))
        finally:
            self.busy = False

    def __enter__(self):
        _watch.append(self)
        return self

    def __exit__(self, *exc):
        _watch.remove(self)
        self.probe.close()

    def registry_reads(self, locked: bool) -> list[str]:
        return [p for e, p, held in self.events if e == "open" and p.endswith("active_sessions.json") and held == locked]

    def listings(self, locked: bool) -> list[str]:
        return [p for e, p, held in self.events if e != "open" and p.rstrip("/").endswith("sessions") and held == locked]


def registry(s, *session_ids):
    """A registry whose entries are all of a dead process: read, and no evidence."""
    runtime = s.profile.home / "runtime"
    runtime.mkdir(exist_ok=True)
    entries = [{"session_id": sid, "pid": dead_pid(), "process_start_time": 1.0, "surface": "cli",
                "started_at": 1.0} for sid in session_ids]
    (runtime / "active_sessions.json").write_text(json.dumps({"entries": entries}))


def assert_lock_held_for_the_store_only(watch, listed=True):
    assert watch.registry_reads(locked=False), watch.events  # read, before the lock
    assert watch.registry_reads(locked=True) == [], watch.events
    assert watch.listings(locked=True) == [], watch.events
    if listed:
        assert watch.listings(locked=False), watch.events


def test_a_deletion_reads_the_registry_and_lists_files_before_the_lock(aged_home):
    s = store(aged_home, "default")
    sid = ids("default")["branch_parent"]  # with a child to detach: judged too
    registry(s, sid, ids("default")["branch_child"])
    (s.profile.sessions_dir / f"{sid}.json").write_text("{}")
    plan, item = confirm(s, sid)
    with LockWatch(s) as watch:
        done = deletion.Deleter(actor_label="alice").delete(s, item)
    assert done.status == "applied" and done.counts["detached"] == 1 and done.counts["files"] == 1
    assert_lock_held_for_the_store_only(watch)
    assert done.plan.files == [f"{sid}.json"]  # the audit still names the files, as listed before the lock
    back = deletion.Deleter(actor_label="alice")
    with LockWatch(s) as watch:
        restored = back.restore(s, trash.get_entry(done.entry.id))
    assert restored.status == "applied"
    assert watch.registry_reads(locked=False) and watch.registry_reads(locked=True) == []


def test_a_repair_and_a_flag_write_read_the_registry_before_the_lock(aged_home):
    s = store(aged_home, "default")
    sid = ids("default")["cli_main"]
    registry(s, sid)
    with damage(s) as db:
        db.execute("UPDATE sessions SET message_count = message_count + 3 WHERE id = ?", (sid,))
    [finding] = [f for f in run_store_checks(s, only=["counter_drift"]).findings if f.session_id == sid]
    with s.read() as conn:
        plan = plan_for(s, conn, s.capabilities(conn), finding)
    with LockWatch(s) as watch:
        done = Applier(actor_label="cron").apply(s, plan)
    assert done.status == "applied", done.reason
    assert_lock_held_for_the_store_only(watch, listed=False)
    with LockWatch(s) as watch:
        done = Flagger(actor_label="alice").set_flag(s, sid, "archived", True)
    assert done.status == "applied", done.reason
    assert_lock_held_for_the_store_only(watch, listed=False)


def test_a_prune_batch_reads_the_registry_and_lists_files_before_the_lock(aged_home):
    s = store(aged_home, "default")
    registry(s, ids("default")["slack_ended"])
    with LockWatch(s) as watch:
        report = run_prune([s], Criteria(older_than_days=30), apply=True, writer=Pruner(actor_label="cron"))
    assert report["summary"]["applied"] >= 1, report
    assert_lock_held_for_the_store_only(watch)


def test_a_session_an_agent_registered_is_still_refused(aged_home):
    """The registry read before the lock still refuses (ground rule 6)."""
    s = store(aged_home, "default")
    sid = ids("default")["cli_main"]
    runtime = s.profile.home / "runtime"
    runtime.mkdir(exist_ok=True)
    (runtime / "active_sessions.json").write_text(json.dumps({"entries": [
        {"session_id": sid, "pid": os.getpid(), "process_start_time": None, "surface": "cli",
         "started_at": 1.0}]}))
    plan, item = confirm(s, sid)
    done = deletion.Deleter(actor_label="alice").delete(s, item)
    assert done.status == "refused" and "registry" in done.reason


class OpenedDuringBackup:
    """An agent that opens ``session_id`` while the run's backup is being taken: when
    the backup's copy is read back (its sha256), a live process is written into the
    registry, the way a CLI starting at that moment registers itself."""

    def __init__(self, s, session_id, data_dir):
        self.s, self.session_id, self.backups = s, session_id, str(data_dir / "backups")
        self.agent = None

    def seen(self, event, path):
        path = path.decode() if isinstance(path, bytes) else str(path) if path is not None else ""
        if self.agent is None and event == "open" and path.startswith(self.backups) and path.endswith("state.db"):
            self.agent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
            runtime = self.s.profile.home / "runtime"
            runtime.mkdir(exist_ok=True)
            (runtime / "active_sessions.json").write_text(json.dumps({"entries": [{
                "session_id": self.session_id, "pid": self.agent.pid, "surface": "cli", "started_at": 1.0,
                "process_start_time": psutil.Process(self.agent.pid).create_time()}]}))

    def __enter__(self):
        _watch.append(self)
        return self

    def __exit__(self, *exc):
        _watch.remove(self)
        if self.agent is not None:
            self.agent.kill()
            self.agent.wait()


def _row(s, sid):
    with s.read() as conn:
        return tuple(conn.execute("SELECT * FROM sessions WHERE id = ?", (sid,)).fetchone())


def test_a_session_opened_during_the_backup_is_refused(aged_home, data_dir):
    """Ground rule 6: the registry is read again after the backup, right before the
    writer opens; an agent that registered the session meanwhile refuses the write."""
    s = store(aged_home, "default")
    sid = ids("default")["cli_main"]
    before = _row(s, sid)
    with OpenedDuringBackup(s, sid, data_dir) as agent:
        done = Flagger(actor_label="alice").set_flag(s, sid, "archived", True)
    assert agent.agent is not None  # the backup was taken, and the agent registered during it
    assert done.status == "refused" and done.refused, done.reason
    assert "registry" in done.reason and "during the backup" in done.reason, done.reason
    assert _row(s, sid) == before


def test_a_deletion_of_a_session_opened_during_the_backup_is_refused(aged_home, data_dir):
    s = store(aged_home, "default")
    sid = ids("default")["cli_main"]
    plan, item = confirm(s, sid)
    with s.read() as conn:
        count = conn.execute("SELECT COUNT(*) FROM messages WHERE session_id = ?", (sid,)).fetchone()[0]
    with OpenedDuringBackup(s, sid, data_dir) as agent:
        done = deletion.Deleter(actor_label="alice").delete(s, item)
    assert agent.agent is not None
    assert done.status == "refused", done.reason
    assert "registry" in done.reason, done.reason
    with s.read() as conn:
        assert conn.execute("SELECT COUNT(*) FROM messages WHERE session_id = ?", (sid,)).fetchone()[0] == count
