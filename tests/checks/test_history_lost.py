"""``history_lost`` and ``unanswered_turn`` against copies on disk, with the losses
reproduced through hermes-agent 0.19.0's own ``SessionDB`` calls, and the copies
written in the shapes of 0.19.0's own writers (``run_agent._save_session_log``,
``agent_runtime_helpers.dump_api_request_debug``), with its own ``atomic_json_write``
and ``redact_sensitive_text``."""

import time

from sessions_app.checks import run_store_checks
from sessions_app.stores import recovery
from sessions_app.stores import session_files as sf

from .helpers import damage, findings, hermes

HOUR = 3600
SID = "20260401_100000_de1e7e"

# Snippet helpers run under the release: write copies the way 0.19.0 does.
WRITERS = """
import sqlite3
from datetime import datetime
from utils import atomic_json_write
from agent.redact import redact_sensitive_text
logs_dir = Path(sys.argv[1]).parent / "sessions"
logs_dir.mkdir(exist_ok=True)

def in_memory(sid):
    # The agent's list: what a resume loads, without the store's timestamps.
    return [{k: v for k, v in m.items() if k != "timestamp"} for m in db.get_messages_as_conversation(sid)]

def save_snapshot(sid, messages, name=None):
    # run_agent.AIAgent._save_session_log (0.19.0), minus the agent object.
    cleaned = []
    for msg in messages:
        if "content" in msg:
            msg = dict(msg)
            msg["content"] = redact_sensitive_text(msg.get("content"))
        cleaned.append(msg)
    entry = {"session_id": sid, "model": "test/model", "base_url": "http://127.0.0.1:9/v1", "platform": "cli",
             "session_start": datetime.now().isoformat(), "last_updated": datetime.now().isoformat(),
             "system_prompt": redact_sensitive_text("You are Hermes."), "tools": [],
             "message_count": len(cleaned), "messages": cleaned}
    atomic_json_write(logs_dir / (name or f"session_{sid}.json"), entry, indent=2, default=str)

def save_request_dump(sid, messages, stamp):
    # agent_runtime_helpers.dump_api_request_debug (0.19.0), minus the agent object.
    payload = {"timestamp": datetime.now().isoformat(), "session_id": sid, "reason": "non_retryable_client_error",
               "request": {"method": "POST", "url": "http://127.0.0.1:9/v1/chat/completions",
                           "headers": {"Authorization": "Bearer ***"},
                           "body": {"model": "test/model", "messages": messages, "stream": True}},
               "error": {"type": "BadRequestError", "message": "400"}}
    text = json.dumps(payload, ensure_ascii=False, indent=2, default=str)
    atomic_json_write(logs_dir / f"request_dump_{sid}_{stamp}.json", json.loads(redact_sensitive_text(text, force=True)),
                      default=str)

def turn(sid, n, reply=True):
    db.append_message(sid, "user", f"Question {n}: what is {n} times {n}?")
    if reply:
        db.append_message(sid, "assistant", f"Answer {n}: {n * n}.")
    db.update_token_counts(sid, input_tokens=10, output_tokens=5, api_call_count=1)
"""


def deleted_under_live_agent(store, snapshot: bool):
    """Three turns; the row is deleted (0.19.0 ``delete_session``, as ``hermes sessions
    delete`` does) while the agent runs; its next append fails the foreign key; the
    gateway's cumulative ``update_token_counts`` brings the row back as
    ``source='unknown'``; turn 4 then lands. With ``snapshot``, the agent's snapshot
    (written after turn 4, holding all 8 messages) survives the deletion."""
    return hermes(store, WRITERS + f"""
sid = {SID!r}
db.create_session(sid, "cli", model="test/model")
for n in (1, 2, 3):
    turn(sid, n)
memory = in_memory(sid)
db.delete_session(sid)
try:
    db.append_message(sid, "user", "Question 4: what is 4 times 4?")
    raise SystemExit("append after the deletion did not fail")
except sqlite3.IntegrityError as exc:
    assert "FOREIGN KEY" in str(exc), exc
db.update_token_counts(sid, input_tokens=40, output_tokens=20, api_call_count=4, absolute=True, model="test/model")
assert db.get_session(sid)["source"] == "unknown"
db.append_message(sid, "user", "Question 4: what is 4 times 4?")
db.append_message(sid, "assistant", "Answer 4: 16.")
memory += [{{"role": "user", "content": "Question 4: what is 4 times 4?"}}, {{"role": "assistant", "content": "Answer 4: 16."}}]
if {snapshot!r}:
    save_snapshot(sid, memory)
""")


