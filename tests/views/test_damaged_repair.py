"""A repair applied from an older preview to a store a later pass found damaged is
refused by the guarded write (its hazard check) and audited, nothing written. The
repair's own re-check reads one check's rows only, so it alone would not stop it."""

import os
import re
import sqlite3

import pytest

from sessions_app.checks.registry import BY_CODE as CHECKS
from sessions_app.models import AuditEvent
from sessions_app.stores import registry
from tests.actions.conftest import run_command
from tests.checks.helpers import damage
from tests.conftest import IDS

from .test_health_pages import home, text, wait_for  # noqa: F401  (the fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def garble_index(db, index: str) -> None:
    """One b-tree page of ``index`` turned to garbage, as a failing disk leaves it;
    patched after every connection closed and the WAL checkpointed (test setup only)."""
    conn = sqlite3.connect(db)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (index,)).fetchone()[0]
    finally:
        conn.close()
    with open(db, "r+b") as handle:
        handle.seek((root - 1) * page_size)
        handle.write(bytes((i * 37 + 11) % 256 for i in range(page_size)))


def test_a_repair_previewed_before_the_damage_is_refused(admin_client, home):
    s = registry.get("default")
    with damage(s) as db:  # an orphan to repair: the session row gone, its messages kept
        db.execute("DELETE FROM sessions WHERE id = ?", (IDS["long"],))
    preview = text(admin_client.get(f"/p/default/s/{IDS['long']}/repair/?check=orphan_messages"))
    token = re.search(r'name="plan" value="([^"]+)"', preview).group(1)
    garble_index(s.path, "idx_async_delegations_delivery")
    code, report = run_command("heal_sessions", "--profile", "default", "--json")  # the pass that finds it
    assert code == 2 and report["profiles"][0]["status"] == "corrupt"
    before = os.stat(s.path)
    response = admin_client.post(f"/p/default/s/{IDS['long']}/repair/apply/", {"plan": token, "check": "orphan_messages"})
    run = wait_for(int(re.search(r"/runs/(\d+)/", response["Location"]).group(1)))
    assert run.status == "done", run.error
    [event] = AuditEvent.objects.filter(run=run)
    assert event.outcome == "refused" and "this store is damaged" in event.reason, event.reason
    assert CHECKS["store_corrupt"].next_step in event.reason and event.rows_changed == 0
    after = os.stat(s.path)
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    with s.read() as conn:
        assert conn.execute("SELECT COUNT(*) FROM sessions WHERE id = ?", (IDS["long"],)).fetchone() == (0,)
