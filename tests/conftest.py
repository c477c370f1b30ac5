"""Shared fixtures: a fresh copy of the committed Hermes home per test.

The committed stores (``tests/fixtures/hermes_home``) were written by the real
hermes-agent releases through their own ``SessionDB`` (``scripts/make_fixtures.py``).
Tests never touch them in place: each gets its own copy under ``tmp_path``.
"""

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from django.db.backends.base.base import BaseDatabaseWrapper

from sessions_app.stores import registry

FIXTURE_HOME = Path(__file__).parent / "fixtures" / "hermes_home"
MANIFEST = json.loads((FIXTURE_HOME / "manifest.json").read_text())
PROFILES = list(MANIFEST["profiles"])
IDS = MANIFEST["session_ids"]  # the default profile's ids (kind -> id)


def ids(profile: str) -> dict:
    """kind -> session id in ``profile``'s fixture store. Every profile has its own
    ids (the profile's date in the id), so no session id is shared across profiles;
    a kind the store's release could not write (e.g. ``undo`` before 0.17) is absent."""
    return MANIFEST["profiles"][profile]["session_ids"]


@pytest.fixture
def manifest():
    return MANIFEST


STORE_FILES = ("*.db", "*.db-wal", "*.db-shm", "*.db-journal")


def copy_store(src: Path, dest: Path) -> Path:
    """Copy the SQLite store ``src`` to ``dest`` through SQLite's backup API, the
    source opened read-only: committed WAL frames are in the copy, and no plain
    file read races a connection this process (or an agent) may hold on ``src``
    (ground rule 5). Damaged pages are copied as they are (the backup copies pages,
    it does not read b-trees). Returns ``dest``."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    source = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    try:
        target = sqlite3.connect(dest)
        try:
            source.backup(target)
        finally:
            target.close()
    finally:
        source.close()
    return dest


def copy_home_of(src: Path, dest: Path) -> Path:
    """A private copy of the Hermes home ``src`` at ``dest``: its stores (``*.db``)
    through :func:`copy_store`, every other file copied plainly. Returns ``dest``."""
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns(*STORE_FILES))
    for db in src.rglob("*.db"):
        copy_store(db, dest / db.relative_to(src))
    return dest


def copy_home(dest: Path) -> Path:
    # Sidecars left by anything that opened the fixtures in place are not part of them.
    shutil.copytree(FIXTURE_HOME, dest, ignore=shutil.ignore_patterns("*-wal", "*-shm"))
    return dest


@pytest.fixture
def use_roots(settings):
    """Point discovery at the given roots (a fresh registry each time)."""

    def apply(*roots):
        settings.HERMES_ROOTS = [str(r) for r in roots]
        registry.reset()
        return roots

    yield apply
    registry.reset()


@pytest.fixture
def hermes_home(tmp_path, use_roots):
    """A private copy of the fixture Hermes home, browsed by the dashboard."""
    home = copy_home(tmp_path / "hermes")
    use_roots(home)
    return home


@pytest.fixture(autouse=True)
def allow_store_aliases(request, monkeypatch):
    """Let tests reach store aliases registered while they run.

    Django's TestCase refuses connections to any alias it did not set up as a test
    database (it patches ``ensure_connection``). Store aliases are different by
    design: they point at the real ``state.db`` copies each test makes under
    ``tmp_path``, read-only, and must never be replaced by a test database. Every other alias keeps Django's guard.
    """
    if request.node.get_closest_marker("django_db") is None and "db" not in request.fixturenames \
            and "admin_client" not in request.fixturenames and "transactional_db" not in request.fixturenames \
            and "live_server" not in request.fixturenames:
        yield
        return
    request.getfixturevalue("_django_db_helper")
    real = request.getfixturevalue("django_db_blocker")._real_ensure_connection
    guarded = BaseDatabaseWrapper.ensure_connection

    def ensure_connection(self, *args, **kwargs):
        if self.alias.startswith("store_"):
            return real(self, *args, **kwargs)
        return guarded(self, *args, **kwargs)

    monkeypatch.setattr(BaseDatabaseWrapper, "ensure_connection", ensure_connection)
    yield


@pytest.fixture(scope="session")
def demo_home(tmp_path_factory):
    """The demo Hermes home (``scripts/demo_home.py``), built once per test session
    by the real releases (the cached venvs of ``scripts/make_fixtures.py``).
    Shared: tests that change it must copy it first (``shutil.copytree``)."""
    from sessions_app.management.commands.make_demo_home import demo_builder

    home = tmp_path_factory.mktemp("demo") / "demo-home"
    demo_builder().build(home)
    return home
