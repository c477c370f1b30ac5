"""Session-level checks on copies of real-release stores, damaged as in the field.

Cases from issue 3 ("Cases that must behave", detection side) plus the other
session checks of docs/architecture.md §4.
"""

import json
import time

import pytest

from sessions_app.checks import run_store_checks
from tests.conftest import IDS, ids

from .helpers import damage, findings, hermes, newest_timestamp, own_pidns

HOUR = 3600
DAY = 86400


def later(hours: float = 2) -> float:
    """A moment when rows written just now by a real release are idle."""
    return time.time() + hours * HOUR


# --------------------------------------------------------------------------- unanswered_turn

def test_reply_that_never_reached_the_store(store):
    """The agent stored the user's turn and died before its reply (0.19.0 writer)."""
    s = store("default")
    sid = IDS["long"]
    hermes(s, f"db.append_message({sid!r}, 'user', 'Question 31: and 31 squared?')")
    [f] = findings(run_store_checks(s, now=later()), "unanswered_turn")
    assert f.session_id == sid and f.severity == "warning" and f.heal is None
    assert f.evidence["last"]["role"] == "user"
    assert "ends with a user message" in f.detail


def test_unanswered_turn_waits_while_recent(store):
    s = store("default")
    hermes(s, f"db.append_message({IDS['long']!r}, 'user', 'one more')")
    assert not findings(run_store_checks(s, now=time.time() + 60), "unanswered_turn")


def test_unanswered_turn_not_flagged_under_a_compression_lock(store):
    """Same shape, but a live process holds an unexpired compression lock taken
    through the real 0.19.0 SessionDB API (holder left unprobed or alive)."""
    s = store("default")
    sid = IDS["long"]
    hermes(s, f"""
db.append_message({sid!r}, 'user', 'Question 31?')
holder = f"pid={{os.getpid()}}:tid={{threading.get_ident()}}:agent=1:nonce={{uuid.uuid4().hex[:8]}}"
assert db.try_acquire_compression_lock({sid!r}, holder, ttl_seconds=86400)
""")
    report = run_store_checks(s, now=later())
    assert not findings(report, "unanswered_turn")


def test_unanswered_turn_not_flagged_under_a_turn_lease(store):
    """Newest shape: an unexpired turn lease on the lineage root covers the tip."""
    sids = ids("edge")
    s = store("edge")
    tip = sids["compress_tip"]
    now = newest_timestamp(s) + 2 * HOUR
    with damage(s) as db:
        db.execute("INSERT INTO messages(session_id, role, content, timestamp) VALUES (?, 'user', 'Run them again.', ?)",
                   (tip, now - 2 * HOUR + 1))
        db.execute("UPDATE sessions SET message_count = message_count + 1 WHERE id = ?", (tip,))
    assert [f.session_id for f in findings(run_store_checks(s, now=now), "unanswered_turn")] == [tip]
    with damage(s) as db:
        db.execute("INSERT INTO session_turn_leases VALUES (?, ?, ?, ?)",
                   (sids["compress_root"], f"pid=1:pidns={own_pidns()}:turn=t1:platform=cli", now - 10, now + 290))
    assert not findings(run_store_checks(s, now=now), "unanswered_turn")


def test_prompt_handed_over_to_a_compression_continuation_is_answered_there(store):
    """Compression mid-turn: the parent ends on the prompt, the child carries the reply."""
    s = store("default")
    parent, child = IDS["compress_tip"], "20260301_113000_c0c0c0"
    hermes(s, f"""
db.append_message({parent!r}, 'user', 'Question 31: what is 31 squared?')
db.end_session({parent!r}, 'compression')
db.create_session({child!r}, 'cli', parent_session_id={parent!r})
db.append_message({child!r}, 'user', '[CONTEXT COMPACTION — REFERENCE ONLY] Squares of 1..30 were given.')
db.append_message({child!r}, 'user', 'Question 31: what is 31 squared?')
db.append_message({child!r}, 'assistant', 'Answer 31: 961.')
""")
    report = run_store_checks(s, now=later())
    assert not findings(report, "unanswered_turn")
    assert not findings(report, "compression_without_continuation")


