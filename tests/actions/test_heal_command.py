"""The cron contract of heal_sessions: arguments, exit statuses, output, the lock,
and what survives a concurrent Hermes writer or a SIGKILL."""

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from sessions_app.locks import run_lock
from tests.checks.helpers import damage, hermes_background, release_python  # noqa: F401
from tests.conftest import IDS

from .conftest import DAY, heal, profile_entry, run_manage, store

pytestmark = pytest.mark.django_db
PROJECT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("args, message", [
    ((), "--profile NAME"),
    (("--profile", "nope"), "unknown profile(s): nope"),
    (("--all-profiles", "--only", "orphan_messages,bogus"), "unknown check code(s): bogus"),
    (("--all-profiles", "--profile", "default"), "not both"),
    (("--all-profiles", "--root", "/does/not/exist"), "no such directory"),
])
def test_wrong_usage_exits_2_and_writes_nothing(aged_home, data_dir, args, message):
    code, text = heal(*args)
    assert code == 2 and message in text
    assert list(data_dir.iterdir()) == []


def test_no_root_at_all_exits_2(use_roots, monkeypatch, tmp_path):
    use_roots()
    monkeypatch.delenv("HERMES_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    code, text = heal("--all-profiles")
    assert code == 2 and "no Hermes root" in text


def test_root_option_overrides_the_configured_roots(aged_home, use_roots, tmp_path):
    use_roots(tmp_path / "elsewhere")
    code, report = heal("--root", str(aged_home), "--profile", "edge", "--only", "orphan_messages", "--json")
    assert code == 0 and [p["profile"] for p in report["profiles"]] == ["edge"]


def test_report_shape(aged_home):
    code, report = heal("--all-profiles", "--only", "orphan_messages,counter_drift", "--json")
    assert set(report) == {"version", "mode", "started_at", "finished_at", "profiles", "summary"}
    assert report["version"] == 2 and report["mode"] == "check"
    entry = profile_entry(report, "default")
    assert set(entry) == {"profile", "root", "path", "status", "schema_version", "error", "findings", "actions", "backup"}
    assert entry["schema_version"] == 22 and entry["status"] == "ok"
    for f in entry["findings"]:
        assert set(f) == {"check", "severity", "session_id", "count", "detail", "heal"}
    assert set(report["summary"]) == {"profiles", "critical", "warning", "info", "planned", "applied", "skipped", "refused", "failed"}


def test_exit_status_follows_fail_on(aged_home):
    s = store(aged_home, "default")
    with damage(s) as db:
        db.execute("UPDATE sessions SET message_count = message_count + 3 WHERE id = ?", (IDS["cli_main"],))
    code, _ = heal("--profile", "default", "--only", "counter_drift", "--json")
    assert code == 1  # warning-level drift, default --fail-on warning
    code, _ = heal("--profile", "default", "--only", "counter_drift", "--fail-on", "critical", "--json")
    assert code == 0


def test_a_damaged_store_exits_2_and_the_others_are_still_processed(aged_home):
    (aged_home / "profiles" / "legacy" / "state.db").write_text("not a database at all\n" * 100)
    code, report = heal("--all-profiles", "--only", "orphan_messages", "--json")
    assert code == 2
    assert profile_entry(report, "legacy")["status"] == "unreadable"
    assert profile_entry(report, "default")["status"] == "ok"


def test_a_clean_run_prints_only_the_result(aged_home):
    code, text = heal("--all-profiles", "--only", "orphan_messages")
    assert code == 0
    assert text.strip().splitlines() == [
        "check: 6 profile(s), 6 with nothing to report; 0 critical, 0 warning, 0 info; applied 0, skipped 0, refused 0, failed 0"
    ]


def test_a_second_run_waits_for_no_one_and_says_who_holds_the_lock(aged_home):
    with run_lock("heal", label="run #7 by alice"):
        code, text = heal("--all-profiles", "--only", "orphan_messages")
    assert code == 2 and "another heal run is in progress" in text and "run #7 by alice" in text


def test_a_lock_conflict_with_json_prints_the_error_document(aged_home):
    from io import StringIO

    from django.core.management import CommandError, call_command

    out = StringIO()
    with run_lock("heal", label="run #8 by bob"), pytest.raises(CommandError) as refused:
        call_command("heal_sessions", "--all-profiles", "--json", stdout=out, stderr=StringIO())
    report = json.loads(out.getvalue())
    assert refused.value.returncode == 2 and report["profiles"] == [] and "run #8 by bob" in report["error"]


def test_unwritable_data_folder_exits_2(aged_home, tmp_path):
    data = tmp_path / "ro-data"
    data.mkdir()
    assert run_manage(["migrate", "-v0"], data).returncode == 0
    data.chmod(0o555)
    try:
        command = [sys.executable, "manage.py", "heal_sessions", "--root", str(aged_home), "--all-profiles", "--apply"]
        if os.geteuid() == 0:  # root ignores file modes unless it gives up DAC override
            command = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"] + command
        env = dict(os.environ, HERMES_ADMIN_DATA=str(data), HERMES_ADMIN_SECRET_KEY="test")
        env.pop("DATABASE_URL", None)
        out = subprocess.run(command, cwd=PROJECT, env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 2, out.stderr
        assert "not writable" in out.stderr
    finally:
        data.chmod(0o755)
    assert sorted(p.name for p in data.iterdir()) == ["hermes_admin.sqlite3", "logs", "static"]


def test_concurrent_hermes_writer_loses_nothing(aged_home, tmp_path):
    """A real 0.19.0 SessionDB appends throughout a heal --apply of the same store."""
    s = store(aged_home, "default")
    busy = IDS["cli_main"]
    with damage(s) as db:
        db.execute("DELETE FROM sessions WHERE id = ?", (IDS["long"],))  # orphans to recreate
        db.execute("UPDATE sessions SET message_count = 99 WHERE id = ?", (busy,))  # drift the writer's session
    writer = hermes_background(s, f"""
print("READY", flush=True)
written, errors = [], []
deadline = time.time() + 8
i = 0
while time.time() < deadline:
    try:
        written.append(db.append_message({busy!r}, 'user' if i % 2 == 0 else 'assistant', f'live turn {{i}}'))
    except Exception as exc:
        errors.append(repr(exc))
    i += 1
    time.sleep(0.01)
print(json.dumps({{"written": written, "errors": errors}}), flush=True)
""")
    data = tmp_path / "run-data"
    data.mkdir()
    assert run_manage(["migrate", "-v0"], data).returncode == 0
    healed = run_manage(["heal_sessions", "--root", str(aged_home), "--profile", "default", "--apply", "--json"], data)
    out, err = writer.communicate(timeout=60)
    result = json.loads(out.strip().splitlines()[-1])
    assert result["errors"] == [] and len(result["written"]) > 10
    report = json.loads(healed.stdout)
    actions = profile_entry(report, "default")["actions"]
    assert any(a["action"] == "recreate_session_row" and a["status"] == "applied" for a in actions)
    busy_actions = [a for a in actions if a["session_id"] == busy]
    assert busy_actions and all(a["status"] in ("skipped", "refused") for a in busy_actions)
    with s.read() as conn:
        ids = {r[0] for r in conn.execute("SELECT id FROM messages WHERE session_id = ?", (busy,))}
    assert set(result["written"]) <= ids


def test_sigkill_mid_run_leaves_stores_consistent_and_the_next_run_completes(aged_home, tmp_path):
    s = store(aged_home, "edge")
    orphans = []
    with damage(s) as db:
        for n in range(60):
            sid = f"20260101_000000_{n:06x}"
            orphans.append(sid)
            db.executemany("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
                           [(sid, "user", f"q{n}", 1.7e9 + n), (sid, "assistant", f"a{n}", 1.7e9 + n + 1)])
    data = tmp_path / "run-data"
    data.mkdir()
    assert run_manage(["migrate", "-v0"], data).returncode == 0
    env = dict(os.environ, HERMES_ADMIN_DATA=str(data), HERMES_ADMIN_SECRET_KEY="test")
    env.pop("DATABASE_URL", None)
    proc = subprocess.Popen([sys.executable, "manage.py", "heal_sessions", "--root", str(aged_home), "--profile", "edge",
                             "--only", "orphan_messages", "--apply"], cwd=PROJECT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    audit = sqlite3.connect(data / "hermes_admin.sqlite3", timeout=10)
    deadline = time.time() + 120
    while time.time() < deadline:
        n = audit.execute("SELECT COUNT(*) FROM sessions_app_auditevent WHERE outcome = 'applied'").fetchone()[0]
        if n >= 3 or proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    audit.close()
    with s.read() as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        for sid in orphans:  # each orphan session either untouched or fully healed
            row = conn.execute("SELECT source FROM sessions WHERE id = ?", (sid,)).fetchone()
            assert row is None or row[0] == "unknown"
            assert conn.execute("SELECT COUNT(*) FROM messages WHERE session_id = ?", (sid,)).fetchone() == (2,)
    again = run_manage(["heal_sessions", "--root", str(aged_home), "--profile", "edge", "--only", "orphan_messages",
                         "--apply", "--json"], data)
    assert again.returncode == 0, again.stderr
    with s.read() as conn:
        present = {r[0] for r in conn.execute("SELECT id FROM sessions WHERE source = 'unknown'")}
    assert set(orphans) <= present
    shutil.rmtree(data / "backups", ignore_errors=True)


def test_a_root_that_is_not_a_hermes_home_fails_loudly(hermes_home, tmp_path):
    """A mistyped root in a crontab must not pass every night as "nothing to do"."""
    from sessions_app.stores.discovery import NOT_A_HOME

    stray = tmp_path / "not-hermes"
    stray.mkdir()
    (stray / "notes.txt").write_text("hello")
    code, message = heal("--root", str(stray), "--all-profiles", "--apply")
    assert code == 2 and "not a Hermes home" in message and str(stray) in message
    out = StringIO()
    with pytest.raises(CommandError):
        call_command("heal_sessions", "--root", str(stray), "--all-profiles", "--json", stdout=out, stderr=StringIO())
    assert "not a Hermes home" in json.loads(out.getvalue())["error"]  # --json consumers get a document
    code, report = heal("--root", str(hermes_home), "--all-profiles", "--json")
    assert report["profiles"] and "skipped_roots" not in report  # a real home still works
    # Beside a good root, the good one is still healed and the run exits 2 at the end.
    code, report = heal("--root", str(hermes_home), "--root", str(stray), "--all-profiles", "--json")
    assert code == 2 and len(report["profiles"]) == 6
    assert report["skipped_roots"] == [f"{stray}: {NOT_A_HOME}"]
    from sessions_app.models import HealRun
    run = HealRun.objects.latest("id")
    assert run.report["skipped_roots"] == report["skipped_roots"]
    from django.contrib.auth.models import User
    from django.test import Client
    client = Client()
    client.force_login(User.objects.create_superuser("root-admin", password="x"))
    assert f'Root skipped: <code dir="auto">{stray}: not a Hermes home' in client.get(f"/runs/{run.pk}/").content.decode()
    key = report["profiles"][0]["profile"]
    code, report = heal("--root", str(hermes_home), "--root", str(stray), "--profile", key, "--json")
    assert code == 2 and report["skipped_roots"]  # a named profile does not hide a broken root
