"""A profile_name that disagrees with the session key of this very store is reported
(owner_mismatch, mislabelled), never overwritten: stamp_owner only fills blanks."""

import pytest

from tests.checks.helpers import damage
from tests.conftest import ids

from .conftest import heal, profile_entry, store

pytestmark = pytest.mark.django_db


def test_a_wrong_label_is_reported_and_left_alone(aged_home):
    s = store(aged_home, "edge")
    sid = ids("edge")["telegram_open"]
    with damage(s) as db:
        key = db.execute("SELECT session_key FROM sessions WHERE id = ?", (sid,)).fetchone()[0]
        assert key.startswith("agent:edge:")
        db.execute("UPDATE sessions SET profile_name = 'research' WHERE id = ?", (sid,))
    code, report = heal("--profile", "edge", "--only", "owner_mismatch", "--apply", "--json")
    [found] = [f for f in profile_entry(report, "edge")["findings"] if f["session_id"] == sid]
    assert found["heal"] is None and "session key belongs to this profile" in found["detail"]
    assert not [a for a in profile_entry(report, "edge")["actions"] if a["session_id"] == sid]
    with s.read() as conn:
        assert conn.execute("SELECT profile_name FROM sessions WHERE id = ?", (sid,)).fetchone() == ("research",)


def test_a_blank_owner_is_stamped(aged_home):
    s = store(aged_home, "edge")
    sid = ids("edge")["long"]
    with damage(s) as db:
        db.execute("UPDATE sessions SET profile_name = '  ' WHERE id = ?", (sid,))
    code, report = heal("--profile", "edge", "--only", "missing_owner", "--apply", "--json")
    assert [a["status"] for a in profile_entry(report, "edge")["actions"] if a["session_id"] == sid] == ["applied"]
    with s.read() as conn:
        assert conn.execute("SELECT profile_name FROM sessions WHERE id = ?", (sid,)).fetchone() == ("edge",)