def test_turn_ending_on_a_tool_result_is_info(store):
    s = store("research")
    sid = ids("research")["hostile"]
    calls = [{"id": "call_t9", "type": "function", "function": {"name": "terminal", "arguments": "{}"}}]
    hermes(s, f"""
db.append_message({sid!r}, 'user', 'run it')
db.append_message({sid!r}, 'assistant', None, tool_calls={calls!r}, finish_reason='tool_calls')
db.append_message({sid!r}, 'tool', 'done', tool_call_id='call_t9', tool_name='terminal')
""", version="0.17.0")
    [f] = findings(run_store_checks(s, now=later()), "unanswered_turn")
    assert (f.session_id, f.severity, f.evidence["last"]["role"]) == (sid, "info", "tool")
    assert not findings(run_store_checks(s, now=later()), "unanswered_tool_call")


def test_back_to_back_user_rows(store):
    s = store("ops")
    sid = ids("ops")["cli_main"]
    hermes(s, f"""
db.append_message({sid!r}, 'user', 'first prompt')
db.append_message({sid!r}, 'user', 'second prompt, no reply to the first')
db.append_message({sid!r}, 'assistant', 'Answering the second.')
""", version="0.18.2")
    [f] = findings(run_store_checks(s, now=later()), "unanswered_turn")
    assert f.session_id == sid and len(f.evidence["back_to_back_user_rows"]) == 1


# --------------------------------------------------------------------------- orphans and lineage

@pytest.mark.parametrize("profile", ["default", "archive"])
def test_session_row_removed_with_foreign_keys_off(store, profile):
    sids = ids(profile)
    s = store(profile)
    sid = sids["cli_main"]
    with s.read() as conn:
        message_ids = [r[0] for r in conn.execute("SELECT id FROM messages WHERE session_id = ? ORDER BY id", (sid,))]
        earliest = conn.execute("SELECT MIN(timestamp) FROM messages WHERE session_id = ?", (sid,)).fetchone()[0]
    with damage(s) as db:
        db.execute("DELETE FROM sessions WHERE id = ?", (sid,))
    report = run_store_checks(s, now=newest_timestamp(s) + 2 * HOUR)
    [f] = findings(report, "orphan_messages")
    assert (f.session_id, f.severity, f.heal, f.count) == (sid, "critical", "recreate_session_row", len(message_ids))
    assert f.evidence["message_ids"] == message_ids and f.evidence["earliest_timestamp"] == earliest
    assert f"ids {message_ids[0]}-{message_ids[-1]}" in f.detail
    # its delegate child now points at a missing parent
    [d] = findings(report, "dangling_parent")
    assert d.session_id == sids["delegate_child"] and d.evidence["parent_session_id"] == sid


def test_lineage_cycle(store):
    sids = ids("research")
    s = store("research")
    with damage(s) as db:
        db.execute("UPDATE sessions SET parent_session_id = ? WHERE id = ?", (sids["compress_tip"], sids["compress_root"]))
    report = run_store_checks(s, now=newest_timestamp(s) + 2 * HOUR, only=["lineage_cycle"])
    assert {f.session_id for f in report.findings} == {sids["compress_root"], sids["compress_mid"], sids["compress_tip"]}
    assert all(f.severity == "critical" for f in report.findings)


def test_compression_without_continuation(store):
    s = store("default")
    sid = IDS["branch_child"]
    hermes(s, f"db.end_session({sid!r}, 'compression')")
    [f] = findings(run_store_checks(s, now=later()), "compression_without_continuation")
    assert (f.session_id, f.heal) == (sid, "reopen_compression_parent")


def test_compression_without_continuation_spares_a_locked_session(store):
    s = store("default")
    sid = IDS["branch_child"]
    hermes(s, f"""
db.end_session({sid!r}, 'compression')
assert db.try_acquire_compression_lock({sid!r}, f"pid={{os.getpid()}}:tid=1:agent=1:nonce=1", ttl_seconds=86400)
""")
    assert not findings(run_store_checks(s, now=later()), "compression_without_continuation")


