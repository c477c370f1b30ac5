"""Issue 5, engine side: delete with liveness, trash export, restore, on real-release stores.

Stores are copies written by the real hermes-agent releases (aged 40 days, their
agents long gone) plus the newest shape; live agents are real processes running
hermes-agent 0.19.0's ``SessionDB`` against the copy.
"""

import hashlib
import os
import socket
import time

import pytest

from sessions_app import trash
from sessions_app.actions import deletion
from sessions_app.models import AuditEvent
from tests.checks.helpers import damage, dead_pid, hermes, hermes_background, own_pidns
from tests.conftest import PROFILES, ids

from .conftest import store
from .delete_helpers import agent, confirm, dump, fts_hits, rows, stop

pytestmark = pytest.mark.django_db


def deleter(label="alice"):
    return deletion.Deleter(actor_label=label)


def events(action=deletion.DELETE_ACTION):
    return list(AuditEvent.objects.filter(action=action).order_by("id"))


def add_files(s, sid):
    """The files a gateway leaves for a session (hermes-agent 0.19.0 names)."""
    folder = s.profile.sessions_dir
    folder.mkdir(exist_ok=True)
    made = {}
    for name in (f"{sid}.json", f"{sid}.jsonl", f"request_dump_{sid}_20260301_090000_123456.json"):
        (folder / name).write_bytes(f"{name} body \u00e9\n".encode())
        made[name] = (folder / name).read_bytes()
    return made


# --------------------------------------------------------------------------- round trip

@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("kind", ["cli_main", "telegram_open", "compress_mid"])
def test_delete_then_restore_is_byte_for_byte(aged_home, profile, kind):
    s = store(aged_home, profile)
    sid = ids(profile)[kind]
    files = add_files(s, sid)
    before = dump(s)
    word = {"cli_main": "checkout", "telegram_open": None, "compress_mid": None}[kind]
    hits = fts_hits(s, word) if word else None

    plan, item = confirm(s, sid)
    assert plan.messages > 0
    override = None
    if plan.verdict != "not_live":
        # A routing entry on a store that keeps no gateway heartbeats (releases up to
        # 0.19.0): maybe live, and the admin's typed override takes the entry along.
        assert plan.verdict == "maybe_live" and plan.override_possible, plan.evidence
        assert {(e.source, e.blocks) for _, e in plan.evidence} == {("gateway", False)}
        override = sid
    done = deleter().delete(s, item, override=override, may_override=True)
    assert done.status == "applied", done.reason
    assert rows(s, "SELECT COUNT(*) FROM sessions WHERE id IN (%s)" % ",".join("?" * len(plan.target_ids)),
                plan.target_ids) == [(0,)]
    assert rows(s, "SELECT COUNT(*) FROM messages WHERE session_id = ?", (sid,)) == [(0,)]
    assert not any((s.profile.sessions_dir / n).exists() for n in files)
    assert {p.name: p.read_bytes() for p in done.entry.files_dir.iterdir()} == files
    kept = trash.rows_tables(done.entry)
    assert set(kept) >= {"sessions", "messages", "_detached", "_detached_sessions"}
    assert done.counts["detached"] == len(plan.detach)
    if kind == "compress_mid":
        assert [c["edge"] for c in plan.detach] == ["compression"]
    if kind == "cli_main":
        # Releases before 0.17 wrote delegate children as plain 'cli' rows without a
        # marker: upstream could not tell them apart either, they are detached.
        delegated = [t.kind for t in plan.targets] == ["asked", "delegate"]
        assert delegated == (profile not in ("legacy", "archive")) and delegated != bool(plan.detach)
    if word:
        assert fts_hits(s, word) == [] and hits  # left the index with its rows

    back = deleter().restore(s, trash.get_entry(done.entry.id))
    assert back.status == "applied", back.reason
    assert dump(s) == before  # same ids, same bytes, same storage classes, every table
    assert {n: (s.profile.sessions_dir / n).read_bytes() for n in files} == files
    if word:
        assert fts_hits(s, word) == hits
    assert trash.get_entry(done.entry.id).state == "restored"
    [deleted], [restored] = events(), events(deletion.RESTORE_ACTION)
    assert (deleted.outcome, restored.outcome) == ("applied", "applied")
    assert deleted.session_ids == plan.target_ids and deleted.backup_path and deleted.backup_sha256
    data = open(deleted.backup_path, "rb").read()
    assert hashlib.sha256(data).hexdigest() == deleted.backup_sha256


