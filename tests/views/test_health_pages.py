"""Health in the browser: overview counts, list badges and filter, findings in place,
repair preview -> apply (background job) -> result, heal profile with progress."""

import re
import time

import pytest
from django.core import signing

from sessions_app.models import AuditEvent, HealRun
from tests.actions.conftest import age_store
from tests.checks.helpers import damage
from tests.conftest import IDS, ids
from sessions_app.stores import registry
from tests.views.markup import without_bidi_markup

pytestmark = pytest.mark.django_db(transaction=True)
DAY = 86_400


@pytest.fixture
def home(hermes_home, settings, tmp_path):
    settings.HERMES_ADMIN_JOB_RUNNER = "thread"
    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir()
    for db in [hermes_home / "state.db", *hermes_home.glob("profiles/*/state.db")]:
        age_store(db, 40 * DAY)
    return hermes_home


def wait_for(run_id, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        run = HealRun.objects.get(pk=run_id)
        if run.status in ("done", "failed"):
            return run
        time.sleep(0.1)
    raise AssertionError("run did not finish")


def text(response):
    return without_bidi_markup(response.content.decode())


def test_findings_are_marked_in_place_on_the_session_page(admin_client, home):
    s = registry.get("default")
    with damage(s) as db:
        db.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', 'still there?', ?)",
                   (IDS["long"], time.time() - 40 * DAY))
    html = text(admin_client.get(f"/p/default/s/{IDS['long']}/?before=-1"))
    assert 'id="findings"' in html and "unanswered_turn" in html
    assert 'class="missing-reply"' in html


def test_repair_preview_apply_and_result(admin_client, home):
    s = registry.get("default")
    with damage(s) as db:
        db.execute("DELETE FROM sessions WHERE id = ?", (IDS["long"],))
    page = text(admin_client.get(f"/p/default/s/{IDS['long']}/"))
    assert "orphan_messages" in page and "Preview: Recreate the missing session row" in page
    # Every row is an orphan: said once in the findings box, not under each message.
    box = page[page.index('id="findings"'):page.index("</section>", page.index('id="findings"'))]
    assert "<code>orphan_messages</code>" in box and 'data-check="orphan_messages"' not in page
    preview = text(admin_client.get(f"/p/default/s/{IDS['long']}/repair/?check=orphan_messages"))
    assert "recreate_session_row" in preview and ">Add<" in preview
    token = re.search(r'name="plan" value="([^"]+)"', preview).group(1)
    response = admin_client.post(f"/p/default/s/{IDS['long']}/repair/apply/", {"plan": token, "check": "orphan_messages"})
    assert response.status_code == 302
    run_id = int(re.search(r"/runs/(\d+)/", response["Location"]).group(1))
    run = wait_for(run_id)
    assert run.status == "done", run.error
    result = text(admin_client.get(f"/runs/{run_id}/"))
    assert "applied" in result and "backup-path" in result
    event = AuditEvent.objects.get(run=run)
    assert event.outcome == "applied" and event.actor.username == "admin" and event.request_address == "127.0.0.1"
    with s.read() as conn:
        assert conn.execute("SELECT source FROM sessions WHERE id = ?", (IDS["long"],)).fetchone() == ("unknown",)


def test_a_tampered_plan_is_refused(admin_client, home):
    forged = signing.dumps({"profile": "default", "session_id": IDS["long"]}, salt="wrong")
    response = admin_client.post(f"/p/default/s/{IDS['long']}/repair/apply/", {"plan": forged})
    assert response.status_code == 400
    assert not HealRun.objects.exists()
    event = AuditEvent.objects.get(action="repair_apply")  # audited, as a forged delete token is
    assert event.outcome == "refused" and event.actor.username == "admin" and "forged" in event.reason


def test_heal_profile_runs_in_the_background_and_the_page_polls(admin_client, home):
    sids = ids("edge")
    s = registry.get("edge")
    with damage(s) as db:
        db.execute("UPDATE sessions SET message_count = 42 WHERE id = ?", (sids["cli_main"],))
    response = admin_client.post("/p/edge/heal/")
    run_id = int(re.search(r"/runs/(\d+)/", response["Location"]).group(1))
    polling = text(admin_client.get(f"/runs/{run_id}/", HTTP_HX_REQUEST="true"))
    assert polling.lstrip().startswith('<div id="run-status"')
    run = wait_for(run_id)
    assert run.status == "done" and run.report["summary"]["applied"] >= 1
    final = text(admin_client.get(f"/runs/{run_id}/", HTTP_HX_REQUEST="true"))
    assert "hx-trigger" not in final  # finished: the fragment stops polling
    with s.read() as conn:
        assert conn.execute("SELECT message_count FROM sessions WHERE id = ?", (sids["cli_main"],)).fetchone() == (5,)


def test_overview_counts_list_badges_and_health_filter_after_a_check(admin_client, home):
    sids = ids("ops")
    s = registry.get("ops")
    with damage(s) as db:
        db.execute("UPDATE sessions SET message_count = 42 WHERE id = ?", (sids["cli_main"],))
    response = admin_client.post("/checks/run/", {"profile": "ops"})
    run = wait_for(int(re.search(r"/runs/(\d+)/", response["Location"]).group(1)))
    assert run.status == "done"
    overview = text(admin_client.get("/"))
    row = re.search(r'<tr data-profile="ops">(.*?)</tr>', overview, re.S).group(1)
    assert "warning" in row and "checked" in row
    listing = text(admin_client.get("/sessions/?check=counter_drift"))
    assert set(re.findall(r'href="/p/([^/]+)/s/([^/]+)/"', listing)) == {("ops", sids["cli_main"]), ("ops", sids["undo"])}
    health = text(admin_client.get("/p/ops/health/"))
    assert "counter_drift" in health and "Preview: Recount the session</a> <code class=\"small\">recount_session</code>" in health
