"""Fleet tests: real Redis, real PostgreSQL, real Celery workers (subprocesses).

Run by ``scripts/test-fleet.sh`` (from ``.ci/run``), which installs and starts
``redis-server`` and PostgreSQL and sets ``HERMES_ADMIN_FLEET_TESTS=1``. Without
that variable these modules are not collected (the main suite starts no broker);
with it, a broker or database that cannot be reached fails every test loudly.

Each worker is ``celery -A hermes_admin worker -Q hermes.<host> -P threads`` in
its own session (process group), with its own ``HERMES_ROOTS`` (copies of the
committed fixture home) and data folder, on the test database pytest-django made.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import copy_home

ENABLED = os.environ.get("HERMES_ADMIN_FLEET_TESTS") == "1"
if not ENABLED:
    collect_ignore_glob = ["test_*.py"]

BASE = Path(__file__).resolve().parents[2]
READY_SECONDS = 60


def _database_url() -> str:
    from django.db import connection

    s = connection.settings_dict
    if s["ENGINE"] != "django.db.backends.postgresql":
        raise RuntimeError("fleet tests need DATABASE_URL on PostgreSQL (scripts/test-fleet.sh starts one)")
    auth = s["USER"] + (f":{s['PASSWORD']}" if s.get("PASSWORD") else "")
    return f"postgres://{auth}@{s['HOST']}:{s['PORT']}/{s['NAME']}"


def _broker_ping() -> None:
    import redis

    url = os.environ.get("CELERY_BROKER_URL") or ""
    if not url.startswith("redis://"):
        raise RuntimeError("fleet tests need CELERY_BROKER_URL=redis://… (scripts/test-fleet.sh starts Redis)")
    redis.Redis.from_url(url, socket_connect_timeout=3).ping()


class Worker:
    """One host's Celery worker, started and stopped by the tests."""

    def __init__(self, name: str, roots: list[Path], db_url: str):
        self.name, self.roots, self.db_url = name, roots, db_url
        self.data = Path(tempfile.mkdtemp(prefix=f"fleet-{name}-"))
        self.log = self.data / "worker.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> "Worker":
        env = dict(os.environ, DATABASE_URL=self.db_url, HERMES_ADMIN_HOST=self.name,
                   HERMES_ROOTS=os.pathsep.join(str(r) for r in self.roots), HERMES_ADMIN_DATA=str(self.data),
                   HERMES_ADMIN_FLEET_HEARTBEAT="1", HERMES_ADMIN_LOG_FILE="")
        env.pop("HERMES_HOME", None)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "hermes_admin", "worker", "-Q", f"hermes.{self.name}",
                 "-P", "threads", "-c", "4", "-n", f"{self.name}@%h", "--without-gossip", "--without-mingle",
                 "--without-heartbeat", "-l", "info"],
                cwd=BASE, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        self.wait_ready()
        return self

    def wait_ready(self) -> None:
        """Until this process's heartbeat is in the central database."""
        from django.db import close_old_connections

        from sessions_app.fleet.models import FleetHost

        deadline = time.monotonic() + READY_SECONDS
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker {self.name} exited: {self.log.read_text()[-3000:]}")
            close_old_connections()
            if FleetHost.objects.filter(name=self.name, pid=self.proc.pid, stopped_at=None).exists():
                return
            time.sleep(0.2)
        raise RuntimeError(f"worker {self.name} never announced itself: {self.log.read_text()[-3000:]}")

    def kill(self, sig=signal.SIGKILL) -> None:
        """Send ``sig`` to the worker's whole process group and reap it."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


def tree_digest(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` (no process of the tests holds a SQLite
    connection to these stores: the workers do, in other processes)."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


@pytest.fixture(scope="session")
def fleet(django_db_setup, django_db_blocker, tmp_path_factory):
    """Hosts ``host-a`` and ``host-b``, each a worker on its own copy of the fixture home."""
    _broker_ping()
    with django_db_blocker.unblock():
        url = _database_url()
        base = tmp_path_factory.mktemp("fleet")
        roots = {"host-a": copy_home(base / "alpha"), "host-b": copy_home(base / "beta")}
        workers = {name: Worker(name, [root], url) for name, root in roots.items()}
        try:
            for w in workers.values():
                w.start()
            yield {"workers": workers, "roots": roots, "db_url": url, "base": base}
        finally:
            for w in workers.values():
                w.kill(signal.SIGTERM)


def wait_for(predicate, seconds: float = 60, what: str = "condition"):
    """Poll ``predicate`` until truthy (returns its value) or fail after ``seconds``."""
    from django.db import close_old_connections

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        close_old_connections()
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def hosts_up(fleet, transactional_db):
    """Both hosts announced (a flush between tests removed their rows; the next beat restores them)."""
    from sessions_app.fleet import client

    def announced():
        # This process's read of the host table (HERMES_FLEET_HOSTS_TTL) may predate
        # the flush: forget it, so the rows seen here are the beats since, and the
        # test's pages read the same rows instead of an empty table moments later.
        client._rows_cache = (float("-inf"), [])
        return {h.name for h in client.hosts() if h.reachable} >= {"host-a", "host-b"}

    wait_for(announced, what="both hosts")
    return fleet


@pytest.fixture
def admin(transactional_db, client):
    from django.contrib.auth.models import User

    user = User.objects.create_superuser("fleet-admin", password="x-unused-x")
    client.force_login(user)
    return client
