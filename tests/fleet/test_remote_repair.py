"""A remote profile's one-finding repair: previewed on its host, applied as a run there."""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest

from sessions_app import runs
from sessions_app.fleet import client
from sessions_app.models import AuditEvent

from tests.plans import decoded_values

from .conftest import tree_digest
from .test_remote import _finish, _redeliver_on, _run_of

pytestmark = pytest.mark.django_db(transaction=True)
KEY = "ops on host-a"  # no other fleet test writes host-a's stores
SESSION = "20260302_160000_0d0ba5"  # its message_count drifted from its rows (counter_drift)


def test_a_remote_repair_form_carries_a_reference_bound_to_its_user(hosts_up, admin, settings, django_user_model):
    """Before the apply below (which clears the finding). The plan (unmasked store text, what applying executes) stays in the user's
    login session: the form's token decodes to no part of it, and another user
    posting it is refused and audited."""
    from django.test import Client

    from sessions_app.models import HealRun

    settings.HERMES_ADMIN_MASK_SECRETS = True
    url = f"/fleet/p/{quote(KEY)}/s/{SESSION}/repair/"
    page = admin.get(url, {"check": "counter_drift"}).content.decode()
    token = re.search(r'name="plan" value="([^"]+)"', page).group(1)
    decoded = decoded_values(page)
    assert any('"nonce"' in d for d in decoded)
    assert not [d for d in decoded if "recount_session" in d or "store_path" in d or SESSION in d]
    other = Client()
    other.force_login(django_user_model.objects.create_superuser("fleet-other", password="x-unused-x"))
    refused = other.post(url + "apply/", {"plan": token, "check": "counter_drift"})
    assert refused.status_code == 400 and b"previewed by another user" in refused.content
    event = AuditEvent.objects.get(action="repair_apply", outcome="refused")
    assert event.actor.username == "fleet-other" and event.profile == KEY and event.session_ids == [SESSION]
    assert not HealRun.objects.exists()


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


def test_an_apply_run_whose_plans_are_not_what_it_names_is_refused_on_the_worker(hosts_up):
    """The worker checks a fleet apply run's plans against the run itself: each plan
    is for one of the run's profiles and names a known action (audited refusals)."""
    from sessions_app.models import HealRun

    before = tree_digest(hosts_up["roots"]["host-b"])
    key = "ops on host-b"  # its drift is still there (host-a's was repaired above)
    answer = client.ask("host-b", "repair_preview", key=key, session_id=SESSION, check="counter_drift")
    assert answer.ok, answer.error
    plan = answer.data["plan_data"]
    assert plan is not None
    for profiles, forged, why in (
        (["default on host-b"], plan, f"is for profile '{key}', which the run does not name"),
        ([key], dict(plan, action="drop_every_table"), "names no known action ('drop_every_table')"),
    ):
        run = runs.create("apply", runs.FLEET_TRIGGER, actor_label="forger", profiles=profiles, plans=[forged])
        client.start_run(run, "host-b")
        run = _finish(run.pk)
        assert run.status == HealRun.Status.FAILED and "refused by host host-b" in run.error and why in run.error
        assert AuditEvent.objects.filter(action="fleet:run_job", outcome="refused", reason__contains=why).exists()
    assert not AuditEvent.objects.filter(outcome="applied").exists()
    assert tree_digest(hosts_up["roots"]["host-b"]) == before


def test_a_remote_recovery_preview_shows_its_texts_only_to_readers_of_transcripts(hosts_up, admin):
    """The host excerpts the messages a recovery writes only when the dashboard's user
    may read transcripts (``texts``); an auditor's preview counts them, with no text."""
    import json
    import sqlite3

    from tests.views.test_roles import role_client

    profile = hosts_up["roots"]["host-a"] / "profiles" / "ops"
    conn = sqlite3.connect(f"file:{profile / 'state.db'}?mode=ro", uri=True)
    rows = conn.execute("SELECT role, content FROM messages WHERE session_id = ? AND role IN ('user', 'assistant') "
                        "AND tool_calls IS NULL ORDER BY id", (SESSION,)).fetchall()
    conn.close()
    messages = [{"role": r, "content": c} for r, c in rows]
    messages += [{"role": "user", "content": "remote: and then?"}, {"role": "assistant", "content": "remote: <b>this</b>"}]
    snapshot = profile / "sessions" / f"session_{SESSION}.json"
    snapshot.parent.mkdir(exist_ok=True)
    snapshot.write_text(json.dumps({"session_id": SESSION, "messages": messages}))
    try:
        url = f"/fleet/p/{quote(KEY)}/s/{SESSION}/repair/"
        page = admin.get(url, {"check": "history_lost"}).content.decode()
        assert "recover_messages" in page and 'id="inserted"' in page
        assert "remote: and then?" in page and "remote: &lt;b&gt;this&lt;/b&gt;" in page
        hidden = role_client("Auditor", "fleet-auditor").get(url, {"check": "history_lost"}).content.decode()
        assert "recover_messages" in hidden and "is shown to users who may read transcripts" in hidden
        assert "remote: and then?" not in hidden and "this</b>" not in hidden
    finally:
        snapshot.unlink()
