"""An admin in real Chromium: a damaged store's finding, repair preview, apply, the run
page updating itself (htmx polling) to the result with its backup path."""


import pytest

from tests.conftest import IDS

pytestmark = pytest.mark.e2e


def test_preview_apply_and_watch_the_run(logged_in, live_server, orphaned_long, settings, tmp_path):
    settings.HERMES_ADMIN_JOB_RUNNER = "thread"
    page = logged_in
    page.goto(f"{live_server.url}/p/default/s/{IDS['long']}/")
    assert page.locator("#findings").inner_text().count("orphan_messages") == 1
    page.click("text=Preview: Recreate the missing session row")
    assert "Add" in page.locator("table.plan").inner_text()
    page.click("button:has-text('Apply')")
    page.wait_for_url("**/runs/*/")
    # The status fragment polls every 2 s and stops once the run is done.
    page.wait_for_selector(".run-state.run-done", timeout=30_000)
    assert page.locator("code.backup-path").count() == 1
    assert "applied" in page.locator("table").first.inner_text()
    page.screenshot(path=str(tmp_path / "run.png"), full_page=True)
    page.goto(f"{live_server.url}/p/default/s/{IDS['long']}/")
    assert page.locator("#findings").count() == 0 or "orphan_messages" not in page.locator("#findings").inner_text()
    assert "Source" in page.locator(".meta").inner_text() and "unknown" in page.locator(".meta").inner_text()
