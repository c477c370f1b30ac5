"""Every cron line the README documents leaves the data folder private: run through
``sh -c`` as cron runs it (umask 022), its redirected report is 0600 and
``manage.py check`` reports no ``hermes_admin.W002`` afterwards. Without the line's
``umask 077;`` the shell creates the report 0644 (the regression this guards)."""

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.actions.conftest import DAY, age_store
from tests.conftest import copy_home

from .test_data_folder import manage

PROJECT = Path(__file__).resolve().parents[2]
SCHEDULE = re.compile(r"^(?:[0-9*/,-]+ ){5}\s*(?P<command>.+)$")


def readme_cron_lines() -> list[str]:
    """The commands (schedule dropped) of the cron lines in README.md's code blocks."""
    lines, inside = [], False
    for line in (PROJECT / "README.md").read_text().splitlines():
        if line.startswith("```"):
            inside = not inside
            continue
        match = SCHEDULE.match(line) if inside else None
        if match:
            lines.append(match.group("command"))
    return lines


def as_here(command: str, data: Path) -> str:
    """The line as it runs on this machine: this checkout and interpreter, and the
    data folder's ``logs/`` for ``var/logs/`` (the README says so for a
    ``HERMES_ADMIN_DATA`` set); cron itself turns ``\\%`` into ``%``."""
    return (command.replace("\\%", "%").replace("cd /srv/hermes-admin", f"cd {PROJECT}")
            .replace(".venv/bin/python", sys.executable).replace("var/logs/", f"{data}/logs/"))


def cron(command: str, data: Path, roots: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, HERMES_ADMIN_DATA=str(data), HERMES_ROOTS=str(roots))
    for name in ("HERMES_HOME", "DATABASE_URL", "HERMES_ADMIN_SECRET_KEY", "HERMES_ADMIN_LOG_FILE",
                 "HERMES_ADMIN_JOB_RUNNER"):
        env.pop(name, None)
    return subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True, timeout=600,
                          preexec_fn=lambda: os.umask(0o022))


@pytest.fixture
def setup(tmp_path):
    home = copy_home(tmp_path / "hermes")
    for db in [home / "state.db", *home.glob("profiles/*/state.db")]:
        age_store(db, 400 * DAY)
    data = tmp_path / "data"
    assert manage(data, "migrate", "-v0").returncode == 0
    return data, home


def test_every_documented_cron_line_sets_a_private_umask():
    lines = readme_cron_lines()
    # heal, prune (2), purge_trash, purge_backups, and the fleet's two
    assert len(lines) >= 7 and {"heal_sessions", "prune_sessions", "purge_trash", "purge_backups",
                                "fleet_check"} <= {w for line in lines for w in line.split()}
    assert all(line.startswith("umask 077; ") for line in lines), lines


def test_the_documented_lines_run_by_cron_leave_no_w002(setup):
    data, home = setup
    local = [line for line in readme_cron_lines() if "/srv/hermes-admin" in line]
    assert len(local) == 5
    for line in local:
        proc = cron(as_here(line, data), data, home)
        assert proc.returncode in (0, 1), (line, proc.stdout, proc.stderr)
    reports = sorted((data / "logs").glob("*.json"))
    assert [p.name.split("-")[0] for p in reports] == ["heal", "prune", "prune"]
    for report in reports:
        assert stat.S_IMODE(report.stat().st_mode) == 0o600, report
        assert json.loads(report.read_text())["version"] == 2
    out = manage(data, "check", "--fail-level", "WARNING")
    assert out.returncode == 0 and "hermes_admin.W002" not in out.stderr, out.stderr


def test_without_the_umask_the_report_is_loose_and_w002_says_so(setup):
    data, home = setup
    [heal] = [line for line in readme_cron_lines() if "heal_sessions" in line and "/srv/" in line]
    cron(as_here(heal.removeprefix("umask 077; "), data), data, home)
    [report] = (data / "logs").glob("heal-*.json")
    assert stat.S_IMODE(report.stat().st_mode) == 0o644
    out = manage(data, "check")
    assert "hermes_admin.W002" in out.stderr and str(report) in out.stderr
