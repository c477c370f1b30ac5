"""Store-level checks, access failures and session-restricted runs."""

import json
import os
import sqlite3
import subprocess
import sys
import time

import pytest

from sessions_app.checks import run_store_checks
from tests.conftest import IDS, ids

from .helpers import damage, dead_pid, findings, hermes, newest_timestamp, own_pidns

HOUR = 3600
DAY = 86400


def soon(store):
    return newest_timestamp(store) + 2 * HOUR


def _rootpage(path, name) -> int:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (name,)).fetchone()[0]
    finally:
        conn.close()


def _smash_page(path, page: int) -> None:
    """Overwrite one page of a test copy with garbage. Plain file I/O is fine here:
    no connection to this copy is open in this process (ground rule 5 is about
    processes holding one), and the fixture copies carry no -wal."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    for sidecar in (f"{path}-wal", f"{path}-shm"):
        assert not os.path.exists(sidecar) or os.path.getsize(sidecar) == 0 or sidecar.endswith("-shm")
    with open(path, "r+b") as fh:
        fh.seek((page - 1) * size)
        fh.write(b"\xff" * size)


# --------------------------------------------------------------------------- access

def test_busy_store_is_reported_not_raised(store, settings):
    """Another process holds an exclusive lock: status busy, a store_busy finding."""
    settings.HERMES_READ_TIMEOUT = 0.2
    s = store("default")
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sqlite3, sys, time\n"
        "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "c.execute('PRAGMA locking_mode=EXCLUSIVE'); c.execute('BEGIN EXCLUSIVE')\n"
        "print('READY', flush=True); time.sleep(60)\n"), str(s.path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "READY"
        report = run_store_checks(s, now=time.time())
        session_report = run_store_checks(s, session_id=IDS["cli_main"])
    finally:
        holder.kill()
        holder.wait()
    for r in (report, session_report):
        assert r.status == "busy" and "retry" in r.error
        assert [f.check for f in r.findings] == ["store_busy"]
    assert run_store_checks(s, now=soon(s)).status == "ok"


@pytest.mark.parametrize("tree", ["idx_messages_session", "messages"])
def test_structural_damage_is_store_corrupt(store, tree):
    """A broken page of an index (reported by quick_check) or of a table (quick_check
    itself fails): structural damage, status corrupt, no traceback."""
    s = store("default")
    _smash_page(s.path, _rootpage(s.path, tree))
    report = run_store_checks(s, now=time.time())
    assert report.status == "corrupt" and report.error
    [f] = findings(report, "store_corrupt")
    assert f.severity == "critical" and f.session_id is None
    if tree.startswith("idx_"):
        assert f.evidence["objects"] == [tree]
    # a session page on the damaged store gets the status, not an exception
    assert run_store_checks(s, session_id=IDS["long"]).status in ("ok", "corrupt")


def test_damage_confined_to_the_search_index_is_fts_damaged(store):
    s = store("ops")
    _smash_page(s.path, _rootpage(s.path, "messages_fts_data"))
    report = run_store_checks(s, now=soon(s))
    assert report.status == "ok"
    assert not findings(report, "store_corrupt")
    [f] = findings(report, "fts_damaged")
    kinds = {p["kind"] for p in f.evidence["problems"]}
    assert "quick_check" in kinds


def test_schema_refused_by_sqlite(store):
    s = store("legacy")
    with damage(s) as db:
        db.execute("PRAGMA writable_schema=ON")
        db.execute("INSERT INTO sqlite_master SELECT * FROM sqlite_master WHERE name = 'idx_sessions_source'")
    report = run_store_checks(s)
    assert report.status == "corrupt"
    assert [f.check for f in report.findings] == ["schema_malformed"]


def test_unreadable_and_missing_stores(store, tmp_path):
    s = store("archive")
    s.path.write_bytes(b"this is not a database at all" * 200)
    r = run_store_checks(s)
    assert (r.status, [f.check for f in r.findings]) == ("unreadable", ["store_unreadable"])
    s.path.write_bytes(b"")
    r = run_store_checks(s)
    assert r.status == "unreadable" and r.findings[0].severity == "critical"
    s.path.unlink()
    r = run_store_checks(s)
    assert r.status == "missing" and r.findings[0].severity == "info"


# --------------------------------------------------------------------------- search index

def test_fts_stale_marker(store):
    s = store("edge")
    with damage(s) as db:
        db.execute("INSERT INTO state_meta(key, value) VALUES ('fts_stale', '1')")
    [f] = findings(run_store_checks(s, now=soon(s)), "fts_damaged")
    assert f.evidence["problems"][0] == {"kind": "marker", "key": "fts_stale", "value": "1"}


def test_rows_written_while_the_triggers_were_gone(store):
    """A process dropped the FTS insert trigger; rows written since are unindexed."""
    sids = ids("edge")
    s = store("edge")
    with damage(s) as db:
        db.execute("DROP TRIGGER messages_fts_insert")
        db.execute("INSERT INTO messages(session_id, role, content, timestamp) VALUES (?, 'user', 'unindexed', ?)",
                   (sids["compress_tip"], newest_timestamp(s) + 1))
        db.execute("UPDATE sessions SET message_count = message_count + 1 WHERE id = ?", (sids["compress_tip"],))
    report = run_store_checks(s, now=soon(s))
    [incomplete] = findings(report, "fts_incomplete")
    assert incomplete.evidence["table"] == "messages_fts" and incomplete.count == 1
    [damaged] = findings(report, "fts_damaged")
    assert {"kind": "missing_trigger", "table": "messages_fts", "trigger": "messages_fts_insert"} in damaged.evidence["problems"]


def test_fts_backfill_window_is_not_incomplete(store):
    """Rows inside a deferred rebuild window are expected to be missing (docs/store.md §3.4)."""
    s = store("edge")
    with damage(s) as db:
        top = db.execute("SELECT MAX(id) FROM messages").fetchone()[0]
        db.execute("INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls) "
                   "SELECT 'delete', id, content, tool_name, tool_calls FROM messages_fts_src WHERE id = ?", (top,))
        db.execute("INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content, tool_name) "
                   "SELECT 'delete', id, content, tool_name FROM messages_fts_trigram_src WHERE id = ?", (top,))
    assert {f.evidence["table"] for f in findings(run_store_checks(s, now=soon(s)), "fts_incomplete")} == {
        "messages_fts", "messages_fts_trigram"}
    with damage(s) as db:
        db.executemany("INSERT INTO state_meta(key, value) VALUES (?, ?)",
                       [("fts_rebuild_high_water", str(top)), ("fts_rebuild_progress", str(top - 1))])
    assert not findings(run_store_checks(s, now=soon(s)), "fts_incomplete")


# --------------------------------------------------------------------------- files beside the store

def test_oversized_wal(store, settings):
    settings.HERMES_WAL_OVERSIZED_BYTES = 4096
    s = store("default")
    writer = sqlite3.connect(s.path, isolation_level=None)
    try:
        writer.execute("PRAGMA wal_autocheckpoint=0")
        for n in range(20):
            writer.execute("INSERT INTO state_meta(key, value) VALUES (?, ?)", (f"test:{n}", "x" * 500))
        report = run_store_checks(s, now=soon(s))
    finally:
        writer.close()
    [f] = findings(report, "wal_oversized")
    assert f.evidence["wal_bytes"] > 4096 and f.session_id is None


def test_retired_wal_capture_and_deleted_sidecar_holder(store):
    s = store("default")
    (s.path.parent / "state.db.retired-wal-20260301-101010-4242").mkdir()
    r = run_store_checks(s, now=soon(s), only=["wal_generation_split"])
    [f] = r.findings
    assert f.severity == "critical" and f.evidence["retired_captures"] == ["state.db.retired-wal-20260301-101010-4242"]
    # A process that kept the -wal of a generation that was deleted under it.
    holder = subprocess.Popen([sys.executable, "-c", (
        "import os, sys, time\n"
        "fh = open(sys.argv[1] + '-wal', 'ab'); os.unlink(sys.argv[1] + '-wal')\n"
        "print('READY', flush=True); time.sleep(60)\n"), str(s.path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "READY"
        [f] = run_store_checks(s, now=soon(s), only=["wal_generation_split"]).findings
    finally:
        holder.kill()
        holder.wait()
    assert {"pid": holder.pid, "file": "-wal"}.items() <= f.evidence["deleted_sidecar_holders"][0].items()


def test_repair_leftovers(store):
    s = store("research")
    (s.path.parent / "state.db.malformed-backup-20260301_101010").write_bytes(b"x")
    (s.path.parent / "state.db.repair-attempts.json").write_text(json.dumps(
        {"fingerprint": "abc", "failed_attempts": 3, "last_attempt": 1.0}))
    [f] = findings(run_store_checks(s, now=soon(s)), "repair_leftovers")
    assert f.evidence["files"] == ["state.db.malformed-backup-20260301_101010"]
    assert f.evidence["repair_ledger"]["failed_attempts"] == 3


@pytest.mark.parametrize("ledger", ["[" * 5000 + "]" * 5000, '{"failed_attempts": 3, "pad": "' + "p" * 2**21 + '"}'],
                         ids=["deep", "huge"])
def test_a_ledger_too_deep_or_too_large_is_ignored_and_the_check_runs(store, ledger):
    s = store("research")
    (s.path.parent / "state.db.repair-attempts.json").write_text(ledger)
    report = run_store_checks(s, now=soon(s))
    assert report.failed_checks == [] and not findings(report, "repair_leftovers")


# --------------------------------------------------------------------------- leases and dependents

def test_stale_leases_and_locks(store):
    sids = ids("edge")
    s = store("edge")
    now = soon(s)
    ns = own_pidns()
    with damage(s) as db:
        db.execute("INSERT INTO session_turn_leases VALUES (?, 'pid=1:turn=1:platform=cli', ?, ?)",
                   (sids["long"], now - 3 * DAY, now - 2 * DAY))
        db.execute("INSERT INTO session_turn_leases VALUES (?, 'pid=1:turn=2:platform=cli', ?, ?)",
                   (sids["hostile"], now - 900, now - 600))
        db.execute("INSERT INTO compression_locks VALUES (?, ?, ?, ?)",
                   (sids["undo"], f"pid={dead_pid()}:pidns={ns}:tid=1:agent=1:nonce=1", now - 10, now + 290))
        db.execute("INSERT INTO compression_locks VALUES (?, ?, ?, ?)",
                   (sids["compacted"], f"pid={os.getpid()}:pidns={ns}:tid=1", now - 10, now + 290))
    report = run_store_checks(s, now=now)
    by = {f.evidence["key"]: f for f in findings(report, "stale_lease")}
    assert set(by) == {sids["long"], sids["hostile"], sids["undo"]}
    assert by[sids["long"]].heal == "clear_stale_lease" and by[sids["long"]].evidence["long_expired"]
    assert by[sids["hostile"]].heal is None  # expired 10 minutes ago: upstream reclaims it itself
    assert by[sids["undo"]].evidence["holder_dead"] is True and by[sids["undo"]].heal is None
    assert all(f.session_id is None for f in by.values())


def test_orphan_dependents(store):
    s = store("default")
    with damage(s) as db:
        db.execute("DELETE FROM sessions WHERE id IN (?, ?)", (IDS["cli_main"], IDS["telegram_open"]))
    report = run_store_checks(s, now=soon(s))
    by = {f.evidence["table"]: f for f in findings(report, "orphan_dependents")}
    assert by["session_model_usage"].evidence["session_ids"] == [IDS["cli_main"]]
    assert by["gateway_routing"].evidence["session_ids"] == [IDS["telegram_open"]]
    assert {f.session_id for f in findings(report, "orphan_messages")} == {IDS["cli_main"], IDS["telegram_open"]}


# --------------------------------------------------------------------------- restricted runs

def test_session_restricted_run_returns_only_that_session(store):
    s = store("default")
    with damage(s) as db:
        db.execute("DELETE FROM sessions WHERE id = ?", (IDS["cli_main"],))
        db.execute("UPDATE sessions SET message_count = 1 WHERE id = ?", (IDS["long"],))
        db.execute("INSERT INTO state_meta(key, value) VALUES ('fts_stale', '1')")
    (s.profile.sessions_dir / f"{IDS['long']}.jsonl").write_text(json.dumps({"role": "user", "content": "lost"}) + "\n")
    full = run_store_checks(s, now=soon(s))
    assert {f.session_id for f in full.findings} >= {None, IDS["cli_main"], IDS["long"], IDS["delegate_child"]}
    one = run_store_checks(s, now=soon(s), session_id=IDS["long"])
    assert one.status == "ok" and one.findings
    assert {f.session_id for f in one.findings} == {IDS["long"]}
    assert {f.check for f in one.findings} == {"counter_drift", "transcript_on_disk_only"}
    orphan = run_store_checks(s, now=soon(s), session_id=IDS["cli_main"])
    assert [f.check for f in orphan.findings] == ["orphan_messages"]


def test_restricted_run_uses_that_sessions_liveness(store):
    s = store("default")
    sid = IDS["long"]
    hermes(s, f"db.append_message({sid!r}, 'user', 'still there?')")
    later = time.time() + 2 * HOUR
    assert [f.check for f in run_store_checks(s, now=later, session_id=sid).findings] == ["unanswered_turn"]
    hermes(s, f"assert db.try_acquire_compression_lock({sid!r}, 'pid=1:tid=1', ttl_seconds=86400)")
    assert run_store_checks(s, now=later, session_id=sid).findings == []


@pytest.mark.parametrize("only", [["orphan_messages"], ["schema_outdated", "counter_drift"]])
def test_only_runs_the_named_checks(store, only):
    s = store("research")
    report = run_store_checks(s, now=soon(s), only=only)
    assert {f.check for f in report.findings} <= set(only)
