"""Issue 14, retention pruning on stores written by the real releases (and the newest shape).

What a prune must spare: a pinned conversation, one a live 0.19.0 process holds
(a compression lock) or wrote moments ago, a chat whose only rows are compacted,
a lineage not wholly selected; what it takes goes into the trash exactly as a
deletion does and comes back byte for byte.
"""

import pytest

from sessions_app import trash
from sessions_app.actions import prune as prune_mod
from sessions_app.actions.flags import Flagger
from sessions_app.actions.prune_run import Pruner, exit_status
from sessions_app.models import AuditEvent
from sessions_app.stores.retention import Criteria, CriteriaError
from tests.checks.helpers import damage, hermes
from tests.conftest import ids
from tests.stores.lock_holders import start_holder, stop_holder

from .conftest import DAY, store
from .delete_helpers import dump, rows, stop
from .prune_helpers import (
    compacted_only, empty_session, fresh_session, lock_holder, profile_of, prune, restore_all, spared, sql_dump,
)

pytestmark = pytest.mark.django_db


def age(s, sids, seconds):
    """Time passing for some sessions of a test copy (their rows' timestamps move back)."""
    with damage(s) as conn:
        ph = ",".join("?" * len(sids))
        cols = {r[1] for r in conn.execute("PRAGMA table_info(sessions)")}
        for col in ("started_at", "ended_at", "last_activity_at"):
            if col in cols:
                conn.execute(f"UPDATE sessions SET {col} = {col} - ? WHERE id IN ({ph}) AND {col} IS NOT NULL",
                             [seconds, *sids])
        conn.execute(f"UPDATE messages SET timestamp = timestamp - ? WHERE session_id IN ({ph})", [seconds, *sids])


def pruned_ids(report, key):
    prof = profile_of(report, key)
    return sorted(s for u in prof["units"] if u["status"] in ("applied", "planned")
                  for s in u["sessions"] + u["delegates"])


# --------------------------------------------------------------------------- what stays

def test_prune_spares_pinned_live_recent_and_compacted_only(aged_home):
    """0.19.0's store: a live compression lock (a real process) and a session it wrote
    just now stay, a compacted-only chat is not "empty"; the newest shape: a pinned
    conversation stays (pinned through the dashboard's own flag write)."""
    s, edge = store(aged_home, "default"), store(aged_home, "edge")
    d, e = ids("default"), ids("edge")
    assert Flagger(actor_label="tester").set_flag(edge, e["cli_main"], "pinned", True).status == "applied"
    fresh_session(s, "fresh_batch_1")  # ended now: recent activity
    compacted_only(s, "compacted_only_1")
    empty_session(s, "empty_old_1")
    age(s, ["compacted_only_1", "empty_old_1"], 40 * DAY)
    holder = lock_holder(s, d["long"])
    try:
        before_default, before_edge = dump(s), dump(edge)
        report = prune([s, edge], older_than_days=30)
        assert d["long"] not in pruned_ids(report, "default")
        [live] = [x for x in spared(report, "default") if d["long"] in x["session_ids"]]
        assert live["reason"] == "live" and "compression_lock" in live["detail"]
        [pin] = spared(report, "edge", "pinned")
        assert set(pin["session_ids"]) == {e["cli_main"], e["delegate_child"]}  # the delegate goes with it, or not
        assert e["cli_main"] not in pruned_ids(report, "edge")
        assert report["summary"]["spared_pinned"] == 2
        # Without an age bound, what 0.19.0 wrote a moment ago stays (recent activity).
        recent = prune([s], sources=("batch",))
        assert pruned_ids(recent, "default") == []
        [(reason, why)] = [(x["reason"], x["detail"]) for x in spared(recent, "default")]
        assert reason == "maybe_live" and "activity" in why
        # Empty: the session that never held a message goes, the compacted-only chat does not.
        empty = prune([s], empty=True)
        assert pruned_ids(empty, "default") == ["empty_old_1"]
        [kept] = spared(empty, "default", "not_empty")
        assert kept["session_ids"] == ["compacted_only_1"] and "compacted or rewound" in kept["detail"]
        gone = prune([s], apply=True, empty=True)
        assert [u["status"] for u in profile_of(gone, "default")["units"]] == ["applied"]
        assert rows(s, "SELECT COUNT(*) FROM sessions WHERE id IN ('empty_old_1', 'compacted_only_1')") == [(1,)]
        assert rows(s, "SELECT COUNT(*) FROM messages WHERE session_id = 'compacted_only_1'") == [(2,)]
        done = prune([s, edge], apply=True, older_than_days=30)
        assert done["summary"]["failed"] == 0 and done["summary"]["applied"] > 0
        assert rows(s, "SELECT COUNT(*) FROM sessions WHERE id = ?", (d["long"],)) == [(1,)]
        assert rows(edge, "SELECT pinned FROM sessions WHERE id = ?", (e["cli_main"],)) == [(1,)]
    finally:
        stop(holder)
    # What went is in the trash, a unit per entry, and comes back.
    restore_all(s)
    restore_all(edge)
    assert dump(edge) == before_edge
    assert dump(s) == before_default


