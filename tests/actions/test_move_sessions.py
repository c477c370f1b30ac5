"""Issue 4 section 2: sessions moved back to the profile that owns them, between real
release stores (0.19.0 default, 0.18.2 ops, 0.13.0 archive, newest-shape edge)."""

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sessions_app.actions.engine import plan_for
from sessions_app.actions.move import NOT_COPIED
from sessions_app.actions.rowcopy import exact_select
from sessions_app.checks import run_store_checks
from sessions_app.models import AuditEvent
from tests.checks.helpers import damage, hermes
from tests.conftest import ids

from .conftest import heal, profile_entry, store

pytestmark = pytest.mark.django_db
PROJECT = Path(__file__).resolve().parents[2]


def rows(s, sql, params=()):
    with s.read() as conn:
        return conn.execute(sql, params).fetchall()


def columns(s, table):
    return [r[1] for r in rows(s, f"PRAGMA table_info({table})")]


def message_values(s, sid, cols):
    return rows(s, f"SELECT {exact_select(cols)} FROM messages WHERE session_id = ? ORDER BY id", (sid,))


def common_message_columns(a, b):
    return [c for c in columns(a, "messages") if c in columns(b, "messages") and c not in NOT_COPIED]


def rekey(s, sid, key):
    with damage(s) as db:
        db.execute("UPDATE sessions SET session_key = ? WHERE id = ?", (key, sid))


def moves(report, key):
    return [a for a in profile_entry(report, key)["actions"] if a["action"] == "move_to_owner_store"]


def exists(s, sid):
    return bool(rows(s, "SELECT 1 FROM sessions WHERE id = ?", (sid,)))


def test_move_copies_every_row_verifies_and_removes_the_source(aged_home):
    """0.19.0 -> 0.18.2: a session with compacted (inactive) rows and a usage row."""
    src, dst = store(aged_home, "default"), store(aged_home, "ops")
    sid = ids("default")["compacted"]
    rekey(src, sid, "agent:ops:telegram:dm:777")
    with damage(src) as db:  # give it usage detail too (0.19.0 keeps it per model)
        db.execute("INSERT INTO session_model_usage (session_id, model, api_call_count, input_tokens) "
                   "VALUES (?, 'gpt-x', 3, 1200)", (sid,))
    cols = common_message_columns(src, dst)
    before = message_values(src, sid, cols)
    assert rows(src, "SELECT COUNT(*) FROM messages WHERE session_id = ? AND active = 0", (sid,)) == [(4,)]

    code, report = heal("--profile", "default", "--only", "owner_mismatch", "--apply", "--json")
    [done] = moves(report, "default")
    assert done["status"] == "applied", done
    assert code == 0 and profile_entry(report, "default")["findings"] == []
    assert not exists(src, sid) and not rows(src, "SELECT 1 FROM messages WHERE session_id = ?", (sid,))
    assert message_values(dst, sid, cols) == before  # every row, inactive and compacted too, value for value
    # 0.18.2 has no session_model_usage table: the usage row is not kept, the totals are
    with src.read() as conn:
        assert conn.execute("SELECT COUNT(*) FROM session_model_usage WHERE session_id = ?", (sid,)).fetchone() == (0,)
    # the title clashed in ops (same fixture titles): suffixed as upstream does
    assert rows(dst, "SELECT title FROM sessions WHERE id = ?", (sid,)) == [(f"In-place compaction ({sid[-12:]})",)]
    events = {e.profile: e for e in AuditEvent.objects.filter(action="move_to_owner_store", outcome="applied")}
    assert set(events) == {"default", "ops"} and all(e.backup_path for e in events.values())
    assert events["default"].backup_path != events["ops"].backup_path
    backup = sqlite3.connect(events["default"].backup_path)  # taken before: the session is in it
    assert backup.execute("SELECT COUNT(*) FROM messages WHERE session_id = ?", (sid,)).fetchone() == (len(before),)
    backup.close()
    assert not run_store_checks(dst, only=["id_collision"], other_stores=[src]).findings

    code, again = heal("--all-profiles", "--only", "owner_mismatch", "--apply", "--json")
    assert code == 0 and again["summary"]["applied"] == 0 and not moves(again, "default")


