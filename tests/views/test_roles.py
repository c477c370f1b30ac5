"""Every URL with every role and anonymously; writes need their permission; CSRF on POST.

Roles are the groups made by the ``roles`` migration (issue 6): Auditor reads
metadata, health and history; Operator adds transcript content and repairs;
Admin adds deletion, moves and the live override.
"""

import importlib
import re
import time

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from sessions_app.models import HealRun
from tests.conftest import IDS

pytestmark = pytest.mark.django_db(transaction=True)
SID = IDS["cli_main"]


def ensure_roles():
    """Transactional tests flush every table between tests, the groups the
    ``roles`` migration made included: make them again the migration's way."""
    from django.apps import apps
    module = importlib.import_module("sessions_app.migrations.0003_roles")
    module.create_roles(apps, None)
    importlib.import_module("sessions_app.migrations.0004_change_flags").grant(apps, None)


def role_client(role: str, username: str | None = None) -> Client:
    """A test client logged in as a new user of ``role`` (``Auditor``, ``Operator``, ``Admin``)."""
    ensure_roles()
    user = User.objects.create_user(username or role.lower(), password=f"pw-{role.lower()}-long-enough")
    user.groups.add(Group.objects.get(name=role))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def clients(hermes_home, settings, tmp_path):
    ensure_roles()
    settings.HERMES_ADMIN_JOB_RUNNER = "thread"
    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir()
    made = {"anonymous": Client()}
    for role in ("Auditor", "Operator", "Admin", None):
        name = (role or "nobody").lower()
        user = User.objects.create_user(name, password="pw-" + name + "-long-enough")
        if role:
            user.groups.add(Group.objects.get(name=role))
        client = Client()
        client.force_login(user)
        made[name] = client
    return made


def first_message_id(client):
    html = client.get(f"/p/default/s/{SID}/").content.decode()
    return re.search(r'id="m(\d+)"', html).group(1)


READ_URLS = ["/", "/sessions/", "/p/default/", f"/p/default/s/{SID}/", "/p/default/health/", "/runs/",
             f"/p/default/s/{SID}/repair/?check=counter_drift"]
CONTENT_URLS = [f"/p/default/s/{SID}/export.jsonl", f"/p/default/s/{SID}/export.md"]


@pytest.mark.parametrize("url", READ_URLS + CONTENT_URLS)
def test_anonymous_is_sent_to_login(clients, url):
    response = clients["anonymous"].get(url)
    assert response.status_code == 302 and response["Location"].startswith("/login/")


@pytest.mark.parametrize("url", READ_URLS)
def test_read_pages_by_role(clients, url):
    for role in ("auditor", "operator", "admin"):
        assert clients[role].get(url).status_code == 200, (role, url)
    assert clients["nobody"].get(url).status_code == 403


@pytest.mark.parametrize("url", CONTENT_URLS)
def test_transcript_content_needs_its_own_permission(clients, url):
    assert clients["auditor"].get(url).status_code == 403
    assert clients["operator"].get(url).status_code == 200
    assert clients["admin"].get(url).status_code == 200


def test_auditor_sees_metadata_and_findings_but_no_transcript(clients):
    html = clients["auditor"].get(f"/p/default/s/{SID}/").content.decode()
    assert "Fix the flaky build" in html and "message_count" in html
    assert 'class="msg' not in html and "view transcripts" in html
    mid = first_message_id(clients["operator"])
    assert clients["auditor"].get(f"/p/default/s/{SID}/m/{mid}/").status_code == 403
    assert clients["operator"].get(f"/p/default/s/{SID}/m/{mid}/").status_code == 200


def test_no_write_is_reachable_without_its_permission(clients):
    for role in ("auditor", "nobody"):
        c = clients[role]
        assert c.post("/checks/run/").status_code == 403
        assert c.get("/p/default/heal/").status_code == 403
        assert c.post("/p/default/heal/").status_code == 403
        assert c.post(f"/p/default/s/{SID}/repair/apply/", {"plan": "x"}).status_code == 403
    assert not HealRun.objects.exists()
    html = clients["auditor"].get("/p/default/health/").content.decode()
    assert 'href="/p/default/heal/"' not in html and 'action="/checks/run/"' not in html


def test_operator_can_check_and_heal(clients):
    assert clients["operator"].get("/p/default/heal/").status_code == 200
    response = clients["operator"].post("/checks/run/")
    assert response.status_code == 302
    run = HealRun.objects.get()
    assert run.actor.username == "operator"
    deadline = time.time() + 60
    while HealRun.objects.get().status not in ("done", "failed") and time.time() < deadline:
        time.sleep(0.1)


@pytest.mark.parametrize("url, data", [
    ("/checks/run/", {}),
    ("/p/default/heal/", {}),
    (f"/p/default/s/{SID}/repair/apply/", {"plan": "x"}),
    ("/logout/", {}),
])
def test_csrf_is_enforced_on_every_post(hermes_home, url, data):
    user = User.objects.create_superuser("root", "", "pw")
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    assert client.post(url, data).status_code == 403
    assert not HealRun.objects.exists()
