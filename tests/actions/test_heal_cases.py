"""Issue 3's cases, repair side: heal_sessions --apply on real-release stores.

Each store is a copy written by the real hermes-agent release, aged 40 days (its
agents long gone), then damaged the way it happens in the field.
"""

import hashlib
import sqlite3
import time

import pytest

from sessions_app.models import AuditEvent
from sessions_app.presenters.changes import change_table
from tests.checks.helpers import damage, hermes
from tests.conftest import IDS, ids

from .conftest import DAY, heal, profile_entry, store

pytestmark = pytest.mark.django_db

MODERN = ["default", "edge"]  # 0.19.0 and the newest shape


def rows(s, sql, params=()):
    with s.read() as conn:
        return conn.execute(sql, params).fetchall()


def actions(report, key, name=None):
    return [a for a in profile_entry(report, key)["actions"] if name is None or a["action"] == name]


@pytest.mark.parametrize("profile", ["default", "edge", "archive"])
def test_orphan_messages_get_their_session_row_back(aged_home, profile):
    s = store(aged_home, profile)
    sid = ids(profile)["long"]
    before = rows(s, "SELECT id, role, CAST(content AS BLOB), timestamp FROM messages WHERE session_id = ? ORDER BY id", (sid,))
    with damage(s) as db:
        db.execute("DELETE FROM sessions WHERE id = ?", (sid,))
    code, report = heal("--profile", profile, "--only", "orphan_messages", "--apply", "--json")
    [done] = actions(report, profile, "recreate_session_row")
    assert done["status"] == "applied", done
    assert profile_entry(report, profile)["findings"] == [] and code == 0
    [(source, started)] = rows(s, "SELECT source, started_at FROM sessions WHERE id = ?", (sid,))
    assert source == "unknown" and started == min(r[3] for r in before)
    after = rows(s, "SELECT id, role, CAST(content AS BLOB), timestamp FROM messages WHERE session_id = ? ORDER BY id", (sid,))
    assert after == before  # every message still there, once, untouched

    event = AuditEvent.objects.get(action="recreate_session_row", outcome="applied")
    assert event.profile == profile and event.session_ids == [sid] and event.rows_changed == 1
    backup = event.backup_path
    assert backup and profile_entry(report, profile)["backup"] == backup
    data = open(backup, "rb").read()
    assert hashlib.sha256(data).hexdigest() == event.backup_sha256 and len(data) == event.backup_size
    copy = sqlite3.connect(backup)
    assert copy.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert copy.execute("SELECT COUNT(*) FROM sessions WHERE id = ?", (sid,)).fetchone() == (0,)  # taken before
    copy.close()

    code, again = heal("--profile", profile, "--only", "orphan_messages", "--apply", "--json")
    assert again["summary"]["applied"] == 0 and code == 0


def test_reopen_compression_parent_without_continuation(aged_home):
    s = store(aged_home, "default")
    mid, tip = IDS["compress_mid"], IDS["compress_tip"]
    with damage(s) as db:  # the continuation was lost: its rows removed with FKs off
        db.execute("DELETE FROM messages WHERE session_id = ?", (tip,))
        db.execute("DELETE FROM sessions WHERE id = ?", (tip,))
    code, report = heal("--profile", "default", "--only", "compression_without_continuation", "--apply", "--json")
    [done] = actions(report, "default", "reopen_compression_parent")
    assert done["status"] == "applied" and done["session_id"] == mid
    assert rows(s, "SELECT ended_at, end_reason FROM sessions WHERE id = ?", (mid,)) == [(None, None)]


def test_reopen_is_skipped_while_a_compression_lock_is_held(aged_home):
    s = store(aged_home, "default")
    mid, tip = IDS["compress_mid"], IDS["compress_tip"]
    with damage(s) as db:
        db.execute("DELETE FROM messages WHERE session_id = ?", (tip,))
        db.execute("DELETE FROM sessions WHERE id = ?", (tip,))
    hermes(s, f"""
holder = f"pid={{os.getpid()}}:tid={{threading.get_ident()}}:agent=1:nonce=abc"
assert db.try_acquire_compression_lock({mid!r}, holder, ttl_seconds=3600)
""")
    before = rows(s, "SELECT ended_at, end_reason FROM sessions WHERE id = ?", (mid,))
    code, report = heal("--profile", "default", "--only", "compression_without_continuation", "--apply", "--json")
    reopen = actions(report, "default", "reopen_compression_parent")
    # Either the check already spares a locked session, or the action refuses it.
    assert all(a["status"] == "skipped" and "compression_lock" in a["reason"] for a in reopen)
    assert rows(s, "SELECT ended_at, end_reason FROM sessions WHERE id = ?", (mid,)) == before
    assert not AuditEvent.objects.filter(outcome="applied").exists()