def test_a_branch_child_is_not_a_continuation(store):
    """Only compression edges continue a conversation: the parent ended 'compression'
    but its only child carries a _branched_from marker."""
    s = store("default")
    with damage(s) as db:
        db.execute("UPDATE sessions SET end_reason = 'compression' WHERE id = ?", (IDS["branch_parent"],))
    [f] = findings(run_store_checks(s, now=newest_timestamp(s) + 2 * HOUR), "compression_without_continuation")
    assert f.session_id == IDS["branch_parent"]


def test_multiple_continuations(store):
    s = store("default")
    mid = IDS["compress_mid"]
    hermes(s, f"db.create_session('20260301_113000_c9c9c9', 'cli', parent_session_id={mid!r})")
    [f] = findings(run_store_checks(s, now=later()), "multiple_continuations")
    assert f.session_id == mid and f.count == 2
    assert set(f.evidence["continuations"]) == {IDS["compress_tip"], "20260301_113000_c9c9c9"}


# --------------------------------------------------------------------------- counters, usage, duplicates

def test_counter_drift_is_a_warning_when_unexplained(store):
    s = store("edge")
    sid = ids("edge")["long"]
    with damage(s) as db:
        db.execute("UPDATE sessions SET message_count = 58 WHERE id = ?", (sid,))
    [f] = findings(run_store_checks(s, now=newest_timestamp(s) + 2 * HOUR), "counter_drift")
    assert (f.session_id, f.severity, f.heal, f.count) == (sid, "warning", "recount_session", 2)
    assert f.evidence["active_rows"] == 60


def test_usage_without_transcript(store):
    s = store("default")
    sid = "20260301_180000_0e0e0e"
    hermes(s, f"""
db.create_session({sid!r}, 'cli')
db.update_token_counts({sid!r}, input_tokens=1200, output_tokens=300, api_call_count=7, model='m')
db.create_session('20260301_180500_0f0f0f', 'cli')
""")
    report = run_store_checks(s, now=later())
    [f] = findings(report, "usage_without_transcript")
    assert (f.session_id, f.count, f.heal) == (sid, 7, None)
    assert f.evidence["usage"]["api_call_count"] == 7
    # an ordinary empty session (no usage) is not reported
    assert not findings(report, session_id="20260301_180500_0f0f0f")


def test_user_message_stored_twice_in_one_turn(store):
    """Gateway wrote the prompt with its platform id, the agent flush wrote it again without."""
    s = store("default")
    sid = IDS["telegram_open"]
    out = hermes(s, f"""
a = db.append_message({sid!r}, 'user', 'book a table for two', platform_message_id='1007')
b = db.append_message({sid!r}, 'user', 'book a table for two')
db.append_message({sid!r}, 'assistant', 'Booked for 19:30.')
print(json.dumps([a, b]))
""")
    with_id, without = json.loads(out)
    [f] = findings(run_store_checks(s, now=later()), "duplicate_live_rows")
    assert (f.session_id, f.heal, f.count) == (sid, "hide_duplicates", 1)
    assert f.evidence["hide"] == [without]
    assert f.evidence["groups"] == [{"keep": with_id, "hide": [without]}]
    # a duplicate is not also an unanswered back-to-back prompt
    assert not findings(run_store_checks(s, now=later()), "unanswered_turn")


def test_two_prompts_alike_in_length_and_start_are_back_to_back_not_a_duplicate(store):
    """The walk takes rows of one length and the same first 64 bytes for duplicate
    candidates; when the full contents differ they are two prompts, the first of
    which got no reply (unanswered_turn), and nothing is offered for hiding."""
    s = store("default")
    sid = IDS["long"]
    head = "Please summarise the quarterly report for the finance team, focusing on "
    first, second = head + "section A.", head + "section B."
    assert len(first) == len(second) and len(head) > 64
    out = hermes(s, f"""
a = db.append_message({sid!r}, 'user', {first!r})
b = db.append_message({sid!r}, 'user', {second!r})
db.append_message({sid!r}, 'assistant', 'Section B: revenue grew 4 %.')
print(json.dumps([a, b]))
""")
    a, b = json.loads(out)
    report = run_store_checks(s, now=later())
    assert not findings(report, "duplicate_live_rows", sid)
    [f] = findings(report, "unanswered_turn", sid)
    assert [a, b] in f.evidence["back_to_back_user_rows"]


