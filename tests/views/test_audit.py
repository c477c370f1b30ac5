"""Audit views: timeline with filters, detail, streamed exports, health-over-time chart,
and secrets masked for users without the transcript permission."""

import csv
import importlib
import io
import json
import re
import sqlite3

import pytest
from django.contrib.auth.models import User
from django.test import Client

from sessions_app.models import AuditEvent
from tests.actions.conftest import age_store, heal
from tests.conftest import IDS, PROFILES
from tests.views.test_roles import role_client

pytestmark = pytest.mark.django_db
DAY = 86_400


@pytest.fixture
def events(hermes_home, settings, tmp_path):
    """A real heal run that leaves applied and skipped events."""
    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir()
    for db in [hermes_home / "state.db", *hermes_home.glob("profiles/*/state.db")]:
        age_store(db, 40 * DAY)
    conn = sqlite3.connect(hermes_home / "state.db")
    conn.execute("PRAGMA foreign_keys=OFF")
    conn.execute("DELETE FROM sessions WHERE id = ?", (IDS["long"],))
    conn.execute("UPDATE sessions SET message_count = 99 WHERE id = ?", (IDS["cli_main"],))
    conn.commit()
    conn.close()
    code, report = heal("--all-profiles", "--apply", "--json")
    assert report["summary"]["applied"] >= 2
    return AuditEvent.objects.all()


def test_timeline_lists_every_event_and_filters(admin_client, events):
    html = admin_client.get("/audit/").content.decode()
    assert html.count('<tr class="outcome-') == events.count()
    html = admin_client.get("/audit/?action=recreate_session_row").content.decode()
    assert html.count('<tr class="outcome-') == 1 and IDS["long"] in html
    html = admin_client.get(f"/audit/?session={IDS['cli_main']}").content.decode()
    assert html.count('<tr class="outcome-') == events.filter(session_ids__icontains=IDS["cli_main"]).count() >= 1
    html = admin_client.get("/audit/?outcome=failed").content.decode()
    assert "No events match" in html
    html = admin_client.get("/audit/?profile=default&actor=heal_sessions").content.decode()
    assert html.count('<tr class="outcome-') == events.filter(profile="default").count()
    assert "No events match" in admin_client.get("/audit/?date_to=2000-01-01").content.decode()


def test_an_empty_trail_says_nothing_was_recorded(admin_client):
    html = admin_client.get("/audit/").content.decode()
    assert "Nothing recorded yet" in html and "No events match" not in html


def test_a_page_past_the_oldest_event_says_so_and_links_back(admin_client):
    """An "Older" link followed after the trail changed (the events before it pruned)
    says there is nothing older, not that nothing was ever recorded."""
    only = AuditEvent.objects.create(actor_label="cron", action="recount_session", profile="p", store_path="/",
                                     outcome="applied", reason="")
    html = admin_client.get(f"/audit/?before={only.pk}").content.decode()
    assert "No older events" in html and "Nothing recorded yet" not in html and 'href="?"' in html
    html = admin_client.get(f"/audit/?profile=p&before={only.pk}").content.decode()
    assert "No older events match" in html and 'href="?profile=p"' in html


def test_event_detail_shows_the_backup_and_plan(admin_client, events):
    event = events.get(action="recreate_session_row")
    html = admin_client.get(f"/audit/{event.pk}/").content.decode().replace("<wbr>", "")  # paths break after "/"
    assert event.backup_sha256 in html and event.backup_path in html and "source" in html


def test_exports_are_streamed_and_filtered(admin_client, events):
    response = admin_client.get("/audit/export.csv?outcome=applied")
    assert response.streaming and response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert len(rows) == events.filter(outcome="applied").count() and {r["outcome"] for r in rows} == {"applied"}
    response = admin_client.get("/audit/export.json")
    data = json.loads(b"".join(response.streaming_content))
    assert len(data) == events.count() and {"actor_label", "backup_sha256", "changes"} <= set(data[0])
    assert admin_client.get("/audit/export.xml").status_code == 404


