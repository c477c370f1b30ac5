"""The comparison and the recovery plan on their own: copies against the rows of a
real store session, positions, agreement between copies, times."""

import json

import pytest

from sessions_app.stores import copies, recovery
from tests.checks.helpers import damage, store_of
from tests.conftest import IDS

SID = IDS["cli_main"]


@pytest.fixture
def s(hermes_home, settings, tmp_path):
    settings.DATA_DIR = tmp_path / "data"
    store = store_of(hermes_home, "default")
    store.profile.sessions_dir.mkdir(exist_ok=True)
    return store


def rows_and_memory(store):
    """The session's rows, and its messages as a snapshot would hold them."""
    with store.read() as conn:
        rows = recovery.store_messages(conn, store.capabilities(conn), SID)
        raw = conn.execute("SELECT role, content, tool_call_id, tool_calls, tool_name FROM messages "
                           "WHERE session_id = ? ORDER BY id", (SID,)).fetchall()
    memory = []
    for role, content, call_id, calls, name in raw:
        m = {"role": role, "content": content}
        if call_id:
            m["tool_call_id"] = call_id
        if calls:
            m["tool_calls"] = json.loads(calls)
        if name:
            m["tool_name"] = name
        memory.append(m)
    return rows, memory


def snapshot(store, messages, name=f"session_{SID}.json"):
    path = store.profile.sessions_dir / name
    path.write_text(json.dumps({"session_id": SID, "messages": messages}))
    kind = "snapshot" if name.startswith("session_") else "json"
    return copies.read_json_copy(path, kind, SID, store_paths=[store.path])


def test_identical_copy_has_nothing_to_recover(s):
    rows, memory = rows_and_memory(s)
    plan = recovery.plan_recovery(SID, rows, [snapshot(s, memory)])
    [comp] = plan.comparisons
    assert len(comp.pairs) == len(rows) and not comp.missing and not comp.extra and not plan.insertions
    assert set(comp.statuses().values()) == {"present"}


def test_older_copy_leaves_newer_rows_as_extra_after_it(s):
    rows, memory = rows_and_memory(s)
    [comp] = recovery.plan_recovery(SID, rows, [snapshot(s, memory[:2])]).comparisons
    assert {e["where"] for e in comp.extra} == {"after"} and len(comp.extra) == len(rows) - 2


def test_a_message_rewritten_in_the_copy_is_differing_never_inserted(s):
    rows, memory = rows_and_memory(s)
    memory[1] = dict(memory[1], content="[REDACTED]")
    plan = recovery.plan_recovery(SID, rows, [snapshot(s, memory)])
    [d] = plan.comparisons[0].differing
    assert d.indexes == (1,) and d.row_ids == (rows[1].id,) and d.after_id == rows[0].id
    assert not plan.insertions and plan.differences[0]["row_ids"] == [rows[1].id]


def test_a_hidden_row_is_not_missing(s):
    rows, memory = rows_and_memory(s)
    with damage(s) as conn:
        conn.execute("UPDATE messages SET active = 0 WHERE id = ?", (rows[1].id,))
    with s.read() as conn:
        rows = recovery.store_messages(conn, s.capabilities(conn), SID)
    plan = recovery.plan_recovery(SID, rows, [snapshot(s, memory)])
    assert plan.comparisons[0].hidden == [1] and not plan.insertions


def test_copies_agree_when_one_holds_less(s):
    """An older copy proposing the start of what a fuller copy proposes agrees with it."""
    rows, memory = rows_and_memory(s)
    with damage(s) as conn:
        conn.execute("DELETE FROM messages WHERE id IN (?, ?)", (rows[-1].id, rows[-2].id))
    with s.read() as conn:
        rows = recovery.store_messages(conn, s.capabilities(conn), SID)
    full, partial = snapshot(s, memory), snapshot(s, memory[:-1], name=f"{SID}.json")
    plan = recovery.plan_recovery(SID, rows, [partial, full])
    assert not plan.conflicts and [i.message.index for i in plan.insertions] == [len(memory) - 2, len(memory) - 1]
    assert {i.source.kind for i in plan.insertions} == {"snapshot"}
    assert [i.after_id for i in plan.insertions] == [rows[-1].id] * 2 and [i.order for i in plan.insertions] == [0, 1]
    assert all(i.timestamp_estimated and i.timestamp > rows[-1].timestamp for i in plan.insertions)
    assert sorted((p.kind, n) for p, n in plan.holding_missing()) == [("json", 1), ("snapshot", 2)]


def test_a_copy_that_vanished_before_planning_gives_an_error_not_an_insertion(s):
    rows, memory = rows_and_memory(s)
    c = snapshot(s, memory + [{"role": "user", "content": "one more"}])
    (s.profile.sessions_dir / f"session_{SID}.json").unlink()
    plan = recovery.plan_recovery(SID, rows, [c])
    assert not plan.insertions and "No such file" in plan.errors[0]


def test_messages_lost_before_the_first_row_get_times_after_the_session_start(s):
    """A snapshot holds the first turns the store lost; they carry no time of their
    own, and their estimates lie between the session's start and the first row left."""
    rows, memory = rows_and_memory(s)
    with s.read() as conn:
        started = conn.execute("SELECT started_at FROM sessions WHERE id = ?", (SID,)).fetchone()[0]
    with damage(s) as conn:
        # The first row kept is stamped a second after the start: counted back one
        # second a message, the three lost before it would come before the start.
        conn.execute("UPDATE messages SET timestamp = ? WHERE id = ?", (started + 1, rows[3].id))
        conn.execute("DELETE FROM messages WHERE id IN (?, ?, ?)", (rows[0].id, rows[1].id, rows[2].id))
    snapshot(s, memory)
    with s.read() as conn:
        analysis = recovery.analyse(s, conn, s.capabilities(conn), SID)
    head = [i for i in analysis.plan.insertions if i.after_id is None]
    assert [i.message.index for i in head] == [0, 1, 2]
    assert all(i.timestamp_estimated and started <= i.timestamp <= started + 1 for i in head)
    assert [i.timestamp for i in head] == sorted(i.timestamp for i in head)