def test_delegate_children_go_branch_children_stay_as_upstream_does(aged_home, tmp_path):
    """Our deletion leaves the same sessions and messages as hermes-agent 0.19.0's own
    ``delete_session`` on an identical copy; files leave sessions/ in both."""
    sids = ids("default")
    s = store(aged_home, "default")
    for sid in (sids["cli_main"], sids["delegate_child"], sids["branch_parent"]):
        add_files(s, sid)
    twin_home = tmp_path / "twin"
    import shutil
    shutil.copytree(aged_home, twin_home)
    twin = store(twin_home, "default")

    for kind in ("cli_main", "branch_parent"):
        plan, item = confirm(s, sids[kind])
        if kind == "cli_main":
            assert [(t.id, t.kind) for t in plan.targets] == [(sids["cli_main"], "asked"), (sids["delegate_child"], "delegate")]
            assert plan.detach == []
        else:
            assert [t.id for t in plan.targets] == [sids["branch_parent"]]
            assert plan.detach == [{"id": sids["branch_child"], "parent_session_id": sids["branch_parent"], "edge": "branch"}]
        assert deleter().delete(s, item).status == "applied"
    hermes(twin, f"""
for sid in ({sids['cli_main']!r}, {sids['branch_parent']!r}):
    assert db.delete_session(sid, sessions_dir=Path(sys.argv[1]).parent / 'sessions')
""")
    tables = ["sessions", "messages", "session_model_usage", "state_meta", "schema_version"]
    assert dump(s, tables) == dump(twin, tables)
    assert rows(s, "SELECT parent_session_id FROM sessions WHERE id = ?", (sids["branch_child"],)) == [(None,)]
    assert sorted(os.listdir(s.profile.sessions_dir)) == sorted(os.listdir(twin.profile.sessions_dir)) == ["sessions.json"]
    assert len(events()) == 2


def test_topic_binding_goes_and_comes_back_unless_the_topic_was_rebound(aged_home):
    """0.19.0 binds a Telegram DM topic to the session with its own API; the binding
    goes with the session and comes back with it, unless the gateway bound the topic
    to a new session meanwhile (then that binding stays and the restore says so)."""
    s = store(aged_home, "default")
    sid = ids("default")["telegram_open"]
    bind = f"""
db.bind_telegram_topic(chat_id='12345', thread_id='77', user_id='12345',
                       session_key='agent:main:telegram:dm:12345', session_id={{sid!r}})
"""
    hermes(s, bind.format(sid=sid))
    before = dump(s)
    plan, item = confirm(s, sid)
    assert plan.dependents["telegram_dm_topic_bindings"] == 1
    done = deleter().delete(s, item, override=sid, may_override=True)
    assert done.status == "applied" and done.counts["telegram_dm_topic_bindings"] == 1
    assert rows(s, "SELECT COUNT(*) FROM telegram_dm_topic_bindings") == [(0,)]
    assert deleter().restore(s, done.entry).status == "applied"
    assert dump(s) == before

    done = deleter().delete(s, confirm(s, sid)[1], override=sid, may_override=True)
    hermes(s, "db.create_session('20260301_200000_9a9a9a9a', 'telegram')\n" + bind.format(sid="20260301_200000_9a9a9a9a"))
    back = deleter().restore(s, done.entry)
    assert back.status == "applied" and back.report["telegram_dm_topic_bindings_not_restored"] == 1
    assert rows(s, "SELECT session_id FROM telegram_dm_topic_bindings") == [("20260301_200000_9a9a9a9a",)]