def test_csv_cells_cannot_become_formulas(admin_client, events):
    AuditEvent.objects.create(actor_label="=HYPERLINK(\"http://x\")", action="x", profile="p", store_path="/",
                              outcome="failed", reason="@SUM(1)")
    body = b"".join(admin_client.get("/audit/export.csv?action=x").streaming_content).decode()
    assert "'=HYPERLINK" in body and "'@SUM" in body


def test_audit_rows_cannot_be_changed_through_the_ui(admin_client, events):
    event = events.first()
    for url in (f"/audit/{event.pk}/", "/audit/"):
        assert admin_client.post(url, {"outcome": "applied"}).status_code == 405
        assert admin_client.delete(url).status_code == 405
    assert AuditEvent.objects.get(pk=event.pk).outcome == event.outcome


def test_hostile_audit_details_render_inert(admin_client, events):
    AuditEvent.objects.create(actor_label="<script>alert(1)</script>", action="x", profile="<b>p</b>",
                              store_path="/", outcome="failed", reason="<img src=x onerror=alert(2)>",
                              session_ids=["<svg onload=alert(3)>"])
    for url in ("/audit/", f"/audit/{AuditEvent.objects.latest('id').pk}/"):
        html = admin_client.get(url).content.decode()
        assert "<script>alert(1)" not in html and "<img src=x" not in html and "<svg onload" not in html
        assert "&lt;script&gt;" in html


def test_health_over_time_chart_is_inline_svg(admin_client, events):
    heal("--all-profiles", "--json")  # a second pass after the repairs
    html = admin_client.get("/p/default/history/").content.decode()
    assert "<svg" in html and "<script" not in html.split("<svg", 1)[1]
    assert html.count('<polyline points="') == 3 and "2 check passes" in html


def test_auditor_reads_the_trail_but_sees_masked_titles(events, hermes_home):
    conn = sqlite3.connect(hermes_home / "state.db")
    conn.execute("UPDATE sessions SET title = 'deploy with ghp_abcdefghijklmnopqrstuvwxyz0123456789' WHERE id = ?",
                 (IDS["cli_main"],))
    conn.commit()
    conn.close()
    auditor = role_client("Auditor")
    assert auditor.get("/audit/").status_code == 200
    assert auditor.get("/audit/export.csv").status_code == 200
    for url in ("/sessions/?profile=default", f"/p/default/s/{IDS['cli_main']}/"):
        html = auditor.get(url).content.decode()
        assert "ghp_abcdefghijklmnopqrstuvwxyz0123456789" not in html and "secret masked" in html


def test_masking_setting_masks_transcripts_and_exports(admin_client, events, hermes_home, settings):
    conn = sqlite3.connect(hermes_home / "state.db")
    conn.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', ?, 1.7e9)",
                 (IDS["cli_main"], "my key is sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123"))
    conn.commit()
    conn.close()
    url = f"/p/default/s/{IDS['cli_main']}/"
    assert "sk-ant-api03" in admin_client.get(url).content.decode()  # admins see content as stored
    settings.HERMES_ADMIN_MASK_SECRETS = True
    html = admin_client.get(url).content.decode()
    assert "sk-ant-api03" not in html and "secret masked: Anthropic key" in html
    for fmt in ("jsonl", "md"):
        body = b"".join(admin_client.get(f"{url}export.{fmt}").streaming_content).decode()
        assert "sk-ant-api03" not in body and "secret masked" in body
    mid = re.findall(r'id="m(\d+)"', html)[-1]
    assert "sk-ant-api03" not in admin_client.get(f"{url}m/{mid}/").content.decode()


def test_auditors_get_secrets_masked_in_audit_detail_and_exports(events):
    AuditEvent.objects.create(actor_label="cron", action="move_to_owner_store", profile="default", store_path="/",
                              outcome="applied", reason="moved 'deploy ghp_abcdefghijklmnopqrstuvwxyz0123456789'",
                              plan={"params": {"titles": ["ghp_abcdefghijklmnopqrstuvwxyz0123456789"]}},
                              changes=[{"after": {"title": "ghp_abcdefghijklmnopqrstuvwxyz0123456789"}}])
    event = AuditEvent.objects.latest("id")
    auditor = role_client("Auditor")
    for url in (f"/audit/{event.pk}/", "/audit/?action=move_to_owner_store"):
        html = auditor.get(url).content.decode()
        assert "ghp_abcdefghijklmnopqrstuvwxyz0123456789" not in html and "secret masked" in html
    for fmt in ("csv", "json"):
        body = b"".join(auditor.get(f"/audit/export.{fmt}?action=move_to_owner_store").streaming_content).decode()
        assert "ghp_abcdefghijklmnopqrstuvwxyz0123456789" not in body and "secret masked" in body


