"""Pruning a remote profile: the preview read on its host, the confirmed prune a run there."""

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
KEY = "research on host-a"  # no other fleet test writes it


def test_remote_prune_previews_on_the_host_and_prunes_there_once(hosts_up, admin):
    before_b = tree_digest(hosts_up["roots"]["host-b"])
    url = f"/fleet/p/{quote(KEY)}/prune/"
    assert url in admin.get(f"/fleet/p/{quote(KEY)}/").content.decode()
    page = admin.get(url, {"older_than": "1"}).content.decode()
    roots = re.findall(r'<tr data-root="([^"]+)"', page)
    assert roots and "host-a" in page
    token = re.search(r'name="token" value="([^"]+)"', page).group(1)
    misplaced = admin.post(f"/fleet/p/{quote('ops on host-a')}/prune/apply/", {"token": token})
    assert misplaced.status_code == 400
    assert AuditEvent.objects.filter(action="prune_sessions", outcome="refused", profile="ops on host-a").exists()

    run = _run_of(admin.post(url + "apply/", {"token": token}))
    assert run.status == "done", run.error
    assert run.report["summary"]["applied"] == len(roots), run.report["summary"]
    assert admin.get(f"/fleet/p/{quote(KEY)}/s/{roots[0]}/").status_code == 404
    assert not re.findall(r'<tr data-root="', admin.get(url, {"older_than": "1"}).content.decode())
    applied = AuditEvent.objects.filter(run=run, outcome="applied").count()
    assert applied >= 1
    # Redelivered after its writes: the units are in the trash already, nothing goes twice.
    redone = _redeliver_on(run, "host-a")
    assert redone.status == "done" and redone.report["summary"]["applied"] == 0, redone.report["summary"]
    assert AuditEvent.objects.filter(run=run, outcome="applied").count() == applied
    assert tree_digest(hosts_up["roots"]["host-b"]) == before_b


def test_remote_prune_arguments_are_checked_on_the_worker(hosts_up):
    answer = client.ask("host-a", "prune_preview", key=KEY, criteria={"older_than_days": "soon"})
    assert not answer.ok and "malformed prune criteria" in answer.error
    answer = client.ask("host-a", "prune_preview", key="research on host-b", criteria={"empty": True})
    assert not answer.ok and "is not on host host-a" in answer.error
    spec = {"criteria": {"empty": True}, "roots": {"research on host-b": ["x"]}, "apply": True}
    run = runs.create("prune", runs.FLEET_TRIGGER, actor_label="forger", profiles=[KEY], plans=[spec])
    client.start_run(run, "host-a")
    run = _finish(run.pk)
    assert run.status == "failed" and "refused by host host-a" in run.error