def test_system_prompts_are_collected_only_when_nobody_else_uses_them(aged_home):
    sids = ids("edge")
    s = store(aged_home, "edge")
    [(digest,)] = rows(s, "SELECT system_prompt_hash FROM sessions WHERE id = ?", (sids["cli_main"],))
    plan, item = confirm(s, sids["cli_main"])
    assert plan.prompts == [digest]
    done = deleter().delete(s, item)
    assert done.counts["system_prompts"] == 1 and rows(s, "SELECT COUNT(*) FROM system_prompts") == [(0,)]
    assert deleter().restore(s, done.entry).status == "applied"
    with damage(s) as db:  # another session pinned to the same prompt
        db.execute("UPDATE sessions SET system_prompt_hash = ? WHERE id = ?", (digest, sids["long"]))
    plan, item = confirm(s, sids["cli_main"])
    assert plan.prompts == [] and "system_prompts" not in plan.dependents
    assert deleter().delete(s, item).status == "applied"
    assert rows(s, "SELECT hash FROM system_prompts") == [(digest,)]


def test_whole_lineage_goes_as_one_conversation(aged_home):
    sids = ids("edge")
    s = store(aged_home, "edge")
    before = dump(s)
    # Deleting only the tip makes the previous segment the visible end again.
    tip_plan, _ = confirm(s, sids["compress_tip"])
    assert [t.id for t in tip_plan.targets] == [sids["compress_tip"]]
    plan, item = confirm(s, sids["compress_mid"], lineage=True)
    assert [t.id for t in plan.targets] == [sids["compress_root"], sids["compress_mid"], sids["compress_tip"]]
    assert [t.kind for t in plan.targets] == ["lineage", "asked", "lineage"]
    done = deleter().delete(s, item)
    assert done.status == "applied", done.reason
    assert rows(s, "SELECT COUNT(*) FROM sessions WHERE id IN (?, ?, ?)", tuple(plan.target_ids)) == [(0,)]
    assert deleter().restore(s, done.entry).status == "applied"
    assert dump(s) == before


# --------------------------------------------------------------------------- refusals

def test_compression_lock_taken_through_the_release_api_refuses(aged_home):
    """0.19.0 takes the lock with its own API in a live process: refused. Killed, its
    holder (no pidns stamp) cannot be proved dead: still refused, even with an
    override, until the lock's TTL runs out."""
    s = store(aged_home, "default")
    sid = ids("default")["long"]
    proc = hermes_background(s, f"""
holder = f"pid={{os.getpid()}}:tid={{threading.get_ident()}}:agent=1:nonce={{uuid.uuid4().hex[:8]}}"
assert db.try_acquire_compression_lock({sid!r}, holder)
print("READY", flush=True)
time.sleep(600)
""")
    before = dump(s)
    try:
        plan, item = confirm(s, sid)
        assert plan.verdict == "live"
        [e] = [e for _, e in plan.evidence]
        assert (e.source, e.holder_pid, e.blocks) == ("compression_lock", proc.pid, True)
        done = deleter().delete(s, item, override=sid, may_override=True)
        assert done.status == "refused" and "live" in done.reason
    finally:
        stop(proc)
    plan, item = confirm(s, sid)
    assert plan.verdict == "live" and plan.evidence[0][1].holder_dead is None
    assert deleter().delete(s, item, override=sid, may_override=True).status == "refused"
    assert dump(s) == before
    assert [e.outcome for e in events()] == ["refused", "refused"]
    assert not trash.list_entries()