def test_open_tip_keeps_the_whole_lineage_and_ending_it_lets_it_go_as_one_unit(aged_home):
    s = store(aged_home, "default")
    d = ids("default")
    chain = [d["compress_root"], d["compress_mid"], d["compress_tip"]]
    report = prune([s], older_than_days=30)
    [kept] = spared(report, "default", "lineage")
    assert sorted(kept["session_ids"]) == sorted(chain[:2]) and chain[2] in kept["detail"]
    hermes(s, f"db.end_session({chain[2]!r}, 'cli_close')")  # the real release ends the tip
    age(s, [chain[2]], 40 * DAY)
    done = prune([s], apply=True, older_than_days=30)
    [unit] = [u for u in profile_of(done, "default")["units"] if u["root"] == chain[0]]
    assert unit["sessions"] == chain and unit["status"] == "applied"
    entry = trash.get_entry(unit["trash_entry"])
    assert sorted(entry.manifest["targets"]) == sorted(chain) and entry.state == "deleted"
    assert rows(s, f"SELECT COUNT(*) FROM sessions WHERE id IN ({','.join('?' * 3)})", chain) == [(0,)]


def test_delegate_goes_with_its_parent_and_stays_with_it(aged_home):
    edge = store(aged_home, "edge")
    e = ids("edge")
    report = prune([edge], older_than_days=30, sources=("cli", "subagent"))
    [unit] = [u for u in profile_of(report, "edge")["units"] if u["root"] == e["cli_main"]]
    assert unit["delegates"] == [e["delegate_child"]]
    assert e["delegate_child"] not in [u["root"] for u in profile_of(report, "edge")["units"]]
    Flagger(actor_label="tester").set_flag(edge, e["cli_main"], "pinned", True)
    report = prune([edge], older_than_days=30, sources=("subagent",))  # only the child is selected
    [kept] = spared(report, "edge", "pinned")
    assert kept["session_ids"] == [e["delegate_child"]] and e["cli_main"] in kept["detail"]
    assert pruned_ids(report, "edge") == []
    # Selected with its parent while the parent stays (live): it stays with it.
    assert Flagger(actor_label="tester").set_flag(edge, e["cli_main"], "pinned", False).status == "applied"
    holder = lock_holder(edge, e["cli_main"])
    try:
        report = prune([edge], older_than_days=30, sources=("cli", "subagent"))
    finally:
        stop(holder)
    [kept] = spared(report, "edge", "with_parent")
    assert kept["session_ids"] == [e["delegate_child"]] and "live" in kept["detail"]


# --------------------------------------------------------------------------- round trip

@pytest.mark.parametrize("profile", ["default", "archive", "edge"])
def test_prune_then_restore_is_byte_for_byte(aged_home, profile):
    """A prune's trash entries restore the store to the same plain SQL dump (and the
    same typed bytes), files included."""
    s = store(aged_home, profile)
    sid = ids(profile)["long"]
    folder = s.profile.sessions_dir
    folder.mkdir(exist_ok=True)
    files = {f"{sid}.jsonl": b'{"role": "user", "content": "x"}\n',
             f"request_dump_{sid}_20260301_090000_123456.json": b"{}\n"}
    for name, data in files.items():
        (folder / name).write_bytes(data)
    before, typed = sql_dump(s), dump(s)
    done = prune([s], apply=True, older_than_days=30)
    assert done["summary"]["applied"] >= 3 and done["summary"]["failed"] == 0
    assert not any((folder / n).exists() for n in files)
    assert sql_dump(s) != before
    outcomes = restore_all(s)
    assert outcomes and all(o.status == "applied" for o in outcomes), [o.reason for o in outcomes]
    assert sql_dump(s) == before
    assert dump(s) == typed
    assert {n: (folder / n).read_bytes() for n in files} == files


def test_each_batch_is_one_transaction_with_one_audit_event_and_one_backup(aged_home):
    s = store(aged_home, "default")
    report = prune([s], older_than_days=30)
    units = profile_of(report, "default")["units"]
    assert len(units) >= 5
    writer = Pruner(actor_label="tester")
    from sessions_app.actions.prune_run import run_prune
    done = run_prune([s], Criteria(older_than_days=30), apply=True, writer=writer, batch_units=2)
    batches = profile_of(done, "default")["batches"]
    assert len(batches) == (len(units) + 1) // 2 and all(b["status"] == "applied" for b in batches)
    events = list(AuditEvent.objects.filter(action=prune_mod.PRUNE_ACTION, outcome="applied").order_by("id"))
    assert len(events) == len(batches)
    assert len({e.backup_path for e in events}) == 1 and events[0].backup_sha256
    assert sorted(sid for e in events for sid in e.session_ids) == sorted(
        sid for u in units for sid in u["sessions"] + u["delegates"])
    assert all(e.plan["pruned"] for e in events)


