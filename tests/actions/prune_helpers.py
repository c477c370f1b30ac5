"""Helpers of the prune and flags tests: plain SQL dumps, real 0.19.0 agents, runs."""

from __future__ import annotations

import sqlite3

from sessions_app import trash
from sessions_app.actions import deletion
from sessions_app.actions.prune_run import Pruner, run_prune
from sessions_app.stores.connection import ro_uri
from sessions_app.stores.retention import Criteria
from tests.checks.helpers import hermes, hermes_background


def sql_dump(store) -> list[str]:
    """The store as a plain SQL dump (``iterdump``), FTS index tables left out (their
    segments are SQLite's business), sorted: equal dumps mean equal rows, byte for
    byte as SQL literals render them (storage class included: 1 vs 1.0 vs '1')."""
    conn = sqlite3.connect(ro_uri(store.path), uri=True)
    try:
        return sorted(line for line in conn.iterdump()
                      if not line.startswith(('INSERT INTO "messages_fts', "INSERT INTO messages_fts"))
                      and "sqlite_sequence" not in line)
    finally:
        conn.close()


def prune(stores, apply=False, **criteria):
    """A prune run as the command makes it (its own writer, no run row)."""
    return run_prune(list(stores), Criteria(**criteria), apply=apply, writer=Pruner(actor_label="tester"))


def profile_of(report, key):
    return next(p for p in report["profiles"] if p["profile"] == key)


def spared(report, key, reason=None):
    return [s for s in profile_of(report, key)["spared"] if reason is None or s["reason"] == reason]


def restore_all(store):
    """Restore every deleted trash entry of ``store`` (newest first, as an admin would)."""
    outcomes = []
    for entry in trash.list_entries():
        if entry.manifest.get("store_path") == str(store.path) and entry.state == "deleted":
            outcomes.append(deletion.Deleter(actor_label="tester").restore(store, entry))
    return outcomes


def lock_holder(store, sid):
    """A real hermes-agent 0.19.0 process holding a compression lock on ``sid``."""
    return hermes_background(store, f"""
holder = f"pid={{os.getpid()}}:tid={{threading.get_ident()}}:agent=1:nonce=prune"
assert db.try_acquire_compression_lock({sid!r}, holder, ttl_seconds=3600)
print("READY", flush=True)
time.sleep(600)
""")


def fresh_session(store, sid, source="batch", messages=2, end=True):
    """A session 0.19.0 writes now (messages, then ended): recent activity."""
    hermes(store, f"""
db.create_session({sid!r}, {source!r})
for i in range({messages}):
    db.append_message({sid!r}, 'user' if i % 2 == 0 else 'assistant', f'fresh message {{i}}')
if {end!r}:
    db.end_session({sid!r}, 'cli_close')
""")


def compacted_only(store, sid, source="cli"):
    """A chat whose every row 0.19.0's in-place compaction archived (``active = 0,
    compacted = 1``, message_count 0), then ended."""
    hermes(store, f"""
db.create_session({sid!r}, {source!r})
db.append_message({sid!r}, 'user', 'an old question about the compactor')
db.append_message({sid!r}, 'assistant', 'an old answer about the compactor')
assert db.archive_and_compact({sid!r}, []) == 0
db.end_session({sid!r}, 'cli_close')
""")


def empty_session(store, sid, source="cli"):
    """A session 0.19.0 created and ended without a message."""
    hermes(store, f"""
db.create_session({sid!r}, {source!r})
db.end_session({sid!r}, 'cli_close')
""")