@pytest.mark.parametrize("profile", MODERN)
def test_duplicate_user_message_is_hidden_and_counted_out(aged_home, profile):
    sids = ids(profile)
    s = store(aged_home, profile)
    sid = sids["long"]
    [(mid, content, ts)] = rows(s, "SELECT id, content, timestamp FROM messages WHERE session_id = ? AND role = 'user' "
                                   "ORDER BY id LIMIT 1", (sid,))
    with damage(s) as db:
        db.execute("UPDATE messages SET platform_message_id = 'tg-77' WHERE id = ?", (mid,))
        copy = db.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
                          (sid, content, ts)).lastrowid
        db.execute("UPDATE sessions SET message_count = message_count + 1 WHERE id = ?", (sid,))  # as an append counts
    total = rows(s, "SELECT COUNT(*) FROM messages")[0][0]
    code, report = heal("--profile", profile, "--only", "duplicate_live_rows", "--apply", "--json")
    [done] = actions(report, profile, "hide_duplicates")
    assert done["status"] == "applied", done
    assert rows(s, "SELECT id, active FROM messages WHERE id IN (?, ?) ORDER BY id", (mid, copy)) == [(mid, 1), (copy, 0)]
    assert rows(s, "SELECT COUNT(*) FROM messages")[0][0] == total  # hidden, not deleted
    active = rows(s, "SELECT COUNT(*) FROM messages WHERE session_id = ? AND active = 1", (sid,))[0][0]
    assert rows(s, "SELECT message_count FROM sessions WHERE id = ?", (sid,)) == [(active,)]
    # The plan's "recount" is one of its listed changes, labelled as the run page shows it.
    [counter] = [r for r in change_table(done["changes"]).rows if r.column == "message_count"]
    assert counter.field == "Messages" and counter.op == "Change" and str(active) in str(counter.after.value)
    # The compacted generation beside its active copy was never a duplicate.
    assert not [a for a in actions(report, profile, "hide_duplicates") if a["session_id"] == sids["compacted"]]


def test_stale_cli_session_is_closed_but_pinned_and_messaging_ones_are_left(aged_home):
    sids = ids("edge")
    s = store(aged_home, "edge")
    with damage(s) as db:
        for table, col in (("sessions", "started_at"), ("sessions", "last_activity_at")):
            db.execute(f"UPDATE {table} SET {col} = {col} - ?", (80 * DAY,))
        db.execute("UPDATE messages SET timestamp = timestamp - ?", (80 * DAY,))
        db.execute("UPDATE sessions SET pinned = 1 WHERE id = ?", (sids["branch_child"],))
    code, report = heal("--profile", "edge", "--only", "stale_open", "--apply", "--json")
    closed = {a["session_id"] for a in actions(report, "edge", "close_stale_session") if a["status"] == "applied"}
    assert sids["compress_tip"] in closed
    assert sids["branch_child"] not in closed and sids["telegram_open"] not in closed
    [(ended, reason)] = rows(s, "SELECT ended_at, end_reason FROM sessions WHERE id = ?", (sids["compress_tip"],))
    assert reason == "startup_orphan_reap" and abs(ended - time.time()) < 600
    assert rows(s, "SELECT ended_at FROM sessions WHERE id IN (?, ?)", (sids["branch_child"], sids["telegram_open"])) == [(None,), (None,)]


