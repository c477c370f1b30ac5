"""No way out of a root: every path of a profile resolves inside it, symlinks included.

The stores are copies of the committed fixture stores (written by the real
hermes-agent releases); links are planted the way a careless or hostile setup
does: ``state.db``, a sidecar, ``sessions/``, one ``sessions/<id>.jsonl`` or
``runtime/active_sessions.json`` pointing out of the root.
"""

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from sessions_app.stores import jsonl
from sessions_app.stores.discovery import discover
from sessions_app.stores.liveness import read_registry
from sessions_app.stores.store import OutsideRoot, Store
from tests.conftest import FIXTURE_HOME, copy_home, ids

PROJECT = Path(__file__).resolve().parents[2]


def sha256(path: Path) -> str:
    # This test process holds no SQLite connection to ``path`` (ground rule 5).
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def home(tmp_path):
    return copy_home(tmp_path / "hermes").resolve()


@pytest.fixture
def outside(tmp_path):
    """A folder beside the root, holding a real 0.19.0 store (the fixture's default one)."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    shutil.copy(FIXTURE_HOME / "state.db", folder / "state.db")
    return folder


def skipped(found, key):
    return found.outside.get(key, (None, ""))[1]


def test_state_db_symlinked_out_of_the_root_skips_the_profile(home, outside):
    ops = home / "profiles" / "ops"
    (ops / "state.db").unlink()
    (ops / "state.db").symlink_to(outside / "state.db")
    found = discover([home])
    assert "ops" not in found.by_key()
    reason = skipped(found, "ops")
    assert "state.db resolves to" in reason and str(outside) in reason and "outside the root" in reason
    assert any("ops" in path and "state.db" in why for path, why in found.ignored)
    assert {"default", "research", "legacy", "archive", "edge"} <= set(found.by_key())


def test_default_store_symlinked_out_skips_only_the_default_profile(home, outside):
    (home / "state.db").unlink()
    (home / "state.db").symlink_to(outside / "state.db")
    found = discover([home])
    assert "default" not in found.by_key() and "ops" in found.by_key()
    assert "outside the root" in skipped(found, "default")
    assert found.bad_roots == []  # the root itself is fine


def test_a_link_planted_after_discovery_is_refused_at_open(home, outside):
    store = Store(discover([home]).by_key()["ops"])
    (store.path).unlink()
    store.path.symlink_to(outside / "state.db")
    status = store.preflight()
    assert status.status == "unreadable" and "outside the root" in status.reason
    assert store.probe().status == "unreadable"
    with pytest.raises(OutsideRoot, match="outside the root"):
        with store.read():
            pass
    with pytest.raises(sqlite3.Error):  # what every store reader already handles
        with store.read():
            pass


@pytest.mark.parametrize("sidecar", ["state.db-wal", "state.db-shm", "state.db-journal"])
def test_a_sidecar_symlinked_out_skips_the_profile(home, outside, sidecar):
    (outside / "stolen").write_bytes(b"")
    (home / "profiles" / "research" / sidecar).symlink_to(outside / "stolen")
    found = discover([home])
    assert "research" not in found.by_key()
    assert f"{sidecar} resolves to" in skipped(found, "research")


def test_sessions_folder_symlinked_out_skips_the_profile(home, outside, tmp_path):
    legacy = home / "profiles" / "legacy"
    theirs = outside / "sessions"
    theirs.mkdir()
    sid = ids("legacy")["cli_main"]
    (theirs / f"{sid}.jsonl").write_text(json.dumps({"role": "user", "content": "not yours"}) + "\n")
    shutil.rmtree(legacy / "sessions", ignore_errors=True)
    (legacy / "sessions").symlink_to(theirs, target_is_directory=True)
    found = discover([home])
    assert "legacy" not in found.by_key()
    assert "sessions resolves to" in skipped(found, "legacy")
    # A store object made before the link appeared never reads a file behind it.
    parsed = jsonl.read_file(legacy / "sessions" / f"{sid}.jsonl", sid, store_path=legacy / "state.db")
    assert parsed.messages == [] and "outside the root" in parsed.error


def test_one_jsonl_symlinked_out_skips_the_profile(home, outside):
    archive = home / "profiles" / "archive"
    (archive / "sessions").mkdir(exist_ok=True)
    secret = outside / "secret.jsonl"
    secret.write_text(json.dumps({"role": "user", "content": "private"}) + "\n")
    sid = ids("archive")["cli_main"]
    (archive / "sessions" / f"{sid}.jsonl").symlink_to(secret)
    found = discover([home])
    assert "archive" not in found.by_key()
    assert f"sessions/{sid}.jsonl resolves to" in skipped(found, "archive")


def test_registry_symlinked_out_skips_the_profile_and_is_never_read(home, outside):
    edge = home / "profiles" / "edge"
    (edge / "runtime").mkdir(exist_ok=True)
    (outside / "active_sessions.json").write_text(json.dumps({"entries": []}))
    store = Store(discover([home]).by_key()["edge"])
    (edge / "runtime" / "active_sessions.json").symlink_to(outside / "active_sessions.json")
    found = discover([home])
    assert "edge" not in found.by_key()
    assert "active_sessions.json resolves to" in skipped(found, "edge")
    entries, error = read_registry(store)
    assert entries == [] and "outside the root" in error


def test_a_copy_beside_the_store_symlinked_out_skips_the_profile(home, outside):
    (home / "profiles" / "ops" / "state.db.repair-attempts.json").symlink_to(outside / "state.db")
    found = discover([home])
    assert "ops" not in found.by_key()
    assert "state.db.repair-attempts.json resolves to" in skipped(found, "ops")


def test_links_that_stay_inside_the_root_are_allowed(home):
    ops = home / "profiles" / "ops"
    shared = home / "shared-sessions"
    shared.mkdir()
    shutil.rmtree(ops / "sessions", ignore_errors=True)
    (ops / "sessions").symlink_to(shared, target_is_directory=True)
    sid = ids("ops")["cli_main"]
    (shared / f"{sid}.jsonl").write_text(json.dumps({"role": "user", "content": "hello"}) + "\n")
    found = discover([home])
    assert "ops" in found.by_key() and found.outside == {}
    parsed = jsonl.read_file(ops / "sessions" / f"{sid}.jsonl", sid, store_path=ops / "state.db")
    assert parsed.error == "" and len(parsed.messages) == 1


def test_two_profiles_reaching_one_store_are_not_both_listed(home):
    edge = home / "profiles" / "edge"
    twin = home / "profiles" / "twin"
    twin.mkdir()
    (twin / "state.db").symlink_to(edge / "state.db")
    found = discover([home])
    assert "edge" in found.by_key() and "twin" not in found.by_key()
    assert "same file as profile edge's" in skipped(found, "twin")


def test_overview_lists_the_skipped_profile_with_its_reason(admin_client, use_roots, home, outside):
    (home / "profiles" / "ops" / "state.db").unlink()
    (home / "profiles" / "ops" / "state.db").symlink_to(outside / "state.db")
    use_roots(home)
    html = admin_client.get("/").content.decode()
    assert "profile ops skipped" in html and "outside the root" in html


def _manage(args, data: Path):
    env = dict(os.environ, HERMES_ADMIN_DATA=str(data), HERMES_ADMIN_SECRET_KEY="test")
    env.pop("HERMES_ROOTS", None)
    env.pop("DATABASE_URL", None)
    return subprocess.run([sys.executable, "manage.py", *args], cwd=PROJECT, env=env, capture_output=True,
                          text=True, timeout=600)


def test_heal_apply_never_writes_a_store_outside_the_root(home, outside, tmp_path):
    """A real ``heal_sessions --all-profiles --apply``: the 0.19.0 stores lack
    ``profile_name``, so heal stamps the owner (the default store inside changes);
    the same store reached through ``profiles/mirror/state.db`` out of the root is
    skipped and reported, its bytes unchanged."""
    mirror = home / "profiles" / "mirror"
    mirror.mkdir()
    (mirror / "state.db").symlink_to(outside / "state.db")
    (mirror / "sessions").mkdir()
    before, inside_before = sha256(outside / "state.db"), sha256(home / "state.db")
    data = tmp_path / "data"
    data.mkdir()
    assert _manage(["migrate", "-v0"], data).returncode == 0
    out = _manage(["heal_sessions", "--root", str(home), "--all-profiles", "--apply", "--json"], data)
    report = json.loads(out.stdout)
    assert sha256(outside / "state.db") == before
    assert not (outside / "state.db-wal").exists() and not (outside / "state.db-shm").exists()
    assert sha256(home / "state.db") != inside_before  # the run did write where it may
    assert "mirror" not in [p["profile"] for p in report["profiles"]]
    assert any("profile mirror skipped" in s and "outside the root" in s for s in report["skipped_roots"])
    assert out.returncode == 2 and "profile mirror skipped" in out.stderr
