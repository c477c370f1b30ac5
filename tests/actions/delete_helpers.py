"""Helpers of the deletion tests (issue 5): byte-level dumps of a store, planning
and deleting the way the browser does, and real Hermes agents as lease holders."""

from __future__ import annotations

import sqlite3

from sessions_app.actions import deletion
from sessions_app.actions.rowcopy import quote
from sessions_app.stores.connection import ro_uri
from tests.checks.helpers import hermes_background, own_pidns


def dump(store, tables: list[str] | None = None) -> dict[str, list]:
    """Every row of every ordinary table (FTS shadow tables left out), each value as
    ``(typeof, bytes)``: a byte-for-byte picture of the store's data."""
    conn = sqlite3.connect(ro_uri(store.path), uri=True)
    conn.text_factory = bytes
    try:
        names = [r[0].decode() for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'messages_fts%' ORDER BY name")]
        out = {}
        for name in names:
            if tables is not None and name not in tables:
                continue
            cols = [c[1].decode() for c in conn.execute(f"PRAGMA table_info({quote(name)})")]
            select = ", ".join(f"typeof({quote(c)}), CAST({quote(c)} AS BLOB)" for c in cols)
            out[name] = sorted(conn.execute(f"SELECT {select} FROM {quote(name)}").fetchall(), key=repr)
        return out
    finally:
        conn.close()


def rows(store, sql, params=()):
    with store.read() as conn:
        return conn.execute(sql, params).fetchall()


def fts_hits(store, word: str) -> list[int]:
    """Message ids the store's own full-text index finds for ``word``."""
    with store.read() as conn:
        return sorted(r[0] for r in conn.execute("SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?", (word,)))


def confirm(store, session_id: str, lineage: bool = False) -> tuple[deletion.DeletePlan, dict]:
    """Step 1 as the browser does it: the plan and the item its token binds."""
    plan = deletion.plan_for(store, session_id, lineage)
    item = deletion.unsign(deletion.sign([deletion.token_item(plan)]))[0]  # with its nonce
    return plan, item


def agent(store, session_id: str, *, root: str | None = None, end_normally: bool = False):
    """A real Hermes agent process (hermes-agent 0.19.0's ``SessionDB`` on ``store``)
    running a turn on ``session_id``: it creates the session if needed, holds a turn
    lease on the lineage ``root`` (newest-shape stores have the table; the holder is
    stamped with its pid, platform and PID namespace, as upstream's façade does)
    and writes the user's message. With ``end_normally`` it finishes the turn,
    releases its lease, ends the session and exits; otherwise it stays in the turn
    until killed. Returns the process (already finished when ``end_normally``)."""
    root = root or session_id
    code = f"""
sid, root = {session_id!r}, {root!r}
if db.get_session(sid) is None:
    db.create_session(sid, 'cli')
holder = f"pid={{os.getpid()}}:pidns={own_pidns()}:turn=1:platform=cli"
now = time.time()
def take(conn):
    conn.execute("INSERT INTO session_turn_leases (conversation_id, holder, acquired_at, expires_at) VALUES (?, ?, ?, ?)",
                 (root, holder, now, now + 300))
db._execute_write(take)
db.append_message(sid, 'user', 'please summarise the quarterly numbers')
print("READY", flush=True)
if {end_normally!r}:
    db.append_message(sid, 'assistant', 'Revenue grew 4 percent.')
    db._execute_write(lambda conn: conn.execute(
        "DELETE FROM session_turn_leases WHERE conversation_id = ? AND holder = ?", (root, holder)))
    db.end_session(sid, 'cli_close')
    print("ENDED", flush=True)
else:
    time.sleep(600)
"""
    proc = hermes_background(store, code)
    if end_normally:
        assert proc.stdout.readline().strip() == "ENDED"
        assert proc.wait(timeout=60) == 0
    return proc


def stop(proc) -> None:
    """Kill a background agent the way a crash does (SIGKILL), and reap it."""
    proc.kill()
    proc.wait()
