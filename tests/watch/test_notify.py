"""Notifications (issue 18): a real webhook server on 127.0.0.1, real check passes
over copies of the fixture stores through ``heal_sessions``."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.core import mail
from django.utils import timezone

from sessions_app import notify, runs
from sessions_app.models import AuditEvent, HealRun
from tests.actions.conftest import heal

from .conftest import SECRET, not_a_database, orphan_messages
from .hooks import webhook_server

pytestmark = pytest.mark.django_db


def notify_events(kind=None):
    qs = AuditEvent.objects.filter(action__startswith="notify_")
    return list(qs.filter(action=f"notify_{kind}") if kind else qs)


def test_a_new_critical_finding_sends_one_webhook_and_the_same_finding_none(hermes_home, hook):
    code, _ = heal("--all-profiles", "--json")
    assert code == 0 and hook.count() == 0  # the fixture stores have nothing critical
    orphan_messages(hermes_home)
    code, report = heal("--all-profiles", "--json")
    assert code == 1
    assert hook.count() == 1
    [body] = hook.bodies
    assert body["event"] == "new_critical" and body["profile"] == "default"
    assert body["codes"] == {"orphan_messages": 1} and body["counts"]["new"] == 1
    assert "orphan_messages" in body["text"] and body["link"] == "https://admin.example.org/p/default/health/"
    assert SECRET.split()[0] not in json.dumps(body)  # no transcript content
    [event] = notify_events("new_critical")
    assert event.outcome == "applied" and event.profile == "default" and event.check_code == "orphan_messages"
    assert event.run_id == HealRun.objects.order_by("-pk").first().pk
    assert "webhook http://127.0.0.1" in event.reason and "secret-path-token" not in event.reason
    # The next pass finds the same finding: nothing new, no notification.
    code, _ = heal("--all-profiles", "--json")
    assert code == 1 and hook.count() == 1 and len(notify_events()) == 1
    # Another session's orphans are a new finding again.
    orphan_messages(hermes_home, session_id="ghost-session-2")
    heal("--all-profiles", "--json")
    assert hook.count() == 2 and hook.bodies[1]["codes"] == {"orphan_messages": 1}


def test_the_first_pass_ever_reports_what_is_critical(hermes_home, hook):
    orphan_messages(hermes_home, profile="ops")
    heal("--profile", "ops", "--json")
    assert [b["event"] for b in hook.bodies] == ["new_critical"] and hook.bodies[0]["profile"] == "ops"


def test_an_unreadable_store_sends_one(hermes_home, hook):
    heal("--all-profiles", "--json")
    not_a_database(hermes_home / "profiles" / "research" / "state.db")
    code, report = heal("--all-profiles", "--json")
    assert code == 2
    assert hook.events() == ["store_unreadable"]  # its access finding is part of it, not a second one
    body = hook.bodies[0]
    assert body["profile"] == "research" and body["status"] == "unreadable"
    assert "not an SQLite database" in body["text"]
    heal("--all-profiles", "--json")
    assert hook.count() == 1 and len(notify_events("store_unreadable")) == 1


def test_slack_shape_is_text_only(hermes_home, hook, settings):
    settings.HERMES_NOTIFY_WEBHOOK_FORMAT = "slack"
    orphan_messages(hermes_home)
    heal("--profile", "default", "--json")
    assert list(hook.bodies[0]) == ["text"] and "orphan_messages" in hook.bodies[0]["text"]


def test_email_goes_through_django_mail(hermes_home, settings):
    settings.HERMES_NOTIFY_WEBHOOK_URLS = []
    settings.HERMES_NOTIFY_EMAIL_TO = ["ops@example.org", "oncall@example.org"]
    orphan_messages(hermes_home)
    heal("--profile", "default", "--json")
    [message] = mail.outbox
    assert message.to == ["ops@example.org", "oncall@example.org"]
    assert "new critical finding" in message.subject and "orphan_messages" in message.body
    assert SECRET.split()[0] not in message.body + message.subject
    [event] = notify_events("new_critical")
    assert event.outcome == "applied" and "email: delivered (sent to 2 recipients" in event.reason


def test_a_failing_endpoint_is_retried_then_recorded_and_the_run_goes_on(hermes_home, settings):
    with webhook_server(status=503) as hook:
        settings.HERMES_NOTIFY_WEBHOOK_URLS = [hook.url]
        settings.HERMES_NOTIFY_ATTEMPTS, settings.HERMES_NOTIFY_BACKOFF = 3, 0.01
        orphan_messages(hermes_home)
        code, report = heal("--profile", "default", "--json")
        assert code == 1 and report["summary"]["critical"] == 1  # the run's own result is untouched
        assert hook.count() == 3  # bounded retries
        [event] = notify_events("new_critical")
        assert event.outcome == "failed" and "HTTP 503, 3 attempts" in event.reason


def test_an_unreachable_endpoint_costs_at_most_the_budget(hermes_home, settings):
    with webhook_server() as hook:
        url = hook.url
    settings.HERMES_NOTIFY_WEBHOOK_URLS = [url]  # the server is gone: connection refused
    settings.HERMES_NOTIFY_BACKOFF = 0.01
    orphan_messages(hermes_home)
    code, _ = heal("--profile", "default", "--json")
    assert code == 1
    [event] = notify_events("new_critical")
    assert event.outcome == "failed" and "ConnectionError" in event.reason


def test_a_failed_run_is_notified_without_what_its_error_quotes(hook):
    run = runs.begin(runs.create("check", "command", actor_label="t", profiles=["default"]))
    runs.fail(run, f"ValueError: could not decode {SECRET}")
    [body] = hook.bodies
    assert body["event"] == "run_failed" and "ValueError" in body["text"]
    assert SECRET.split()[0] not in json.dumps(body)
    assert body["link"].endswith(f"/runs/{run.pk}/")


def test_a_run_that_did_not_fail_on_its_own_is_not_notified(hook):
    run = runs.begin(runs.create("check", "browser", actor_label="t"))
    runs.fail(run, "another heal run is in progress (pid 1)", notify=False)
    assert hook.count() == 0 and not notify_events()


def test_a_stuck_run_is_notified_once(hook, settings):
    run = runs.begin(runs.create("apply", "command", actor_label="command:heal_sessions@h", profiles=["ops"]))
    HealRun.objects.filter(pk=run.pk).update(started_at=timezone.now() - dt.timedelta(hours=3))
    assert notify.check_stuck(threshold=7200)
    assert hook.events() == ["run_stuck"] and "running for 3.0 h" in hook.bodies[0]["text"]
    assert notify.check_stuck(threshold=7200) == [] and hook.count() == 1
    young = runs.begin(runs.create("check", "command", actor_label="t"))
    assert notify.check_stuck(threshold=7200) == [] and young.pk


def test_failed_repairs_are_one_notification(hook):
    run = runs.begin(runs.create("apply", "command", actor_label="t", profiles=["default", "ops"]))
    report = runs.RunReport(mode="apply")
    for key in ("default", "ops"):
        entry = report.profile(key, f"/x/{key}/state.db")
        entry.root = "/x"
        entry.actions = [{"action": "recount_session", "session_id": "s", "status": "failed", "reason": "r",
                          "changes": []}]
    runs.finish(run, report.as_json())
    assert hook.events() == ["heal_failed"]
    assert hook.bodies[0]["codes"] == {"recount_session": 2} and "default, ops" in hook.bodies[0]["text"]


def test_nothing_is_recorded_without_a_channel(hermes_home, settings):
    settings.HERMES_NOTIFY_WEBHOOK_URLS, settings.HERMES_NOTIFY_EMAIL_TO = [], []
    orphan_messages(hermes_home)
    heal("--profile", "default", "--json")
    assert not notify_events()


def test_settings_that_cannot_work_are_reported(settings):
    from sessions_app.system_checks import watch_settings

    settings.HERMES_NOTIFY_WEBHOOK_FORMAT = "teams"
    settings.HERMES_NOTIFY_WEBHOOK_URLS = ["hooks.example.org/abc", "https://ok.example.org/x"]
    settings.HERMES_METRICS_TOKEN = "short"
    ids = sorted(m.id for m in watch_settings())
    assert ids == ["hermes_admin.W010", "hermes_admin.W011", "hermes_admin.W012"]
    settings.HERMES_NOTIFY_WEBHOOK_FORMAT, settings.HERMES_NOTIFY_WEBHOOK_URLS = "generic", ["https://ok.example.org/x"]
    settings.HERMES_METRICS_TOKEN = "a" * 32
    assert watch_settings() == []


@pytest.mark.django_db(transaction=True)
def test_a_browser_check_pass_notifies_too(hermes_home, hook, settings, admin_client):
    import time

    settings.HERMES_ADMIN_JOB_RUNNER = "thread"
    orphan_messages(hermes_home, profile="research")
    response = admin_client.post("/checks/run/")
    assert response.status_code == 302
    deadline = time.monotonic() + 120
    # The run is marked done first, then its notifications go out: wait for their audit event.
    while time.monotonic() < deadline and not (HealRun.objects.filter(status__in=("done", "failed")).exists()
                                               and notify_events()):
        time.sleep(0.1)
    run = HealRun.objects.get()
    assert run.status == "done" and run.trigger == "browser"
    assert hook.events() == ["new_critical"] and hook.bodies[0]["profile"] == "research"
    [event] = notify_events("new_critical")
    assert event.run_id == run.pk