def test_usage_without_transcript_is_never_treated_as_empty(aged_home):
    s = store(aged_home, "default")
    sid = "20260301_210000_ab12cd"
    hermes(s, f"""
db.create_session({sid!r}, 'cli')
db.update_token_counts({sid!r}, input_tokens=5000, output_tokens=700, api_call_count=7)
db.end_session({sid!r}, 'cli_close')
""")
    with damage(s) as db:
        db.execute("UPDATE sessions SET started_at = started_at - ?, ended_at = ended_at - ? WHERE id = ?", (40 * DAY, 40 * DAY, sid))
    before = rows(s, "SELECT * FROM sessions WHERE id = ?", (sid,))
    code, report = heal("--profile", "default", "--apply", "--json")
    found = [f for f in profile_entry(report, "default")["findings"] if f["session_id"] == sid]
    assert [f["check"] for f in found] == ["usage_without_transcript"] and found[0]["heal"] is None
    assert not [a for a in actions(report, "default") if a["session_id"] == sid]
    assert rows(s, "SELECT * FROM sessions WHERE id = ?", (sid,)) == before


def test_continuation_inherits_only_null_routing_columns(aged_home):
    s = store(aged_home, "default")
    parent, child = IDS["telegram_open"], "20260301_200000_7e3f9a22"
    hermes(s, f"""
db.end_session({parent!r}, 'compression')
db.create_session({child!r}, 'telegram', parent_session_id={parent!r})
db.append_message({child!r}, 'user', 'and the day after?')
""")
    with damage(s) as db:
        db.execute("UPDATE sessions SET chat_type = 'group', started_at = started_at - ? WHERE id = ?", (40 * DAY, child))
        db.execute("UPDATE messages SET timestamp = timestamp - ? WHERE session_id = ?", (40 * DAY, child))
        db.execute("UPDATE sessions SET ended_at = ended_at - ? WHERE id = ?", (40 * DAY, parent))
    parent_row = rows(s, "SELECT session_key, chat_id, chat_type FROM sessions WHERE id = ?", (parent,))[0]
    code, report = heal("--profile", "default", "--only", "missing_routing_identity", "--apply", "--json")
    [done] = actions(report, "default", "inherit_routing_identity")
    assert done["status"] == "applied", done
    key, chat, chat_type = rows(s, "SELECT session_key, chat_id, chat_type FROM sessions WHERE id = ?", (child,))[0]
    assert (key, chat) == parent_row[:2] and chat_type == "group"  # set before: kept


def test_check_mode_writes_nothing_anywhere(aged_home, data_dir):
    s = store(aged_home, "default")
    with damage(s) as db:
        db.execute("DELETE FROM sessions WHERE id = ?", (IDS["long"],))
    files = {p: p.read_bytes() for p in aged_home.rglob("*") if p.is_file()}
    code, report = heal("--all-profiles", "--json")
    assert code == 1 and report["mode"] == "check"
    assert [a["status"] for a in actions(report, "default", "recreate_session_row")] == ["planned"]
    assert {p: p.read_bytes() for p in aged_home.rglob("*") if p.is_file() and not p.name.endswith(("-wal", "-shm"))} == \
        {p: b for p, b in files.items() if not p.name.endswith(("-wal", "-shm"))}
    assert not (data_dir / "backups").exists() and not (data_dir / "trash").exists()
    assert not AuditEvent.objects.exists()


def test_a_second_run_changes_nothing(aged_home):
    s = store(aged_home, "default")
    with damage(s) as db:
        db.execute("DELETE FROM sessions WHERE id = ?", (IDS["long"],))
        db.execute("UPDATE sessions SET message_count = 99 WHERE id = ?", (IDS["cli_main"],))
    code, first = heal("--all-profiles", "--apply", "--json")
    assert first["summary"]["applied"] >= 2 and first["summary"]["failed"] == 0
    code, second = heal("--all-profiles", "--apply", "--json")
    assert second["summary"]["applied"] == 0 and second["summary"]["failed"] == 0


def test_a_recreated_session_with_tool_calls_heals_in_one_pass(aged_home):
    """The session row rebuilt for orphan messages carries the tool calls its rows
    hold, so the next pass finds nothing left (a cron would otherwise warn forever)."""
    s = store(aged_home, "ops")
    sid = ids("ops")["cli_main"]
    [(calls,)] = rows(s, "SELECT SUM(json_array_length(tool_calls)) FROM messages WHERE session_id = ? "
                         "AND json_valid(tool_calls)", (sid,))
    assert calls > 0
    with damage(s) as db:
        db.execute("DELETE FROM sessions WHERE id = ?", (sid,))
    heal("--profile", "ops", "--apply", "--json")
    assert rows(s, "SELECT tool_call_count FROM sessions WHERE id = ?", (sid,)) == [(calls,)]
    code, again = heal("--profile", "ops", "--json")
    left = [(f["check"], f["severity"]) for f in profile_entry(again, "ops")["findings"] if f["session_id"] == sid]
    assert left == [("placeholder_session", "info")]  # source 'unknown' until a writer knows better