def test_turn_lease_of_a_live_agent_then_killed_needs_the_typed_override(aged_home):
    """Newest shape: an agent holds a turn lease on the lineage root and writes.
    Live -> refused. Killed mid-turn -> its stamped holder is provably dead: maybe
    live, refused without the override, deleted with it, audited as an override."""
    sids = ids("edge")
    s = store(aged_home, "edge")
    sid, root = sids["compress_tip"], sids["compress_root"]
    proc = agent(s, sid, root=root)
    try:
        plan, item = confirm(s, sid)
        assert plan.verdict == "live"
        lease = next(e for _, e in plan.evidence if e.source == "turn_lease")
        assert lease.holder_pid == proc.pid and lease.blocks and lease.holder_dead is False
        assert lease.holder_fields["platform"] == "cli" and lease.holder_fields["pidns"] == own_pidns()
        assert lease.holder_fields["pidns_here"] is True
        assert deleter().delete(s, item).status == "refused"
    finally:
        stop(proc)

    plan, item = confirm(s, sid)
    assert plan.verdict == "maybe_live" and plan.override_possible
    assert {e.source for _, e in plan.evidence} == {"turn_lease", "activity"}
    assert next(e for _, e in plan.evidence if e.source == "turn_lease").holder_dead is True
    assert "override" in deleter().delete(s, item).reason
    assert deleter().delete(s, item, override=sid, may_override=False).status == "refused"
    assert deleter().delete(s, item, override="not-the-id", may_override=True).status == "refused"
    assert rows(s, "SELECT COUNT(*) FROM sessions WHERE id = ?", (sid,)) == [(1,)]

    done = deleter().delete(s, item, override=f"  {sid} ", may_override=True)
    assert done.status == "applied", done.reason
    assert done.override and "OVERRIDE" in done.reason
    assert rows(s, "SELECT COUNT(*) FROM sessions WHERE id = ?", (sid,)) == [(0,)]
    # the lease sat on the root, which stays (only the tip was deleted): it is not ours to clear
    assert rows(s, "SELECT COUNT(*) FROM session_turn_leases WHERE conversation_id = ?", (root,)) == [(1,)]
    audit = events()
    assert [e.outcome for e in audit] == ["refused"] * 4 + ["applied"]
    assert audit[-1].check_code == "override_live" and audit[-1].plan["override"] is True
    assert "OVERRIDE" in audit[-1].reason


def test_stale_lease_on_the_session_itself_goes_to_the_trash(aged_home):
    sids = ids("edge")
    s = store(aged_home, "edge")
    sid = sids["long"]
    proc = agent(s, sid)
    stop(proc)
    plan, item = confirm(s, sid)
    assert plan.dependents["session_turn_leases"] == 1
    done = deleter().delete(s, item, override=sid, may_override=True)
    assert done.status == "applied" and done.counts["session_turn_leases"] == 1
    assert rows(s, "SELECT COUNT(*) FROM session_turn_leases WHERE conversation_id = ?", (sid,)) == [(0,)]
    back = deleter().restore(s, done.entry)
    assert back.status == "applied" and "session_turn_leases_not_restored" in back.report
    assert rows(s, "SELECT COUNT(*) FROM session_turn_leases") == [(0,)]  # a dead hold is not brought back


def test_agent_that_ended_normally_is_deleted_and_does_not_come_back(aged_home):
    s = store(aged_home, "edge")
    sid = "20260306_180000_aa11bb"
    agent(s, sid, end_normally=True)
    plan, item = confirm(s, sid)
    assert plan.verdict == "not_live", plan.evidence  # ended by its writer seconds ago
    assert plan.messages == 2
    done = deleter().delete(s, item)
    assert done.status == "applied", done.reason
    # Hermes opens the store again (its open runs maintenance): the session stays gone.
    out = hermes(s, f"""
print(db.get_session({sid!r}), len(db.get_messages({sid!r})))
""")
    assert out.split() == ["None", "0"]
    assert rows(s, "SELECT COUNT(*) FROM messages WHERE session_id = ?", (sid,)) == [(0,)]


def test_gateway_routing_with_a_live_heartbeat_refuses_until_the_gateway_stops(aged_home):
    sids = ids("edge")
    s = store(aged_home, "edge")
    sid = sids["telegram_open"]
    gateway_code = """
def beat(conn):
    now = time.time()
    conn.execute("INSERT OR REPLACE INTO gateway_heartbeats (backend_id, pid, started_at, last_heartbeat, profile, host) "
                 "VALUES ('serve-1', ?, ?, ?, 'edge', '')", (os.getpid(), now - 60, now))
db._execute_write(beat)
print("READY", flush=True)
time.sleep(600)
"""
    gateway = hermes_background(s, gateway_code)
    try:
        plan, item = confirm(s, sid)
        assert plan.verdict == "live"
        [e] = [e for _, e in plan.evidence if e.source == "gateway"]
        assert e.holder_pid == gateway.pid and "routed by gateway key" in e.detail
        done = deleter().delete(s, item)
        assert done.status == "refused" and "gateway" in done.reason
    finally:
        stop(gateway)
    plan, item = confirm(s, sid)
    assert plan.verdict == "not_live" and plan.dependents["gateway_routing"] == 1
    done = deleter().delete(s, item)
    assert done.status == "applied" and done.counts["gateway_routing"] == 1
    assert rows(s, "SELECT COUNT(*) FROM gateway_routing WHERE entry_json LIKE ?", (f"%{sid}%",)) == [(0,)]


