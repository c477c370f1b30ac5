"""A remote profile's one-finding repair: previewed on its host, applied as a run there."""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest

from sessions_app import runs
from sessions_app.fleet import client
from sessions_app.models import AuditEvent

from .conftest import tree_digest
from .test_remote import _finish, _redeliver_on, _run_of

pytestmark = pytest.mark.django_db(transaction=True)
KEY = "ops on host-a"  # no other fleet test writes host-a's stores
SESSION = "20260302_160000_0d0ba5"  # its message_count drifted from its rows (counter_drift)


def test_remote_repair_preview_and_apply_run_on_the_host(hosts_up, admin):
    before_b = tree_digest(hosts_up["roots"]["host-b"])
    session = admin.get(f"/fleet/p/{quote(KEY)}/s/{SESSION}/").content.decode()
    assert "?check=counter_drift" in session and "Repair…" in session
    url = f"/fleet/p/{quote(KEY)}/s/{SESSION}/repair/"
    page = admin.get(url, {"check": "counter_drift"}).content.decode()
    assert "recount_session" in page and "host-a" in page
    token = re.search(r'name="plan" value="([^"]+)"', page).group(1)

    forged = admin.post(url + "apply/", {"plan": token[:-3] + "xyz", "check": "counter_drift"})
    assert forged.status_code == 400
    other = admin.post(f"/fleet/p/{quote('default on host-a')}/s/{SESSION}/repair/apply/", {"plan": token})
    assert other.status_code == 400 and b"another session" in other.content
    assert AuditEvent.objects.filter(action="repair_apply", outcome="refused", profile=KEY).count() == 1

    run = _run_of(admin.post(url + "apply/", {"plan": token, "check": "counter_drift"}))
    assert run.status == "done", run.error
    assert run.report["profiles"][0]["actions"][0]["status"] == "applied", run.report
    applied = AuditEvent.objects.filter(run=run, outcome="applied")
    assert applied.count() == 1 and applied[0].store_path.startswith(str(hosts_up["roots"]["host-a"]))
    assert "no <code>counter_drift</code> finding any more" in admin.get(url, {"check": "counter_drift"}).content.decode()
    # Redelivered (a worker killed after its write): the plan's guard sees the change, nothing is written twice.
    redone = _redeliver_on(run, "host-a")
    assert redone.status == "done" and redone.report["profiles"][0]["actions"][0]["status"] != "applied"
    assert AuditEvent.objects.filter(run=run, outcome="applied").count() == 1
    assert tree_digest(hosts_up["roots"]["host-b"]) == before_b


def test_remote_repair_arguments_are_checked_on_the_worker(hosts_up):
    answer = client.ask("host-a", "repair_preview", key=KEY, session_id=SESSION, check="no_such_check")
    assert not answer.ok and "unknown check" in answer.error
    answer = client.ask("host-a", "repair_preview", key="ops on host-b", session_id=SESSION, check="counter_drift")
    assert not answer.ok and "is not on host host-a" in answer.error
    answer = client.ask("host-b", "repair_preview", key="ops on host-b", session_id=SESSION, check="counter_drift")
    assert answer.ok, answer.error
    plan = answer.data["plan_data"]
    assert plan is not None
    run = runs.create("apply", runs.FLEET_TRIGGER, actor_label="forger", profiles=[KEY],
                      plans=[dict(plan, profile=KEY)])  # host-b's store path under host-a's profile
    client.start_run(run, "host-a")
    run = _finish(run.pk)
    assert run.status == "failed" and "refused by host host-a" in run.error
