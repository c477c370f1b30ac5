"""The data folder is private to the dashboard's user whatever the umask (issue 13,
point 1): real ``manage.py`` processes started with umask 022 migrate, take a
heal's backup, delete a session into the trash through a background job and log
a failed login; every folder they made is 0700 and every file 0600. A looser
existing folder or file is reported at start, with the path and the fix."""

import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hermes_admin.private import loose_paths
from tests.actions.conftest import DAY, age_store
from tests.conftest import copy_home, ids

PROJECT = Path(__file__).resolve().parents[2]
SID = ids("default")["cli_main"]


def manage(data: Path, *args, roots: Path | None = None, timeout: float = 600, umask: int = 0o022):
    """``manage.py ARGS`` in a fresh process started with ``umask`` (the shell's usual 022)."""
    env = dict(os.environ, HERMES_ADMIN_DATA=str(data))
    for name in ("HERMES_ROOTS", "HERMES_HOME", "DATABASE_URL", "HERMES_ADMIN_SECRET_KEY", "HERMES_ADMIN_LOG_FILE",
                 "HERMES_ADMIN_JOB_RUNNER"):
        env.pop(name, None)
    if roots is not None:
        env["HERMES_ROOTS"] = str(roots)
    return subprocess.run([sys.executable, "manage.py", *args], cwd=PROJECT, env=env, capture_output=True,
                          text=True, timeout=timeout, preexec_fn=lambda: os.umask(umask))


def modes(root: Path) -> dict[str, int]:
    """Relative path -> permission bits of everything under ``root`` (``.`` itself)."""
    out = {".": stat.S_IMODE(os.lstat(root).st_mode)}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            out[str(path.relative_to(root))] = stat.S_IMODE(os.lstat(path).st_mode)
    return out


@pytest.fixture
def aged(tmp_path):
    home = copy_home(tmp_path / "hermes")
    for db in [home / "state.db", *home.glob("profiles/*/state.db")]:
        age_store(db, 40 * DAY)
    return home


DELETE_IN_A_JOB = textwrap.dedent(f"""
    from django.contrib.auth import authenticate
    from django.test import RequestFactory
    from sessions_app import jobs
    from sessions_app.actions import deletion
    from sessions_app.models import HealRun
    from sessions_app.stores import registry

    store = registry.get("default")
    plan = deletion.plan_for(store, {SID!r})
    item = deletion.unsign(deletion.sign([deletion.token_item(plan)]))[0]
    run = HealRun.objects.create(mode="delete", trigger="browser", actor_label="test", plans=[item], total=1,
                                 profiles=["default"])
    jobs.start(run).wait()  # a detached manage.py run_job, its output in logs/run-<id>.log
    run.refresh_from_db()
    print("RUN", run.status, run.error)
    # A failed login: an audit event and a line in the log file.
    authenticate(RequestFactory().post("/login/"), username="mallory", password="guess")
""")


def test_everything_the_dashboard_creates_is_private_under_umask_022(aged, tmp_path):
    data = tmp_path / "data"  # does not exist yet: the first command creates it
    jsonl = aged / "sessions" / f"{SID}.jsonl"
    jsonl.write_text('{"role": "user", "content": "hello"}\n')
    jsonl.chmod(0o644)  # as Hermes leaves its files

    assert manage(data, "migrate", "-v0").returncode == 0
    out = manage(data, "ensure_admin")
    assert out.returncode == 0, out.stderr
    out = manage(data, "heal_sessions", "--root", str(aged), "--all-profiles", "--apply", "--json")
    assert out.returncode in (0, 1), out.stderr
    out = manage(data, "shell", "-c", DELETE_IN_A_JOB, roots=aged)
    assert out.returncode == 0 and "RUN done" in out.stdout, out.stdout + out.stderr

    made = modes(data)
    # What the commands were to create is there.
    assert {"hermes_admin.sqlite3", "secret_key", "admin-password", "locks/heal.lock",
            "logs/hermes-admin.log"} <= set(made)
    assert any(p.startswith("backups/") and p.endswith("/state.db") for p in made)
    # The heal's backups (several stores) and the deletion's.
    assert sum(p.startswith("backups/") and p.endswith("/backup.json") for p in made) >= 3
    assert any(p.startswith("logs/run-") for p in made)
    entry = [p for p in made if p.startswith("trash/sessions/") and p.count("/") == 2]
    assert len(entry) == 1
    assert {f"{entry[0]}/manifest.json", f"{entry[0]}/rows.sqlite3", f"{entry[0]}/files/{SID}.jsonl"} <= set(made)
    assert "failed login as '<an unknown user name of 7 characters>'" in (data / "logs" / "hermes-admin.log").read_text()

    moved_in = f"{entry[0]}/files/{SID}.jsonl"
    for path, mode in made.items():
        if path == moved_in:
            # Moved from the Hermes home: keeps its mode (a restore puts it back as it
            # was); the 0700 folders above it keep other users out.
            assert mode == 0o644
        elif (data / path).is_dir():
            assert mode == 0o700, f"{path} is {mode:04o}"
        else:
            assert mode == 0o600, f"{path} is {mode:04o}"
    # And the start-up check agrees: nothing to report.
    out = manage(data, "check", "--fail-level", "WARNING")
    assert out.returncode == 0 and "hermes_admin.W" not in out.stderr, out.stderr


