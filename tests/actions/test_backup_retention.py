"""Backup retention (`manage.py purge_backups`): old copies go, the newest of each
store stay whatever their age, every removal is audited, nothing runs beside a heal."""

import json
import os
import sqlite3
import time
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from sessions_app.locks import run_lock
from sessions_app.models import AuditEvent
from sessions_app.stores import backup
from tests.actions.conftest import store

pytestmark = pytest.mark.django_db
DAY = 86_400


def _backups(home, key, n):
    """``n`` real, verified backups of ``key``'s store, oldest first."""
    return [backup.backup_store(store(home, key), label=f"run{i}") for i in range(n)]


def _purge(*args) -> dict:
    out = StringIO()
    call_command("purge_backups", "--json", *args, stdout=out)
    return json.loads(out.getvalue())


def _age(folder: Path, days: float) -> None:
    """Make a backup ``days`` old: in its manifest, as a past run would have left it."""
    meta = json.loads((folder / "backup.json").read_text())
    meta["created_at"] = time.time() - days * DAY
    (folder / "backup.json").write_text(json.dumps(meta))


def test_old_backups_go_but_the_newest_of_each_store_stay(hermes_home):
    ops = _backups(hermes_home, "ops", 3)
    research = _backups(hermes_home, "research", 1)
    for record in ops + research:
        _age(Path(record.path).parent, 40)
    report = _purge("--keep", "2")
    removed = [Path(p["path"]) for p in report["purged"]]
    assert removed == [Path(ops[0].path).parent]
    assert not removed[0].exists()
    for record in ops[1:] + research:  # the kept copies are intact and still verify
        conn = sqlite3.connect(record.path)
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        conn.close()
    [event] = AuditEvent.objects.filter(action="purge_backup")
    assert event.profile == "ops" and event.plan["path"] == str(removed[0]) and event.outcome == "applied"
    assert event.store_path == str(store(hermes_home, "ops").path)


def test_recent_backups_stay_and_a_dry_run_removes_nothing(hermes_home):
    records = _backups(hermes_home, "ops", 2)
    assert _purge("--keep", "1")["purged"] == []  # younger than the 30-day default
    assert _purge("--keep", "1", "--older-than", "0")["purged"] == []  # younger than the hour of grace
    _age(Path(records[0].path).parent, 31)
    dry = _purge("--keep", "1", "--dry-run")
    assert [p["path"] for p in dry["purged"]] == [str(Path(records[0].path).parent)] and dry["dry_run"]
    assert all(Path(r.path).exists() for r in records)
    assert not AuditEvent.objects.filter(action="purge_backup").exists()


def test_a_copy_without_manifest_goes_by_age_only(hermes_home, data_dir):
    kept = _backups(hermes_home, "ops", 1)[0]
    failed = backup.backups_dir() / "20200101-000000-ops-left-for-inspection"
    failed.mkdir()
    (failed / "state.db").write_bytes(b"partial copy")
    assert _purge("--older-than", "0")["purged"] == []  # its mtime is now: maybe a copy being taken
    old = time.time() - 40 * DAY
    os.utime(failed, (old, old))
    report = _purge("--older-than", "30", "--keep", "5")
    assert [p["path"] for p in report["purged"]] == [str(failed)] and report["purged"][0]["verified"] is False
    assert Path(kept.path).exists()


def test_a_copy_from_before_manifests_is_known_from_the_audit_trail(hermes_home):
    """A heal run's backup recorded in its audit event is a verified copy of its
    store: as the store's only copy it stays, whatever its age."""
    s = store(hermes_home, "ops")
    record = backup.backup_store(s)
    folder = Path(record.path).parent
    (folder / "backup.json").unlink()  # as backups were written before manifests
    old = time.time() - 400 * DAY
    os.utime(folder, (old, old))
    AuditEvent.objects.create(actor_label="cron", action="recount_session", profile="ops", store_path=str(s.path),
                              outcome="applied", backup_path=record.path, backup_sha256=record.sha256,
                              backup_size=record.size)
    assert _purge("--older-than", "30")["purged"] == []
    newer = _backups(hermes_home, "ops", 1)[0]
    _age(Path(newer.path).parent, 1)
    report = _purge("--older-than", "30", "--keep", "1")
    assert [p["path"] for p in report["purged"]] == [str(folder)] and report["purged"][0]["verified"] is True


@pytest.mark.parametrize("args,says", [(["--keep", "0"], "--keep must be 1 or more"),
                                       (["--keep", "-1"], "--keep must be 1 or more"),
                                       (["--older-than", "-2"], "--older-than must be 0 or more"),
                                       (["--keep", "many"], "invalid int value: 'many'")])
def test_wrong_arguments_are_refused(hermes_home, args, says):
    record = _backups(hermes_home, "ops", 1)[0]
    _age(Path(record.path).parent, 40)
    with pytest.raises(CommandError) as refused:
        call_command("purge_backups", *args, stdout=StringIO(), stderr=StringIO())
    assert says in str(refused.value) and Path(record.path).exists()


