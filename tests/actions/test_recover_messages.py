"""``recover_messages`` on the guarded write: the losses reproduced with hermes-agent
0.19.0's own ``SessionDB`` calls, the copies written in the shapes of 0.19.0's own
writers (see ``tests/checks/test_history_lost.py``), then healed the way cron does."""

import hashlib
import re
import sqlite3

from sessions_app.actions.engine import Applier
from sessions_app.actions.heal import heal
from sessions_app.actions.registry import plan_for
from sessions_app.checks import run_store_checks
from sessions_app.models import AuditEvent
from sessions_app.stores import registry
from sessions_app.stores.recovery.panel import copies_panel
from sessions_app.stores.search import count_hits, search

import pytest

from ..checks.helpers import damage, findings, hermes
from ..checks.test_history_lost import SID, WRITERS, deleted_under_live_agent
from ..views.markup import without_bidi_markup
from .conftest import DAY, age_store, store


def visible(s, sid=SID) -> list[tuple[str, str]]:
    """The session as Hermes reads it: visible rows in ``messages.id`` order."""
    conn = sqlite3.connect(f"file:{s.path}?mode=ro", uri=True)
    try:
        cols = {r[1] for r in conn.execute("PRAGMA table_info(messages)")}
        where = " AND (active IS NULL OR active != 0)" if "active" in cols else ""
        return list(conn.execute(f"SELECT role, content FROM messages WHERE session_id = ?{where} ORDER BY id", (sid,)))
    finally:
        conn.close()


def sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def quiet(s):
    """The store as it looks once the agent has gone quiet (no recent activity)."""
    age_store(s.path, 2 * DAY)


def heal_default(hermes_home, only=("history_lost", "unanswered_turn")):
    registry.reset()
    return heal([store(hermes_home, "default")], only=list(only), apply=True)


pytestmark = pytest.mark.django_db

TURNS = [(r, t) for n in (1, 2, 3, 4) for r, t in
         (("user", f"Question {n}: what is {n} times {n}?"), ("assistant", f"Answer {n}: {n * n}."))]


def read_only(s, sql: str, params=()) -> list[tuple]:
    conn = sqlite3.connect(f"file:{s.path}?mode=ro", uri=True)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def everywhere(client) -> tuple[int, set[int]]:
    """The all-profiles search for "Question" in the default profile: its count and
    the message ids it lists (the newest few; the profile's page lists them all)."""
    html = without_bidi_markup(client.get("/search/", {"q": "Question", "profile": "default"}).content.decode())
    return int(re.search(r'data-total="(\d+)"', html).group(1)), {
        int(i) for i in re.findall(r'<li data-message="(\d+)">', html)}


def test_a_session_deleted_under_a_live_agent_gets_its_turns_back(hermes_home, use_roots, admin_client):
    use_roots(hermes_home)
    s = store(hermes_home, "default")
    deleted_under_live_agent(s, snapshot=True)
    quiet(s)
    snapshot = s.profile.sessions_dir / f"session_{SID}.json"
    before = sha(snapshot)
    assert visible(s) == TURNS[6:]

    report = heal_default(hermes_home)
    done = [a for a in report["profiles"][0]["actions"] if a["action"] == "recover_messages"]
    assert [a["status"] for a in done] == ["applied"], done
    assert visible(s) == TURNS  # every turn, in order, once each
    assert sha(snapshot) == before and snapshot.is_file()  # the copy is untouched, and stays
    event = AuditEvent.objects.get(action="recover_messages", outcome="applied")
    assert event.backup_path and str(snapshot) in event.reason and before[:12] in event.reason
    assert event.plan["params"]["sources"][0]["sha256"] == before
    assert not [f for f in report["profiles"][0]["findings"] if f["check"] == "history_lost"]

    # The copies add up afterwards: the backup taken before the write holds the two
    # rows the store had, now matched by their visible copies, not the hidden originals.
    panel = copies_panel(s, SID)
    assert panel.recoverable == 0 and panel.repair_check is None
    for c in panel.copies:
        assert c.message_count == c.present + c.missing + c.differing + c.merged, c
    [backup] = [c for c in panel.copies if c.kind == "backup"]
    assert (backup.message_count, backup.present, backup.hidden, backup.missing) == (2, 2, 0, 0)
    # Search shows each message once: the originals the recovery hid are not hits of their own.
    with s.read() as conn:
        caps = s.capabilities(conn)
        found = search(conn, caps.columns("messages"), caps.columns("sessions"), "Question")
        counted, every = count_hits(conn, "Question", columns=caps.columns("messages")), count_hits(conn, "Question")
    assert counted[0] == every[0] - 1 and counted[1] == every[1]  # the count agrees with the hits shown
    mine = [h for h in found.hits if h.session_id == SID]
    assert sorted(h.id for h in mine) == sorted(r[0] for r in read_only(
        s, "SELECT id FROM messages WHERE session_id = ? AND active = 1 AND role = 'user'", (SID,)))
    assert len(mine) == 4 and {h.state for h in mine} == {"active"} and found.superseded == 1
    # Search across profiles counts the way the profile search does: its count is the
    # profile's hits (all of them listed there), the hidden originals in neither.
    total, listed = everywhere(admin_client)
    assert total == counted[0] == len(found.hits) and listed <= {h.id for h in found.hits}

    again = heal_default(hermes_home)
    assert not [a for a in again["profiles"][0]["actions"] if a["action"] == "recover_messages"]
    assert visible(s) == TURNS

    # The index lacks the visible copy (fts_incomplete): the hidden original is then the
    # one hit of that message, marked rewound, not left out for a twin search cannot find.
    [(original, twin)] = read_only(
        s, "SELECT m.id, v.id FROM messages m JOIN messages v ON v.session_id = m.session_id AND v.id > m.id "
           "AND v.active = 1 AND v.content IS m.content AND v.timestamp IS m.timestamp "
           "WHERE m.session_id = ? AND m.active = 0 AND m.role = 'user'", (SID,))
    with damage(s) as db:
        db.execute("DELETE FROM messages_fts WHERE rowid = ?", (twin,))
    with s.read() as conn:
        caps = s.capabilities(conn)
        found = search(conn, caps.columns("messages"), caps.columns("sessions"), "Question")
        counted = count_hits(conn, "Question", columns=caps.columns("messages"))
    mine = {h.id: h.state for h in found.hits if h.session_id == SID}
    assert original in mine and twin not in mine and mine[original] == "rewound" and len(mine) == 4
    total, listed = everywhere(admin_client)
    assert found.superseded == 0 and total == counted[0] == len(found.hits) and listed <= {h.id for h in found.hits}