def test_the_demo_home_in_the_data_folder_is_private(tmp_path):
    data = tmp_path / "data"
    out = manage(data, "make_demo_home")
    assert out.returncode == 0, out.stderr
    made = modes(data / "demo-home")
    assert made and all(m == (0o700 if (data / "demo-home" / p).is_dir() else 0o600) for p, m in made.items())


def test_a_loose_data_folder_is_reported_with_the_path_and_the_fix(tmp_path):
    data = tmp_path / "data"
    assert manage(data, "migrate", "-v0").returncode == 0
    data.chmod(0o755)  # as an older version (or a umask-022 mkdir) left it
    (data / "hermes_admin.sqlite3").chmod(0o644)
    (data / "backups" / "old").mkdir(parents=True)
    (data / "backups" / "old").chmod(0o755)

    out = manage(data, "check")
    assert out.returncode == 0  # a warning, not a refusal to start
    assert f"(hermes_admin.W001) The data folder {data} is accessible by other users (mode 0755)" in out.stderr
    assert f"HINT: chmod 700 {data}" in out.stderr
    assert "(hermes_admin.W002) 2 folder(s) or file(s)" in out.stderr
    assert f"{data / 'hermes_admin.sqlite3'} (file, mode 0644)" in out.stderr
    assert f"{data / 'backups' / 'old'} (folder, mode 0755)" in out.stderr
    assert f"HINT: chmod -R go-rwx {data}" in out.stderr
    assert manage(data, "check", "--fail-level", "WARNING").returncode != 0

    # The web server runs no system checks: the WSGI entry point logs the same.
    env = dict(os.environ, HERMES_ADMIN_DATA=str(data), HERMES_ADMIN_LOG_FILE="")
    env.pop("DATABASE_URL", None)
    out = subprocess.run([sys.executable, "-c", "import hermes_admin.wsgi"], cwd=PROJECT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "WARNING sessions_app.security: hermes_admin.W001" in out.stderr and f"chmod 700 {data}" in out.stderr

    # The fix works.
    subprocess.run(["chmod", "-R", "go-rwx", str(data)], check=True)
    out = manage(data, "check", "--fail-level", "WARNING")
    assert out.returncode == 0 and "hermes_admin.W" not in out.stderr, out.stderr


def test_files_moved_in_from_a_hermes_home_are_left_to_their_folders(tmp_path):
    data = tmp_path / "data"
    for folder in ("trash/sessions/20260101-000000-default-x-abc123/files", "trash/files/20260101-000000/default/sessions",
                   "archive/jsonl/20260101-000000/default/sessions", "backups/20260101-000000-default"):
        (data / folder).mkdir(parents=True, mode=0o700)
    for path in ("trash/sessions/20260101-000000-default-x-abc123/files/x.jsonl",
                 "trash/files/20260101-000000/default/sessions/y.json",
                 "archive/jsonl/20260101-000000/default/sessions/z.jsonl",
                 "trash/sessions/20260101-000000-default-x-abc123/manifest.json",
                 "backups/20260101-000000-default/backup.json"):
        (data / path).write_text("{}")
        (data / path).chmod(0o644)
    for folder, _, _ in os.walk(data):
        os.chmod(folder, 0o700)
    (data / "link").symlink_to("/etc/passwd")  # not followed, not judged

    top, inside, truncated = loose_paths(data)
    assert top is None and not truncated
    # Our own files are judged; the three moved in from a Hermes home are not.
    assert sorted(str(e.path.relative_to(data)) for e in inside) == [
        "backups/20260101-000000-default/backup.json", "trash/sessions/20260101-000000-default-x-abc123/manifest.json"]
    # ...unless a folder above them is loose.
    (data / "archive" / "jsonl").chmod(0o755)
    assert "archive/jsonl" in [str(e.path.relative_to(data)) for e in loose_paths(data)[1]]


def test_the_walk_is_bounded(tmp_path):
    for n in range(30):
        (tmp_path / f"f{n}").write_text("")
        (tmp_path / f"f{n}").chmod(0o644)
    top, inside, truncated = loose_paths(tmp_path, limit=10)
    assert truncated and len(inside) == 10


def test_a_missing_data_folder_is_created_private_even_with_missing_parents(tmp_path):
    data = tmp_path / "a" / "b" / "data"
    out = manage(data, "check")
    assert out.returncode == 0, out.stderr
    for folder in (tmp_path / "a", tmp_path / "a" / "b", data):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    shutil.rmtree(tmp_path / "a")
