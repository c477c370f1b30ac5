"""Liveness evidence (docs/store.md §7) on copies of real-release stores."""

import json
import os
import time

import psutil
import pytest

from sessions_app.stores.liveness import (
    LiveIndex, evidence_for, holder_is_dead, index_for, live_sessions, page_indexes, process_matches, registry_path,
    verdict_of,
)
from tests.checks.helpers import damage, dead_pid, hermes, hermes_background, newest_timestamp, own_pidns, store_of
from tests.conftest import IDS, ids

HOUR = 3600


def verdict(store, session_id, now):
    with store.read() as conn:
        caps = store.capabilities(conn)
        single = evidence_for(store, conn, caps, session_id, now)
        index = live_sessions(store, conn, caps, now)
        # the session page's one read gives what the two reads of index_for give
        for closed_counts, got in zip((True, False), page_indexes(store, conn, caps, session_id, now)):
            want = index_for(store, conn, caps, session_id, now, closed_counts=closed_counts)
            assert dict(got) == dict(want) and got.store_wide == want.store_wide
    # the set-based index and the single-session read agree
    assert index.verdict(session_id) == single.verdict
    assert sorted(e.source for e in index.evidence(session_id)) == sorted(e.source for e in single.evidence)
    return single


@pytest.fixture
def edge(hermes_home):
    return store_of(hermes_home, "edge")


@pytest.fixture
def default(hermes_home):
    return store_of(hermes_home, "default")


def test_nothing_then_recent_activity(edge):
    sids = ids("edge")
    idle = newest_timestamp(edge) + 2 * HOUR
    assert verdict(edge, sids["long"], idle).verdict == "not_live"
    recent = verdict(edge, sids["compacted"], newest_timestamp(edge) + 60)
    assert recent.verdict == "maybe_live"
    assert [e.source for e in recent.evidence] == ["activity"] and not recent.evidence[0].blocks


def test_turn_lease_on_the_root_covers_the_whole_chain(edge):
    sids = ids("edge")
    now = newest_timestamp(edge) + 2 * HOUR
    with damage(edge) as db:
        db.execute("INSERT INTO session_turn_leases VALUES (?, 'pid=4242:turn=7:platform=cli', ?, ?)",
                   (sids["compress_root"], now - 20, now + 280))
    for kind in ("compress_root", "compress_mid", "compress_tip"):
        live = verdict(edge, sids[kind], now)
        assert live.verdict == "live", kind
        [e] = live.evidence
        # Linux: an unstamped holder is never probed (STRICT policy), only its TTL counts
        assert (e.source, e.holder_pid, e.blocks) == ("turn_lease", 4242, True)
        assert e.holder_dead is None
    assert verdict(edge, sids["branch_child"], now).verdict == "not_live"


def test_root_lease_covers_every_continuation(edge):
    """Two open continuations of one parent (a race): the root's lease covers both,
    whichever one upstream's chain walk would pick."""
    sids = ids("edge")
    now = newest_timestamp(edge) + 2 * HOUR
    with damage(edge) as db:
        db.execute("INSERT INTO sessions(id, source, parent_session_id, started_at, profile_name) "
                   "VALUES ('20260301_113000_c9c9c9', 'cli', ?, ?, 'edge')", (sids["compress_mid"], now - 3 * HOUR))
        db.execute("INSERT INTO session_turn_leases VALUES (?, 'pid=4242:turn=8', ?, ?)",
                   (sids["compress_root"], now - 20, now + 280))
    assert verdict(edge, "20260301_113000_c9c9c9", now).verdict == "live"
    assert verdict(edge, sids["compress_tip"], now).verdict == "live"


def test_expired_lease_is_no_evidence(edge):
    sids = ids("edge")
    now = newest_timestamp(edge) + 2 * HOUR
    with damage(edge) as db:
        db.execute("INSERT INTO session_turn_leases VALUES (?, 'pid=1:turn=1', ?, ?)", (sids["long"], now - 400, now - 100))
    assert verdict(edge, sids["long"], now).verdict == "not_live"


def test_lease_of_a_provably_dead_holder_is_maybe_live(edge):
    sids = ids("edge")
    now = newest_timestamp(edge) + 2 * HOUR
    gone = dead_pid()
    with damage(edge) as db:
        db.execute("INSERT INTO session_turn_leases VALUES (?, ?, ?, ?)",
                   (sids["long"], f"pid={gone}:pidns={own_pidns()}:turn=1:platform=cli", now - 20, now + 280))
    live = verdict(edge, sids["long"], now)
    assert live.verdict == "maybe_live"
    assert (live.evidence[0].holder_pid, live.evidence[0].holder_dead, live.evidence[0].blocks) == (gone, True, False)


def test_holder_rules():
    ns = own_pidns()
    assert holder_is_dead(f"pid={os.getpid()}:pidns=999") is False  # our own pid is never dead
    assert holder_is_dead(f"pid={dead_pid()}:pidns={ns}") is True
    assert holder_is_dead(f"pid={dead_pid()}:pidns=1") is None  # another namespace: not probed
    assert holder_is_dead(f"pid={dead_pid()}:tid=1") is None  # unstamped on Linux: TTL only
    assert holder_is_dead("nonce=abc") is None
    assert verdict_of([]) == "not_live"


