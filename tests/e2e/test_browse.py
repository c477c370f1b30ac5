"""An admin in real Chromium logs in, filters the sessions list and opens a transcript."""

import pytest

from tests.conftest import IDS, ids

pytestmark = pytest.mark.e2e


def test_login_filter_and_open_a_transcript(logged_in, live_server, hermes_home, tmp_path):
    page = logged_in
    assert page.locator("#profiles tbody tr").count() == 6
    page.screenshot(path=str(tmp_path / "overview.png"), full_page=True)

    page.click("text=Sessions")
    page.select_option("select[name=profile]", "ops")
    # The filter form swaps the table through htmx and pushes the URL.
    page.wait_for_url("**profile=ops**")
    rows = page.locator("table.sessions tbody tr")
    assert rows.count() == 15
    assert all(href.startswith("/p/ops/") for href in
               page.locator("table.sessions tbody a").evaluate_all("els => els.map(e => e.getAttribute('href'))"))

    page.fill("input[name=q]", "flaky")
    page.press("input[name=q]", "Enter")
    page.wait_for_url("**q=flaky**")
    assert page.locator("table.sessions tbody tr").count() == 1
    page.click("text=Fix the flaky build")
    page.wait_for_url(f"**/p/ops/s/{ids('ops')['cli_main']}/")
    assert page.locator("article.msg").count() == 4  # the tool result sits inside its call
    assert page.locator(".tool-call .tool-name").inner_text().endswith("terminal")
    page.screenshot(path=str(tmp_path / "session.png"), full_page=True)


def test_hostile_content_does_not_run_in_the_browser(logged_in, live_server, hermes_home):
    page = logged_in
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(f"{live_server.url}/p/default/s/{IDS['hostile']}/")
    page.click("text=Arguments")
    page.wait_for_timeout(300)
    assert dialogs == []
    assert "<script>alert(1)</script>" in page.locator("article.msg").first.inner_text()


def test_copies_panel_loads_and_hostile_copy_content_stays_inert(logged_in, live_server, hermes_home, settings, tmp_path):
    """The session page swaps its *Copies on disk* panel in through htmx; a snapshot
    holding a script shows it as text."""
    import json

    sid = IDS["cli_main"]
    folder = hermes_home / "sessions"
    folder.mkdir(exist_ok=True)
    (folder / f"session_{sid}.json").write_text(json.dumps({"session_id": sid, "messages": [
        {"role": "user", "content": "<script>alert('copy')</script>"}]}))
    page = logged_in
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(f"{live_server.url}/p/default/s/{sid}/")
    page.wait_for_selector("#copies table.copies")
    assert f"session_{sid}.json" in page.locator("#copies").inner_text()
    page.click("#copies summary")
    page.wait_for_timeout(300)
    assert dialogs == []
    assert "differs from the store" in page.locator("#copies").inner_text()
    assert "<script>alert('copy')</script>" in page.locator("#copies pre.preview").inner_text()
