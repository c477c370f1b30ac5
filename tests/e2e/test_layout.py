"""Every page fits a phone: at 390 px no page scrolls sideways (wide tables scroll in
their own box or stack their cells), and at 1400 px no badge breaks over two lines
(issue 15). The pages are those of the demo home after a check run, so they hold
findings, long paths and every kind of badge.

Screenshots of each page at both widths go to ``$HERMES_ADMIN_SCREENSHOTS`` when set
(a person looks at them), else to the test's own temporary folder."""

import os
import re
import shutil
from pathlib import Path

import pytest

from tests.actions.conftest import heal

pytestmark = pytest.mark.e2e

NARROW, WIDE = 390, 1400
# Elements drawn as one pill or tag: a line break inside one reads as two badges.
BADGES = ".sev, .status, .badge, .live, .edge, .run-state, .verdict strong"
MEASURE = """(selector) => {
    const broken = [...document.querySelectorAll(selector)].filter(
        e => e.offsetParent !== null && e.getClientRects().length > 1).map(e => e.outerHTML.slice(0, 120));
    const wide = [...document.querySelectorAll("body *")].filter(e => e.getBoundingClientRect().right > window.innerWidth + 1
        && !e.closest(".table-scroll, table.grid")).slice(0, 4).map(e => e.outerHTML.slice(0, 100));
    return {width: document.documentElement.scrollWidth, viewport: window.innerWidth, broken, wide};
}"""


@pytest.fixture
def demo_checked(demo_home, use_roots, tmp_path, settings):
    """A private copy of the demo home, checked once (findings, a run to open)."""
    home = shutil.copytree(demo_home, tmp_path / "demo-home")
    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir()
    use_roots(home)
    heal("--all-profiles", "--json")
    return home


def shots() -> Path:
    folder = os.environ.get("HERMES_ADMIN_SCREENSHOTS")
    return Path(folder) if folder else None


def href(page, selector: str) -> str:
    return page.locator(selector).first.get_attribute("href")


def page_urls(page, base: str) -> dict[str, str]:
    """Name -> path of every page family, found by following the dashboard's own links.
    One session is deleted on the way (through its confirmation page), so the trash,
    its entry and an audit event have something to show."""
    page.goto(f"{base}/sessions/?profile=default&order=messages")
    session = href(page, "table.sessions tbody a[href^='/p/default/s/']")
    # A session whose copies on disk hold messages the store lacks: its page shows the
    # *Copies on disk* table (loaded by htmx after the page).
    page.goto(f"{base}/sessions/?profile=default&check=history_lost")
    with_copies = href(page, "table.sessions tbody a[href^='/p/default/s/']")
    page.goto(f"{base}/sessions/?profile=research&state=ended&order=started&dir=asc")
    doomed = href(page, "table.sessions tbody a[href^='/p/research/s/']")
    page.goto(f"{base}{doomed}delete/")
    page.click("form.delete-form button[type=submit]")
    page.wait_for_url("**/trash/*/")
    trash_entry = page.url.removeprefix(base)
    page.goto(f"{base}/runs/")
    run = page.locator("a[href^='/runs/']").filter(has_text=re.compile(r"\d")).first.get_attribute("href")
    page.goto(f"{base}/audit/")
    event = href(page, "table.audit a[href^='/audit/']")
    page.goto(f"{base}/p/default/health/")
    repair = href(page, "a[href*='/repair/']")
    page.goto(f"{base}/p/legacy/migrate/")
    jsonl = href(page, "a[href$='/jsonl/']")
    return {
        "overview": "/",
        "sessions": "/sessions/",
        "session": session,
        "session-with-copies": with_copies,
        "profile": "/p/default/",
        "health": "/p/default/health/",
        "history": "/p/default/history/",
        "repair": repair,
        "runs": "/runs/",
        "run": run,
        "audit": "/audit/",
        "audit-event": event,
        "delete-confirm": f"{session}delete/",
        "trash": "/trash/",
        "trash-entry": trash_entry,
        "copies": f"{session}copies/",
        "search": "/p/default/search/?q=the",
        "search-everywhere": "/search/?q=the",
        "usage": "/usage/",
        "prune": "/prune/",
        "migration": "/p/legacy/migrate/",
        "jsonl": jsonl,
    }