def test_compression_lock_through_the_real_release(default):
    """0.19.0 takes the lock in a live process; after the process dies the row stays.
    Its holder format has no pidns stamp, so on Linux only the TTL counts."""
    sid = IDS["long"]
    proc = hermes_background(default, f"""
holder = f"pid={{os.getpid()}}:tid={{threading.get_ident()}}:agent=1:nonce={{uuid.uuid4().hex[:8]}}"
assert db.try_acquire_compression_lock({sid!r}, holder)
print("READY", flush=True)
time.sleep(600)
""")
    now = time.time() + 60
    try:
        live = verdict(default, sid, now)
        assert live.verdict == "live"
        assert any(e.source == "compression_lock" and e.holder_pid == proc.pid and e.blocks for e in live.evidence)
    finally:
        proc.kill()
        proc.wait()
    after = verdict(default, sid, now)
    lock = next(e for e in after.evidence if e.source == "compression_lock")
    assert after.verdict == "live" and lock.holder_dead is None
    # The admin is told why in plain words, not in the holder format's terms.
    assert "cannot be checked from here" in lock.detail and "pidns" not in lock.detail
    assert verdict(default, sid, time.time() + 2 * HOUR).verdict == "not_live"  # TTL (300 s) passed


def test_compression_lock_stamped_with_our_namespace(default):
    """A holder stamped with a matching pidns is probed: alive blocks, dead does not."""
    sid = IDS["hostile"]
    ns = own_pidns()
    proc = hermes_background(default, f"""
holder = f"pid={{os.getpid()}}:pidns={ns}:tid=1:agent=1:nonce=1"
assert db.try_acquire_compression_lock({sid!r}, holder, ttl_seconds=86400)
print("READY", flush=True)
time.sleep(600)
""")
    now = time.time() + 2 * HOUR
    try:
        assert verdict(default, sid, now).verdict == "live"
    finally:
        proc.kill()
        proc.wait()
    after = verdict(default, sid, now)
    assert after.verdict == "maybe_live"
    assert after.evidence[0].holder_dead is True and after.evidence[0].holder_pid == proc.pid


def _write_registry(store, entries):
    path = registry_path(store)
    path.parent.mkdir(exist_ok=True)
    path.write_text(entries if isinstance(entries, str) else json.dumps({"entries": entries}))


def test_active_session_registry(default):
    now = newest_timestamp(default) + 2 * HOUR
    me = psutil.Process()
    _write_registry(default, [
        {"lease_id": "a", "session_id": IDS["long"], "surface": "cli", "pid": me.pid,
         "process_start_time": me.create_time(), "started_at": now - 50},
        {"lease_id": "b", "session_id": IDS["hostile"], "surface": "tui", "pid": me.pid,
         "process_start_time": me.create_time() - 5, "started_at": now - 50},  # pid reused
        {"lease_id": "c", "session_id": IDS["cron"], "surface": "cli", "pid": dead_pid(), "started_at": now - 50},
        {"lease_id": "d", "session_id": "x", "surface": "desktop", "pid": me.pid,
         "metadata": {"live_session_id": IDS["branch_child"]}},
    ])
    assert verdict(default, IDS["long"], now).verdict == "live"
    assert verdict(default, IDS["hostile"], now).verdict == "not_live"
    assert verdict(default, IDS["cron"], now).verdict == "not_live"
    assert verdict(default, IDS["branch_child"], now).verdict == "live"
    assert process_matches(me.pid, me.create_time() + 0.0005)
    assert not process_matches(me.pid, me.create_time() + 0.01)


def test_unreadable_registry_fails_closed(default):
    now = newest_timestamp(default) + 2 * HOUR
    _write_registry(default, "{ half a json")
    live = verdict(default, IDS["long"], now)
    assert live.verdict == "maybe_live" and live.evidence[0].source == "registry"
    with default.read() as conn:
        index = live_sessions(default, conn, default.capabilities(conn), now)
    assert isinstance(index, LiveIndex) and index.store_wide


def test_gateway_heartbeat_with_routing_entry(edge):
    sids = ids("edge")
    now = time.time()
    with damage(edge) as db:
        db.execute("INSERT INTO gateway_heartbeats VALUES ('serve-1', ?, ?, ?, 'edge', '')",
                   (os.getpid(), now - 600, now - 30))
    live = verdict(edge, sids["telegram_open"], now + 1)
    assert live.verdict == "live" and any(e.source == "gateway" for e in live.evidence)
    assert not any(e.source == "gateway" for e in verdict(edge, sids["slack_ended"], now + 1).evidence)  # not routed
    # a stale heartbeat is no evidence
    assert verdict(edge, sids["telegram_open"], now + 2 * HOUR).verdict == "not_live"


def test_registry_read_needs_no_store_write(default):
    """Reading evidence writes nothing: the store's data is unchanged afterwards."""
    with default.read() as conn:
        before = conn.execute("SELECT COUNT(*), MAX(id) FROM messages").fetchone()
    verdict(default, IDS["long"], time.time())
    with default.read() as conn:
        assert conn.execute("SELECT COUNT(*), MAX(id) FROM messages").fetchone() == before


def test_release_writer_sees_its_own_lock(default):
    """Sanity of the fixture path: the release reports the holder we detect."""
    sid = IDS["cron"]
    out = hermes(default, f"""
assert db.try_acquire_compression_lock({sid!r}, 'pid=77:tid=1', ttl_seconds=600)
print(db.get_compression_lock_holder({sid!r}))
""")
    assert out.strip() == "pid=77:tid=1"
    [e] = [e for e in verdict(default, sid, time.time() + 10).evidence if e.source == "compression_lock"]
    assert (e.holder_pid, e.blocks) == (77, True)