def later():
    return time.time() + 2 * HOUR


def _rows(store, sid=SID):
    with store.read() as conn:
        return recovery.store_messages(conn, store.capabilities(conn), sid)


def test_deletion_under_a_live_agent_with_a_snapshot(store):
    s = store("default")
    deleted_under_live_agent(s, snapshot=True)
    report = run_store_checks(s, now=later())
    [f] = findings(report, "history_lost", SID)
    assert (f.severity, f.heal) == ("critical", "recover_messages")
    assert f.evidence["cause"] == "deleted_under_live_agent"
    assert "deleted while an agent was still using it" in f.detail
    [copy] = f.evidence["copies"]
    assert copy["kind"] == "snapshot" and copy["missing"] == 6 and copy["message_count"] == 8
    assert copy["path"].endswith(f"session_{SID}.json") and len(copy["sha256"]) == 64
    assert f.count == 6 and f.evidence["recoverable"] == 6 and not f.evidence["conflicts"]
    # The snapshot is nobody's leftover.
    assert not findings(report, "leftover_files")
    # The plan: the three lost turns before the first row, in order, times estimated.
    with s.read() as conn:
        a = recovery.analyse(s, conn, s.capabilities(conn), SID)
    ins = a.plan.insertions
    assert [i.after_id for i in ins] == [None] * 6 and [i.order for i in ins] == list(range(6))
    assert [(i.message.role, i.message.content) for i in ins] == [
        ("user", "Question 1: what is 1 times 1?"), ("assistant", "Answer 1: 1."),
        ("user", "Question 2: what is 2 times 2?"), ("assistant", "Answer 2: 4."),
        ("user", "Question 3: what is 3 times 3?"), ("assistant", "Answer 3: 9.")]
    assert all(i.timestamp_estimated for i in ins)
    first = a.rows[0].timestamp
    assert all(i.timestamp < first for i in ins) and [i.timestamp for i in ins] == sorted(i.timestamp for i in ins)
    assert {i.source.kind for i in ins} == {"snapshot"}


def test_deletion_under_a_live_agent_without_any_copy(store):
    s = store("default")
    deleted_under_live_agent(s, snapshot=False)
    [f] = findings(run_store_checks(s, now=later()), "history_lost", SID)
    assert (f.severity, f.heal) == ("warning", None)
    assert f.evidence["cause"] == "deleted_under_live_agent" and not f.evidence["copies"]
    assert "4 API calls recorded but only 1 assistant reply stored" in f.detail
    assert "nothing on disk can restore it" in f.detail