def test_descendants_move_with_it_and_prompts_and_usage_follow(aged_home):
    """edge (newest shape) -> a second newest-shape profile: the prompt row and the
    usage row go along, the delegate child moves with its parent, the child keyed to
    another profile stays, detached."""
    src = store(aged_home, "edge")
    home2 = aged_home / "profiles" / "edge2"
    home2.mkdir()
    shutil.copy(src.path, home2 / "state.db")
    dst = store(aged_home, "edge2")
    sids = ids("edge")
    parent, delegate = sids["cli_main"], sids["delegate_child"]
    [(prompt_hash,)] = rows(src, "SELECT system_prompt_hash FROM sessions WHERE id = ?", (parent,))
    with damage(dst) as db:  # edge2 holds everything but this conversation
        for sid in (delegate, parent):
            db.execute("DELETE FROM messages WHERE session_id = ?", (sid,))
            db.execute("DELETE FROM session_model_usage WHERE session_id = ?", (sid,))
            db.execute("DELETE FROM sessions WHERE id = ?", (sid,))
        db.execute("DELETE FROM system_prompts WHERE hash = ?", (prompt_hash,))
    stay = "20260306_091000_5aa5aa"
    with damage(src) as db:
        db.execute("UPDATE sessions SET profile_name = 'edge2' WHERE id = ?", (parent,))
        db.execute("INSERT INTO sessions (id, source, started_at, parent_session_id, session_key, profile_name) "
                   "VALUES (?, 'telegram', 1.7e9, ?, 'agent:edge:telegram:dm:1', 'edge')", (stay, parent))
    cols = common_message_columns(src, dst)
    before = {sid: message_values(src, sid, cols) for sid in (parent, delegate)}

    code, report = heal("--profile", "edge", "--only", "owner_mismatch", "--apply", "--json")
    [done] = moves(report, "edge")
    assert done["status"] == "applied", done
    assert {sid: message_values(dst, sid, cols) for sid in (parent, delegate)} == before
    assert rows(dst, "SELECT parent_session_id FROM sessions WHERE id = ?", (delegate,)) == [(parent,)]
    assert rows(dst, "SELECT system_prompt_hash, profile_name FROM sessions WHERE id = ?", (parent,)) == [(prompt_hash, "edge2")]
    assert rows(dst, "SELECT COUNT(*) FROM system_prompts WHERE hash = ?", (prompt_hash,)) == [(1,)]
    assert rows(dst, "SELECT COUNT(*) FROM session_model_usage WHERE session_id = ?", (parent,)) == [(1,)]
    assert not exists(src, parent) and not exists(src, delegate)
    assert rows(src, "SELECT parent_session_id FROM sessions WHERE id = ?", (stay,)) == [(None,)]  # detached
    assert rows(src, "SELECT COUNT(*) FROM system_prompts WHERE hash = ?", (prompt_hash,)) == [(0,)]  # collected
    with src.read() as conn:
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []


def test_missing_parent_is_dropped_and_said_so(aged_home):
    src, dst = store(aged_home, "default"), store(aged_home, "ops")
    child, parent = ids("default")["branch_child"], ids("default")["branch_parent"]
    rekey(src, child, "agent:ops:telegram:dm:888")
    with src.read() as conn:
        [f] = [f for f in run_store_checks(src, only=["owner_mismatch"]).findings if f.session_id == child]
        plan = plan_for(src, conn, src.capabilities(conn), f)
    assert not plan.blocked
    assert any(f"The parent {parent} does not exist in ops" in n for n in plan.params["notes"])
    code, report = heal("--profile", "default", "--only", "owner_mismatch", "--apply", "--json")
    assert moves(report, "default")[0]["status"] == "applied"
    assert rows(dst, "SELECT parent_session_id FROM sessions WHERE id = ?", (child,)) == [(None,)]
    assert exists(src, parent)  # the parent stays where it is


