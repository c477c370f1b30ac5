"""Issue 13, Why 8: a server error is logged with DEBUG off; ``create_user``
refuses bad user names and a missing terminal cleanly; a message id SQLite cannot
hold is a 404; a forged repair or migration plan token is refused and audited."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core import signing
from django.test import Client

from sessions_app.models import AuditEvent, HealRun
from tests.conftest import IDS
from tests.plans import planted_token

PROJECT = Path(__file__).resolve().parents[2]
SID = IDS["cli_main"]


# --------------------------------------------------------------------------- the 500 page

@pytest.mark.django_db
def test_a_server_error_is_logged_with_debug_off(admin_user, settings):
    assert settings.DEBUG is False
    settings.ROOT_URLCONF = "tests.security.urls_failing"
    client = Client(raise_request_exception=False)
    client.force_login(admin_user)
    response = client.get("/boom/")
    assert response.status_code == 500 and "The error was logged" in response.content.decode()
    log = Path(django_settings.LOG_FILE).read_text()
    entry = log[log.rindex("Internal Server Error: /boom/"):]
    assert "Traceback" in entry and "RuntimeError: boom-7f3a: an unexpected failure" in entry
    assert oct(os.stat(django_settings.LOG_FILE).st_mode & 0o777) == "0o600"


# --------------------------------------------------------------------------- create_user

@pytest.fixture(scope="module")
def data(tmp_path_factory):
    data = tmp_path_factory.mktemp("data")
    assert run(data, "migrate", "-v0").returncode == 0
    return data


def run(data, *args, env=None):
    """``manage.py`` with no terminal: stdin is /dev/null, output captured."""
    full = dict(os.environ, HERMES_ADMIN_DATA=str(data), **(env or {}))
    full.pop("DATABASE_URL", None)
    return subprocess.run([sys.executable, "manage.py", *args], cwd=PROJECT, env=full, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)


def users(data) -> list[str]:
    out = run(data, "shell", "-v0", "-c", "import json; from django.contrib.auth.models import User; "
                                          "print(json.dumps(sorted(User.objects.values_list('username', flat=True))))")
    return json.loads(out.stdout)


PW = {"NEW_PW": "a long enough passphrase 42"}


@pytest.mark.parametrize("name, why", [
    ("", "This field cannot be blank."),
    ("a" * 300, "Ensure this value has at most 150 characters (it has 300)."),
    ("<script>alert(1)</script>", "Enter a valid username."),
    ('bob" onmouseover="x', "Enter a valid username."),
])
def test_create_user_refuses_bad_names(data, name, why):
    out = run(data, "create_user", name, "--role", "auditor", "--password-env", "NEW_PW", env=PW)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert out.stderr.startswith("CommandError: user name ") and why in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert users(data) == []


def test_create_user_without_a_terminal(data):
    out = run(data, "create_user", "carol", "--role", "operator")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "no terminal to ask for the password on: pass --password-env VAR" in out.stderr
    assert users(data) == []
    # With the password in the environment it works, and a role change needs none.
    out = run(data, "create_user", "carol", "--role", "operator", "--password-env", "NEW_PW", env=PW)
    assert out.returncode == 0 and "carol is now in the Operator role." in out.stdout
    out = run(data, "create_user", "carol", "--role", "admin")
    assert out.returncode == 0 and "carol is now in the Admin role." in out.stdout
    assert users(data) == ["carol"]


def test_create_user_refuses_a_weak_password_cleanly(data):
    out = run(data, "create_user", "dave", "--role", "auditor", "--password-env", "NEW_PW", env={"NEW_PW": "dave"})
    assert out.returncode == 2 and "Traceback" not in out.stderr and "too short" in out.stderr


# --------------------------------------------------------------------------- big ids in URLs

@pytest.mark.django_db
@pytest.mark.parametrize("number", [2**63, 2**64, 10**30])
def test_a_message_id_past_sqlite_integers_is_a_404(admin_user, hermes_home, number):
    client = Client(raise_request_exception=False)
    client.force_login(admin_user)
    assert client.get(f"/p/default/s/{SID}/m/{number}/").status_code == 404
    assert client.get(f"/p/default/s/{SID}/m/{2**63 - 1}/").status_code == 404  # the largest id: no such message
    assert client.get(f"/p/default/s/{SID}/m/1/").status_code in (200, 404)


# --------------------------------------------------------------------------- forged tokens

@pytest.fixture
def operator(hermes_home, settings, django_user_model):
    settings.HERMES_ADMIN_JOB_RUNNER = "thread"
    from django.contrib.auth.models import Group  # noqa: E402
    user = django_user_model.objects.create_user("olive", password="x")
    user.groups.add(Group.objects.get(name="Operator"))
    client = Client()
    client.force_login(user)
    return client


def refused(action):
    return list(AuditEvent.objects.filter(action=action, outcome="refused"))


@pytest.mark.django_db
def test_a_forged_repair_plan_is_refused_and_audited(operator):
    url = f"/p/default/s/{SID}/repair/apply/"
    response = operator.post(url, {"plan": "eyJmb3JnZWQiOnRydWV9:1abc:xyz", "check": "counter_drift"})
    assert response.status_code == 400 and b"forged or corrupted" in response.content
    [event] = refused("repair_apply")
    assert event.actor.username == "olive" and event.profile == "default" and event.session_ids == [SID]
    assert event.request_address == "127.0.0.1" and "nothing was done" in event.reason
    assert not HealRun.objects.exists()


@pytest.mark.django_db
def test_a_repair_plan_for_another_session_is_refused_and_audited(operator, django_user_model):
    other = IDS["long"]
    olive = django_user_model.objects.get(username="olive")
    token = planted_token(operator, olive, "repair-plan",
                          {"profile": "default", "session_id": other, "action": "recount_session"})
    response = operator.post(f"/p/default/s/{SID}/repair/apply/", {"plan": token})
    assert response.status_code == 400
    [event] = refused("repair_apply")
    assert f"belongs to another session (default {other})" in event.reason
    assert not HealRun.objects.exists()


@pytest.mark.django_db
def test_forged_migration_plans_are_refused_and_audited(operator, django_user_model):
    response = operator.post("/p/default/migrate/", {"plans": "not-a-token"})
    assert response.status_code == 400
    olive = django_user_model.objects.get(username="olive")
    elsewhere = planted_token(operator, olive, "migration-plans", [{"profile": "ops", "action": "import_jsonl_transcript"}])
    assert operator.post("/p/default/migrate/", {"plans": elsewhere}).status_code == 400
    events = refused("migrate_apply")
    assert [e.reason.split(";")[0] for e in reversed(events)] == [
        "invalid migration plans (forged or corrupted token)", "the migration plans belong to another profile"]
    assert all(e.profile == "default" and e.actor.username == "olive" for e in events)
    assert not HealRun.objects.exists()


@pytest.mark.django_db
def test_expired_migration_plans_send_back_to_a_fresh_page(operator, settings, monkeypatch):
    token = signing.dumps([{"profile": "default"}], salt="migration-plans", compress=True)
    monkeypatch.setattr("sessions_app.views.migration.PLANS_MAX_AGE", -1)
    response = operator.post("/p/default/migrate/", {"plans": token})
    assert response.status_code == 302 and response["Location"] == "/p/default/migrate/"
    assert not refused("migrate_apply")
