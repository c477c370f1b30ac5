"""An admin in real Chromium deletes a session (evidence, confirmation, trash), restores
it, and is refused for a session a live agent holds, even after confirming."""

import pytest

from sessions_app.stores import registry
from tests.actions.delete_helpers import rows, stop
from tests.checks.helpers import hermes_background
from tests.conftest import IDS

pytestmark = pytest.mark.e2e


@pytest.fixture
def data_dir(settings, tmp_path):
    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir()
    return settings.DATA_DIR


def lock(store, sid):
    """A real hermes-agent 0.19.0 process holding a compression lock on ``sid``."""
    return hermes_background(store, f"""
holder = f"pid={{os.getpid()}}:tid={{threading.get_ident()}}:agent=1:nonce=e2e"
assert db.try_acquire_compression_lock({sid!r}, holder, ttl_seconds=3600)
print("READY", flush=True)
time.sleep(600)
""")


def test_delete_restore_and_refusals(logged_in, live_server, hermes_home, data_dir, tmp_path):
    page = logged_in
    s = registry.get("default")
    sid = IDS["long"]

    page.goto(f"{live_server.url}/p/default/s/{sid}/")
    assert "not live" in page.locator("#liveness .verdict").inner_text()
    page.click("text=Delete…")
    page.wait_for_url(f"**/p/default/s/{sid}/delete/")
    assert page.locator("table.targets tbody tr").count() == 1
    page.screenshot(path=str(tmp_path / "confirm.png"), full_page=True)
    page.click("form.delete-form button[type=submit]")
    page.wait_for_url("**/trash/*/")
    assert "Deleted" in page.locator(".flash").inner_text()
    page.screenshot(path=str(tmp_path / "trash-entry.png"), full_page=True)
    assert rows(s, "SELECT COUNT(*) FROM sessions WHERE id = ?", (sid,)) == [(0,)]
    page.click("button:has-text(\"Restore\")")
    page.wait_for_url(f"**/p/default/s/{sid}/")
    assert page.locator(".flash").inner_text().startswith("Restored from the trash")
    assert page.locator("article.msg").count() > 0

    # A live agent: the confirmation shows the evidence and offers no delete button.
    held = IDS["hostile"]
    proc = lock(s, held)
    try:
        page.goto(f"{live_server.url}/p/default/s/{held}/")
        assert "live" in page.locator("#liveness .verdict").inner_text()
        assert "compression lock" in page.locator("#liveness").inner_text()
        page.screenshot(path=str(tmp_path / "session-live.png"))
        # No Delete button where deletion is refused: the reason instead.
        assert page.locator("#liveness >> text=Delete…").count() == 0
        assert "an agent holds this session" in page.locator("#delete-refused").inner_text()
        page.goto(f"{live_server.url}/p/default/s/{held}/delete/")  # the address typed anyway
        assert "Deletion is refused" in page.content()
        assert page.locator("form.delete-form").count() == 0
    finally:
        stop(proc)

    # Confirmed while idle, then an agent takes the session before the click: refused.
    target = IDS["cron"]
    page.goto(f"{live_server.url}/p/default/s/{target}/delete/")
    proc = lock(s, target)
    try:
        page.click("form.delete-form button[type=submit]")
        page.wait_for_selector("#refusal")
        assert "live" in page.locator("#refusal").inner_text()
        assert "compression lock" in page.locator("#liveness").inner_text()
        page.screenshot(path=str(tmp_path / "refused.png"), full_page=True)
    finally:
        stop(proc)
    assert rows(s, "SELECT COUNT(*) FROM sessions WHERE id = ?", (target,)) == [(1,)]