def test_gateway_that_moved_on_no_longer_blocks(aged_home):
    """The routing entry is repointed (the peer started a new session) while the
    gateway stays live: the old session may go; the entry (now naming the new one) stays."""
    sids = ids("edge")
    s = store(aged_home, "edge")
    sid, other = sids["telegram_open"], sids["slack_ended"]
    gateway = hermes_background(s, """
now = time.time()
db._execute_write(lambda conn: conn.execute(
    "INSERT INTO gateway_heartbeats VALUES ('serve-1', ?, ?, ?, 'edge', '')", (os.getpid(), now - 60, now)))
print("READY", flush=True)
time.sleep(600)
""")
    try:
        assert confirm(s, sid)[0].verdict == "live"
        with damage(s) as db:
            db.execute("UPDATE gateway_routing SET entry_json = json_set(entry_json, '$.session_id', ?) "
                       "WHERE json_extract(entry_json, '$.session_id') = ?", (other, sid))
        plan, item = confirm(s, sid)
        assert plan.verdict == "not_live" and plan.dependents["gateway_routing"] == 0
        assert deleter().delete(s, item).status == "applied"
        assert rows(s, "SELECT COUNT(*) FROM gateway_routing WHERE json_extract(entry_json, '$.session_id') = ?",
                    (other,)) == [(1,)]
    finally:
        stop(gateway)


def test_a_message_written_between_the_two_steps_refuses(aged_home):
    s = store(aged_home, "default")
    sid = ids("default")["long"]
    plan, item = confirm(s, sid)
    hermes(s, f"db.append_message({sid!r}, 'user', 'one more question')")
    before = dump(s)
    done = deleter().delete(s, item)
    assert done.status == "refused" and done.changed
    assert "last message id" in done.reason and str(plan.targets[0].last_message_id) in done.reason
    assert done.plan.targets[0].last_message_id > plan.targets[0].last_message_id  # the evidence, fresh
    assert dump(s) == before
    [event] = events()
    assert event.outcome == "refused" and event.plan["changed_since_confirmation"] is True
    assert not trash.list_entries()


def test_a_new_delegate_child_between_the_two_steps_refuses(aged_home):
    sids = ids("default")
    s = store(aged_home, "default")
    plan, item = confirm(s, sids["cli_main"])
    hermes(s, f"""
db.create_session('20260301_091000_d0d0d0', 'subagent', parent_session_id={sids['cli_main']!r},
                  model_config={{'_delegate_from': {sids['cli_main']!r}}})
""")
    done = deleter().delete(s, item)
    assert done.status == "refused" and "new delegate children: 20260301_091000_d0d0d0" in done.reason


def test_no_deletion_while_hermes_recovery_files_lie_beside_the_store(aged_home):
    """Hermes' own schema repair may be midway (docs/store.md §1.2): nothing is written."""
    s = store(aged_home, "default")
    sid = ids("default")["hostile"]
    plan, item = confirm(s, sid)
    scratch = s.path.parent / "state.db.repair-scratch"
    scratch.write_bytes(b"")
    done = deleter().delete(s, item)
    assert done.status == "refused" and "recovery files" in done.reason
    scratch.unlink()
    assert deleter().delete(s, item).status == "applied"
    assert [e.outcome for e in events()] == ["refused", "applied"]


# --------------------------------------------------------------------------- restore refusals

