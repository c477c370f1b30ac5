"""An admin in real Chromium repairs every finding of one kind in a profile: the
health page's *Repair all findings of this kind*, the confirmation listing each
plan, the background run, and the health page again without those findings. The
recount the duplicates made wrong waits for the hide, and is not needed after it."""

import sqlite3

import pytest

from tests.actions.conftest import age_store
from tests.conftest import IDS

pytestmark = pytest.mark.e2e


def duplicate_without_count(db, sid):
    conn = sqlite3.connect(db)
    content, ts = conn.execute("SELECT content, timestamp FROM messages WHERE session_id = ? AND role = 'user' "
                               "ORDER BY id LIMIT 1", (sid,)).fetchone()
    conn.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
                 (sid, content, ts))
    conn.commit()
    conn.close()


def test_repair_all_duplicates_of_a_profile(logged_in, live_server, hermes_home, settings, tmp_path):
    settings.HERMES_ADMIN_JOB_RUNNER = "thread"
    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir()
    db = hermes_home / "state.db"
    age_store(db, 40 * 86400)
    dupes = [IDS["long"], IDS["cli_main"]]
    for sid in dupes:
        duplicate_without_count(db, sid)

    page = logged_in
    page.goto(f"{live_server.url}/p/default/health/")
    page.click("button:has-text('Check now')")
    page.wait_for_selector(".run-state.run-done", timeout=30_000)
    page.goto(f"{live_server.url}/p/default/health/")
    group = page.locator("#check-duplicate_live_rows")
    assert "Message written twice" in group.locator("h2").inner_text()
    # The recount of each of these sessions offers the hide first.
    drift = page.locator("#check-counter_drift")
    for sid in dupes:
        assert "Preview first: Hide the duplicate messages" in drift.locator("tr", has_text=sid).inner_text()

    group.locator("a:has-text('Repair all findings of this kind')").click()
    page.wait_for_url("**/repair-all/duplicate_live_rows/")
    table = page.locator("#repair-all")
    assert table.locator(":scope > tbody > tr").count() == 2  # one per plan (each nests its change table)
    plan = table.locator(":scope > tbody > tr").first
    plan.locator("summary").click()  # its changes, as on the heal page
    assert plan.locator("table.changes tbody tr").count() >= 1
    assert all(sid in table.inner_text() for sid in dupes)
    page.screenshot(path=str(tmp_path / "repair-all.png"), full_page=True)
    page.click("button:has-text('Apply 2 repairs')")
    page.wait_for_url("**/runs/*/")
    page.wait_for_selector(".run-state.run-done", timeout=30_000)
    assert page.locator("table").first.inner_text().count("applied") >= 2

    page.goto(f"{live_server.url}/p/default/health/")
    assert page.locator("#check-duplicate_live_rows").count() == 0
    drift = page.locator("#check-counter_drift")
    for sid in dupes:  # hiding recounted them: no recount is left to offer
        assert drift.count() == 0 or drift.locator("tr", has_text=sid).count() == 0
    conn = sqlite3.connect(db)
    for sid in dupes:
        count, active = conn.execute("SELECT message_count, (SELECT COUNT(*) FROM messages WHERE session_id = s.id "
                                     "AND active = 1) FROM sessions s WHERE id = ?", (sid,)).fetchone()
        assert count == active
    conn.close()
