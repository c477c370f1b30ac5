"""A store without a ``(session_id, id)`` index: one statement tells the transcript
both whether to walk the rowid and, mostly, how many rows are visible (issue 16);
the count a page shows is the capped visible count either way."""

import sqlite3

import pytest

from sessions_app.stores.transcript import COUNT_CAP, Transcript


def _store(rows: int, inactive: int) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE messages (id INTEGER PRIMARY KEY, session_id TEXT, role TEXT, content TEXT, active)")
    conn.execute("CREATE INDEX idx_messages_session ON messages (session_id, role)")
    conn.executemany("INSERT INTO messages (session_id, role, content, active) VALUES ('s', 'user', 'x', ?)",
                     [(0 if i < inactive else None if i % 7 == 0 else 1,) for i in range(rows)])
    conn.execute("INSERT INTO messages (session_id, role, content, active) VALUES ('other', 'user', 'x', 1)")
    return conn


def _capped(conn, visible: bool) -> int:
    where = " AND (active IS NULL OR active != 0)" if visible else ""
    n = conn.execute(f"SELECT COUNT(*) FROM messages WHERE session_id = 's'{where}").fetchone()[0]
    return min(n, COUNT_CAP + 1)


@pytest.mark.parametrize("rows, inactive", [
    (0, 0), (50, 10), (COUNT_CAP, 0), (COUNT_CAP + 1, 0), (COUNT_CAP + 500, 600), (2 * COUNT_CAP, 9_000),
    (COUNT_CAP + 5, COUNT_CAP + 5)])
@pytest.mark.parametrize("include_inactive", [False, True])
def test_counts_and_walk_as_two_statements_gave_them(rows, inactive, include_inactive):
    conn = _store(rows, inactive)
    transcript = Transcript(conn, ["id", "session_id", "role", "content", "active"], "s", include_inactive)
    assert (transcript.source == "messages NOT INDEXED") == (_capped(conn, False) > COUNT_CAP)
    want = _capped(conn, not include_inactive)
    # past the cap with inactive rows among the first ones, the visible rows are counted apart
    assert (transcript._counted is None) == (not include_inactive and rows > COUNT_CAP and 0 < inactive)
    assert transcript.count() == want
    assert transcript.count() == want  # later counts are counted again
