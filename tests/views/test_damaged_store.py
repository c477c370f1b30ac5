"""A store known damaged (the demo home's ``laptop``: a page of its messages index is
garbage) offers no write: its session pages offer no rename or flag, its health page
no heal or migration, and every page gives the same salvage advice (that of the
``store_corrupt`` check). Its 503 page does not log an ERROR per view (ground rule 9)."""

import json
import logging

import pytest
from django.contrib.auth.models import User

from sessions_app.checks.registry import BY_CODE as CHECKS
from sessions_app.context_processors import DEMO_MARKER
from sessions_app.models import AuditEvent
from tests.actions.conftest import heal
from tests.conftest import copy_home_of

pytestmark = pytest.mark.django_db

ADVICE = CHECKS["store_corrupt"].next_step


@pytest.fixture
def laptop(demo_home, use_roots, tmp_path, settings, client):
    """A private copy of the demo home, checked once; an admin logged in. Returns the
    ``laptop`` profile's session ids by kind."""
    home = copy_home_of(demo_home, tmp_path / "demo-home")
    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir()
    use_roots(home)
    heal("--all-profiles", "--json")
    client.force_login(User.objects.create_superuser("root", password="x"))
    return json.loads((home / DEMO_MARKER).read_text())["profiles"]["laptop"]["session_ids"]


def text(response) -> str:
    return response.content.decode().replace("&#x27;", "'").replace("&lt;", "<").replace("&gt;", ">")


def test_session_pages_of_a_damaged_store_offer_no_rename_or_flag(client, laptop):
    for sid in (laptop["cli_main"], laptop["slack_ended"]):
        page = client.get(f"/p/laptop/s/{sid}/")
        assert page.status_code == 200
        body = text(page)
        assert 'class="rename-form"' not in body and 'class="inline flag-form"' not in body
        assert f"/p/laptop/s/{sid}/rename/" not in body
        assert 'id="no-writes"' in body and "this store is damaged" in body and ADVICE in body


def test_health_page_of_a_damaged_store_offers_no_heal_or_migration(client, laptop):
    body = text(client.get("/p/laptop/health/"))
    assert "Heal profile…" not in body and "Migration…" not in body
    assert "/p/laptop/heal/" not in body and "/p/laptop/migrate/" not in body
    assert 'id="no-writes"' in body and ADVICE in body
    assert "Check now" in body  # reading it again is still offered
    assert "/repair/?check=" not in body and "/repair-all/" not in body  # no repair of any finding
    # A healthy store keeps its controls.
    assert "Heal profile…" in text(client.get("/p/default/health/"))


def test_profile_page_gives_the_same_advice_and_logs_no_error_per_view(client, laptop, caplog):
    with caplog.at_level(logging.INFO):
        pages = [client.get("/p/laptop/") for _ in range(3)]
    assert [p.status_code for p in pages] == [503, 503, 503]
    body = text(pages[0])
    assert ADVICE in body and "--inspect-only" not in body
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]


def test_a_write_posted_anyway_is_refused_before_touching_the_store(client, laptop):
    sid = laptop["cli_main"]
    before = AuditEvent.objects.count()
    renamed = client.post(f"/p/laptop/s/{sid}/rename/", {"title": "new", "had_title": "0"}, follow=True)
    archived = client.post(f"/p/laptop/s/{sid}/flags/", {"action": "archive"}, follow=True)
    for response in (renamed, archived):
        said = [str(m) for m in response.context["messages"]]
        assert any("not changed: this store is damaged" in m for m in said), said
    assert AuditEvent.objects.count() == before  # no failed write recorded: none was tried
