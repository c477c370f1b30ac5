"""Browser tests drive Debian's Chromium through Playwright (`executable_path`; Playwright's own browser download is never used)."""

import os
import shutil
import sqlite3

import pytest

from tests.actions.conftest import age_store
from tests.conftest import IDS

# Playwright's sync API runs an event loop; Django refuses ORM calls from a thread
# with a running loop unless told otherwise (microsoft/playwright-pytest#29).
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


def chromium_path() -> str:
    for candidate in (os.environ.get("HERMES_ADMIN_CHROMIUM"), "/usr/lib/chromium/chromium",
                      shutil.which("chromium")):
        if candidate and os.path.exists(candidate):
            return candidate
    pytest.fail("Chromium not found: install Debian's chromium (scripts/test.sh does it)")


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    return {
        **browser_type_launch_args,
        "executable_path": chromium_path(),
        "args": ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync"],
    }


@pytest.fixture
def admin_page(page, live_server, django_user_model):
    """A page logged in as an admin against the live server, whatever roots the test
    browses (it sets them itself)."""
    django_user_model.objects.create_superuser("alice", "", "correct horse battery")
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "correct horse battery")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")
    return page


@pytest.fixture
def logged_in(hermes_home, admin_page):
    """:func:`admin_page` browsing the private copy of the fixture home."""
    return admin_page


@pytest.fixture
def orphaned_long(hermes_home, settings, tmp_path):
    """The default store 40 days quiet with the ``long`` session's row deleted under
    its messages (an ``orphan_messages`` finding to preview and repair), and a private
    data folder for the repair's backup. Returns that session's id."""
    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir()
    age_store(hermes_home / "state.db", 40 * 86400)
    conn = sqlite3.connect(hermes_home / "state.db")
    conn.execute("PRAGMA foreign_keys=OFF")
    conn.execute("DELETE FROM sessions WHERE id = ?", (IDS["long"],))
    conn.commit()
    conn.close()
    return IDS["long"]