def test_purge_waits_for_a_running_heal(hermes_home):
    record = _backups(hermes_home, "ops", 1)[0]
    _age(Path(record.path).parent, 40)
    with run_lock("heal", label="run #4 by cron"):
        with pytest.raises(CommandError) as refused:
            call_command("purge_backups", "--older-than", "1", stdout=StringIO())
    assert refused.value.returncode == 2 and "run #4 by cron" in str(refused.value)
    assert Path(record.path).exists()
    newer = _backups(hermes_home, "ops", 1)[0]
    assert _purge("--older-than", "1", "--keep", "1")["purged"][0]["path"] == str(Path(record.path).parent)
    assert Path(newer.path).exists()


def test_a_backup_killed_midway_is_garbage_for_purge_after_the_grace(aged_home, tmp_path):
    """A real SIGKILL after the copy, before the backup is described and put in place,
    leaves a ``.partial`` folder: never taken for a verified copy, and purged once it
    is older than the grace, whatever the retention."""
    import os
    import signal
    import subprocess
    import sys
    import time as clock

    from .conftest import PROJECT, manage_env, run_manage

    data = tmp_path / "run-data"
    data.mkdir()
    assert run_manage(["migrate", "-v0"], data).returncode == 0
    script = (
        "import os, signal, django\n"
        "os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'hermes_admin.settings')\n"
        "django.setup()\n"
        "from sessions_app.stores import backup, registry\n"
        "backup._write_manifest = lambda *a: os.kill(os.getpid(), signal.SIGKILL)\n"
        "registry.scan()\n"
        "backup.backup_store(registry.get('default'), label='killed')\n")
    env = dict(manage_env(data), HERMES_ROOTS=str(aged_home))
    proc = subprocess.run([sys.executable, "-c", script], cwd=PROJECT, env=env, capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL
    [left] = list((data / "backups").iterdir())
    assert left.name.endswith(".partial") and (left / "state.db").exists()
    assert run_manage(["purge_backups", "--json"], data).returncode == 0
    assert left.exists()  # younger than the grace: it might still be being written
    old = clock.time() - 2 * 3600
    os.utime(left, (old, old))
    done = run_manage(["purge_backups", "--json"], data)
    assert done.returncode == 0, done.stderr
    assert not left.exists() and str(left) in done.stdout


def test_a_data_disk_too_small_for_a_backup_is_tried_once_per_store(aged_home, monkeypatch):
    """With no room for a backup nothing is written, and the backup is not tried again
    for every planned repair of that store (each try would fill the disk once more)."""
    from sessions_app.actions.heal import heal
    from sessions_app.stores import backup as backups

    from ..checks.helpers import damage
    from .conftest import store

    s = store(aged_home, "edge")
    with damage(s) as db:
        for n in range(5):
            db.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', 'q', 1.7e9)",
                       (f"20260101_000000_{n:06x}",))
    monkeypatch.setattr(backups, "FREE_MARGIN_BYTES", 1 << 60)  # more room than any disk has
    tries = []
    real = backups.backup_store
    monkeypatch.setattr(backups, "backup_store", lambda *a, **k: tries.append(1) or real(*a, **k))
    report = heal([s], only=["orphan_messages"], apply=True)
    actions = report["profiles"][0]["actions"]
    assert len(actions) == 5 and {a["status"] for a in actions} == {"failed"}
    assert all("not enough free space" in a["reason"] for a in actions)
    assert len(tries) == 1


def test_a_backup_holding_rows_the_store_lost_is_kept_past_its_retention(aged_home, use_roots, settings):
    """Copies on disk are never removed while they hold what the store lacks: an old
    backup with messages a still-existing session lost is kept by purge_backups, and
    removed once nothing of it is missing any more."""
    import os

    from sessions_app.stores import backup as backups

    from ..checks.helpers import damage
    from ..conftest import ids
    from .conftest import store

    use_roots(aged_home)
    s = store(aged_home, "default")
    sid = ids("default")["long"]
    first = backups.backup_store(s, label="before")
    with damage(s) as db:  # history lost under a live session: the rows go, the session stays
        db.execute("DELETE FROM messages WHERE id IN (SELECT id FROM messages WHERE session_id = ? LIMIT 3)", (sid,))
    backups.backup_store(s, label="after")
    folder = Path(first.path).parent
    old = time.time() - 90 * 86400
    os.utime(folder, (old, old))
    manifest = json.loads((folder / "backup.json").read_text())
    manifest["created_at"] = old
    (folder / "backup.json").write_text(json.dumps(manifest))
    out, err = StringIO(), StringIO()
    call_command("purge_backups", "--older-than", "30", "--keep", "1", stdout=out, stderr=err)
    assert folder.exists() and "still holds 3 message row(s) its store lost" in err.getvalue()