def test_restore_is_refused_when_the_id_was_recreated(aged_home):
    s = store(aged_home, "default")
    sid = ids("default")["long"]
    done = deleter().delete(s, confirm(s, sid)[1])
    assert done.status == "applied"
    # An idle chat's next save recreates the row (docs/store.md §10.3).
    hermes(s, f"""
db.create_session({sid!r}, 'cli')
db.append_message({sid!r}, 'user', 'are you still there?')
""")
    before = dump(s)
    back = deleter().restore(s, trash.get_entry(done.entry.id))
    assert back.status == "refused" and "recreated meanwhile" in back.reason and sid in back.reason
    assert dump(s) == before
    assert trash.get_entry(done.entry.id).state == "deleted"  # kept for a later attempt
    [event] = events(deletion.RESTORE_ACTION)
    assert event.outcome == "refused" and event.session_ids == [sid]


def test_restore_keeps_parent_links_only_where_the_parent_exists(aged_home):
    sids = ids("default")
    s = store(aged_home, "default")
    child = deleter().delete(s, confirm(s, sids["branch_child"])[1])
    parent = deleter().delete(s, confirm(s, sids["branch_parent"])[1])
    assert (child.status, parent.status) == ("applied", "applied")
    back = deleter().restore(s, child.entry)
    assert back.status == "applied" and back.report["parent_links_dropped"] == 1
    assert rows(s, "SELECT parent_session_id FROM sessions WHERE id = ?", (sids["branch_child"],)) == [(None,)]
    assert deleter().restore(s, parent.entry).status == "applied"
    assert deleter().restore(s, parent.entry).status == "refused"  # already restored: exactly once


def test_an_interrupted_entry_is_restorable_only_if_the_deletion_committed(aged_home):
    sids = ids("default")
    s = store(aged_home, "default")
    done = deleter().delete(s, confirm(s, sids["hostile"])[1])
    gone = {"pid": dead_pid(), "started": 0, "host": socket.gethostname()}
    done.entry.update(state="pending", owner=gone)  # as if the process died right after COMMIT
    assert deleter().restore(s, trash.get_entry(done.entry.id)).status == "applied"
    again = deleter().delete(s, confirm(s, sids["hostile"])[1])
    assert deleter().restore(s, again.entry).status == "applied"
    again.entry.update(state="pending", owner=gone)  # an entry whose sessions are in the store: not restorable
    refused = deleter().restore(s, trash.get_entry(again.entry.id))
    assert refused.status == "refused" and "did not complete" in refused.reason


def test_every_outcome_leaves_exactly_one_audit_event(aged_home):
    s = store(aged_home, "default")
    sid = ids("default")["hostile"]
    plan, item = confirm(s, sid)
    forged = dict(item, fingerprint={"targets": [sid], "last": {sid: [1, 1]}, "detach": []})
    outcomes = [deleter().delete(s, forged).status, deleter().delete(s, item).status,
                deleter().delete(s, item).status]
    assert outcomes == ["refused", "applied", "refused"]
    assert [e.outcome for e in events()] == outcomes


# --------------------------------------------------------------------------- purge

def test_purge_removes_only_expired_entries(aged_home, settings):
    from io import StringIO
    from django.core.management import call_command
    import json

    s = store(aged_home, "default")
    old = deleter().delete(s, confirm(s, ids("default")["hostile"])[1]).entry
    new = deleter().delete(s, confirm(s, ids("default")["long"])[1]).entry
    old.update(deleted_at=time.time() - 40 * 86400)
    leftovers = trash.trash_root() / "files" / "20200101-000000" / "default" / "sessions"
    leftovers.mkdir(parents=True)
    settings.HERMES_TRASH_RETENTION_DAYS = 30
    out = StringIO()
    call_command("purge_trash", "--dry-run", "--json", stdout=out)
    report = json.loads(out.getvalue())
    assert sorted(i["kind"] for i in report["purged"]) == ["entry", "files"] and old.path.exists()
    call_command("purge_trash", stdout=StringIO())
    assert not old.path.exists() and new.path.exists() and not leftovers.exists()
    assert [e.id for e in trash.list_entries()] == [new.id]
    assert AuditEvent.objects.filter(action="purge_trash").count() == 2