def check(page, name: str, folder: Path | None, problems: list) -> None:
    # Folded parts (findings of a run, all columns of a session) are measured open.
    page.evaluate("document.querySelectorAll('details').forEach(d => { d.open = true; })")
    for width in (NARROW, WIDE):
        page.set_viewport_size({"width": width, "height": 900})
        page.wait_for_timeout(50)  # layout after the resize
        found = page.evaluate(MEASURE, BADGES)
        if folder:
            page.screenshot(path=str(folder / f"{name}-{width}.png"))  # the first screen
            page.screenshot(path=str(folder / f"{name}-{width}-full.png"), full_page=True)
        if width == NARROW and found["width"] > NARROW:
            problems.append(f"{name}: {found['width']} px wide at {NARROW} px: {found['wide']}")
        if width == WIDE and found["broken"]:
            problems.append(f"{name}: badges over two lines at {WIDE} px: {found['broken'][:3]}")


def test_every_page_fits_390_px_and_no_badge_breaks_at_1400(demo_checked, admin_page, live_server, browser,
                                                              tmp_path):
    folder = shots() or tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []

    login = browser.new_page()  # a context of its own: not logged in
    login.goto(f"{live_server.url}/login/")
    check(login, "login", folder, problems)
    login.close()

    page = admin_page
    for name, path in page_urls(page, live_server.url).items():
        page.set_viewport_size({"width": WIDE, "height": 900})
        response = page.goto(f"{live_server.url}{path}")
        assert response.status < 500, (name, path, response.status)
        if name == "session-with-copies":  # measured once the htmx panel is in
            page.wait_for_selector("#copies table.copies")
        check(page, name, folder, problems)
    assert not problems, "\n".join(problems)


LABELS = """() => [...document.querySelectorAll("table.run-actions > tbody > tr")].map(row => ({
    own: [...row.children].map(td => td.getAttribute("data-label")),
    nested: [...row.querySelectorAll("table.changes > tbody > tr:first-child > td")].map(td => td.getAttribute("data-label")),
}))"""


def test_a_runs_nested_changes_read_under_their_own_labels_at_390_px(demo_home, use_roots, tmp_path, settings,
                                                                      admin_page, live_server):
    """A heal run's changes table sits in a cell of the run's actions table: on a phone its
    cells read Change / Row / Field / Before / After, not the actions table's labels."""
    home = shutil.copytree(demo_home, tmp_path / "demo-home")
    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir()
    use_roots(home)
    heal("--profile", "default", "--apply", "--json")
    page = admin_page
    page.set_viewport_size({"width": NARROW, "height": 900})
    page.goto(f"{live_server.url}/runs/")
    page.goto(live_server.url + page.locator("a[href^='/runs/']").filter(has_text=re.compile(r"\d")).first
              .get_attribute("href"))
    rows = [r for r in page.evaluate(LABELS) if r["nested"]]
    assert rows, "the heal run lists a change table"
    for row in rows:
        assert row["own"][1:] == ["Session", "Outcome", "Reason", "Changes"]
        assert row["nested"] == ["Change", "Row", "Field", "Before", "After"]
    cell = page.locator("table.run-actions table.changes > tbody > tr > td").first
    assert cell.evaluate("td => getComputedStyle(td, '::before').content") == '"Change"'


STACKED = """(selector) => [...document.querySelectorAll(selector)].map(td => ({
    display: getComputedStyle(td).display, label: td.getAttribute("data-label"),
    inside: td.getBoundingClientRect().right <= window.innerWidth + 1}))"""


def test_repair_plans_read_as_one_block_per_row_at_390_px(demo_checked, admin_page, live_server):
    """The repair-all plan and a repair preview's changes stack their cells on a phone,
    each under its column's label, instead of a table cut at the screen's edge."""
    page = admin_page
    page.set_viewport_size({"width": NARROW, "height": 900})
    page.goto(f"{live_server.url}/p/ops/health/")
    page.goto(live_server.url + href(page, "a[href*='/repair-all/']"))
    page.evaluate("document.querySelectorAll('details').forEach(d => { d.open = true; })")
    plan = page.evaluate(STACKED, "#repair-all > tbody > tr > td")
    changes = page.evaluate(STACKED, "#repair-all table.changes > tbody > tr > td")
    page.goto(f"{live_server.url}/p/default/health/")
    page.goto(live_server.url + href(page, "a[href*='/repair/']"))
    preview = page.evaluate(STACKED, "table.changes > tbody > tr > td")
    for name, cells in (("plan", plan), ("its changes", changes), ("a preview's changes", preview)):
        assert cells, f"no {name} on the page"
        assert {c["display"] for c in cells} == {"block"}, name
        assert all(c["label"] for c in cells) and all(c["inside"] for c in cells), (name, cells[:3])
