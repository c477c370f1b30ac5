"""``/metrics`` (issue 18): the bearer token, the Prometheus client's own parser,
and figures that match the stored run, the stores and the data folder."""

from __future__ import annotations

import os
import sqlite3

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from sessions_app import trash
from sessions_app.checks.registry import codes as catalog_codes
from sessions_app.metrics import probes
from sessions_app.models import HealRun
from sessions_app.runs import exit_status
from sessions_app.stores.backup import list_backups
from tests.actions.conftest import heal

from .conftest import not_a_database, orphan_messages

pytestmark = pytest.mark.django_db
TOKEN = "scrape-token-0123456789"


@pytest.fixture
def token(settings):
    settings.HERMES_METRICS_TOKEN = TOKEN
    return TOKEN


def scrape(token=TOKEN) -> dict:
    """``{(name, labels as a sorted tuple): value}`` of one scrape, parsed by the
    Prometheus client's own parser."""
    response = Client(HTTP_HOST="localhost").get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples, name, **labels):
    return samples[(name, tuple(sorted(labels.items())))]


def test_without_a_token_configured_there_is_no_endpoint(hermes_home, settings):
    settings.HERMES_METRICS_TOKEN = ""
    response = Client(HTTP_HOST="localhost").get("/metrics", HTTP_AUTHORIZATION="Bearer anything")
    assert response.status_code == 404 and b"HERMES_ADMIN_METRICS_TOKEN" in response.content


def test_the_token_is_required(hermes_home, token, admin_client):
    client = Client(HTTP_HOST="localhost")
    missing = client.get("/metrics")
    assert missing.status_code == 401 and missing["WWW-Authenticate"].startswith("Bearer")
    assert client.get("/metrics", HTTP_AUTHORIZATION="Basic " + TOKEN).status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 403
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer " + TOKEN[:-1]).status_code == 403
    # A logged-in admin without the token gets nothing either: the login is not the guard.
    admin_client.defaults["HTTP_HOST"] = "localhost"
    assert admin_client.get("/metrics").status_code == 401
    assert client.post("/metrics", HTTP_AUTHORIZATION="Bearer " + TOKEN).status_code in (403, 405)
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer " + TOKEN).status_code == 200


def test_figures_match_the_stored_run(hermes_home, token):
    orphan_messages(hermes_home, n=3)
    code, report = heal("--all-profiles", "--json")
    run = HealRun.objects.get()
    samples = scrape()
    assert value(samples, "hermes_profiles") == len(report["profiles"])
    for entry in run.report["profiles"]:
        key = entry["profile"]
        for severity in ("critical", "warning", "info"):
            expected = sum(f["severity"] == severity for f in entry["findings"])
            assert value(samples, "hermes_findings", profile=key, severity=severity) == expected, (key, severity)
        for check in catalog_codes():
            expected = sum(f["check"] == check for f in entry["findings"])
            assert value(samples, "hermes_findings_by_check", profile=key, check=check) == expected, (key, check)
        assert value(samples, "hermes_check_pass_run", profile=key) == run.pk
        assert value(samples, "hermes_check_pass_timestamp_seconds", profile=key) == pytest.approx(
            run.finished_at.timestamp())
        assert value(samples, "hermes_check_pass_age_seconds", profile=key) >= 0
        db = entry["path"]
        assert value(samples, "hermes_store_file_bytes", profile=key) == os.stat(db).st_size
        wal = f"{db}-wal"
        assert value(samples, "hermes_store_wal_bytes", profile=key) == (os.stat(wal).st_size if os.path.exists(wal) else 0)
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        sessions, messages = (conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("sessions", "messages"))
        conn.close()
        assert value(samples, "hermes_store_sessions", profile=key) == sessions
        assert value(samples, "hermes_store_messages", profile=key) == messages
        assert value(samples, "hermes_store_status", profile=key, status="ok") == 1
        assert value(samples, "hermes_store_status", profile=key, status="corrupt") == 0
    assert value(samples, "hermes_findings_by_check", profile="default", check="orphan_messages") == 1
    # The run kind "check": its outcome is the cron contract's exit status, its duration the run's.
    assert exit_status(run.report) == code == 1
    assert value(samples, "hermes_run_last_outcome", kind="check", outcome="findings") == 1
    assert value(samples, "hermes_run_last_outcome", kind="check", outcome="clean") == 0
    assert value(samples, "hermes_run_last_duration_seconds", kind="check") == pytest.approx(
        (run.finished_at - run.started_at).total_seconds())
    assert value(samples, "hermes_run_last_finished_timestamp_seconds", kind="check") == pytest.approx(
        run.finished_at.timestamp())
    assert value(samples, "hermes_runs_running", kind="check") == 0
    assert ("hermes_run_last_outcome", (("kind", "apply"), ("outcome", "clean"))) not in samples  # no such run yet


