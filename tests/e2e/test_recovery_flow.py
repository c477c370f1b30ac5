"""An admin in real Chromium recovers a session deleted under a live agent: the Copies on
disk panel names the snapshot, Preview recovery shows the plan, Apply runs it, and the
session reads all its turns again (the store written by hermes-agent 0.19.0 itself)."""

import pytest

from tests.actions.conftest import DAY, age_store, store
from tests.checks.test_history_lost import SID, deleted_under_live_agent

pytestmark = pytest.mark.e2e


def test_preview_and_apply_a_recovery(logged_in, live_server, hermes_home, settings, tmp_path):
    settings.HERMES_ADMIN_JOB_RUNNER = "thread"
    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir()
    s = store(hermes_home, "default")
    deleted_under_live_agent(s, snapshot=True)
    age_store(s.path, 2 * DAY)

    page = logged_in
    page.goto(f"{live_server.url}/p/default/s/{SID}/")
    page.wait_for_selector("#copies table.copies")  # the panel swaps in through htmx (the placeholder has the id too)
    panel = page.locator("#copies").inner_text()
    assert f"session_{SID}.json" in panel and "can be recovered" in panel
    page.click("#preview-recovery")
    assert "Recover 6 message(s)" in page.content()
    page.click("button:has-text('Apply')")
    page.wait_for_url("**/runs/*/")
    page.wait_for_selector(".run-state.run-done", timeout=30_000)
    assert "applied" in page.locator("table").first.inner_text()
    page.screenshot(path=str(tmp_path / "recovered.png"), full_page=True)
    page.goto(f"{live_server.url}/p/default/s/{SID}/")
    text = page.locator("main").inner_text()
    for n in (1, 2, 3, 4):
        assert f"Question {n}: what is {n} times {n}?" in text and f"Answer {n}: {n * n}." in text
