"""An admin in real Chromium prunes a profile (criteria, preview, confirmation, the
job, the trash), sees what Hermes' own auto-prune will delete and pins it from
there, and changes a session's flags and title on its page."""

import pytest

from sessions_app.stores import registry
from tests.actions.conftest import age_store
from tests.actions.delete_helpers import rows
from tests.conftest import ids

pytestmark = pytest.mark.e2e
DAY = 86_400


@pytest.fixture
def aged(hermes_home, settings, tmp_path):
    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir()
    settings.HERMES_ADMIN_JOB_RUNNER = "thread"
    for db in [hermes_home / "state.db", *hermes_home.glob("profiles/*/state.db")]:
        age_store(db, 40 * DAY)
    return hermes_home


def test_prune_page_preview_confirm_and_trash(logged_in, live_server, aged, tmp_path):
    page = logged_in
    d = ids("default")
    page.goto(f"{live_server.url}/p/default/")
    page.click("p.actions >> text=Prune")
    page.wait_for_url("**/p/default/prune/")
    page.fill("#id_older_than", "30")
    page.click("text=Show what would go")
    page.wait_for_selector("#prune-preview")
    roots = page.locator("#prune-preview table.prune-units tbody tr").evaluate_all(
        "rows => rows.map(r => r.dataset.root)")
    assert d["long"] in roots and d["compress_root"] not in roots
    assert "a compression lineage goes only as a whole" in page.locator(".prune-spared").inner_text()
    page.screenshot(path=str(tmp_path / "prune-preview.png"), full_page=True)
    page.click("form.prune-confirm button[type=submit]")
    page.wait_for_url("**/runs/*/")
    page.wait_for_selector(".run-state.run-done", timeout=60_000)
    assert "Prune run" in page.locator("h1").inner_text()
    assert page.locator("table.prune-units tr.outcome-applied").count() == len(roots)
    page.screenshot(path=str(tmp_path / "prune-run.png"), full_page=True)
    s = registry.get("default")
    assert rows(s, "SELECT COUNT(*) FROM sessions WHERE id = ?", (d["long"],)) == [(0,)]
    page.locator("table.prune-units a", has_text="trash entry").first.click()
    page.wait_for_url("**/trash/*/")
    page.click("button:has-text(\"Restore\")")
    page.wait_for_url("**/p/default/s/**")
    assert page.locator(".flash").inner_text().startswith("Restored from the trash")


def test_hermes_auto_prune_preview_and_pin_from_it(logged_in, live_server, aged, tmp_path):
    page = logged_in
    e = ids("edge")
    edge = registry.get("edge")
    (edge.profile.home / "config.yaml").write_text("sessions:\n  retention_days: 30\n")  # on by default (newest)
    page.goto(f"{live_server.url}/p/edge/prune/")
    box = page.locator('.autoprune[data-profile="edge"]')
    assert "will be deleted by Hermes at its next start" in box.inner_text()
    row = box.locator(f'tr[data-session="{e["long"]}"]')
    row.locator("button:has-text(\"Pin\")").click()
    page.wait_for_url("**/p/edge/prune/")
    assert "pin" in page.locator(".flash").inner_text()
    assert page.locator(f'.autoprune tr[data-session="{e["long"]}"]').count() == 0
    page.screenshot(path=str(tmp_path / "autoprune.png"), full_page=True)
    assert rows(edge, "SELECT pinned FROM sessions WHERE id = ?", (e["long"],)) == [(1,)]


def test_flags_and_rename_on_the_session_page(logged_in, live_server, aged, tmp_path):
    page = logged_in
    e = ids("edge")
    page.goto(f"{live_server.url}/p/edge/s/{e['compress_tip']}/")
    flags = page.locator("#flags")
    assert "3 segments" in flags.inner_text()
    flags.locator("button:has-text(\"Archive\")").click()
    page.wait_for_url(f"**/p/edge/s/{e['compress_tip']}/")
    assert "archive: 3 session(s)" in page.locator(".flash").inner_text()
    assert "yes" in page.locator("#flags .flag-archived").inner_text()
    page.fill("#flags input[name=title]", "Fix the flaky build")  # taken by another session
    page.click("#flags button:has-text(\"Rename\")")
    assert "already used by session" in page.locator(".flash").inner_text()
    page.fill("#flags input[name=title]", "Parser refactor, done")
    page.click("#flags button:has-text(\"Rename\")")
    assert "renamed to" in page.locator(".flash").inner_text()
    assert page.locator("h1").inner_text() == "Parser refactor, done"
    page.screenshot(path=str(tmp_path / "flags.png"), full_page=True)
    page.goto(f"{live_server.url}/sessions/?profile=edge&archived=yes")
    assert page.locator("table.sessions tbody tr").count() == 3
