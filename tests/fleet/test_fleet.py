"""Two hosts under one dashboard: pages, heals where the store is, refusals."""

from __future__ import annotations

import re
import signal
from urllib.parse import quote

import pytest

from sessions_app import runs
from sessions_app.fleet import client
from sessions_app.models import AuditEvent, HealRun

from .conftest import tree_digest, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _digest(root):
    # -shm is SQLite's shared-memory index: readers (the worker's probes) update it.
    return {k: v for k, v in tree_digest(root).items() if not k.endswith("-shm")}


def _finish(run_id, seconds=120):
    return wait_for(lambda: (r := HealRun.objects.get(pk=run_id)).status in ("done", "failed") and r,
                    seconds, f"run #{run_id} to finish")


def test_both_hosts_profiles_in_one_overview_and_sessions_list(hosts_up, admin):
    page = admin.get("/").content.decode()
    for host in ("host-a", "host-b"):
        assert f'data-host="{host}"' in page
        for name in ("default", "ops", "research"):
            assert f'data-profile="{name} on {host}"' in page
    listing = admin.get("/sessions/")
    assert listing.status_code == 200
    rows = set(re.findall(r'data-profile="([^"]+)" data-session="([^"]+)"', listing.content.decode()))
    assert {key.rsplit(" on ", 1)[1] for key, _sid in rows} == {"host-a", "host-b"}
    # The same fixture on both hosts: every session id of a page shows once per host.
    ids_a = {sid for key, sid in rows if key.endswith(" on host-a")}
    ids_b = {sid for key, sid in rows if key.endswith(" on host-b")}
    assert ids_a == ids_b and ids_a
    assert "host-problem" not in listing.content.decode()


def test_remote_session_page_and_profile_page_read_through_the_host(hosts_up, admin):
    answer = client.ask("host-b", "sessions", filters={"profiles": ["default on host-b"]}, limit=1)
    assert answer.ok, answer.error
    row = answer.data["rows"][0]
    page = admin.get(f"/fleet/p/{quote(row['profile'])}/s/{quote(row['id'])}/")
    assert page.status_code == 200
    body = page.content.decode()
    assert "read now from host <bdi>host-b</bdi>" in body
    assert 'class="msg role-' in body or row["message_count"] == 0
    profile = admin.get(f"/fleet/p/{quote('default on host-b')}/")
    assert profile.status_code == 200 and "status-ok" in profile.content.decode()
    assert admin.get(f"/fleet/p/{quote('nosuch on host-b')}/").status_code == 404


def test_a_heal_on_host_b_touches_only_host_b(hosts_up, admin):
    roots = hosts_up["roots"]
    before_a, before_b = _digest(roots["host-a"]), _digest(roots["host-b"])
    response = admin.post(f"/fleet/p/{quote('default on host-b')}/heal/", {"mode": "apply"})
    assert response.status_code == 302
    run = _finish(int(response["Location"].rstrip("/").rsplit("/", 1)[1]))
    assert run.status == "done", run.error
    assert run.report["summary"]["applied"] >= 1 and run.report["summary"]["failed"] == 0
    events = list(AuditEvent.objects.filter(run=run))
    assert events and {e.profile for e in events} == {"default on host-b"}
    assert all(e.store_path.startswith(str(roots["host-b"])) for e in events)
    assert _digest(roots["host-a"]) == before_a
    assert _digest(roots["host-b"]) != before_b
    # The backup of the write stays on host B, in its worker's data folder.
    applied = [e for e in events if e.outcome == "applied"]
    assert applied[0].backup_path.startswith(str(hosts_up["workers"]["host-b"].data))