def test_a_unit_taken_by_an_agent_after_the_preview_is_dropped_not_the_batch(aged_home):
    s = store(aged_home, "default")
    d = ids("default")
    with s.read() as conn:
        preview = prune_mod.plan_units(s, conn, s.capabilities(conn), Criteria(older_than_days=30))
    [held] = [u for u in preview.units if u.root == d["hostile"]]
    holder = lock_holder(s, d["hostile"])
    try:
        outcome = Pruner(actor_label="tester").perform(s, prune_mod.PruneWrite(preview.units, Criteria(30)))
    finally:
        stop(holder)
    assert outcome.status == "applied"
    assert held.root not in [p["root"] for p in outcome.report["pruned"]]
    [kept] = [x for x in outcome.report["spared"] if held.root in x["session_ids"]]
    assert kept["reason"] == "live"
    assert rows(s, "SELECT COUNT(*) FROM sessions WHERE id = ?", (held.root,)) == [(1,)]
    assert len(outcome.report["pruned"]) == len(preview.units) - 1


def test_a_batch_with_nothing_left_to_prune_is_refused_and_writes_nothing(aged_home):
    s = store(aged_home, "default")
    d = ids("default")
    with s.read() as conn:
        preview = prune_mod.plan_units(s, conn, s.capabilities(conn), Criteria(older_than_days=30))
    unit = next(u for u in preview.units if u.root == d["long"])
    holder = lock_holder(s, d["long"])
    before = dump(s)
    try:
        outcome = Pruner(actor_label="tester").perform(s, prune_mod.PruneWrite([unit], Criteria(30)))
    finally:
        stop(holder)
    assert outcome.status == "refused" and "compression_lock" in outcome.reason
    assert dump(s) == before and not trash.list_entries()
    [event] = AuditEvent.objects.filter(action=prune_mod.PRUNE_ACTION)
    assert event.outcome == "refused" and event.backup_path == ""


# --------------------------------------------------------------------------- criteria

def test_criteria_combine_and_match_ids_or_titles(aged_home):
    s = store(aged_home, "default")
    d = ids("default")
    assert pruned_ids(prune([s], match="flaky"), "default") == sorted([d["cli_main"], d["delegate_child"]])
    assert pruned_ids(prune([s], match="cron_*"), "default") == [d["cron"]]
    assert pruned_ids(prune([s], match="*F00BAD"), "default") == [d["hostile"]]  # any case
    assert pruned_ids(prune([s], sources=("slack",), older_than_days=30), "default") == [d["slack_ended"]]
    assert pruned_ids(prune([s], sources=("slack",), older_than_days=60), "default") == []
    assert prune([s], sources=("telegram",))["summary"]["units"] == 0  # open sessions are never selected


def test_usage_without_rows_is_not_empty(aged_home):
    s = store(aged_home, "default")
    empty_session(s, "lost_history_1")
    hermes(s, "db.update_token_counts('lost_history_1', input_tokens=120, output_tokens=40, api_call_count=1)")
    age(s, ["lost_history_1"], 40 * DAY)
    report = prune([s], empty=True)
    assert pruned_ids(report, "default") == []
    [kept] = spared(report, "default", "not_empty")
    assert kept["session_ids"] == ["lost_history_1"] and "history was lost" in kept["detail"]


@pytest.mark.parametrize("bad", [{"older_than_days": -1}, {"older_than_days": float("nan")},
                                 {"match": "x" * 201}, {"sources": ("",)}])
def test_bad_criteria_are_refused(bad):
    with pytest.raises(CriteriaError):
        Criteria(**bad)


def test_a_busy_store_is_reported_not_pruned(aged_home):
    s = store(aged_home, "default")
    before = sql_dump(s)
    holder = start_holder(s.path, "wal_exclusive")
    try:
        report = prune([s], apply=True, older_than_days=30)
    finally:
        stop_holder(holder)
    prof = profile_of(report, "default")
    assert prof["status"] == "busy" and prof["units"] == [] and "locked" in prof["error"]
    assert exit_status(report) == 2
    assert sql_dump(s) == before and not trash.list_entries()


def test_the_session_a_gateway_routes_to_stays_on_a_store_without_heartbeats(aged_home):
    """0.19.0 keeps no gateway heartbeats: the session its routing index names for a
    chat is where the next message of that chat goes, so it stays (``routed``), and
    does not make a nightly run exit 1 for ever."""
    s = store(aged_home, "default")
    sid = ids("default")["telegram_open"]
    hermes(s, f"db.end_session({sid!r}, 'session_reset')")
    age(s, [sid], 40 * DAY)
    done = prune([s], apply=True, older_than_days=30)
    [kept] = [x for x in spared(done, "default") if sid in x["session_ids"]]
    assert kept["reason"] == "routed" and "gateway" in kept["detail"]
    assert exit_status(done) == 0 and done["summary"]["spared_live"] >= 1
    assert rows(s, "SELECT COUNT(*) FROM sessions WHERE id = ?", (sid,)) == [(1,)]
