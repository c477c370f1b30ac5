"""Repairs in the order their dependencies ask for (docs/architecture.md §5.2), on
real-release stores: a duplicate row that also makes the message count wrong is
healed by hiding it alone; the recount planned beside it is planned again and
dropped, never applied with the duplicate counted."""

import pytest

from sessions_app.actions import registry
from sessions_app.actions.base import Plan
from sessions_app.checks import run_store_checks
from tests.checks.helpers import damage, hermes
from tests.conftest import ids

from .conftest import heal, profile_entry, store

pytestmark = pytest.mark.django_db

MODERN = ["default", "edge"]  # 0.19.0 and the newest shape


def rows(s, sql, params=()):
    with s.read() as conn:
        return conn.execute(sql, params).fetchall()


def duplicate_without_count(s, sid) -> int:
    """A second writer saves the first user message again without counting it (the
    session's message_count then disagrees with its active rows): returns the copy's id."""
    [(content, ts)] = rows(s, "SELECT content, timestamp FROM messages WHERE session_id = ? AND role = 'user' "
                              "ORDER BY id LIMIT 1", (sid,))
    with damage(s) as db:
        return db.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
                          (sid, content, ts)).lastrowid


def plan(action, sid="s1"):
    return Plan(action=action, check="x", profile="p", store_path="/x", session_id=sid, summary="")


def test_the_order_puts_every_repair_after_what_it_depends_on():
    names = [p.action for p in registry.order([plan(n) for n in sorted(registry.ACTIONS)])]
    for name in names:
        for dep in registry.prerequisites(name):
            assert names.index(dep) < names.index(name), (dep, name)
    assert names.index("hide_duplicates") < names.index("recount_session") < names.index("move_to_owner_store")
    assert names.index("move_to_owner_store") < names.index("stamp_owner")
    # Waiting is per session, except after a move (it carries its unit's sessions along).
    earlier = [plan("hide_duplicates", "other"), plan("move_to_owner_store", "parent")]
    assert registry.waits_for(plan("recount_session", "s1"), earlier) == []
    assert registry.waits_for(plan("recount_session", "other"), earlier) == ["hide_duplicates"]
    assert registry.waits_for(plan("stamp_owner", "child"), earlier) == ["move_to_owner_store"]


@pytest.mark.parametrize("profile", MODERN)
def test_a_duplicate_and_the_wrong_count_it_causes_need_one_repair(aged_home, profile):
    s = store(aged_home, profile)
    sid = ids(profile)["long"]
    copy = duplicate_without_count(s, sid)
    [(count,)] = rows(s, "SELECT message_count FROM sessions WHERE id = ?", (sid,))
    found = {f.check: f for f in run_store_checks(s, session_id=sid).findings}
    assert {"duplicate_live_rows", "counter_drift"} <= set(found)
    assert found["counter_drift"].evidence["active_rows"] == count + 1  # the recount alone would count the copy

    # A dry run offers the hide first and says the recount waits for it.
    code, dry = heal("--profile", profile, "--json")
    mine = [a for a in profile_entry(dry, profile)["actions"] if a["session_id"] == sid]
    assert [a["action"] for a in mine] == ["hide_duplicates", "recount_session"]
    assert mine[1]["status"] == "planned" and "after hide_duplicates" in mine[1]["reason"]

    code, report = heal("--profile", profile, "--apply", "--json")
    entry = profile_entry(report, profile)
    mine = {a["action"]: a for a in entry["actions"] if a["session_id"] == sid}
    assert mine["hide_duplicates"]["status"] == "applied"
    assert mine["recount_session"]["status"] == "skipped"
    assert mine["recount_session"]["reason"] == "not needed any more: hide_duplicates healed it"
    assert [f for f in entry["findings"] if f["session_id"] == sid] == []
    # The copy is hidden (never deleted), and the count is what it was: the real messages.
    assert rows(s, "SELECT active FROM messages WHERE id = ?", (copy,)) == [(0,)]
    assert rows(s, "SELECT message_count FROM sessions WHERE id = ?", (sid,)) == [(count,)]
    assert run_store_checks(s, session_id=sid).findings == []
    # A real release reads the session as it was before the damage.
    if profile == "default":
        assert hermes(s, f"print(len(db.get_messages({sid!r})))").strip() == str(count)


def test_a_session_going_home_is_never_stamped_with_this_store_s_profile(aged_home):
    """A blank profile_name on a session whose key names another profile: the move
    is its repair; stamping this store's profile would write the wrong owner (and the
    move, planned against the blank label, would be skipped as changed)."""
    src, dst = store(aged_home, "edge"), store(aged_home, "ops")
    sid = ids("edge")["telegram_open"]
    with damage(src) as db:
        db.execute("UPDATE sessions SET session_key = 'agent:ops:telegram:dm:12345', profile_name = NULL "
                   "WHERE id = ?", (sid,))
    [blank] = [f for f in run_store_checks(src, session_id=sid).findings if f.check == "missing_owner"]
    assert blank.heal is None and "names profile 'ops'" in blank.detail
    # While an agent holds it the move is refused, and nothing stamps it meanwhile.
    hermes(src, f"""
holder = f"pid={{os.getpid()}}:tid={{threading.get_ident()}}:agent=1:nonce=abc"
assert db.try_acquire_compression_lock({sid!r}, holder, ttl_seconds=3600)
""")
    code, report = heal("--profile", "edge", "--apply", "--json")
    mine = [a for a in profile_entry(report, "edge")["actions"] if a["session_id"] == sid]
    assert [(a["action"], a["status"]) for a in mine] == [("move_to_owner_store", "refused")]
    assert rows(src, "SELECT profile_name FROM sessions WHERE id = ?", (sid,)) == [(None,)]
    with damage(src) as db:
        db.execute("DELETE FROM compression_locks")
    code, report = heal("--profile", "edge", "--apply", "--json")
    mine = [a for a in profile_entry(report, "edge")["actions"] if a["session_id"] == sid]
    assert [(a["action"], a["status"]) for a in mine] == [("move_to_owner_store", "applied")], mine
    assert rows(src, "SELECT 1 FROM sessions WHERE id = ?", (sid,)) == []
    assert rows(dst, "SELECT 1 FROM sessions WHERE id = ?", (sid,)) == [(1,)]


def test_a_recount_still_needed_after_the_hide_is_planned_again_and_applied(aged_home):
    s = store(aged_home, "default")
    sid = ids("default")["long"]
    copy = duplicate_without_count(s, sid)
    with damage(s) as db:  # and a tool-call counter wrong for a reason of its own
        db.execute("UPDATE sessions SET tool_call_count = 41 WHERE id = ?", (sid,))
    [(count,)] = rows(s, "SELECT message_count FROM sessions WHERE id = ?", (sid,))
    code, report = heal("--profile", "default", "--apply", "--json")
    mine = {a["action"]: a for a in profile_entry(report, "default")["actions"] if a["session_id"] == sid}
    assert mine["hide_duplicates"]["status"] == "applied"
    recount = mine["recount_session"]
    # Planned again after the hide: the message count is right by then, only the
    # tool-call counter is left to set (the first plan would have counted the copy).
    assert recount["status"] == "applied", recount
    assert [c["column"] for c in recount["changes"]] == ["tool_call_count"]
    assert rows(s, "SELECT message_count, tool_call_count != 41 FROM sessions WHERE id = ?", (sid,)) == [(count, 1)]
    assert rows(s, "SELECT active FROM messages WHERE id = ?", (copy,)) == [(0,)]
    assert run_store_checks(s, session_id=sid).findings == []