def test_duplicate_keeps_the_copy_with_the_platform_id_even_when_later(store):
    s = store("ops")
    sid = ids("ops")["discord_open"]
    out = hermes(s, f"""
a = db.append_message({sid!r}, 'user', 'ping')
b = db.append_message({sid!r}, 'user', 'ping', platform_message_id='555')
db.append_message({sid!r}, 'assistant', 'pong')
print(json.dumps([a, b]))
""", version="0.18.2")
    without, with_id = json.loads(out)
    [f] = findings(run_store_checks(s, now=later()), "duplicate_live_rows")
    assert f.evidence["groups"] == [{"keep": with_id, "hide": [without]}]


def test_not_duplicates(store):
    """Repeated words in different turns, two real platform messages with the same
    text, and compacted copies beside their active clones are all legitimate."""
    s = store("default")
    sid = IDS["telegram_open"]
    hermes(s, f"""
db.append_message({sid!r}, 'user', 'thanks', platform_message_id='2001')
db.append_message({sid!r}, 'assistant', 'You are welcome.')
db.append_message({sid!r}, 'user', 'thanks', platform_message_id='2003')
db.append_message({sid!r}, 'assistant', 'Any time.')
db.append_message({sid!r}, 'user', 'ok', platform_message_id='2005')
db.append_message({sid!r}, 'user', 'ok', platform_message_id='2006')
db.append_message({sid!r}, 'assistant', 'Anything else?')
""")
    report = run_store_checks(s, now=later())
    assert not findings(report, "duplicate_live_rows")
    with s.read() as conn:
        archived = conn.execute("SELECT COUNT(*) FROM messages WHERE session_id = ? AND active = 0 AND compacted = 1",
                                (IDS["compacted"],)).fetchone()[0]
    assert archived == 4 and not findings(report, session_id=IDS["compacted"])


def test_exact_replay_later_in_the_session(store):
    """The same row flushed twice (same timestamp), one whole turn later."""
    s = store("edge")
    sid = ids("edge")["cli_main"]
    with damage(s) as db:
        db.execute("INSERT INTO messages(session_id, role, content, timestamp, finish_reason) "
                   "SELECT session_id, role, content, timestamp, finish_reason FROM messages "
                   "WHERE session_id = ? AND role = 'assistant' AND tool_calls IS NULL ORDER BY id LIMIT 1", (sid,))
    [f] = findings(run_store_checks(s, now=newest_timestamp(s) + 2 * HOUR), "duplicate_live_rows")
    assert f.session_id == sid and f.count == 1


# --------------------------------------------------------------------------- tool pairing, timestamps

def test_tool_rows_answering_nothing_and_calls_never_answered(store):
    s = store("default")
    sid = IDS["hostile"]
    calls = [{"id": "call_x1", "type": "function", "function": {"name": "terminal", "arguments": "{}"}}]
    hermes(s, f"""
db.append_message({sid!r}, 'user', 'list files')
db.append_message({sid!r}, 'assistant', None, tool_calls={calls!r}, finish_reason='tool_calls')
db.append_message({sid!r}, 'user', 'never mind')
db.append_message({sid!r}, 'tool', 'stray output', tool_call_id='call_zz', tool_name='terminal')
db.append_message({sid!r}, 'assistant', 'OK.')
""")
    report = run_store_checks(s, now=later())
    [orphan] = findings(report, "orphan_tool_result")
    assert orphan.session_id == sid and orphan.evidence["rows"][0]["reason"] == "no_matching_call"
    [call] = findings(report, "unanswered_tool_call")
    assert call.evidence["calls"][0]["call_id"] == "call_x1" and not call.evidence["calls"][0]["trailing"]


def test_timestamps_running_backwards(store):
    s = store("legacy")
    sid = ids("legacy")["long"]
    with damage(s) as db:
        db.execute("UPDATE messages SET timestamp = timestamp - 86400 WHERE id = "
                   "(SELECT id FROM messages WHERE session_id = ? ORDER BY id LIMIT 1 OFFSET 10)", (sid,))
    [f] = findings(run_store_checks(s, now=newest_timestamp(s) + 2 * HOUR), "timestamp_disorder")
    assert f.session_id == sid and f.severity == "info" and f.evidence["backwards"]


