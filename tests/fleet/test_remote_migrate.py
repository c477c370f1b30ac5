"""Migration of a remote profile: planned on its host, a JSONL import applied as a run there."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import time
from urllib.parse import quote

import pytest

from sessions_app.models import AuditEvent
from tests.conftest import ids

from .test_remote import _redeliver_on, _run_of

pytestmark = pytest.mark.django_db(transaction=True)
KEY = "default on host-a"  # no other fleet test writes it
LONG = ids("default")["long"]
NEW = [{"role": "user", "content": "What did we say about the zebra?"},
       {"role": "assistant", "content": "That the zebra test is flaky."}]


def _messages(db):
    conn = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT role, content, tool_call_id, tool_calls FROM messages WHERE session_id = ? "
                            "ORDER BY id", (LONG,)).fetchall()
    finally:
        conn.close()


def test_remote_migration_imports_a_legacy_jsonl_on_the_host_once(hosts_up, admin):
    root = hosts_up["roots"]["host-a"]
    stored = _messages(root / "state.db")
    lines = [{"role": r, "content": c, "tool_call_id": t, "tool_calls": json.loads(k) if k else None}
             for r, c, t, k in stored]
    path = root / "sessions" / f"{LONG}.jsonl"  # a legacy transcript holding two messages the store lacks
    path.write_text("\n".join(json.dumps(m) for m in NEW + lines) + "\n")
    os.utime(path, (time.time() - 86_400, time.time() - 86_400))

    url = f"/fleet/p/{quote(KEY)}/migrate/"
    page = admin.get(url).content.decode()
    assert f"/fleet/p/{quote(KEY)}/s/{LONG}/" in page and "host-a" in page
    token = re.search(r'name="plans" value="([^"]+)"', page).group(1)
    misplaced = admin.post(f"/fleet/p/{quote('ops on host-a')}/migrate/", {"plans": token})
    assert misplaced.status_code == 400
    assert AuditEvent.objects.filter(action="migrate_apply", outcome="refused", profile="ops on host-a").exists()

    run = _run_of(admin.post(url, {"plans": token}))
    assert run.status == "done", run.error
    imports = [a for p in run.report["profiles"] for a in p["actions"] if a["action"] == "import_jsonl_transcript"]
    assert imports and imports[0]["status"] == "applied", run.report
    after = _messages(root / "state.db")
    # The transcript is imported; the rows it supersedes stay (never lose a message row).
    assert after[:len(stored)] == stored and {m["content"] for m in NEW} <= {r[1] for r in after[len(stored):]}
    # Redelivered after its write: the guard sees the session changed; nothing is imported twice.
    redone = _redeliver_on(run, "host-a")
    assert redone.status == "done"
    assert _messages(root / "state.db") == after
    assert AuditEvent.objects.filter(run=run, outcome="applied").count() == 1
