"""A deletion or a restore killed (a real SIGKILL) right after its store commit is
finished by the next heal run, from what the store holds, and nothing is lost on the
way: the files are not trashed as leftovers, a purge keeps the unfinished entry, the
session's files end where the session is."""

import json
import os
import signal
import sqlite3
import subprocess
import sys

from .conftest import PROJECT, manage_env, run_manage, store
from ..conftest import ids

KILLER = r"""
import os, signal, sys
import django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hermes_admin.settings")
django.setup()
from sessions_app.actions import deletion
from sessions_app.actions.deletion import apply, restore
from sessions_app import trash
from sessions_app.stores import registry

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)  # right after the store's COMMIT, before anything else

what, sid = sys.argv[1], sys.argv[2]
registry.scan()
s = registry.get("default")
if what == "delete":
    apply.DeleteWrite.after_commit = die
    plan = deletion.plan_for(s, sid)
    item = deletion.unsign(deletion.sign([deletion.token_item(plan)]))[0]
    deletion.Deleter(actor_label="killed").delete(s, item)
else:
    restore.RestoreWrite.after_commit = die
    deletion.Deleter(actor_label="killed").restore(s, trash.get_entry(sid))
raise SystemExit("the write did not reach its commit")
"""


def killed(data, home, what: str, arg: str) -> int:
    env = dict(manage_env(data), HERMES_ROOTS=str(home))
    proc = subprocess.run([sys.executable, "-c", KILLER, what, arg], cwd=PROJECT, env=env,
                          capture_output=True, text=True, timeout=120)
    return proc.returncode


def entries(data):
    root = data / "trash" / "sessions"
    return [json.loads((p / "manifest.json").read_text()) | {"path": p} for p in sorted(root.iterdir())]


def count(s, sql, args=()):
    conn = sqlite3.connect(f"file:{s.path}?mode=ro", uri=True)
    try:
        return conn.execute(sql, args).fetchone()[0]
    finally:
        conn.close()


def heal(data, home, *extra):
    return run_manage(["heal_sessions", "--root", str(home), "--all-profiles", "--json", *extra], data)