def test_columns_the_target_lacks_are_skipped_and_reported(aged_home):
    """newest shape -> 0.13.0 (schema 11): profile_name, session_key, message uids... cannot be kept."""
    src, dst = store(aged_home, "edge"), store(aged_home, "archive")
    sid = ids("edge")["telegram_open"]
    rekey(src, sid, "agent:archive:telegram:dm:12345")
    with src.read() as conn:
        [f] = [f for f in run_store_checks(src, only=["owner_mismatch"]).findings if f.session_id == sid]
        plan = plan_for(src, conn, src.capabilities(conn), f)
    lost = " ".join(n for n in plan.params["notes"] if "has no column" in n)
    assert "sessions.session_key" in lost and "sessions.profile_name" in lost
    cols = common_message_columns(src, dst)
    before = message_values(src, sid, cols)
    code, report = heal("--profile", "edge", "--only", "owner_mismatch", "--apply", "--json")
    assert moves(report, "edge")[0]["status"] == "applied"
    assert message_values(dst, sid, cols) == before and not exists(src, sid)


def test_hidden_rows_never_become_visible_in_a_store_without_active(aged_home):
    src = store(aged_home, "edge")
    sid = ids("edge")["compacted"]
    rekey(src, sid, "agent:archive:telegram:dm:1")
    code, report = heal("--profile", "edge", "--only", "owner_mismatch", "--apply", "--json")
    [skipped] = moves(report, "edge")
    assert skipped["status"] == "skipped" and "would become visible" in skipped["reason"]
    assert exists(src, sid) and not exists(store(aged_home, "archive"), sid)


def test_an_id_already_in_the_target_is_an_id_collision_never_overwritten(aged_home):
    src, dst = store(aged_home, "default"), store(aged_home, "ops")
    sid = ids("default")["telegram_open"]
    rekey(src, sid, "agent:ops:telegram:dm:12345")
    with damage(dst) as db:  # another conversation with the same id in ops
        db.execute("INSERT INTO sessions (id, source, started_at, title) VALUES (?, 'cli', 1.7e9, 'other')", (sid,))
        db.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', 'not the same', 1.7e9)", (sid,))
    src_before, dst_before = rows(src, "SELECT * FROM messages WHERE session_id = ?", (sid,)), \
        rows(dst, "SELECT * FROM messages WHERE session_id = ?", (sid,))
    code, report = heal("--all-profiles", "--only", "owner_mismatch,id_collision", "--apply", "--json")
    [skipped] = moves(report, "default")
    assert skipped["status"] == "skipped" and "id_collision" in skipped["reason"]
    collisions = [f for f in profile_entry(report, "default")["findings"] if f["check"] == "id_collision"]
    assert [f["session_id"] for f in collisions] == [sid] and collisions[0]["heal"] is None
    assert rows(src, "SELECT * FROM messages WHERE session_id = ?", (sid,)) == src_before
    assert rows(dst, "SELECT * FROM messages WHERE session_id = ?", (sid,)) == dst_before
    assert not AuditEvent.objects.filter(outcome="applied").exists()


