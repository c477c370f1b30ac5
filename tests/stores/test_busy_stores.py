"""A locked store costs its own pages only (docs/store.md §5.2, locked stores).

Two stores are held locked by real processes until killed (``lock_holders``): ``archive``
switched to a rollback journal and held in ``BEGIN EXCLUSIVE``, ``ops`` (WAL) by a holder
in ``locking_mode=EXCLUSIVE`` that wrote. The read timeout is set far above what any
page here may take, and the waits are counted by ``stores.busy`` (plain and ORM reads):
the overview, the lists and other profiles' pages show the locked stores busy after a
glance and are otherwise what they are without the locks; only the locked store's own
page waits its read timeout, once; a check-mode ``heal_sessions --all-profiles`` run
waits it once per locked store and reports each once. Nothing writes a store or
creates a file next to it.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sessions_app.stores import busy, registry
from tests.conftest import PROFILES, ids

from .lock_holders import holding

pytestmark = pytest.mark.django_db

PROJECT = Path(__file__).resolve().parents[2]
LOCKED = {"archive": "rollback", "ops": "wal_exclusive"}
FREE = [p for p in PROFILES if p not in LOCKED]
NEVER = 30.0  # seconds: a read timeout no page of these tests may wait


def db_of(home: Path, profile: str) -> Path:
    return home / "state.db" if profile == "default" else home / "profiles" / profile / "state.db"


def store_files(home: Path) -> dict:
    """Every ``state.db*`` file of every profile with (size, mtime in ns), by ``os.stat``
    (no descriptor is opened on a file SQLite may hold). A ``-shm`` only by name: every
    WAL reader writes its read marks into that shared memory (SQLite's "wal" docs)."""
    out = {}
    for profile in PROFILES:
        db = db_of(home, profile)
        for path in db.parent.glob("state.db*"):
            st = os.stat(path)
            out[str(path)] = None if path.name.endswith("-shm") else (st.st_size, st.st_mtime_ns)
    return out


def text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def overview_rows(client) -> dict[str, str]:
    response = client.get("/")
    assert response.status_code == 200
    return {key: text(row) for key, row in
            re.findall(r'<tr data-profile="([^"]+)">(.*?)</tr>', response.content.decode(), re.S)}


def listed(client, query: str = "") -> tuple[set, str]:
    """(``(profile, session id)`` pairs linked from the sessions list, page text)."""
    response = client.get(f"/sessions/?size=200{query}")
    assert response.status_code == 200
    html = response.content.decode()
    table = html[html.index('id="session-table"'):]
    return set(re.findall(r'<a href="/p/([^/"]+)/s/([^"]+)/">', table)), text(html)


def without_tokens(html: str) -> str:
    return re.sub(r'(csrfmiddlewaretoken" value="|csrftoken": ")[^"]*', r"\1", html)


@pytest.fixture
def patient(settings):
    settings.HERMES_READ_TIMEOUT = NEVER
    busy.reset()
    yield settings
    busy.reset()


def test_locked_stores_cost_their_own_pages_only(admin_client, hermes_home, patient):
    research = ids("research")["cli_main"]
    session_page = f"/p/research/s/{research}/"
    search_page = "/p/research/search/?q=build"
    # What the pages show without locks (the overview's second view: the first read of
    # a WAL store creates its empty -wal, which the overview then lists).
    overview_rows(admin_client)
    rows_before = overview_rows(admin_client)
    pairs_before, _ = listed(admin_client)
    found_before, _ = listed(admin_client, "&q=build")
    page_before = without_tokens(admin_client.get(session_page).content.decode())
    search_before = without_tokens(admin_client.get(search_page).content.decode())
    assert {p for p, _ in pairs_before} == set(PROFILES) and "<mark" in search_before.lower()
    registry.reset()  # no connection of the dashboard left open while the holders take their locks
    busy.reset()

    with holding(*((db_of(hermes_home, p), kind) for p, kind in LOCKED.items())):
        files = store_files(hermes_home)

        rows = overview_rows(admin_client)
        for key in LOCKED:
            assert " busy " in rows[key] and "retry" in rows[key], rows[key]
        assert {k: rows[k] for k in FREE} == {k: rows_before[k] for k in FREE}

        pairs, page_text = listed(admin_client)
        assert pairs == {(p, s) for p, s in pairs_before if p not in LOCKED}
        for key in LOCKED:
            assert re.search(rf"Profile {key} was skipped: busy — store is locked by another process; retry", page_text)
        found, _ = listed(admin_client, "&q=build")
        assert found == {(p, s) for p, s in found_before if p not in LOCKED}

        response = admin_client.get(session_page)
        assert response.status_code == 200
        assert without_tokens(response.content.decode()) == page_before
        assert without_tokens(admin_client.get(search_page).content.decode()) == search_before

        # Views again, now with the locks remembered: still complete, still no wait.
        assert {k: v for k, v in overview_rows(admin_client).items() if k in FREE} == \
            {k: rows_before[k] for k in FREE}
        assert listed(admin_client)[0] == pairs
        # A bulk deletion picked from the list: the locked store's row is left alone as busy.
        response = admin_client.post("/sessions/delete/", {"s": [f"ops {ids('ops')['cli_main']}", f"research {research}"]})
        confirm = text(response.content.decode())
        assert response.status_code == 200
        assert confirm.count("left alone: store is locked by another process; retry later") == 1
        assert research in confirm
        assert busy.waits(full=True) == 0
        for key in LOCKED:
            assert busy.waits(db_of(hermes_home, key), full=False) == 1  # one glance each, then remembered

        # The locked store's own page waits its read timeout (made short here), once.
        patient.HERMES_READ_TIMEOUT = 1.0
        response = admin_client.get(f"/p/ops/s/{ids('ops')['cli_main']}/")
        assert response.status_code == 503 and response["Retry-After"] and "busy" in response.content.decode()
        assert busy.waits(db_of(hermes_home, "ops"), full=True) == 1
        assert busy.waits(db_of(hermes_home, "archive"), full=True) == 0

        assert store_files(hermes_home) == files  # nothing written, no sidecar created or removed


def test_a_session_in_two_stores_is_compared_without_waiting_for_locked_ones(admin_client, hermes_home, patient):
    from tests.checks.helpers import damage

    sid = ids("default")["cli_main"]
    with damage(registry.get("research")) as db:
        db.execute("INSERT INTO sessions (id, source, started_at, title) VALUES (?, 'cli', 1.7e9, 'A copy')", (sid,))
    registry.reset()
    with holding(*((db_of(hermes_home, p), kind) for p, kind in LOCKED.items())):
        detail = text(admin_client.get(f"/p/default/s/{sid}/").content.decode())
        assert "The same id is also in research" in detail
        page = admin_client.get(f"/p/default/s/{sid}/collision/").content.decode()
        assert page.count('<section class="copy') == 2 and "A copy" in page
        for key in LOCKED:
            assert re.search(rf'<li><a href="/p/{key}/"><bdi>{key}</bdi></a>: <bdi>busy: store is locked by another process', page)
    assert busy.waits(full=True) == 0


def test_a_glance_remembers_a_locked_store_until_a_read_goes_through(hermes_home, patient):
    db = db_of(hermes_home, "ops")
    store = registry.get("ops")
    with holding((db, "wal_exclusive")):
        assert store.glance().readiness().status == "busy"
        assert store.glance().readiness().status == "busy"  # remembered: not tried again
        assert busy.waits(db, full=False) == 1 and busy.waits(db, full=True) == 0
        patient.HERMES_READ_TIMEOUT = 0.5
        assert store.readiness().status == "busy"  # its own page always tries
        assert busy.waits(db, full=True) == 1
    assert store.glance().readiness().status == "busy"  # still remembered (HERMES_BUSY_MEMORY)
    assert busy.waits(db, full=False) == 1
    assert store.readiness() is None  # a read that goes through ends it
    assert store.glance().readiness() is None and busy.recently_locked(db) is None


def test_orm_reads_of_a_locked_store_are_counted_with_their_timeout(hermes_home, patient):
    from django.db import OperationalError

    from sessions_app.models import AgentSession

    patient.HERMES_READ_TIMEOUT = 0.5  # before the aliases are registered: they keep it
    db = db_of(hermes_home, "ops")
    store = registry.get("ops")
    with store.read() as conn:
        caps = store.capabilities(conn)
    with holding((db, "wal_exclusive")):
        for look, full in ((store.glance(), False), (store, True)):
            with pytest.raises(OperationalError, match="locked"):
                AgentSession.objects.for_store(look, caps).count()
            assert busy.waits(db, full=full) == 1
    assert AgentSession.objects.for_store(store, caps).count() == len(ids("ops"))


def test_the_memory_is_of_one_file_for_a_few_seconds(hermes_home, patient, tmp_path):
    db = db_of(hermes_home, "research")
    store = registry.get("research")
    busy.found_locked(db, 0.25, "database is locked")
    assert store.glance().readiness().status == "busy"
    assert store.readiness() is None  # the store's own pages are not held back by the memory
    busy.found_locked(db, 0.25, "database is locked")
    # Another file at the same path (restored, replaced): tried again at once.
    spare = tmp_path / "spare.db"
    spare.write_bytes(db.read_bytes())  # no SQLite connection to it is open in this test
    os.replace(spare, db)
    assert busy.recently_locked(db) is None and store.glance().readiness() is None
    patient.HERMES_BUSY_MEMORY = 0
    busy.found_locked(db, 0.25, "database is locked")
    assert store.glance().readiness() is None


def test_cross_profile_checks_leave_a_locked_store_out_with_a_note(hermes_home, patient):
    from sessions_app.checks import run_store_checks

    stores = {s.key: s for s in registry.stores()}
    others = [s for k, s in stores.items() if k != "research"]
    before = run_store_checks(stores["research"], other_stores=others)
    with holding((db_of(hermes_home, "archive"), "rollback")):
        report = run_store_checks(stores["research"], other_stores=others)
        again = run_store_checks(stores["default"], other_stores=[s for k, s in stores.items() if k != "default"])
    assert report.status == "ok" and report.findings == before.findings
    assert "profile archive is busy (locked by another process): id_collision did not compare with it" in report.notes
    assert any(n.startswith("profile archive is busy") for n in again.notes)
    assert busy.waits(full=True) == 0 and busy.waits(db_of(hermes_home, "archive"), full=False) == 1


def manage(args, data, env_extra=None, timeout=600):
    env = dict(os.environ, HERMES_ADMIN_DATA=str(data), HERMES_ADMIN_SECRET_KEY="test", **(env_extra or {}))
    env.pop("DATABASE_URL", None)  # the child keeps its own SQLite database in ``data``
    return subprocess.run([sys.executable, "manage.py", *args], cwd=PROJECT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_check_run_over_every_profile_reports_each_locked_store_once(hermes_home, tmp_path):
    data = tmp_path / "run-data"
    data.mkdir()
    assert manage(["migrate", "-v0"], data).returncode == 0
    run = ["heal_sessions", "--root", str(hermes_home), "--all-profiles", "--json"]
    # The read timeout is 3 s: the stores' own passes wait it once each; the run before
    # glances (which waited it once per locked store and other store) waited it 2 + 2 x 5 times.
    counted = {"DJANGO_SETTINGS_MODULE": "tests.busy_settings", "HERMES_ADMIN_READ_TIMEOUT": "3"}
    free = manage(run, data, counted)
    before = {p["profile"]: p for p in json.loads(free.stdout)["profiles"]}
    assert all(p["status"] == "ok" for p in before.values()), free.stderr[-2000:]
    with holding(*((db_of(hermes_home, p), kind) for p, kind in LOCKED.items())):
        files = store_files(hermes_home)
        out = manage(run, data, counted)
        assert store_files(hermes_home) == files
    assert out.returncode == 2, out.stderr[-3000:]  # a store could not be read
    report = json.loads(out.stdout)
    entries = {p["profile"]: p for p in report["profiles"]}
    assert set(entries) == set(PROFILES)
    for key in LOCKED:
        assert entries[key]["status"] == "busy" and "retry" in entries[key]["error"]
        assert [f["check"] for f in entries[key]["findings"]] == ["store_busy"]
        assert entries[key]["actions"] == []
    for key in FREE:
        assert entries[key]["status"] == "ok" and entries[key]["error"] is None
        assert entries[key]["findings"] == before[key]["findings"]
    waited = re.findall(r"store (\S+) stayed locked through a busy timeout of ([0-9.]+) s \(the full read timeout\)",
                        out.stderr)
    assert sorted(Path(path).parent.name for path, _ in waited) == sorted(LOCKED), out.stderr[-3000:]
    assert {seconds for _, seconds in waited} == {"3.00"}