def test_without_a_copy_nothing_is_offered(hermes_home, use_roots):
    use_roots(hermes_home)
    s = store(hermes_home, "default")
    deleted_under_live_agent(s, snapshot=False)
    quiet(s)
    report = heal_default(hermes_home)
    assert not [a for a in report["profiles"][0]["actions"] if a["action"] == "recover_messages"]
    [f] = [f for f in report["profiles"][0]["findings"] if f["check"] == "history_lost"]
    assert f["heal"] is None and "nothing on disk can restore it" in f["detail"]


def test_a_reply_dropped_in_turn_two_goes_back_between_turn_two_and_three(hermes_home, use_roots):
    use_roots(hermes_home)
    s = store(hermes_home, "default")
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
    quiet(s)
    report = heal_default(hermes_home)
    assert {a["status"] for a in report["profiles"][0]["actions"] if a["action"] == "recover_messages"} == {"applied"}
    assert visible(s) == TURNS[:5]
    # The original turn-3 row is kept, hidden, not deleted (ground rule 3).
    conn = sqlite3.connect(f"file:{s.path}?mode=ro", uri=True)
    hidden = conn.execute("SELECT role, content FROM messages WHERE session_id = ? AND active = 0", (SID,)).fetchall()
    count = conn.execute("SELECT message_count FROM sessions WHERE id = ?", (SID,)).fetchone()[0]
    conn.close()
    assert hidden == [TURNS[4]] and count == 5
    after = run_store_checks(store(hermes_home, "default"))
    assert not findings(after, "history_lost", SID) and not findings(after, "counter_drift", SID)
    # Turn 3 itself failed (the 400 that wrote the dump): still unanswered, but turn 2 no longer is.
    [u] = findings(after, "unanswered_turn", SID)
    assert u.evidence["back_to_back_user_rows"] == [] and u.heal is None


def test_copies_that_disagree_leave_that_place_alone_and_recover_the_rest(hermes_home, use_roots):
    use_roots(hermes_home)
    s = store(hermes_home, "default")
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
    quiet(s)
    with s.read() as conn:
        [f] = findings(run_store_checks(s), "history_lost", SID)
        plan = plan_for(s, conn, s.capabilities(conn), f)
    assert any("disagree" in n for n in plan.params["notes"]) and len(plan.params["insertions"]) == 1
    outcome = Applier(actor_label="test").apply(s, plan)
    assert outcome.status == "applied", outcome.reason
    assert visible(s) == TURNS[:2] + [TURNS[2], TURNS[4], TURNS[5]]  # Answer 2 left out: copies disagree


def test_a_session_an_agent_may_hold_is_refused(hermes_home, use_roots):
    use_roots(hermes_home)
    s = store(hermes_home, "default")
    deleted_under_live_agent(s, snapshot=True)  # just written: recent activity
    with s.read() as conn:
        [f] = findings(run_store_checks(s, now=__import__("time").time() + 7200), "history_lost", SID)
        plan = plan_for(s, conn, s.capabilities(conn), f)
    outcome = Applier(actor_label="test").apply(s, plan)
    assert outcome.refused and "activity" in outcome.reason
    assert visible(s) == TURNS[6:]
    assert AuditEvent.objects.get(action="recover_messages").outcome == "refused"


def test_a_copy_changed_after_planning_is_not_used(hermes_home, use_roots):
    use_roots(hermes_home)
    s = store(hermes_home, "default")
    deleted_under_live_agent(s, snapshot=True)
    quiet(s)
    with s.read() as conn:
        [f] = findings(run_store_checks(s), "history_lost", SID)
        plan = plan_for(s, conn, s.capabilities(conn), f)
    snapshot = s.profile.sessions_dir / f"session_{SID}.json"
    snapshot.write_text(snapshot.read_text().replace("Answer 2: 4.", "Answer 2: five."))
    outcome = Applier(actor_label="test").apply(s, plan)
    assert outcome.status == "skipped" and "changed" in outcome.reason
    assert visible(s) == TURNS[6:]
