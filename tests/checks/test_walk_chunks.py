"""The transcript walk's chunking: every active row once, in (session_id, id) order,
whatever the chunk size and whether the store has a (session_id, id) index."""

import time

import pytest

from sessions_app.checks import walk
from sessions_app.checks.base import CheckContext, Thresholds
from sessions_app.stores.liveness import LiveIndex
from tests.conftest import PROFILES, ids


def _ctx(store, conn, session_id=None):
    return CheckContext(store=store, conn=conn, caps=store.capabilities(conn), now=time.time(),
                        thresholds=Thresholds(), liveness=LiveIndex(), session_id=session_id)


def _expected(ctx, session_id=None):
    where = " AND session_id = ?" if session_id else ""
    return [tuple(r) for r in ctx.conn.execute(
        f"SELECT session_id, id FROM messages WHERE {ctx.active()}{where} ORDER BY session_id, id",
        (session_id,) if session_id else ()).fetchall()]


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("chunk", [1, 2, 7, 2000])
def test_walk_yields_every_active_row_once_in_order(store, monkeypatch, profile, chunk):
    monkeypatch.setattr(walk, "CHUNK", chunk)
    s = store(profile)
    with s.read() as conn:
        ctx = _ctx(s, conn)
        got = [(r.session_id, r.id) for r in walk.iter_active_rows(ctx)]
        assert got == _expected(ctx)
        long_session = ids(profile)["long"]
        scoped = _ctx(s, conn, long_session)
        got = [(r.session_id, r.id) for r in walk.iter_active_rows(scoped)]
        assert got == _expected(scoped, long_session) and len(got) == 60


@pytest.mark.parametrize("profile", ["default", "edge"])
def test_a_chunk_never_resumes_inside_a_session(store, monkeypatch, profile):
    """Keyset chunks inside one session are quadratic (re-sorted without a
    (session_id, id) index, re-scanned with one): a session started in a chunk is
    finished by one query ordered by id; a session-scoped walk is one query."""
    monkeypatch.setattr(walk, "CHUNK", 7)
    s = store(profile)
    statements, scoped_statements = [], []
    with s.read() as conn:
        conn.set_trace_callback(statements.append)
        rows = list(walk.iter_active_rows(_ctx(s, conn)))
        conn.set_trace_callback(scoped_statements.append)
        scoped = list(walk.iter_active_rows(_ctx(s, conn, ids(profile)["long"])))
    assert rows and len(scoped) == 60
    walks = [sql for sql in statements if "substr(CAST(content AS BLOB), 1, 64)" in sql]
    assert not any("(session_id, id) >" in sql for sql in walks)
    assert any("session_id = '" in sql and "ORDER BY id" in sql for sql in walks)
    assert len([sql for sql in scoped_statements if "FROM messages" in sql]) == 1


@pytest.mark.parametrize("profile", ["default", "edge"])  # without and with a (session_id, id) index
def test_findings_do_not_depend_on_the_chunk_size(store, monkeypatch, profile):
    from sessions_app.checks import run_store_checks

    s = store(profile)
    now = time.time()
    baseline = [f.to_dict() for f in run_store_checks(s, now=now).findings]
    monkeypatch.setattr(walk, "CHUNK", 3)
    assert [f.to_dict() for f in run_store_checks(s, now=now).findings] == baseline


@pytest.mark.parametrize("raw", [
    None, "", "not json", "{}", "[]", '[1, "x", null]',
    '[{"id": "call_1", "type": "function", "function": {"name": "t", "arguments": "{\\"a\\": 1}"}}]',
    '[{"id": "fc_1", "call_id": "call_9", "name": "t", "arguments": {"a": 1}}, {"call_id": "c2"}, {"id": ""}]',
])
def test_call_ids_read_tool_calls_as_the_transcript_does(raw):
    from sessions_app.stores.transcript import parse_tool_calls

    assert walk.call_ids(raw) == [c["ids"] for c in parse_tool_calls(raw)]


def test_rows_without_a_session_id_do_not_loop_the_walk(store, monkeypatch):
    """A salvaged store whose messages table lost NOT NULL may hold rows with a NULL
    session_id; a full chunk of them once made the walk start over forever."""
    import itertools
    import sqlite3

    monkeypatch.setattr(walk, "CHUNK", 2)
    s = store("ops")
    conn = sqlite3.connect(s.path)
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute("UPDATE sqlite_master SET sql = replace(sql, 'session_id TEXT NOT NULL', 'session_id TEXT') "
                 "WHERE name = 'messages'")
    conn.commit()
    conn.close()
    conn = sqlite3.connect(s.path)  # a new connection reads the loosened schema
    conn.executemany("INSERT INTO messages (session_id, role, content, timestamp) VALUES (NULL, 'user', ?, 1.0)",
                     [(f"salvaged {i}",) for i in range(5)])
    conn.commit()
    conn.close()
    with s.read() as conn:
        ctx = _ctx(s, conn)
        expected = _expected(ctx)
        got = [(r.session_id, r.id) for r in itertools.islice(walk.iter_active_rows(ctx), len(expected) + 10)]
    assert sum(1 for sid, _ in expected if sid is None) == 5
    assert got == expected