def test_history_works_while_the_store_is_damaged(admin_client, events, hermes_home):
    (hermes_home / "state.db").write_text("not a database any more\n" * 50)
    html = admin_client.get("/p/default/history/").content.decode()
    assert "<svg" in html


def test_finding_details_are_masked_wherever_they_show(hermes_home, monkeypatch, settings):
    """A detail quoting store text (here a token) is masked for an auditor in the
    sessions list's badges, on the health page, and on the session page: in the
    findings box and in the markers inside the transcript."""
    from django.utils import timezone

    from sessions_app.models import HealRun
    from sessions_app.presenters import session_page as views

    token = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
    sid = IDS["cli_main"]
    conn = sqlite3.connect(f"file:{hermes_home / 'state.db'}?mode=ro", uri=True)
    first = conn.execute("SELECT MIN(id) FROM messages WHERE session_id = ?", (sid,)).fetchone()[0]
    conn.close()
    finding = {"check": "transcript_on_disk_only", "severity": "warning", "session_id": sid, "count": 1,
               "detail": f"line 3 of sessions/{sid}.jsonl reads 'use {token}'", "heal": None,
               "evidence": {"message_ids": [first]}}
    HealRun.objects.create(mode="check", trigger="command", actor_label="cron", status="done",
                           finished_at=timezone.now(),
                           report={"profiles": [{"profile": "default", "findings": [finding]}]})
    monkeypatch.setattr(views, "LIVE_CHECK_ROWS", 1)  # show the stored pass's findings on the page
    auditor = role_client("Auditor")
    for url in ("/sessions/?profile=default&size=200", "/p/default/health/", f"/p/default/s/{sid}/"):
        html = auditor.get(url).content.decode()
        assert token not in html and "secret masked" in html, url
    admin = User.objects.create_superuser("boss", password="x")
    client = Client()
    client.force_login(admin)
    html = client.get(f"/p/default/s/{sid}/").content.decode()
    assert html.count(token) == 2  # admins see it as stored: findings box and marker on the row
    settings.HERMES_ADMIN_MASK_SECRETS = True
    html = client.get(f"/p/default/s/{sid}/").content.decode()
    assert token not in html and html.count("secret masked") >= 2


def test_lineage_titles_are_masked_too(hermes_home):
    token = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
    conn = sqlite3.connect(hermes_home / "state.db")
    for n, sid in enumerate((IDS["compress_mid"], IDS["delegate_child"])):  # titles are unique
        conn.execute("UPDATE sessions SET title = ? WHERE id = ?", (f"fix {n} with {token}", sid))
    conn.commit()
    conn.close()
    auditor = role_client("Auditor")
    for sid in (IDS["compress_root"], IDS["compress_tip"], IDS["cli_main"]):
        html = auditor.get(f"/p/default/s/{sid}/").content.decode()
        assert token not in html, sid


def test_health_chart_counts_the_passes_that_checked_the_profile(events, hermes_home):
    """A pass of another profile is no point on this profile's chart, and passes
    recorded before ``checked_profiles`` existed are filled in from their reports."""
    from types import SimpleNamespace

    from django.apps import apps
    from django.db import connection

    from sessions_app.charts import health_chart
    from sessions_app.models import HealRun

    other = next(p for p in PROFILES if p != "default")
    heal("--profile", other, "--json")
    assert health_chart("default").passes == 1 and health_chart(other).passes == 2
    # As a database upgraded from before the field: the keys are gone, the reports hold them.
    HealRun.objects.update(checked_profiles=[])
    assert health_chart("default").passes == 0
    migration = importlib.import_module("sessions_app.migrations.0006_healrun_checked_profiles")
    migration.fill(apps, SimpleNamespace(connection=connection))
    assert health_chart("default").passes == 1 and health_chart(other).passes == 2
