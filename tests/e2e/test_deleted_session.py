"""In real Chromium: a session deleted in a bulk deletion is a real page at its old
address (HTTP 404), saying when and by whom, with its trash entry one click away; the
run page and the audit trail use the same words for what happened."""

import re

import pytest

from sessions_app.stores import registry
from tests.actions.delete_helpers import rows
from tests.conftest import IDS

pytestmark = pytest.mark.e2e


@pytest.fixture
def data_dir(settings, tmp_path):
    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir()
    settings.HERMES_ADMIN_JOB_RUNNER = "thread"
    return settings.DATA_DIR


def test_a_deleted_session_page_links_its_trash_entry(logged_in, live_server, hermes_home, data_dir, tmp_path):
    page = logged_in
    sid = IDS["hostile"]
    page.goto(f"{live_server.url}/sessions/?profile=default")
    page.check(f'input[name="s"][value="default {sid}"]')
    page.click("text=Delete selected")
    page.wait_for_url("**/sessions/delete/")
    assert page.locator("form button.danger").inner_text().startswith("Delete 1 session")
    page.click("form button.danger")
    page.wait_for_url(re.compile(r".*/runs/\d+/$"))
    page.wait_for_selector("p.run-result", timeout=60_000)
    assert page.locator("h1").inner_text().startswith("Bulk deletion run #")
    assert page.locator("p.run-result").inner_text() == "Result: 1 session: 1 applied."
    assert "No findings" not in page.content()
    assert rows(registry.get("default"), "SELECT COUNT(*) FROM sessions WHERE id = ?", (sid,)) == [(0,)]

    # The run page's session link leads to the deleted session's own page.
    with page.expect_response(lambda r: r.url.endswith(f"/p/default/s/{sid}/")) as answer:
        page.click(f'table.run-actions a[href$="/p/default/s/{sid}/"]')
    assert answer.value.status == 404
    box = page.locator("#deleted-session")
    assert box.get_attribute("data-how") == "deleted"
    said = box.inner_text()
    assert re.search(r"It was deleted on \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(.*\) by alice", said), said
    assert "trash entry" in said
    page.screenshot(path=str(tmp_path / "deleted-session.png"), full_page=True)
    page.set_viewport_size({"width": 390, "height": 800})  # a phone: nothing wider than the screen
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.screenshot(path=str(tmp_path / "deleted-session-390.png"), full_page=True)
    page.set_viewport_size({"width": 1400, "height": 900})
    assert page.locator("table.grid tbody tr td strong").first.inner_text() == "applied"  # its audit event
    page.click("#deleted-session a.trash-link")
    page.wait_for_url("**/trash/*/")
    assert sid in page.locator("h1").inner_text()
    assert page.locator("button:has-text(\"Restore\")").count() == 1