def test_a_heal_run_its_backup_and_the_trash(hermes_home, token):
    orphan_messages(hermes_home)
    code, report = heal("--profile", "default", "--apply", "--json")
    applied = [a for p in report["profiles"] for a in p["actions"] if a["status"] == "applied"]
    assert applied  # recreate_session_row wrote, after a backup
    entry = trash.new_entry("ops", "some-session")
    (entry.path / "rows.sqlite3").write_bytes(b"x" * 5000)
    samples = scrape()
    [backup] = list_backups()
    assert value(samples, "hermes_backups", profile="default") == 1
    assert value(samples, "hermes_backup_bytes", profile="default") == backup.size > 0
    assert value(samples, "hermes_backups", profile="ops") == 0
    assert value(samples, "hermes_trash_entries", profile="ops") == 1
    assert value(samples, "hermes_trash_bytes", profile="ops") == sum(
        p.stat().st_size for p in entry.path.rglob("*") if p.is_file())
    assert value(samples, "hermes_trash_entries", profile="default") == 0
    run = HealRun.objects.get()
    assert value(samples, "hermes_run_last_outcome", kind="apply", outcome=
                 ("clean", "findings", "error")[exit_status(run.report)]) == 1


def test_sizes_and_file_status_are_live_counts_are_cached(hermes_home, token, settings):
    settings.HERMES_METRICS_PROBE_SECONDS = 3600
    heal("--all-profiles", "--json")
    first = scrape()
    orphan_messages(hermes_home, n=4)  # four more rows; the cached count stands
    db = hermes_home / "state.db"
    second = scrape()
    assert value(second, "hermes_store_messages", profile="default") == value(first, "hermes_store_messages",
                                                                                profile="default")
    not_a_database(hermes_home / "profiles" / "legacy" / "state.db")
    os.truncate(hermes_home / "profiles" / "archive" / "state.db", 0)  # no connection to it in this process
    third = scrape()
    assert value(third, "hermes_store_status", profile="archive", status="unreadable") == 1  # stat: at once
    assert value(third, "hermes_store_file_bytes", profile="archive") == 0
    assert value(third, "hermes_store_status", profile="legacy", status="ok") == 1  # the probe is cached
    probes.reset()
    fourth = scrape()
    assert value(fourth, "hermes_store_status", profile="legacy", status="unreadable") == 1
    assert value(fourth, "hermes_store_messages", profile="default") == value(first, "hermes_store_messages",
                                                                                profile="default") + 4
    assert value(fourth, "hermes_store_file_bytes", profile="default") == os.stat(db).st_size
    # Findings stay those of the latest pass until the next one.
    assert value(fourth, "hermes_findings", profile="default", severity="critical") == 0


def test_a_running_run_and_a_failed_one(hermes_home, token):
    from sessions_app import runs

    running = runs.begin(runs.create("apply", "command", actor_label="t"))
    failed = runs.begin(runs.create("check", "browser", actor_label="t"))
    runs.fail(failed, "ValueError: x")
    samples = scrape()
    assert value(samples, "hermes_runs_running", kind="apply") == 1
    assert value(samples, "hermes_run_running_seconds", kind="apply") >= 0
    assert value(samples, "hermes_run_last_outcome", kind="check", outcome="failed") == 1
    assert running.pk != failed.pk


def test_a_stored_report_of_another_shape_never_fails_a_scrape(hermes_home, token):
    from sessions_app import runs

    odd = runs.begin(runs.create("check", "command", actor_label="t"))
    runs.finish(odd, {"version": 99, "profiles": [{"profile": "default", "findings": [{"what": 1}]}], "summary": {}})
    samples = scrape()
    assert value(samples, "hermes_run_last_outcome", kind="check", outcome="error") == 1
    assert value(samples, "hermes_findings", profile="default", severity="critical") == 0


def test_runs_are_followed_from_scrape_to_scrape(hermes_home, token):
    from sessions_app import runs

    heal("--all-profiles", "--json")
    first = scrape()
    assert ("hermes_run_last_outcome", (("kind", "delete"), ("outcome", "clean"))) not in first
    going = runs.begin(runs.create("delete", "browser", actor_label="t"))
    second = scrape()
    assert value(second, "hermes_runs_running", kind="delete") == 1
    report = runs.RunReport(mode="delete")
    report.profile("default", "/x").actions.append(
        {"action": "delete_session", "session_id": "s", "status": "failed", "reason": "", "changes": []})
    runs.finish(going, report.as_json())
    orphan_messages(hermes_home)
    heal("--all-profiles", "--json")
    third = scrape()
    assert value(third, "hermes_runs_running", kind="delete") == 0
    assert value(third, "hermes_run_last_outcome", kind="delete", outcome="error") == 1
    latest = HealRun.objects.filter(mode="check").order_by("-pk").first()
    assert value(third, "hermes_check_pass_run", profile="default") == latest.pk
    assert value(third, "hermes_findings", profile="default", severity="critical") == 1


def test_the_sample_dashboard_and_alert_rules_use_metrics_that_exist(hermes_home, token):
    import json
    import re
    from pathlib import Path

    import yaml

    heal("--all-profiles", "--json")
    names = {name for name, _ in scrape()}
    docs = Path(__file__).resolve().parents[2] / "docs"
    rules = yaml.safe_load((docs / "alerts.yml").read_text())["groups"][0]["rules"]
    dashboard = json.loads((docs / "grafana-dashboard.json").read_text())
    exprs = [r["expr"] for r in rules] + [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    used = {n for e in exprs for n in re.findall(r"\bhermes_[a-z_]+", e)}
    assert used and used <= names, used - names
    assert all(r["alert"] and r["labels"]["severity"] in ("warning", "critical") for r in rules)
