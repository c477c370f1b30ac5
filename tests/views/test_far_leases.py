"""A lease or lock row whose ``expires_at`` is +Inf (``9e999`` in SQL) or absurdly far
ahead (``1e300``): SQLite keeps both, Hermes treats them as unexpired (``expires_at >
now``, docs/store.md §7.1, §7.2). The sessions list of every profile, the session page,
a flag write and the heal check keep working (ground rule 9): the lease is live
evidence, said in words, never an OverflowError.

Real 0.19.0 stores; the row is written with plain sqlite3, as a salvaged page or a
buggy writer leaves it.
"""

import os

import pytest

from sessions_app.actions.flags import Flagger
from sessions_app.timefmt import human_duration
from tests.actions.conftest import heal, profile_entry, store
from tests.checks.helpers import damage, dead_pid, own_pidns
from tests.conftest import IDS

pytestmark = pytest.mark.django_db

SID = IDS["cli_main"]
FAR = {"inf": float("inf"), "1e300": 1e300}


@pytest.fixture(params=sorted(FAR))
def far_lock(request, hermes_home):
    """A compression lock on cli_main held by this (live) process, expiring at FAR[param]."""
    s = store(hermes_home, "default")
    with damage(s) as db:
        db.execute("DELETE FROM compression_locks WHERE session_id = ?", (SID,))
        db.execute("INSERT INTO compression_locks (session_id, holder, acquired_at, expires_at) VALUES (?, ?, ?, ?)",
                   (SID, f"pid={os.getpid()}:tid=1:agent=1:nonce=1", 1.0, FAR[request.param]))
    with s.read() as conn:
        stored = conn.execute("SELECT expires_at FROM compression_locks WHERE session_id = ?", (SID,)).fetchone()[0]
    assert stored == FAR[request.param]
    return s


def test_every_profiles_list_and_the_session_page_show_the_lock(admin_client, far_lock):
    response = admin_client.get("/sessions/")
    assert response.status_code == 200
    response = admin_client.get("/sessions/?profile=default")
    assert response.status_code == 200
    response = admin_client.get(f"/p/default/s/{SID}/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "compression lock" in html and "more than 100 years" in html


def test_a_flag_write_is_refused_as_live(far_lock):
    with far_lock.read() as conn:
        before = conn.execute("SELECT archived FROM sessions WHERE id = ?", (SID,)).fetchone()
    done = Flagger(actor_label="alice").set_flag(far_lock, SID, "archived", True)
    assert done.status == "refused" and "compression lock" in done.reason, done.reason
    assert "more than 100 years" in done.reason
    with far_lock.read() as conn:
        assert conn.execute("SELECT archived FROM sessions WHERE id = ?", (SID,)).fetchone() == before


def test_the_heal_check_reads_the_store(far_lock):
    code, report = heal("--profile", "default", "--json")
    entry = profile_entry(report, "default")
    assert entry["status"] == "ok", entry["error"]
    assert code in (0, 1)


@pytest.mark.parametrize("seconds, said", [
    (float("inf"), "more than 100 years"), (1e300, "more than 100 years"), (-float("inf"), "0 s"),
    (float("nan"), "—"), (True, "—"), ("12", "—"), (90, "1 min 30 s"), (100 * 365 * 86400, "36500 days"),
])
def test_human_duration_of_any_value(seconds, said):
    assert human_duration(seconds) == said


def test_a_far_lock_of_a_dead_holder_is_a_finding_with_no_overdue_time(hermes_home):
    """A lock that never expires, held by a process that is gone: the heal check
    names it (unexpired, holder gone) and offers no clearing (Hermes reclaims it)."""
    s = store(hermes_home, "default")
    with damage(s) as db:
        db.execute("DELETE FROM compression_locks WHERE session_id = ?", (SID,))
        db.execute("INSERT INTO compression_locks (session_id, holder, acquired_at, expires_at) VALUES (?, ?, ?, 9e999)",
                   (SID, f"pid={dead_pid()}:pidns={own_pidns()}:tid=1:agent=1:nonce=1", 1.0))
    code, report = heal("--profile", "default", "--only", "stale_lease", "--json")
    entry = profile_entry(report, "default")
    assert entry["status"] == "ok", entry["error"]
    [found] = [f for f in entry["findings"] if f["check"] == "stale_lease" and SID in f["detail"]]
    assert "is unexpired" in found["detail"] and "no longer running" in found["detail"] and found["heal"] is None
