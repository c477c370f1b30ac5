"""Every URL of the dashboard, for every role and anonymously.

The table names each route's method and the permission it needs; a route added
without an entry here fails ``test_every_route_is_in_the_table``. A role without
the permission gets 403 and nothing is written; with it, never a 403 or a 500.
"""

import importlib

import pytest
from django.apps import apps
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import get_resolver

from sessions_app.models import AuditEvent, HealRun
from tests.conftest import IDS

pytestmark = pytest.mark.django_db
SID = IDS["cli_main"]
ROLES = {
    "auditor": {"view_dashboard", "view_auditevent"},
    "operator": {"view_dashboard", "view_auditevent", "view_transcripts", "run_heal", "change_flags"},
    "admin": {"view_dashboard", "view_auditevent", "view_transcripts", "run_heal", "delete_sessions",
              "override_live", "change_flags"},
    "nobody": set(),
}
# route name -> [(method, path, permission)]; {run} and {event} are filled in.
TABLE = {
    "overview": [("get", "/", "view_dashboard")],
    "session_list": [("get", "/sessions/", "view_dashboard")],
    "start_check": [("post", "/checks/run/", "run_heal")],
    "runs": [("get", "/runs/", "view_dashboard")],
    "run": [("get", "/runs/{run}/", "view_dashboard")],
    "audit": [("get", "/audit/", "view_auditevent")],
    "audit_event": [("get", "/audit/{event}/", "view_auditevent")],
    "audit_export": [("get", "/audit/export.csv", "view_auditevent")],
    "profile_history": [("get", "/p/default/history/", "view_dashboard")],
    "profile": [("get", "/p/default/", "view_dashboard")],
    "profile_health": [("get", "/p/default/health/", "view_dashboard")],
    "heal_profile": [("get", "/p/default/heal/", "run_heal"), ("post", "/p/default/heal/", "run_heal")],
    "repair_preview": [("get", f"/p/default/s/{SID}/repair/?check=counter_drift", "view_dashboard")],
    "repair_apply": [("post", f"/p/default/s/{SID}/repair/apply/", "run_heal")],
    "repair_all": [("get", "/p/default/repair-all/counter_drift/", "run_heal")],
    "repair_all_apply": [("post", "/p/default/repair-all/counter_drift/apply/", "run_heal")],
    "message_raw": [("get", f"/p/default/s/{SID}/m/1/", "view_transcripts")],
    "session_export": [("get", f"/p/default/s/{SID}/export.jsonl", "view_transcripts")],
    "session_copies": [("get", f"/p/default/s/{SID}/copies/", "view_dashboard")],
    "bulk_delete_confirm": [("post", "/sessions/delete/", "delete_sessions")],
    "bulk_delete_apply": [("post", "/sessions/delete/apply/", "delete_sessions")],
    "trash": [("get", "/trash/", "view_dashboard")],
    "trash_entry": [("get", "/trash/no-such-entry/", "view_dashboard")],
    "trash_restore": [("post", "/trash/no-such-entry/restore/", "delete_sessions")],
    "delete_confirm": [("get", f"/p/default/s/{SID}/delete/", "delete_sessions")],
    "delete_apply": [("post", f"/p/default/s/{SID}/delete/apply/", "delete_sessions")],
    "migrate_profile": [("get", "/p/default/migrate/", "view_dashboard"), ("post", "/p/default/migrate/", "run_heal")],
    "session_jsonl": [("get", f"/p/default/s/{SID}/jsonl/", "view_transcripts")],
    "session_collision": [("get", f"/p/default/s/{SID}/collision/", "view_dashboard")],
    "profile_search": [("get", "/p/default/search/?q=alert", "view_transcripts")],
    "prune": [("get", "/prune/", "view_dashboard"), ("get", "/prune/?older_than=1", "view_dashboard")],
    "prune_apply": [("post", "/prune/apply/", "delete_sessions")],
    "profile_prune": [("get", "/p/default/prune/?empty=on", "view_dashboard")],
    "bulk_flags": [("post", "/sessions/flags/", "change_flags")],
    "session_flags": [("post", f"/p/default/s/{SID}/flags/", "change_flags")],
    "session_rename": [("post", f"/p/default/s/{SID}/rename/", "change_flags")],
    "session": [("get", f"/p/default/s/{SID}/", "view_dashboard")],
    "usage": [("get", "/usage/", "view_dashboard")],
    "usage_export": [("get", "/usage/export.csv", "view_dashboard")],
    "search_everywhere": [("get", "/search/?q=alert", "view_transcripts")],
    "profile_scan": [("get", "/p/edge/search/scan/?q=alert", "view_transcripts")],
    "sessions_export_zip": [("get", "/sessions/export.zip?profile=ops", "view_transcripts")],
    "sessions_export_csv": [("get", "/sessions/export.csv?profile=ops", "view_dashboard")],
}
PUBLIC = {"login", "logout"}
# Guarded by a bearer token instead of the login (tests/watch/test_metrics.py).
TOKEN_ROUTES = {"metrics"}


def routes():
    names = []

    def walk(patterns):
        for p in patterns:
            if hasattr(p, "url_patterns"):
                walk(p.url_patterns)
            elif p.name:
                names.append(p.name)
    walk(get_resolver().url_patterns)
    return names


def test_every_route_is_in_the_table():
    assert set(routes()) - PUBLIC - TOKEN_ROUTES == set(TABLE)


@pytest.fixture
def world(hermes_home, settings, tmp_path):
    settings.HERMES_ADMIN_JOB_RUNNER = "thread"
    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir()
    importlib.import_module("sessions_app.migrations.0003_roles").create_roles(apps, None)
    importlib.import_module("sessions_app.migrations.0004_change_flags").grant(apps, None)
    run = HealRun.objects.create(mode="check", trigger="command", actor_label="t", status="done", report={})
    event = AuditEvent.objects.create(actor_label="t", action="x", profile="default", store_path="/",
                                      outcome="skipped")
    clients = {"anonymous": Client()}
    for role in ROLES:
        user = User.objects.create_user(role, password="pw")
        if role != "nobody":
            user.groups.add(Group.objects.get(name=role.capitalize()))
        clients[role] = Client()
        clients[role].force_login(user)
    return clients, {"run": run.pk, "event": event.pk}


@pytest.mark.parametrize("name", sorted(TABLE))
def test_route_by_role(world, name, monkeypatch):
    clients, ids = world
    started = []
    monkeypatch.setattr("sessions_app.jobs.start", lambda run: started.append(run))  # no job runs here
    for method, path, perm in TABLE[name]:
        path = path.format(**ids)
        response = getattr(clients["anonymous"], method)(path)
        assert response.status_code == 302 and response["Location"].startswith("/login/"), (name, "anonymous")
        for role, perms in ROLES.items():
            before = (HealRun.objects.count(), AuditEvent.objects.exclude(outcome="refused").count())
            refused = AuditEvent.objects.filter(outcome="refused").count()
            response = getattr(clients[role], method)(path)
            if perm in perms:
                assert response.status_code not in (403, 500), (name, method, role, response.status_code)
            else:
                assert response.status_code == 403, (name, method, role, response.status_code)
                # Nothing done; an attempted action (a POST) leaves one "refused" event.
                assert (HealRun.objects.count(), AuditEvent.objects.exclude(outcome="refused").count()) == before
                assert AuditEvent.objects.filter(outcome="refused").count() == refused + (method == "post"), \
                    (name, role)
    if not any(perm in ROLES["admin"] for _, _, perm in TABLE[name]):
        assert not started