# --------------------------------------------------------------------------- lifecycle

def test_stale_open_cli_session(store):
    sids = ids("edge")
    s = store("edge")
    now = newest_timestamp(s) + 120 * DAY
    with damage(s) as db:
        db.execute("UPDATE sessions SET pinned = 1 WHERE id = ?", (sids["branch_child"],))
    report = run_store_checks(s, now=now, only=["stale_open"])
    flagged = {f.session_id for f in report.findings}
    assert sids["compress_tip"] in flagged
    assert sids["branch_child"] not in flagged  # pinned
    assert sids["telegram_open"] not in flagged and sids["discord_open"] not in flagged  # messaging platforms
    f = findings(report, session_id=sids["compress_tip"])[0]
    assert (f.severity, f.heal) == ("warning", "close_stale_session") and f.evidence["idle_seconds"] >= 119 * DAY


def test_stale_open_spares_a_leased_session(store):
    sids = ids("edge")
    s = store("edge")
    now = newest_timestamp(s) + 120 * DAY
    with damage(s) as db:
        db.execute("INSERT INTO session_turn_leases VALUES (?, 'pid=1:turn=9:platform=cli', ?, ?)",
                   (sids["undo"], now - 30, now + 270))
    flagged = {f.session_id for f in run_store_checks(s, now=now, only=["stale_open"]).findings}
    assert sids["undo"] not in flagged and sids["compress_tip"] in flagged


def test_placeholder_session(store):
    s = store("default")
    hermes(s, "db.ensure_session('20260301_190000_abcdef')")
    [f] = findings(run_store_checks(s, now=later()), "placeholder_session")
    assert (f.session_id, f.severity) == ("20260301_190000_abcdef", "info")


# --------------------------------------------------------------------------- ownership and routing

def test_compression_continuation_without_routing_identity(store):
    """0.19.0 creates a compression child without copying the routing columns."""
    s = store("default")
    parent, child = IDS["telegram_open"], "20260301_200000_7e3f9a22"
    hermes(s, f"""
db.end_session({parent!r}, 'compression')
db.create_session({child!r}, 'telegram', parent_session_id={parent!r})
db.append_message({child!r}, 'user', 'and the day after?', platform_message_id='1009')
db.append_message({child!r}, 'assistant', 'Nothing planned.')
""")
    [f] = findings(run_store_checks(s, now=later()), "missing_routing_identity")
    assert (f.session_id, f.heal) == (child, "inherit_routing_identity")
    copy = f.evidence["copy_from_parent"]
    assert copy["session_key"] == "agent:main:telegram:dm:12345" and copy["chat_id"] == "12345"
    assert set(copy) <= {"session_key", "chat_id", "chat_type", "thread_id", "user_id", "display_name", "origin_json"}


def test_missing_owner_only_in_named_profiles(store):
    sids = ids("edge")
    edge, default = store("edge"), store("default")
    with damage(edge) as db:
        db.execute("UPDATE sessions SET profile_name = NULL WHERE id = ?", (sids["long"],))
    [f] = findings(run_store_checks(edge, now=newest_timestamp(edge) + 2 * HOUR), "missing_owner")
    assert (f.session_id, f.heal, f.evidence["expected_profile"]) == (sids["long"], "stamp_owner", "edge")
    # 0.19.0 leaves profile_name NULL in the default profile: upstream behaviour
    assert not findings(run_store_checks(default, now=newest_timestamp(default) + 2 * HOUR), "missing_owner")


