"""Fixtures for metrics, notifications and watch mode: the data folder, a webhook
server on 127.0.0.1 wired into the settings, and field-style damage."""

from __future__ import annotations

import time

import pytest

from sessions_app.metrics import probes, runindex
from tests.checks.helpers import damage, store_of

from .hooks import webhook_server

SECRET = "TRANSCRIPT-SECRET-7f3a a user's private words"


@pytest.fixture(autouse=True)
def data_dir(settings, tmp_path):
    """The dashboard's own data folder, private to the test."""
    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir()
    probes.reset()
    runindex.reset()
    yield settings.DATA_DIR
    probes.reset()
    runindex.reset()


@pytest.fixture
def hook(settings):
    """A webhook endpoint (``hook.url``) notifications go to; quick retries."""
    with webhook_server() as server:
        settings.HERMES_NOTIFY_WEBHOOK_URLS = [server.url]
        settings.HERMES_NOTIFY_EMAIL_TO = []
        settings.HERMES_NOTIFY_WEBHOOK_FORMAT = "generic"
        settings.HERMES_NOTIFY_BACKOFF = 0.01
        settings.HERMES_NOTIFY_TIMEOUT = 2
        settings.HERMES_ADMIN_BASE_URL = "https://admin.example.org"
        yield server


def orphan_messages(home, profile: str = "default", session_id: str = "ghost-session-1", n: int = 2) -> None:
    """Message rows whose session row is missing (a delete with foreign keys off),
    three days old so no check takes them for a live agent's; the text is
    :data:`SECRET`, which no notification may carry."""
    with damage(store_of(home, profile)) as db:
        for i in range(n):
            db.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
                       (session_id, f"{SECRET} {i}", time.time() - 3 * 86400 + i))


def not_a_database(db_path) -> None:
    """Overwrite the store's header with zeros (a disk or copy gone wrong), from a
    separate process so this test process never writes a store file itself."""
    import subprocess
    import sys

    subprocess.run([sys.executable, "-c", "import sys\nwith open(sys.argv[1], 'r+b') as f:\n    f.write(b'\\0' * 100)",
                    str(db_path)], check=True)
