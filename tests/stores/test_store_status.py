"""Bad stores: each gets a clear status, its own error page, and nothing is written.

Design ground rule 9: a busy store is "busy, retry"; a damaged store is "damaged,
here is why"; never an empty list, a traceback page, or a flood of log lines.
"""

import hashlib
import logging
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURE_HOME, IDS, ids

pytestmark = pytest.mark.django_db

PROJECT = Path(__file__).resolve().parents[2]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def overview_row(client, key):
    html = client.get("/").content.decode()
    row = re.search(rf'<tr data-profile="{re.escape(key)}">(.*?)</tr>', html, re.S)
    assert row, f"profile {key} not listed"
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", row.group(1)))


def add_profile(home: Path, name: str) -> Path:
    profile = home / "profiles" / name
    profile.mkdir(parents=True)
    return profile


def corrupt_copy(dest: Path) -> None:
    data = bytearray((FIXTURE_HOME / "state.db").read_bytes())
    page = 4096
    for offset in range(2 * page, len(data) - page, 7):
        data[offset] = 0x55
    dest.write_bytes(bytes(data))


def make_bad(home: Path, kind: str) -> Path:
    """Create profile ``bad`` whose store is broken in the named way; returns the db path."""
    db = add_profile(home, "bad") / "state.db"
    if kind == "zero-byte":
        db.write_bytes(b"")
    elif kind == "not-sqlite":
        db.write_text("this is a text file, not an SQLite database\n" * 200)
    elif kind == "corrupt":
        corrupt_copy(db)
    elif kind in ("newer", "malformed-schema", "not-hermes"):
        if kind == "not-hermes":
            conn = sqlite3.connect(db)
            conn.execute("CREATE TABLE notes (body TEXT)")
        else:
            shutil.copy(FIXTURE_HOME / "state.db", db)
            conn = sqlite3.connect(db)
        if kind == "newer":
            conn.execute("UPDATE schema_version SET version = 99")
        elif kind == "malformed-schema":
            # A duplicated schema object: SQLite then refuses to load the schema.
            conn.execute("PRAGMA writable_schema = ON")
            conn.execute(
                "INSERT INTO sqlite_master SELECT type, name, tbl_name, rootpage, sql FROM sqlite_master "
                "WHERE type = 'index' AND name = 'idx_sessions_source'"
            )
        conn.commit()
        conn.close()
    return db


BAD_KINDS = {
    "zero-byte": ("unreadable", "empty (0 bytes)"),
    "not-sqlite": ("unreadable", "not an SQLite database"),
    "corrupt": ("corrupt", "malformed"),
    "malformed-schema": ("corrupt", "malformed database schema"),
    "not-hermes": ("unreadable", "not a Hermes session store"),
}


@pytest.mark.parametrize("kind", sorted(BAD_KINDS))
def test_bad_store_gets_status_error_page_and_stays_untouched(admin_client, hermes_home, kind):
    db = make_bad(hermes_home, kind)
    before = sha(db)
    status, reason = BAD_KINDS[kind]
    row = overview_row(admin_client, "bad")
    assert f" {status} " in row and reason in row

    page = admin_client.get("/p/bad/")
    assert page.status_code == 503
    assert reason in page.content.decode()
    assert admin_client.get("/p/bad/s/anything/").status_code == 503

    listing = admin_client.get("/sessions/?size=200").content.decode()
    assert "Profile <a href=\"/p/bad/\"><bdi>bad</bdi></a> was skipped" in listing
    # Other profiles keep working.
    assert " readable " in overview_row(admin_client, "default")
    assert f"/p/default/s/{IDS['cli_main']}/" in listing
    assert admin_client.get(f"/p/ops/s/{ids('ops')['cli_main']}/").status_code == 200
    assert sha(db) == before


def test_missing_store_is_listed_as_missing(admin_client, hermes_home):
    add_profile(hermes_home, "fresh")
    row = overview_row(admin_client, "fresh")
    assert " missing " in row and "no state.db yet" in row
    assert admin_client.get("/p/fresh/").status_code == 503
    assert not (hermes_home / "profiles" / "fresh" / "state.db").exists()


def test_newer_than_known_store_still_browses_with_a_warning(admin_client, hermes_home):
    db = make_bad(hermes_home, "newer")
    before = sha(db)
    row = overview_row(admin_client, "bad")
    assert " readable " in row and "newer schema" in row and " 99 " in row
    page = admin_client.get("/p/bad/").content.decode()
    assert "schema 99 is newer than this dashboard knows" in page
    assert admin_client.get(f"/p/bad/s/{IDS['cli_main']}/").status_code == 200  # a copy of default's store
    assert sha(db) == before


