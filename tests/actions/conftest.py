"""Fixtures for repair tests: an aged copy of the fixture home, and the data folder."""

import json
import os
import sqlite3
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from sessions_app.stores.discovery import discover
from sessions_app.stores.store import Store

DAY = 86_400
PROJECT = Path(__file__).resolve().parents[2]


def age_store(db: Path, seconds: float) -> None:
    """Move every timestamp of a store back by ``seconds``: the store as it looks
    when its sessions went quiet that long ago (test copies only)."""
    conn = sqlite3.connect(db)
    cols = {r[1] for r in conn.execute("PRAGMA table_info(sessions)")}
    for col in ("started_at", "ended_at", "last_activity_at"):
        if col in cols:
            conn.execute(f"UPDATE sessions SET {col} = {col} - ? WHERE {col} IS NOT NULL", (seconds,))
    conn.execute("UPDATE messages SET timestamp = timestamp - ?", (seconds,))
    conn.commit()
    conn.close()


@pytest.fixture(autouse=True)
def data_dir(settings, tmp_path):
    """The dashboard's own data folder, private to the test."""
    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir()
    return settings.DATA_DIR


@pytest.fixture
def aged_home(hermes_home):
    """The fixture home with every store 40 days quiet (idle, not yet stale... for most)."""
    for db in [hermes_home / "state.db", *hermes_home.glob("profiles/*/state.db")]:
        age_store(db, 40 * DAY)
    return hermes_home


def store(home: Path, key: str) -> Store:
    return Store(discover([home.resolve()]).by_key()[key])


def run_command(name: str, *args) -> tuple[int, dict | str]:
    """Run the management command ``name`` in-process; returns (exit status, JSON
    report with ``--json`` or text; the error message when it refused)."""
    out = StringIO()
    code = 0
    try:
        call_command(name, *args, stdout=out, stderr=StringIO())
    except SystemExit as exc:
        code = exc.code
    except CommandError as exc:
        return exc.returncode, str(exc)
    text = out.getvalue()
    return code, (json.loads(text) if "--json" in args else text)


def heal(*args) -> tuple[int, dict | str]:
    """Run ``heal_sessions`` in-process (see :func:`run_command`)."""
    return run_command("heal_sessions", *args)


def profile_entry(report: dict, key: str) -> dict:
    return next(p for p in report["profiles"] if p["profile"] == key)


def manage_env(data: Path) -> dict:
    """Environment of a ``manage.py`` child with its own data folder ``data`` (and its
    own SQLite database there); roots come from its ``--root`` arguments."""
    env = dict(os.environ, HERMES_ADMIN_DATA=str(data), HERMES_ADMIN_SECRET_KEY="test")
    env.pop("HERMES_ROOTS", None)
    env.pop("DATABASE_URL", None)
    return env


def run_manage(args, data: Path, timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    """Run ``manage.py *args`` as a separate process, the way cron runs it."""
    return subprocess.run([sys.executable, "manage.py", *args], cwd=PROJECT, env=manage_env(data),
                          capture_output=True, text=True, timeout=timeout, **kw)