def test_a_task_naming_anything_outside_the_workers_roots_is_refused_and_audited(hosts_up):
    roots = hosts_up["roots"]
    before_b = _digest(roots["host-b"])
    answer = client.ask("host-a", "profile", key="default on host-b")
    assert not answer.ok and "is not on host host-a" in answer.error
    answer = client.ask("host-a", "session", key="default on host-a", session_id="x", size=10**9)
    assert not answer.ok and "out of range" in answer.error
    outside = str(roots["host-b"] / "state.db")
    plan = {"action": "recount_session", "check": "counter_drift", "profile": "default on host-a",
            "store_path": outside, "session_id": "s1", "summary": "forged", "changes": [], "params": {},
            "writes_store": True, "blocked": ""}
    run = runs.create("apply", runs.FLEET_TRIGGER, actor_label="forger", plans=[plan], profiles=["default on host-a"])
    client.start_run(run, "host-a")
    run = _finish(run.pk)
    assert run.status == "failed" and "refused by host host-a" in run.error and "outside" in run.error
    refused = AuditEvent.objects.filter(outcome="refused", action="fleet:run_job", store_path=outside)
    assert refused.exists()
    assert AuditEvent.objects.filter(outcome="refused", action="fleet:read", profile="default on host-b").exists()
    assert _digest(roots["host-b"]) == before_b


def test_a_stopped_host_is_unreachable_and_the_other_hosts_pages_still_answer(hosts_up, admin):
    workers = hosts_up["workers"]
    workers["host-a"].kill(signal.SIGTERM)
    try:
        wait_for(lambda: any(h.name == "host-a" and not h.reachable for h in client.hosts()), what="host-a unreachable")
        page = admin.get("/").content.decode()
        section = page.split('data-host="host-a"', 1)[1].split("<h3", 1)[0]
        assert "host-unreachable" in section
        assert 'data-profile="default on host-a" class="stale"' in page  # last announced, not empty
        listing = admin.get("/sessions/").content.decode()
        assert "host host-a is unreachable" in listing
        rows = re.findall(r'data-profile="([^"]+)" data-session="([^"]+)"', listing)
        assert rows and all(key.endswith(" on host-b") for key, _ in rows)
        key, sid = rows[0]
        assert admin.get(f"/fleet/p/{quote(key)}/s/{quote(sid)}/").status_code == 200
        gone = admin.get(f"/fleet/p/{quote('default on host-a')}/")
        assert gone.status_code == 503 and "unreachable" in gone.content.decode()
        search = admin.get("/fleet/search/?q=build").content.decode()
        assert "host host-a is unreachable" in search.split('data-host="host-a"', 1)[1].split("</section>", 1)[0]
        assert 'class="hit' in search.split('data-host="host-b"', 1)[1].split("</section>", 1)[0]
    finally:
        workers["host-a"].start()


def test_fleet_pages_enforce_roles_on_the_server(hosts_up, transactional_db, client):
    from django.apps import apps
    import importlib

    from django.contrib.auth.models import Group, User

    importlib.import_module("sessions_app.migrations.0003_roles").create_roles(apps, None)
    key = quote("default on host-b")
    assert client.get(f"/fleet/p/{key}/").status_code == 302  # anonymous: to the login page
    auditor = User.objects.create_user("auditor", password="x-unused-x")
    auditor.groups.add(Group.objects.get(name="Auditor"))
    client.force_login(auditor)
    assert client.get(f"/fleet/p/{key}/").status_code == 200
    runs_before = HealRun.objects.count()
    assert client.post(f"/fleet/p/{key}/heal/", {"mode": "apply"}).status_code == 403
    assert HealRun.objects.count() == runs_before
    assert AuditEvent.objects.filter(outcome="refused", action="denied:fleet_heal").exists()
    sid = "20260301_140000_10a60b"
    for url in (f"/fleet/p/{key}/s/{sid}/repair/apply/", f"/fleet/p/{key}/prune/apply/", f"/fleet/p/{key}/migrate/"):
        assert client.post(url, {"plan": "x", "token": "x", "plans": "x"}).status_code == 403, url
    assert HealRun.objects.count() == runs_before
    for name in ("fleet_repair_apply", "fleet_prune_apply", "fleet_migrate"):
        assert AuditEvent.objects.filter(outcome="refused", action=f"denied:{name}").exists(), name