def test_a_live_session_or_gateway_is_refused(aged_home):
    src = store(aged_home, "edge")
    sid = ids("edge")["telegram_open"]
    rekey(src, sid, "agent:ops:telegram:dm:12345")
    hermes(src, f"""
holder = f"pid={{os.getpid()}}:tid={{threading.get_ident()}}:agent=1:nonce=abc"
assert db.try_acquire_compression_lock({sid!r}, holder, ttl_seconds=3600)
""", version="0.19.0")
    code, report = heal("--profile", "edge", "--only", "owner_mismatch", "--apply", "--json")
    [refused] = moves(report, "edge")
    assert refused["status"] == "refused" and "compression_lock" in refused["reason"]
    assert AuditEvent.objects.get(action="move_to_owner_store").outcome == "refused"
    assert not exists(store(aged_home, "ops"), sid)  # refused before anything was copied
    with damage(src) as db:
        db.execute("DELETE FROM compression_locks")
        db.execute("INSERT INTO gateway_heartbeats (backend_id, pid, started_at, last_heartbeat, profile, host) "
                   "VALUES ('serve-1', ?, ?, ?, 'edge', '')", (os.getpid(), time.time() - 60, time.time()))
    code, report = heal("--profile", "edge", "--only", "owner_mismatch", "--apply", "--json")
    [refused] = moves(report, "edge")  # the gateway routes this session
    assert refused["status"] == "refused" and "gateway: routed by gateway key" in refused["reason"]
    other = ids("edge")["long"]  # not routed, but the profile's gateway is up
    rekey(src, sid, "agent:edge:telegram:dm:12345")
    rekey(src, other, "agent:ops:telegram:dm:4242")
    code, report = heal("--profile", "edge", "--only", "owner_mismatch", "--apply", "--json")
    [refused] = moves(report, "edge")
    assert refused["status"] == "refused" and "a gateway of profile edge is live" in refused["reason"]
    assert exists(src, sid) and exists(src, other) and not exists(store(aged_home, "ops"), other)


def test_operator_jobs_never_move_without_the_delete_permission(aged_home, django_user_model):
    from django.contrib.auth.models import Permission

    from sessions_app.actions.engine import Applier
    src = store(aged_home, "default")
    sid = ids("default")["telegram_open"]
    rekey(src, sid, "agent:ops:telegram:dm:12345")
    user = django_user_model.objects.create_user("op", password="x")
    user.user_permissions.add(Permission.objects.get(codename="run_heal"))
    with src.read() as conn:
        [f] = run_store_checks(src, only=["owner_mismatch"]).findings
        plan = plan_for(src, conn, src.capabilities(conn), f)
    outcome = Applier(actor=user).apply(src, plan)
    assert outcome.status == "refused" and "delete_sessions" in outcome.reason
    assert exists(src, sid) and not exists(store(aged_home, "ops"), sid)


# --------------------------------------------------------------------------- interrupted moves

def _manage(args, data, **kw):
    env = dict(os.environ, HERMES_ADMIN_DATA=str(data), HERMES_ADMIN_SECRET_KEY="test")
    env.pop("HERMES_ROOTS", None)
    return subprocess.run([sys.executable, "manage.py", *args], cwd=PROJECT, env=env, capture_output=True,
                          text=True, timeout=300, **kw)


