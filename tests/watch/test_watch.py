"""``manage.py watch_stores`` (issue 18): a real subprocess that picks up damage made
to a store while it runs and stops on SIGTERM; cycles in this process for the lock,
the light pass and what "changed and idle" means."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from sessions_app.locks import run_lock
from sessions_app.models import HealRun
from sessions_app.watch import Watcher, last_change
from tests.actions.conftest import PROJECT, manage_env, run_manage, store

from .conftest import not_a_database, orphan_messages

GENEROUS = 30  # seconds: a bound for a loaded machine, not a timing claim


def wait_for(predicate, timeout: float = 120, step: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(step)
    return predicate()


def start_watch(home, data, *args, env=None):
    return subprocess.Popen(
        [sys.executable, "manage.py", "watch_stores", "--root", str(home), *args], cwd=PROJECT,
        env={**manage_env(data), **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture
def child_data(tmp_path):
    folder = tmp_path / "child-data"
    done = run_manage(["migrate", "-v0"], folder)
    assert done.returncode == 0, done.stderr
    return folder


def test_watch_stores_picks_up_damage_while_it_runs_and_stops_on_sigterm(hermes_home, child_data):
    from .hooks import webhook_server

    with webhook_server() as hook:
        proc = start_watch(hermes_home, child_data, "--interval", "0.5", "--idle", "1",
                           env={"HERMES_ADMIN_NOTIFY_WEBHOOK_URL": hook.url,
                                "HERMES_ADMIN_NOTIFY_WEBHOOK_FORMAT": "generic"})
        try:
            # First its own full pass of the stores (none was ever checked), clean.
            first_full = wait_for(lambda: [l for l in _lines(proc) if "full pass" in l], timeout=120)
            assert first_full, "no full pass"
            assert hook.count() == 0
            orphan_messages(hermes_home, profile="ops")  # damage, as a tool with foreign keys off does
            got = wait_for(lambda: hook.count() >= 1, timeout=120)
            assert got, "the damage was not reported"
            [body] = hook.bodies
            assert body["event"] == "new_critical" and body["profile"] == "ops"
            assert body["codes"] == {"orphan_messages": 1} and body["run_kind"] == "check"
            not_a_database(hermes_home / "profiles" / "legacy" / "state.db")
            assert wait_for(lambda: "store_unreadable" in hook.events(), timeout=120), hook.events()
            assert proc.poll() is None
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=GENEROUS)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        rest, errors = proc.communicate()
        assert proc.returncode == 0, errors
        assert hook.events().count("new_critical") == 1 and hook.events().count("store_unreadable") == 1
    out = "".join(_seen) + rest
    assert "not readable: legacy" in out and out.rstrip().endswith("watch_stores: stopped")


_seen: list[str] = []


def _lines(proc) -> list[str]:
    """Lines the child printed so far (read without blocking: one line per cycle)."""
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    while sel.select(timeout=0):
        line = proc.stdout.readline()
        if not line:
            break
        _seen.append(line)
    sel.close()
    return list(_seen)


def test_sigterm_while_it_cycles_leaves_no_run_running(hermes_home, child_data):
    # A short interval: a light pass is nearly always running when the signal comes.
    proc = start_watch(hermes_home, child_data, "--interval", "0.01", "--idle", "0.001")
    try:
        assert wait_for(lambda: len(_run_statuses(child_data)) >= 3, timeout=120)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=GENEROUS)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, proc.stderr.read()
    statuses = _run_statuses(child_data)
    assert "running" not in statuses and "queued" not in statuses  # nothing left "running" behind


def _run_statuses(data) -> list[str]:
    import sqlite3

    conn = sqlite3.connect(f"file:{data / 'hermes_admin.sqlite3'}?mode=ro", uri=True, timeout=5)
    try:
        return [r[0] for r in conn.execute("SELECT status FROM sessions_app_healrun")]
    except sqlite3.OperationalError:
        return []
    finally:
        conn.close()


# --------------------------------------------------------------------------- in process

@pytest.mark.django_db
def test_a_cycle_finding_the_lock_taken_is_skipped(hermes_home, data_dir):
    said = []
    with run_lock("heal", label="heal_sessions by cron"):
        Watcher(60, 1, say=said.append).cycle()
    assert len(said) == 1 and said[0].startswith("cycle skipped: another heal run is in progress")
    assert "heal_sessions by cron" in said[0]
    assert not HealRun.objects.exists()


@pytest.mark.django_db
def test_light_pass_then_full_pass_of_what_changed_once_idle(hermes_home, data_dir):
    said = []
    watcher = Watcher(60, 3600, say=said.append)  # an hour's idle window: nothing is idle yet
    watcher.cycle()
    [light] = HealRun.objects.all()
    assert light.trigger == "watch" and light.only and "orphan_messages" not in light.only
    assert "store_corrupt" not in light.only  # quick_check is not light
    assert {p["profile"] for p in light.report["profiles"]} == {"default", "archive", "edge", "legacy", "ops",
                                                                  "research"}
    watcher.idle = 0.0
    watcher.cycle()
    full = HealRun.objects.filter(only=[]).get()
    assert full.trigger == "watch" and len(full.profiles) == 6
    assert full.snapshots.exists()  # a whole pass: the health-over-time views count it
    # Nothing changed since that pass began: no new full pass.
    watcher.cycle()
    assert HealRun.objects.filter(only=[]).count() == 1
    orphan_messages(hermes_home, profile="research")
    s = store(hermes_home, "research")
    assert last_change(s) > full.started_at.timestamp()
    watcher.cycle()
    second = HealRun.objects.filter(only=[]).order_by("-pk").first()
    assert second.pk != full.pk and second.profiles == ["research"]
    assert any(f["check"] == "orphan_messages" for f in second.report["profiles"][0]["findings"])


@pytest.mark.django_db
def test_the_light_pass_reports_an_unreadable_store_at_once(hermes_home, data_dir, hook):
    watcher = Watcher(60, 3600, say=lambda line: None)
    watcher.cycle()
    not_a_database(hermes_home / "profiles" / "edge" / "state.db")
    watcher.cycle()
    assert hook.events() == ["store_unreadable"] and hook.bodies[0]["run_kind"] == "watch_light"
    watcher.cycle()
    assert hook.count() == 1


def test_bad_arguments_exit_2(hermes_home, child_data):
    for args in (["--interval", "0"], ["--interval", "soon"], ["--idle", "-1"], ["--root", "/no/such/dir"]):
        out = run_manage(["watch_stores", "--once", *args], child_data, timeout=120)
        assert out.returncode == 2 and out.stderr.strip(), (args, out.stderr)


def test_once_runs_one_cycle(hermes_home, child_data):
    out = run_manage(["watch_stores", "--root", str(hermes_home), "--once", "--idle", "0.001"], child_data,
                     timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("light pass run #") == 1 and "full pass of default" in out.stdout
    assert sorted(set(_run_statuses(child_data))) == ["done"]
    assert json.dumps(out.stdout)  # one line per cycle, plain text
    assert os.path.exists(child_data / "hermes_admin.sqlite3")


@pytest.mark.django_db
def test_the_runs_page_leaves_light_passes_out_unless_asked(hermes_home, data_dir, admin_client):
    from tests.actions.conftest import heal

    watcher = Watcher(60, 0.0, say=lambda line: None)
    watcher.cycle()  # one light pass, one full pass
    heal("--profile", "default", "--json")
    light = HealRun.objects.exclude(only=[]).get()
    full = HealRun.objects.filter(trigger="watch", only=[]).get()
    page = admin_client.get("/runs/").content.decode()
    assert f'href="/runs/{light.pk}/"' not in page and f'href="/runs/{full.pk}/"' in page
    assert "1 light pass of <code>watch_stores</code> not listed" in page
    everything = admin_client.get("/runs/?light=1").content.decode()
    assert f'href="/runs/{light.pk}/"' in everything and "light check (watch)" in everything