def test_owner_mismatch_kinds(store):
    sids = ids("edge")
    s = store("edge")
    with damage(s) as db:
        db.execute("UPDATE sessions SET session_key = 'agent:ops:discord:group:98765:4242' WHERE id = ?",
                   (sids["discord_open"],))
        db.execute("UPDATE sessions SET session_key = 'agent:ghost:slack:dm:D0SLACK01' WHERE id = ?",
                   (sids["slack_ended"],))
        db.execute("UPDATE sessions SET profile_name = 'ops' WHERE id = ?", (sids["telegram_open"],))
    report = run_store_checks(s, now=newest_timestamp(s) + 2 * HOUR, only=["owner_mismatch"])
    by = {f.session_id: f for f in report.findings}
    assert (by[sids["discord_open"]].evidence["kind"], by[sids["discord_open"]].heal) == ("wrong_store", "move_to_owner_store")
    assert by[sids["discord_open"]].evidence["target_profile"] == "ops"
    assert (by[sids["slack_ended"]].evidence["kind"], by[sids["slack_ended"]].heal) == ("unclaimed_namespace", None)
    assert (by[sids["telegram_open"]].evidence["kind"], by[sids["telegram_open"]].heal) == ("mislabelled", None)  # reported only: stamp_owner never overwrites
    assert len(report.findings) == 3


# --------------------------------------------------------------------------- files in sessions/

def _jsonl_lines(store, sid):
    with store.read() as conn:
        rows = conn.execute("SELECT role, content, tool_call_id, tool_calls FROM messages WHERE session_id = ? "
                            "ORDER BY id", (sid,)).fetchall()
    lines = []
    for role, content, call_id, calls in rows:
        if isinstance(content, str) and content.startswith("\x00json:"):
            content = json.loads(content[len("\x00json:"):])
        lines.append({"role": role, "content": content, "tool_call_id": call_id,
                      "tool_calls": json.loads(calls) if calls else None, "timestamp": 0})
    return lines


def _write_jsonl(store, sid, lines, extra_text=""):
    folder = store.profile.sessions_dir
    folder.mkdir(exist_ok=True)
    path = folder / f"{sid}.jsonl"
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines) + extra_text)
    return path


def test_legacy_jsonl_longer_than_the_store(store):
    s = store("default")
    sid = IDS["telegram_open"]  # includes structured (image) content
    lines = [{"role": "session_meta", "session": {"id": sid}}] + _jsonl_lines(s, sid) + [
        {"role": "user", "content": "and on Friday?"},
        {"role": "assistant", "content": "Friday is free."},
    ]
    _write_jsonl(s, sid, lines, extra_text="{not json\n\n")
    [f] = findings(run_store_checks(s, now=newest_timestamp(s) + 2 * HOUR), "transcript_on_disk_only")
    assert (f.session_id, f.count, f.severity, f.heal) == (sid, 2, "critical", "import_jsonl_transcript")
    assert f.evidence["file_messages"] == 8 and f.evidence["malformed_lines"] == 1 and f.evidence["session_exists"]


def test_jsonl_equal_to_the_store_is_fine(store):
    s = store("archive")
    sid = ids("archive")["cli_main"]
    _write_jsonl(s, sid, _jsonl_lines(s, sid))
    report = run_store_checks(s, now=newest_timestamp(s) + 2 * HOUR)
    assert not findings(report, "transcript_on_disk_only") and not findings(report, "leftover_files")


def test_jsonl_of_a_session_missing_from_the_store(store):
    s = store("ops")
    _write_jsonl(s, "20260201_080000_dead0001", [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}])
    [f] = findings(run_store_checks(s, now=newest_timestamp(s) + 2 * HOUR), "transcript_on_disk_only")
    assert f.session_id == "20260201_080000_dead0001" and f.count == 2 and not f.evidence["session_exists"]


def test_leftover_files_of_a_deleted_session(store):
    s = store("default")
    folder = s.profile.sessions_dir
    (folder / "20260201_080000_dead0002.json").write_text("{}")
    (folder / "request_dump_20260201_080000_dead0002_20260201_080100_123456.json").write_text("{}")
    (folder / "20260201_080000_dead0003.jsonl").write_text('{"role": "session_meta"}\n')
    (folder / f"request_dump_{IDS['cli_main']}_20260301_090100_000001.json").write_text("{}")  # session exists
    report = run_store_checks(s, now=newest_timestamp(s) + 2 * HOUR, only=["leftover_files", "transcript_on_disk_only"])
    by = {f.session_id: f for f in report.findings}
    assert set(by) == {"20260201_080000_dead0002", "20260201_080000_dead0003"}
    assert by["20260201_080000_dead0002"].count == 2
    assert all((f.check, f.severity, f.heal) == ("leftover_files", "info", "remove_leftover_files") for f in by.values())