@pytest.mark.parametrize("held", ["target", "source"])
def test_sigkill_between_the_steps_loses_nothing_and_the_next_run_finishes(aged_home, tmp_path, held):
    """A real process is killed with SIGKILL while it waits for a write lock held here:
    on the target (after both backups, before the copy), or on the source (after the
    copy was committed and verified, before the delete). The session stays whole in
    at least one store, and the next run finishes the move without a duplicate."""
    src, dst = store(aged_home, "default"), store(aged_home, "ops")
    sid = ids("default")["long"]
    rekey(src, sid, "agent:ops:telegram:dm:999")
    cols = common_message_columns(src, dst)
    before = message_values(src, sid, cols)
    data = tmp_path / "run-data"
    data.mkdir()
    assert _manage(["migrate", "-v0"], data).returncode == 0
    lock = sqlite3.connect((dst if held == "target" else src).path, isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")
    env = dict(os.environ, HERMES_ADMIN_DATA=str(data), HERMES_ADMIN_SECRET_KEY="test")
    proc = subprocess.Popen([sys.executable, "manage.py", "heal_sessions", "--root", str(aged_home), "--profile",
                             "default", "--only", "owner_mismatch", "--apply"], cwd=PROJECT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None:
            if held == "target" and len(list((data / "backups").glob("*/state.db"))) == 2:
                time.sleep(0.3)  # the backups are the last step before the target's write lock
                break
            if held == "source" and exists(dst, sid):
                break
            time.sleep(0.02)
        assert proc.poll() is None, "the move finished before it could be interrupted"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    assert message_values(src, sid, cols) == before  # whole in the source either way
    if held == "source":
        assert message_values(dst, sid, cols) == before  # and whole in the target
    else:
        assert not exists(dst, sid)
    for s in (src, dst):
        with s.read() as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)

    again = _manage(["heal_sessions", "--root", str(aged_home), "--profile", "default", "--only", "owner_mismatch",
                     "--apply", "--json"], data)
    assert again.returncode == 0, again.stdout + again.stderr
    assert not exists(src, sid)
    assert message_values(dst, sid, cols) == before  # once, not twice
    assert rows(dst, "SELECT COUNT(*) FROM sessions WHERE id = ?", (sid,)) == [(1,)]


def test_recovery_files_beside_the_target_refuse_the_move(aged_home):
    src, dst = store(aged_home, "default"), store(aged_home, "ops")
    sid = ids("default")["hostile"]
    rekey(src, sid, "agent:ops:telegram:dm:31337")
    (dst.path.parent / "state.db.repair-scratch").write_bytes(b"")
    code, report = heal("--profile", "default", "--only", "owner_mismatch", "--apply", "--json")
    [refused] = moves(report, "default")
    assert refused["status"] == "refused" and refused["reason"].startswith("ops: Hermes recovery files")
    assert exists(src, sid) and not exists(dst, sid)


def test_a_plan_naming_another_target_is_refused_at_apply(aged_home):
    from sessions_app.actions.engine import Applier
    src = store(aged_home, "default")
    sid = ids("default")["hostile"]
    rekey(src, sid, "agent:ops:telegram:dm:31337")
    with src.read() as conn:
        [f] = run_store_checks(src, only=["owner_mismatch"]).findings
        plan = plan_for(src, conn, src.capabilities(conn), f)
    plan.params["target_path"] = str(aged_home / "elsewhere" / "state.db")
    outcome = Applier(actor_label="test").apply(src, plan)
    assert outcome.status == "failed" and "invalid plan" in outcome.reason
    assert exists(src, sid) and not exists(store(aged_home, "ops"), sid)


# --------------------------------------------------------------------------- review of issue 4: ordering, audit, identity

def _plan(src, sid):
    with src.read() as conn:
        [f] = [f for f in run_store_checks(src, only=["owner_mismatch"]).findings if f.session_id == sid]
        return plan_for(src, conn, src.capabilities(conn), f)


def _apply(src, plan):
    from sessions_app.actions.engine import Applier
    return Applier(actor_label="test").apply(src, plan)


def test_the_copy_is_verified_before_commit_and_audited_per_store(aged_home, monkeypatch):
    """A copy that does not match the source is rolled back inside the target's
    transaction (never committed); the target's event says so, and on a good move
    each store's event counts its own rows: copied there, deleted here."""
    from sessions_app.actions.move import MoveToOwnerStore

    src, dst = store(aged_home, "default"), store(aged_home, "ops")
    sid = ids("default")["long"]
    rekey(src, sid, "agent:ops:telegram:dm:4711")
    copy = MoveToOwnerStore._copy

    def copy_then_garble(self, s, caps, d, tcaps, plan, to_copy):
        n = copy(self, s, caps, d, tcaps, plan, to_copy)
        d.execute("UPDATE messages SET content = 'garbled' WHERE id = (SELECT MAX(id) FROM messages WHERE session_id = ?)",
                  (sid,))
        return n

    monkeypatch.setattr(MoveToOwnerStore, "_copy", copy_then_garble)
    outcome = _apply(src, _plan(src, sid))
    assert outcome.status == "failed" and outcome.reason.startswith(f"verify: the messages of {sid} differ")
    assert not exists(dst, sid) and exists(src, sid)
    event = AuditEvent.objects.get(action="move_to_owner_store", profile="ops")
    assert (event.outcome, event.rows_changed) == ("failed", 0)
    assert event.reason.startswith("verify before COMMIT") and "rolled back" in event.reason

    monkeypatch.setattr(MoveToOwnerStore, "_copy", copy)
    AuditEvent.objects.all().delete()
    [(messages,)] = rows(src, "SELECT COUNT(*) FROM messages WHERE session_id = ?", (sid,))
    prompts_before = rows(dst, "SELECT COUNT(*) FROM system_prompts")[0][0] if "system_prompts" in [
        r[0] for r in rows(dst, "SELECT name FROM sqlite_master WHERE type = 'table'")] else None
    outcome = _apply(src, _plan(src, sid))
    assert outcome.status == "applied", outcome.reason
    events = {e.profile: e for e in AuditEvent.objects.filter(action="move_to_owner_store")}
    prompts = (rows(dst, "SELECT COUNT(*) FROM system_prompts")[0][0] - prompts_before) if prompts_before is not None else 0
    assert events["ops"].rows_changed == 1 + messages + prompts  # the session row, its messages, prompt rows
    assert events["default"].rows_changed == 1 + messages + prompts  # deleted here: the same rows
    assert events["default"].rows_changed == outcome.rows_changed
    assert f"{messages + 1 + prompts} row(s) copied there" in outcome.reason


def test_a_copy_that_raises_completes_the_target_event(aged_home, monkeypatch):
    from sessions_app.actions.move import MoveToOwnerStore

    src, dst = store(aged_home, "default"), store(aged_home, "ops")
    sid = ids("default")["long"]
    rekey(src, sid, "agent:ops:telegram:dm:4711")

    def broken(*args):
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(MoveToOwnerStore, "_copy", broken)
    outcome = _apply(src, _plan(src, sid))
    assert outcome.status == "failed" and "disk I/O error" in outcome.reason
    event = AuditEvent.objects.get(action="move_to_owner_store", profile="ops")
    assert event.outcome == "failed" and event.reason == "nothing written: OperationalError: disk I/O error"
    assert not exists(dst, sid) and exists(src, sid)


def test_the_copy_reads_one_snapshot_of_the_source_and_files_move_after_the_delete(aged_home, monkeypatch):
    """A message an agent appends to the source while the copy runs is not half-copied
    (the copy reads the snapshot the plan was checked against); the source delete then
    sees the change and keeps the session, and its files stay where it stays."""
    from sessions_app.actions.move import MoveToOwnerStore

    src, dst = store(aged_home, "default"), store(aged_home, "ops")
    sid = ids("default")["long"]
    rekey(src, sid, "agent:ops:telegram:dm:4711")
    (src.profile.sessions_dir / f"{sid}.json").write_text("{}")
    cols = common_message_columns(src, dst)
    before = message_values(src, sid, cols)
    copy = MoveToOwnerStore._copy

    def late_write_then_copy(self, s, caps, d, tcaps, plan, to_copy):
        with damage(src) as db:  # an agent writes while the copy is under way
            db.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', 'late', 1.7e9)",
                       (sid,))
        return copy(self, s, caps, d, tcaps, plan, to_copy)

    monkeypatch.setattr(MoveToOwnerStore, "_copy", late_write_then_copy)
    plan = _plan(src, sid)
    assert plan.params["files"] == {sid: [f"{sid}.json"]}
    outcome = _apply(src, plan)
    assert outcome.status == "skipped" and "changed in default after it was copied" in outcome.reason
    assert message_values(dst, sid, cols) == before  # the snapshot, not a mix
    assert message_values(src, sid, cols)[:-1] == before and exists(src, sid)
    assert (src.profile.sessions_dir / f"{sid}.json").exists()
    assert not (dst.profile.sessions_dir / f"{sid}.json").exists()