def test_a_deletion_killed_after_its_commit_is_finished_and_restorable_with_its_files(aged_home, tmp_path):
    data = tmp_path / "run-data"
    data.mkdir()
    assert run_manage(["migrate", "-v0"], data).returncode == 0
    s = store(aged_home, "default")
    sid = ids("default")["hostile"]
    files = s.profile.sessions_dir
    files.mkdir(exist_ok=True)
    (files / f"{sid}.json").write_text('{"note": "the session\'s own dump"}')
    (files / f"{sid}.jsonl").write_text("")
    messages = count(s, "SELECT COUNT(*) FROM messages WHERE session_id = ?", (sid,))

    assert killed(data, aged_home, "delete", sid) == -signal.SIGKILL
    [entry] = entries(data)
    assert entry["state"] == "pending" and entry["targets"] == [sid]
    assert count(s, "SELECT COUNT(*) FROM sessions WHERE id = ?", (sid,)) == 0  # the store committed
    assert (files / f"{sid}.json").exists()  # ... the files never moved

    # A check-mode run writes nothing and offers no leftover repair for those files.
    check = json.loads(heal(data, aged_home, "--fail-on", "critical").stdout)
    default = next(p for p in check["profiles"] if p["profile"] == "default")
    assert not [f for f in default["findings"] if f["check"] == "leftover_files" and f["session_id"] == sid]
    assert (files / f"{sid}.json").exists() and entries(data)[0]["state"] == "pending"
    # A purge never removes the unfinished entry.
    assert run_manage(["purge_trash", "--older-than", "0"], data).returncode == 0
    assert entries(data)[0]["path"].exists()

    done = json.loads(heal(data, aged_home, "--apply", "--fail-on", "critical").stdout)
    default = next(p for p in done["profiles"] if p["profile"] == "default")
    [finish] = [a for a in default["actions"] if a["action"] == "finish_interrupted"]
    assert finish["status"] == "applied" and "finished the deletion" in finish["reason"]
    [entry] = entries(data)
    assert entry["state"] == "deleted" and sorted(os.listdir(entry["path"] / "files")) == [f"{sid}.json", f"{sid}.jsonl"]
    assert not (files / f"{sid}.json").exists()

    env = dict(manage_env(data), HERMES_ROOTS=str(aged_home))
    back = subprocess.run([sys.executable, "-c", KILLER.replace("restore.RestoreWrite.after_commit = die", "pass"),
                           "restore", entry["path"].name], cwd=PROJECT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert "did not reach" in back.stderr  # the restore ran to its end (the script exits after it)
    assert count(s, "SELECT COUNT(*) FROM messages WHERE session_id = ?", (sid,)) == messages
    assert (files / f"{sid}.json").read_text() == '{"note": "the session\'s own dump"}'


def test_a_restore_killed_after_its_commit_is_finished_with_its_files(aged_home, tmp_path):
    data = tmp_path / "run-data"
    data.mkdir()
    assert run_manage(["migrate", "-v0"], data).returncode == 0
    s = store(aged_home, "default")
    sid = ids("default")["long"]
    files = s.profile.sessions_dir
    files.mkdir(exist_ok=True)
    (files / f"{sid}.json").write_text("{}")
    env = dict(manage_env(data), HERMES_ROOTS=str(aged_home))
    first = subprocess.run([sys.executable, "-c", KILLER.replace("apply.DeleteWrite.after_commit = die", "pass"),
                            "delete", sid], cwd=PROJECT, env=env, capture_output=True, text=True, timeout=120)
    assert "did not reach" in first.stderr
    [entry] = entries(data)
    assert entry["state"] == "deleted" and (entry["path"] / "files" / f"{sid}.json").exists()

    assert killed(data, aged_home, "restore", entry["path"].name) == -signal.SIGKILL
    [entry] = entries(data)
    assert entry["state"] == "restoring"
    assert count(s, "SELECT COUNT(*) FROM sessions WHERE id = ?", (sid,)) == 1  # the rows are back
    assert (entry["path"] / "files" / f"{sid}.json").exists()  # ... the file is not yet
    assert run_manage(["purge_trash", "--older-than", "0"], data).returncode == 0
    assert entries(data)[0]["path"].exists()  # never purged while unfinished

    done = json.loads(heal(data, aged_home, "--apply", "--fail-on", "critical").stdout)
    default = next(p for p in done["profiles"] if p["profile"] == "default")
    [finish] = [a for a in default["actions"] if a["action"] == "finish_interrupted"]
    assert finish["status"] == "applied" and "finished the restore" in finish["reason"]
    assert entries(data)[0]["state"] == "restored"
    assert (files / f"{sid}.json").read_text() == "{}"
    audit = sqlite3.connect(data / "hermes_admin.sqlite3")
    outcomes = audit.execute("SELECT action, outcome FROM sessions_app_auditevent ORDER BY id").fetchall()
    audit.close()
    assert ("restore_session", "applied") in outcomes  # the finishing step, audited


REPAIR_KILLER = r"""
import os, signal, sys
import django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hermes_admin.settings")
django.setup()
from django.core.management import call_command
from sessions_app.actions import engine

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)  # the repair committed; its audit event still says "started"

engine.RepairWrite.after_commit = die
call_command("heal_sessions", "--root", sys.argv[1], "--profile", "edge", "--only", "orphan_messages", "--apply")
"""


def test_a_repair_killed_after_its_commit_is_reconciled_by_the_next_run(aged_home, tmp_path):
    from ..checks.helpers import damage

    data = tmp_path / "run-data"
    data.mkdir()
    assert run_manage(["migrate", "-v0"], data).returncode == 0
    s = store(aged_home, "edge")
    with damage(s) as db:
        db.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', 'q', 1.7e9)",
                   ("20260101_000000_00dead",))
    proc = subprocess.run([sys.executable, "-c", REPAIR_KILLER, str(aged_home)], cwd=PROJECT, env=manage_env(data),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL
    assert count(s, "SELECT COUNT(*) FROM sessions WHERE id = ?", ("20260101_000000_00dead",)) == 1  # committed
    audit = sqlite3.connect(data / "hermes_admin.sqlite3")
    [(outcome, reason)] = audit.execute("SELECT outcome, reason FROM sessions_app_auditevent "
                                        "WHERE action = 'recreate_session_row'").fetchall()
    [(status,)] = audit.execute("SELECT status FROM sessions_app_healrun").fetchall()
    audit.close()
    assert (outcome, status) == ("failed", "running") and reason.startswith("started")

    assert heal(data, aged_home, "--fail-on", "critical").returncode == 0  # a check run: it reconciles
    audit = sqlite3.connect(data / "hermes_admin.sqlite3")
    [(outcome, reason)] = audit.execute("SELECT outcome, reason FROM sessions_app_auditevent "
                                        "WHERE action = 'recreate_session_row'").fetchall()
    statuses = [r[0] for r in audit.execute("SELECT status FROM sessions_app_healrun ORDER BY id")]
    audit.close()
    assert outcome == "applied" and "reconciled" in reason and "the store holds the repair" in reason
    assert statuses[0] == "failed"  # the killed run is no longer "running"


def test_a_heal_run_leaves_a_deletion_in_progress_alone(aged_home, use_roots, monkeypatch, db):
    """A heal run starting while a browser deletion is between its export and its
    COMMIT must not take the entry for an interrupted one (its rows are all still in
    the store then): the deletion ends with its entry and files intact."""
    from sessions_app import trash
    from sessions_app.actions import deletion
    from sessions_app.actions.deletion import apply, resume

    use_roots(aged_home)
    s = store(aged_home, "default")
    sid = ids("default")["hostile"]
    s.profile.sessions_dir.mkdir(exist_ok=True)
    (s.profile.sessions_dir / f"{sid}.json").write_text("{}")
    real = apply.export_and_delete
    settled = []

    def export_then_a_heal_starts(*args, **kwargs):
        counts = real(*args, **kwargs)
        settled.extend(resume.finish_unfinished(s))  # what a cron heal run does first
        return counts

    monkeypatch.setattr(apply, "export_and_delete", export_then_a_heal_starts)
    plan = deletion.plan_for(s, sid)
    done = deletion.Deleter(actor_label="test").delete(s, deletion.unsign(deletion.sign([deletion.token_item(plan)]))[0])
    assert [o.status for o in settled] == ["skipped"] and "still being written" in settled[0].reason
    assert done.status == "applied" and not done.problems, done.reason
    entry = trash.get_entry(done.entry.id)
    assert entry.state == "deleted" and (entry.files_dir / f"{sid}.json").exists()