def test_reply_dropped_in_turn_two_is_in_a_later_request_dump(store):
    """Turn 2's reply never reached the store; turn 3's request failed with a 400 and
    its dump holds every message sent, the lost reply included."""
    s = store("default")
    hermes(s, WRITERS + f"""
sid = {SID!r}
db.create_session(sid, "cli", model="test/model")
turn(sid, 1)
turn(sid, 2, reply=False)
sent = [{{"role": "system", "content": "You are Hermes."}}] + in_memory(sid) + [
    {{"role": "assistant", "content": "Answer 2: 4."}}, {{"role": "user", "content": "Question 3: what is 3 times 3?"}}]
db.append_message(sid, "user", "Question 3: what is 3 times 3?")
save_request_dump(sid, sent, "20260401_100300_000001")
""")
    report = run_store_checks(s, now=later())
    [f] = findings(report, "history_lost", SID)
    assert (f.severity, f.heal, f.evidence["cause"]) == ("critical", "recover_messages", "reply_dropped")
    assert [c["kind"] for c in f.evidence["copies"]] == ["request_dump"] and f.count == 1
    rows = _rows(s)
    with s.read() as conn:
        plan = recovery.analyse(s, conn, s.capabilities(conn), SID).plan
    [ins] = plan.insertions
    user2 = [r for r in rows if r.role == "user"][1]
    assert ins.after_id == user2.id and (ins.message.role, ins.message.content) == ("assistant", "Answer 2: 4.")
    assert ins.timestamp_estimated and user2.timestamp < ins.timestamp < rows[-1].timestamp
    [u] = findings(report, "unanswered_turn", SID)
    assert u.heal == "recover_messages" and "holds the missing reply" in u.detail
    assert u.evidence["reply_copies"][0]["kind"] == "request_dump"


def test_a_complete_snapshot_is_no_finding_and_stays(store):
    s = store("default")
    hermes(s, WRITERS + f"""
sid = {SID!r}
db.create_session(sid, "cli", model="test/model")
for n in (1, 2, 3):
    turn(sid, n)
save_snapshot(sid, in_memory(sid))
""")
    report = run_store_checks(s, now=later())
    assert not findings(report, "history_lost") and not findings(report, "leftover_files")
    assert not findings(report, "unanswered_turn", SID)
    assert (s.profile.sessions_dir / f"session_{SID}.json").is_file()


def test_merged_user_turn_in_a_snapshot_is_the_same_turn(store):
    """After a failed turn Hermes joins the dangling user message with the next one
    in memory (``"a\\n\\nb"``); the store keeps both rows: nothing is missing."""
    s = store("default")
    hermes(s, WRITERS + f"""
sid = {SID!r}
db.create_session(sid, "cli", model="test/model")
turn(sid, 1)
db.append_message(sid, "user", "first try")
db.append_message(sid, "user", "second try")
db.append_message(sid, "assistant", "Done.")
memory = in_memory(sid)
save_snapshot(sid, memory[:2] + [{{"role": "user", "content": "first try\\n\\nsecond try"}}, memory[-1]])
""")
    assert not findings(run_store_checks(s, now=later()), "history_lost")
    with s.read() as conn:
        a = recovery.analyse(s, conn, s.capabilities(conn), SID)
    [comp] = a.plan.comparisons
    assert len(comp.merged) == 1 and not comp.missing and not comp.differing


def test_two_copies_that_disagree_are_reported_and_the_rest_recovered(store):
    s = store("default")
    hermes(s, WRITERS + f"""
sid = {SID!r}
db.create_session(sid, "cli", model="test/model")
turn(sid, 1)
turn(sid, 2, reply=False)
turn(sid, 3, reply=False)
memory = in_memory(sid)  # u1 a1 u2 u3
save_snapshot(sid, memory[:3] + [{{"role": "assistant", "content": "Answer 2: 4."}}, memory[3],
                                 {{"role": "assistant", "content": "Answer 3: 9."}}])
save_snapshot(sid, memory[:3] + [{{"role": "assistant", "content": "Answer 2: four."}}, memory[3]],
              name=f"{{sid}}.json")
""")
    [f] = findings(run_store_checks(s, now=later()), "history_lost", SID)
    assert f.severity == "critical" and f.evidence["conflicts"] == 1 and f.evidence["recoverable"] == 1
    assert "disagree" in f.detail
    with s.read() as conn:
        plan = recovery.analyse(s, conn, s.capabilities(conn), SID).plan
    rows = _rows(s)
    u2, u3 = [r for r in rows if r.role == "user"][1:3]
    [conflict] = plan.conflicts
    assert conflict.after_id == u2.id
    assert sorted(p.source.kind for p in conflict.proposals) == ["json", "snapshot"]
    [ins] = plan.insertions
    assert ins.after_id == u3.id and ins.message.content == "Answer 3: 9." and ins.source.kind == "snapshot"