@pytest.mark.parametrize("change", [None, "row", "usage"])
def test_only_an_identical_copy_finishes_an_interrupted_move(aged_home, monkeypatch, change):
    """A same-id session in the target finishes an interrupted move only when it is
    exactly the copy the move writes: messages, the whole session row (but title,
    owner and parent) and the usage rows; anything else is an id_collision."""
    from sessions_app.actions.move import MoveToOwnerStore

    src, dst = store(aged_home, "default"), store(aged_home, "edge")
    sid = ids("default")["long"]
    rekey(src, sid, "agent:edge:telegram:dm:4711")
    with damage(src) as db:
        db.execute("INSERT INTO session_model_usage (session_id, model, api_call_count, input_tokens) "
                   "VALUES (?, 'gpt-x', 3, 1200)", (sid,))

    def interrupted(*args):
        raise sqlite3.OperationalError("killed before the delete")

    monkeypatch.setattr(MoveToOwnerStore, "_delete", staticmethod(interrupted))
    assert _apply(src, _plan(src, sid)).status == "failed"
    monkeypatch.undo()
    assert exists(src, sid) and exists(dst, sid)
    with damage(dst) as db:  # same messages, source and start time; something else differs
        if change == "row":
            db.execute("UPDATE sessions SET end_reason = 'user_exit' WHERE id = ?", (sid,))
        elif change == "usage":
            db.execute("UPDATE session_model_usage SET input_tokens = 99 WHERE session_id = ?", (sid,))
    src_before = rows(src, "SELECT * FROM messages WHERE session_id = ?", (sid,))
    plan = _plan(src, sid)
    outcome = _apply(src, plan)
    if change is None:
        assert plan.params["finish"] == [sid] and outcome.status == "applied", outcome.reason
        assert not exists(src, sid) and rows(dst, "SELECT COUNT(*) FROM sessions WHERE id = ?", (sid,)) == [(1,)]
        return
    what = "session row" if change == "row" else "usage rows"
    assert plan.blocked.startswith(f"id_collision: {sid} already exists in edge") and what in plan.blocked
    assert outcome.status == "skipped" and exists(src, sid)
    assert rows(src, "SELECT * FROM messages WHERE session_id = ?", (sid,)) == src_before


