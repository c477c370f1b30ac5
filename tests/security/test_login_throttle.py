"""Login throttling (django-axes): lockout after N failures, explained on the page,
every failed login audited, lifted by ``manage.py axes_reset`` or the cool-off."""

import datetime as dt

import pytest
from axes.models import AccessAttempt
from django.core.management import call_command
from django.test import Client

from sessions_app.models import AuditEvent

pytestmark = pytest.mark.django_db
PASSWORD = "correct horse battery"


@pytest.fixture
def alice(django_user_model):
    return django_user_model.objects.create_user("alice", password=PASSWORD)


def login(client, password, username="alice"):
    return client.post("/login/", {"username": username, "password": password})


def logged_in(client) -> bool:
    return "_auth_user_id" in client.session


def test_the_login_page_states_the_rule(client, settings):
    settings.AXES_FAILURE_LIMIT = 4
    html = client.get("/login/").content.decode()
    assert "After 4 failed logins in a row, a user name is locked out from that address" in html
    assert "for 15 minutes" in html


def test_lockout_after_the_limit_even_for_the_right_password(client, alice, settings):
    settings.AXES_FAILURE_LIMIT = 3
    for _ in range(2):
        response = login(client, "wrong")
        assert response.status_code == 200 and "didn't match" in response.content.decode()
    response = login(client, "wrong")
    assert response.status_code == 429
    response = login(client, PASSWORD)
    assert response.status_code == 429
    html = response.content.decode()
    assert "Too many failed logins" in html and "<bdi>alice</bdi> is locked out from your address" in html
    assert "manage.py axes_reset_username" in html and "for 15 minutes" in html
    assert not logged_in(client)

    events = list(AuditEvent.objects.filter(action__startswith="login_").order_by("id"))
    assert [e.action for e in events] == ["login_failed", "login_failed", "login_locked_out", "login_locked_out"]
    assert all(e.outcome == "refused" and e.actor is None and e.request_address == "127.0.0.1" for e in events)
    assert events[0].plan["username"] == "alice" and "failed login as 'alice' from 127.0.0.1" in events[0].reason
    assert not any(PASSWORD in (e.reason + str(e.plan)) for e in events)  # the password is never recorded

    call_command("axes_reset", verbosity=0)
    assert login(client, PASSWORD).status_code == 302
    assert logged_in(client)


def test_a_lockout_holds_one_name_from_one_address(alice, settings, django_user_model):
    settings.AXES_FAILURE_LIMIT = 2
    django_user_model.objects.create_user("bob", password=PASSWORD)
    here, elsewhere = Client(REMOTE_ADDR="10.0.0.1"), Client(REMOTE_ADDR="10.0.0.2")
    for _ in range(2):
        login(here, "wrong")
    assert login(here, PASSWORD).status_code == 429
    assert login(elsewhere, PASSWORD).status_code == 302  # alice from another address
    assert login(here, PASSWORD, username="bob").status_code == 302  # another name from this address


def test_the_lockout_ends_after_the_cool_off(client, alice, settings):
    settings.AXES_FAILURE_LIMIT = 2
    for _ in range(2):
        login(client, "wrong")
    assert login(client, PASSWORD).status_code == 429
    # The last failure 16 minutes ago (the default lockout is 15 minutes).
    AccessAttempt.objects.update(attempt_time=dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=16))
    assert login(client, PASSWORD).status_code == 302


def test_each_try_during_a_lockout_starts_it_again(client, alice, settings):
    settings.AXES_FAILURE_LIMIT = 2
    for _ in range(2):
        login(client, "wrong")

    def age(minutes):
        for attempt in AccessAttempt.objects.all():
            attempt.attempt_time -= dt.timedelta(minutes=minutes)
            attempt.save()

    age(10)
    assert login(client, PASSWORD).status_code == 429  # 10 minutes in: refused, and the clock restarts
    age(10)
    assert login(client, PASSWORD).status_code == 429  # 20 minutes after the failures, 10 after the last try
    age(16)
    assert login(client, PASSWORD).status_code == 302


def test_without_a_cool_off_the_lockout_waits_for_an_admin(client, alice, settings):
    settings.AXES_FAILURE_LIMIT = 2
    settings.AXES_COOLOFF_TIME = None
    for _ in range(2):
        login(client, "wrong")
    response = login(client, PASSWORD)
    assert response.status_code == 429 and "until an admin lifts the lockout" in response.content.decode()
    AccessAttempt.objects.update(attempt_time=dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=30))
    assert login(client, PASSWORD).status_code == 429
    call_command("axes_reset_username", "alice", verbosity=0)
    assert login(client, PASSWORD).status_code == 302


def test_a_successful_login_resets_the_count(client, alice, settings):
    settings.AXES_FAILURE_LIMIT = 3
    login(client, "wrong")
    login(client, "wrong")
    assert login(client, PASSWORD).status_code == 302
    client.post("/logout/")
    login(client, "wrong")
    login(client, "wrong")
    assert login(client, PASSWORD).status_code == 302


def test_an_unknown_user_name_is_audited_but_not_written_down(client):
    """A name that is no user's may be a password typed into the wrong field: the
    failure is audited with the name's length only, never the text."""
    html = login(client, "x", username="<b>mallory</b>" + "m" * 300).content.decode()
    assert "<b>mallory" not in html
    event = AuditEvent.objects.get(action="login_failed")
    assert "mallory" not in event.plan["username"] and "mallory" not in event.reason
    assert event.plan["username"] == "<an unknown user name of 150 characters>"