def test_sanitised_snapshot_name_of_an_odd_session_id(store):
    """0.19.0 names the snapshot of ``a:b/c`` by its sanitised id; it is still that
    session's copy (the file carries the raw id)."""
    s = store("default")
    sid = "agent:main:cli:x/y"
    hermes(s, WRITERS + f"""
from pathlib import Path as P
sid = {sid!r}
db.create_session(sid, "cli", model="test/model")
turn(sid, 1)
memory = in_memory(sid) + [{{"role": "user", "content": "more"}}, {{"role": "assistant", "content": "lost"}}]
save_snapshot(sid, memory, name="session_{sf.safe_component(sid)}.json")
""")
    [f] = findings(run_store_checks(s, now=later()), "history_lost", sid)
    assert f.evidence["copies"][0]["missing"] == 2 and f.evidence["cause"] == "reply_dropped"


def _row_reads(monkeypatch) -> list[str]:
    """The ids of the sessions whose rows ``recovery.store_messages`` reads from now
    on, in order (the real reads still happen)."""
    reads = []
    real = recovery.store_messages

    def counted(conn, caps, sid, **kw):
        reads.append(sid)
        return real(conn, caps, sid, **kw)

    monkeypatch.setattr(recovery, "store_messages", counted)
    return reads


def test_a_whole_pass_reads_a_lost_sessions_rows_once(store, monkeypatch):
    """history_lost analyses a session from its sessions/ files, then with every copy
    when that shows a loss: both compare the same rows, read once (and not kept for
    the rest of the pass: a second pass reads them again)."""
    s = store("default")
    deleted_under_live_agent(s, snapshot=True)
    reads = _row_reads(monkeypatch)
    [f] = findings(run_store_checks(s, only=["history_lost"], now=later()), "history_lost", SID)
    assert f.evidence["recoverable"] == 6
    assert reads == [SID]
    run_store_checks(s, only=["history_lost"], now=later())
    assert reads == [SID, SID]


def test_a_counter_gap_without_any_copy_is_judged_from_the_count(store, monkeypatch):
    """A session whose counters show lost replies and that has no copy anywhere: a
    whole pass counts its rows in the grouped statement and never reads them one by
    one (~11,000 such sessions on the 1M bench home), and the session page's own
    check says the same."""
    s = store("default")
    deleted_under_live_agent(s, snapshot=False)
    with s.read() as conn:
        rows = conn.execute("SELECT COUNT(*) FROM messages WHERE session_id = ?", (SID,)).fetchone()[0]
    reads = _row_reads(monkeypatch)
    [whole] = findings(run_store_checks(s, only=["history_lost"], now=later()), "history_lost", SID)
    assert reads == []
    assert whole.evidence["store_rows"] == rows > 0 and not whole.evidence["copies"]
    [page] = findings(run_store_checks(s, session_id=SID, only=["history_lost"], now=later()), "history_lost", SID)
    assert (page.detail, page.evidence, page.severity) == (whole.detail, whole.evidence, whole.severity)


def deleted_with_its_snapshot(store):
    """Two turns and the agent's snapshot; then ``hermes sessions delete`` (0.19.0
    ``delete_session``) removes the row and its messages and leaves the snapshot."""
    hermes(store, WRITERS + f"""
sid = {SID!r}
db.create_session(sid, "cli", model="test/model")
for n in (1, 2):
    turn(sid, n)
save_snapshot(sid, in_memory(sid))
db.delete_session(sid)
assert db.get_session(sid) is None
""")