def test_column_names_are_quoted(aged_home):
    """A store column whose name holds a double quote is named, not a syntax error."""
    src, dst = store(aged_home, "default"), store(aged_home, "ops")
    sid = ids("default")["long"]
    rekey(src, sid, "agent:ops:telegram:dm:4711")
    with damage(src) as db:
        db.execute('ALTER TABLE messages ADD COLUMN "odd""col" TEXT')
        db.execute('UPDATE messages SET "odd""col" = \'x\' WHERE session_id = ?', (sid,))
    plan = _plan(src, sid)
    assert not plan.blocked and any('messages.odd"col' in n for n in plan.params["notes"])
    assert _apply(src, plan).status == "applied"
    assert exists(dst, sid) and not exists(src, sid)


def test_a_live_registry_entry_in_the_owner_refuses_the_copy_and_the_source_stays(aged_home):
    """The target's checks are the copy's own guarded write: an agent of the owner's
    profile registered the session (runtime/active_sessions.json of a running
    process), so nothing is copied there and nothing leaves the source."""
    import json

    src, dst = store(aged_home, "edge"), store(aged_home, "ops")
    sid = ids("edge")["long"]
    rekey(src, sid, "agent:ops:telegram:dm:4242")
    runtime = dst.profile.home / "runtime"
    runtime.mkdir(exist_ok=True)
    (runtime / "active_sessions.json").write_text(json.dumps({"entries": [
        {"session_id": sid, "pid": os.getpid(), "surface": "telegram", "started_at": time.time() - 60}]}))
    before = rows(src, "SELECT * FROM messages WHERE session_id = ?", (sid,))
    code, report = heal("--profile", "edge", "--only", "owner_mismatch", "--apply", "--json")
    [refused] = moves(report, "edge")
    assert refused["status"] == "refused" and refused["reason"].startswith("ops: ")
    assert "registry" in refused["reason"] and sid in refused["reason"]
    assert exists(src, sid) and not exists(dst, sid)
    assert rows(src, "SELECT * FROM messages WHERE session_id = ?", (sid,)) == before
    assert not AuditEvent.objects.filter(outcome="applied").exists()