@pytest.mark.parametrize("profile", MODERN)
def test_recount_fixes_a_drifted_tool_call_count(aged_home, profile):
    s = store(aged_home, profile)
    sid = ids(profile)["cli_main"]
    [(before,)] = rows(s, "SELECT tool_call_count FROM sessions WHERE id = ?", (sid,))
    with damage(s) as db:
        db.execute("UPDATE sessions SET tool_call_count = 99 WHERE id = ?", (sid,))
    code, report = heal("--profile", profile, "--only", "counter_drift", "--apply", "--json")
    [done] = [a for a in actions(report, profile, "recount_session") if a["session_id"] == sid]
    assert done["status"] == "applied", done
    assert rows(s, "SELECT tool_call_count FROM sessions WHERE id = ?", (sid,)) == [(before,)]
    code, again = heal("--profile", profile, "--only", "counter_drift", "--json")
    assert not [f for f in profile_entry(again, profile)["findings"] if f["session_id"] == sid]


def test_recount_and_its_check_agree_on_odd_active_values(aged_home):
    """A stray active = 2 is not an active row for the check; the recount must count
    it the same way, or a nightly heal would warn forever."""
    s = store(aged_home, "default")
    sid = ids("default")["cli_main"]
    with damage(s) as db:
        db.execute("UPDATE messages SET active = 2 WHERE id = (SELECT MAX(id) FROM messages WHERE session_id = ?)",
                   (sid,))
    code, report = heal("--profile", "default", "--only", "counter_drift", "--apply", "--json")
    [done] = [a for a in actions(report, "default", "recount_session") if a["session_id"] == sid]
    assert done["status"] == "applied", done
    code, again = heal("--profile", "default", "--only", "counter_drift", "--json")
    assert not [f for f in profile_entry(again, "default")["findings"] if f["session_id"] == sid]


def _tool_call_drift_plan(home):
    """(store, session id, recount plan) for the newest-shape store's cli_main after
    its tool_call_count was set to 99."""
    from sessions_app.actions.engine import plan_for
    from sessions_app.checks import run_store_checks

    s = store(home, "edge")
    sid = ids("edge")["cli_main"]
    with damage(s) as db:
        db.execute("UPDATE sessions SET tool_call_count = 99 WHERE id = ?", (sid,))
    [finding] = [f for f in run_store_checks(s, only=["counter_drift"]).findings if f.session_id == sid]
    with s.read() as conn:
        return s, sid, plan_for(s, conn, s.capabilities(conn), finding)


def test_recount_skips_when_a_writer_changed_the_counter_after_planning(aged_home):
    """Rule 2: the state the plan was made against is re-read inside the write
    transaction; a counter an agent changed meanwhile is left to the agent."""
    from sessions_app.actions.engine import Applier

    s, sid, plan = _tool_call_drift_plan(aged_home)
    assert [c.column for c in plan.changes] == ["tool_call_count"] and not plan.blocked
    with damage(s) as db:  # an agent bumps the counter between preview and apply
        db.execute("UPDATE sessions SET tool_call_count = 100 WHERE id = ?", (sid,))
    outcome = Applier(actor_label="test").apply(s, plan)
    assert outcome.status == "skipped" and "changed since it was planned" in outcome.reason
    assert rows(s, "SELECT tool_call_count FROM sessions WHERE id = ?", (sid,)) == [(100,)]


def test_a_tampered_recount_plan_is_refused(aged_home):
    from dataclasses import replace

    from sessions_app.actions.engine import Applier

    s, sid, plan = _tool_call_drift_plan(aged_home)
    for values in ({"title": 1}, {"tool_call_count": True}, {"tool_call_count": -1}):
        outcome = Applier(actor_label="test").apply(s, replace(plan, params={"values": values}))
        assert outcome.status == "failed" and "invalid plan" in outcome.reason, outcome.reason
    assert rows(s, "SELECT tool_call_count FROM sessions WHERE id = ?", (sid,)) == [(99,)]
