"""An auditor in real Chromium: sees the audit timeline and the health chart; no
action works for them, even when forced past the hidden buttons."""

import importlib
import sqlite3

import pytest
from django.apps import apps
from django.contrib.auth.models import Group, User

from tests.actions.conftest import age_store, heal
from tests.conftest import IDS

pytestmark = pytest.mark.e2e


@pytest.fixture
def auditor_page(hermes_home, page, live_server, settings, tmp_path):
    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir()
    importlib.import_module("sessions_app.migrations.0003_roles").create_roles(apps, None)
    for db in [hermes_home / "state.db", *hermes_home.glob("profiles/*/state.db")]:
        age_store(db, 40 * 86400)
    conn = sqlite3.connect(hermes_home / "state.db")
    conn.execute("PRAGMA foreign_keys=OFF")
    conn.execute("DELETE FROM sessions WHERE id = ?", (IDS["long"],))
    conn.commit()
    conn.close()
    heal("--all-profiles", "--json")
    heal("--all-profiles", "--apply", "--json")
    user = User.objects.create_user("carol", password="auditor password 1")
    user.groups.add(Group.objects.get(name="Auditor"))
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "carol")
    page.fill("#id_password", "auditor password 1")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")
    return page


def test_auditor_sees_timeline_and_chart_but_cannot_act(auditor_page, live_server, tmp_path):
    page = auditor_page
    page.click("text=Audit")
    rows = page.locator("table.audit tbody tr")
    assert rows.count() >= 1
    assert "recreate_session_row" in page.locator("table.audit").inner_text()
    page.screenshot(path=str(tmp_path / "audit.png"), full_page=True)

    page.goto(f"{live_server.url}/p/default/history/")
    assert page.locator("svg polyline").count() == 3
    page.screenshot(path=str(tmp_path / "history.png"), full_page=True)

    page.goto(f"{live_server.url}/p/default/health/")
    assert page.locator("text=Heal profile").count() == 0 and page.locator("text=Check now").count() == 0
    statuses = page.evaluate("""async () => {
        const token = document.cookie.split('; ').find(c => c.startsWith('csrftoken=')).split('=')[1];
        const post = (url) => fetch(url, {method: 'POST', headers: {'X-CSRFToken': token}}).then(r => r.status);
        return [await post('/checks/run/'), await post('/p/default/heal/')];
    }""")
    assert statuses == [403, 403]
    page.goto(f"{live_server.url}/p/default/s/{IDS['cli_main']}/")
    assert page.locator("article.msg").count() == 0
    assert page.locator("text=view transcripts").count() == 1