def test_locked_store_is_busy_not_an_error(admin_client, hermes_home, settings):
    settings.HERMES_READ_TIMEOUT = 0.2
    db = hermes_home / "profiles" / "ops" / "state.db"
    holder = subprocess.Popen(
        [sys.executable, "-c", (
            "import sqlite3, sys\n"
            f"c = sqlite3.connect({str(db)!r}, isolation_level=None)\n"
            "c.execute('PRAGMA locking_mode=EXCLUSIVE')\n"
            "c.execute('BEGIN EXCLUSIVE')\n"
            "print('ready', flush=True)\n"
            "sys.stdin.read()\n"
        )],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "ready"
        row = overview_row(admin_client, "ops")
        assert " busy " in row and "retry" in row
        response = admin_client.get(f"/p/ops/s/{ids('ops')['cli_main']}/")
        assert response.status_code == 503 and response["Retry-After"]
        assert "busy" in response.content.decode()
        assert " readable " in overview_row(admin_client, "research")
    finally:
        holder.stdin.close()
        holder.wait(timeout=10)
    # The overview may show it busy a few seconds more (remembered, docs/store.md,
    # Busy stores); its own page always tries, and a read that goes through ends that.
    assert admin_client.get("/p/ops/").status_code == 200
    assert " readable " in overview_row(admin_client, "ops")


def test_unreadable_permission_is_reported(tmp_path):
    """The dashboard's user cannot read the file.

    As root, file modes do not apply, so the probe runs in a child process whose
    capability bounding set lacks DAC override (util-linux ``setpriv``): root
    without those capabilities is held to the file's mode like anyone else.
    """
    home = tmp_path / "home"
    home.mkdir()
    db = home / "state.db"
    shutil.copy(FIXTURE_HOME / "state.db", db)
    db.chmod(0o000)
    code = (
        "import os, django\n"
        "os.environ['DJANGO_SETTINGS_MODULE'] = 'hermes_admin.settings'\n"
        "django.setup()\n"
        "from pathlib import Path\n"
        "from sessions_app.stores.discovery import discover\n"
        "from sessions_app.stores.store import Store\n"
        f"s = Store(discover([Path({str(home)!r})]).profiles[0]).probe()\n"
        "print(s.status + '|' + s.reason)\n"
    )
    command = [sys.executable, "-c", code]
    if os.geteuid() == 0:
        command = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"] + command
    env = dict(os.environ, HERMES_ADMIN_DATA=str(tmp_path / "data"), HERMES_ADMIN_SECRET_KEY="x")
    out = subprocess.run(command, cwd=PROJECT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    status, reason = out.stdout.strip().splitlines()[-1].split("|", 1)
    assert status == "unreadable" and "permission denied" in reason
    db.chmod(0o600)


def test_a_bad_store_is_logged_once(admin_client, hermes_home, caplog):
    make_bad(hermes_home, "not-sqlite")
    with caplog.at_level(logging.WARNING, logger="sessions_app.stores"):
        for _ in range(3):
            admin_client.get("/")
            admin_client.get("/p/bad/")
            admin_client.get("/sessions/")
    lines = [r for r in caplog.records if "profiles/bad/state.db" in r.getMessage()]
    assert len(lines) == 1


def test_a_wal_without_its_store_is_damaged_and_no_store_is_created(admin_client, hermes_home):
    """A real 0.19.0 writer appends a turn and dies before closing (its WAL stays);
    then the main file is deleted. The rows live only in the -wal: the profile is
    reported damaged with why, and nothing creates a new state.db beside it."""
    from sessions_app.actions.heal import heal
    from sessions_app.stores import registry
    from tests.checks.helpers import hermes, store_of

    lost = add_profile(hermes_home, "lost")
    shutil.copy(FIXTURE_HOME / "state.db", lost / "state.db")
    hermes(store_of(hermes_home, "lost"), f"""
        db.append_message({IDS['cli_main']!r}, role="user", content="only in the WAL")
        os._exit(0)  # killed: no checkpoint, the -wal stays
    """)
    wal = lost / "state.db-wal"
    assert wal.stat().st_size > 0
    (lost / "state.db").unlink()
    wal_before = sha(wal)

    row = overview_row(admin_client, "lost")
    assert " corrupt " in row and "state.db is gone but state.db-wal" in row and "may exist only in that" in row
    page = admin_client.get("/p/lost/")
    assert page.status_code == 503 and "creates no store here" in page.content.decode()
    listing = admin_client.get("/sessions/?size=200").content.decode()
    assert "Profile <a href=\"/p/lost/\"><bdi>lost</bdi></a> was skipped: <bdi>corrupt" in listing
    report = heal([registry.get("lost")])
    entry = report["profiles"][0]
    assert entry["status"] == "corrupt" and "state.db-wal" in entry["error"]
    assert not (lost / "state.db").exists()
    assert sha(wal) == wal_before


def test_a_lone_shm_is_damaged_too(admin_client, hermes_home):
    lost = add_profile(hermes_home, "lost")
    (lost / "state.db-shm").write_bytes(b"\0" * 32768)
    row = overview_row(admin_client, "lost")
    assert " corrupt " in row and "state.db-shm" in row and "still have the deleted store open" in row
    assert not (lost / "state.db").exists()