def test_a_deleted_session_whose_snapshot_remains(store):
    """The copy holds the whole conversation but there is no row to recover into: no
    repair, and the words say so instead of "when no copy holds the messages"."""
    from sessions_app.checks.registry import get
    from sessions_app.runs import finding_json

    s = store("default")
    deleted_with_its_snapshot(s)
    [f] = findings(run_store_checks(s, now=later()), "history_lost", SID)
    assert (f.heal, f.evidence["cause"], f.evidence["session_exists"]) == (None, "not_in_store", False)
    assert f.evidence["copies"][0]["missing"] == 4 and "likely cause: the session is not in the store" in f.detail
    check = get("history_lost")
    assert f.next_step_case == "session_gone" == finding_json(f)["next_step_case"]
    step = check.next_step_for(f.next_step_case)
    assert step != check.next_step and "gone from the store" in step and "When no copy holds" not in step
    # Planned anyway (the row went between a check and its preview): blocked, the same words.
    from sessions_app.actions.registry import plan_for
    with s.read() as conn:
        plan = plan_for(s, conn, s.capabilities(conn), f.__class__(
            check="history_lost", severity="warning", session_id=SID, count=4, detail="", heal="recover_messages"))
    assert "no row in the store" in plan.blocked and plan.next_step == step
    # A loss with no copy at all keeps the general words.
    deleted_under_live_agent(store("ops"), snapshot=False)
    [plain] = findings(run_store_checks(store("ops"), now=later()), "history_lost", SID)
    assert plain.heal is None and plain.next_step_case == "" and "next_step_case" not in finding_json(plain)


def test_the_likely_cause_never_repeats_the_detail(store):
    """A copy holding a turn before the store's first row, with nothing pointing at a
    cause (no counter gap, a real source): the detail names the copy and guesses none."""
    s = store("default")
    hermes(s, WRITERS + f"""
sid = {SID!r}
db.create_session(sid, "cli", model="test/model")
turn(sid, 1)
memory = [{{"role": "user", "content": "Question 0?"}}, {{"role": "assistant", "content": "Answer 0."}}] + in_memory(sid)
save_snapshot(sid, memory)
""")
    [f] = findings(run_store_checks(s, now=later()), "history_lost", SID)
    assert f.evidence["cause"] == "unknown" and "likely cause" not in f.detail
    assert f.detail.count("the store lacks") == 2  # the total, then the copy's own count


def test_a_placeholder_row_whose_counters_add_up_is_still_the_deletion(store):
    """The gateway's token update after the deletion counts only the turn after it,
    so calls and replies agree; the placeholder row (source 'unknown') and the turns
    the snapshot holds before its first row still say what happened."""
    s = store("default")
    hermes(s, WRITERS + f"""
sid = {SID!r}
db.create_session(sid, "cli", model="test/model")
for n in (1, 2):
    turn(sid, n)
memory = in_memory(sid)
db.delete_session(sid)
db.update_token_counts(sid, input_tokens=10, output_tokens=5, api_call_count=1)
assert db.get_session(sid)["source"] == "unknown"
db.append_message(sid, "user", "Question 3: what is 3 times 3?")
db.append_message(sid, "assistant", "Answer 3: 9.")
save_snapshot(sid, memory + [{{"role": "user", "content": "Question 3: what is 3 times 3?"}},
                             {{"role": "assistant", "content": "Answer 3: 9."}}])
""")
    [f] = findings(run_store_checks(s, now=later()), "history_lost", SID)
    assert f.evidence["counters"] is None and f.evidence["cause"] == "deleted_under_live_agent"
    assert "deleted while an agent was still using it" in f.detail and f.heal == "recover_messages"


def test_a_placeholder_whose_first_role_is_empty_is_still_judged(store):
    """A hand-edited first row with role '' (or any odd value): the detail quotes it,
    the check does not fail."""
    s = store("default")
    deleted_under_live_agent(s, snapshot=False)
    with damage(s) as db:
        db.execute("UPDATE messages SET role = '' WHERE id = (SELECT MIN(id) FROM messages WHERE session_id = ?)",
                   (SID,))
    report = run_store_checks(s, now=later())
    assert report.failed_checks == [], report.failed_checks
    [f] = findings(report, "history_lost", SID)
    assert "the first message's role is '', not 'user'" in f.detail
