"""owner_mismatch of kind mislabelled is healed by relabelling from the session key."""

import pytest

from tests.checks.helpers import damage
from tests.conftest import ids

from .conftest import heal, profile_entry, store

pytestmark = pytest.mark.django_db


def test_a_wrong_label_on_a_session_keyed_to_this_profile_is_relabelled(aged_home):
    s = store(aged_home, "edge")
    sid = ids("edge")["telegram_open"]
    with damage(s) as db:
        key = db.execute("SELECT session_key FROM sessions WHERE id = ?", (sid,)).fetchone()[0]
        assert key.startswith("agent:edge:")
        db.execute("UPDATE sessions SET profile_name = 'research' WHERE id = ?", (sid,))
    code, report = heal("--profile", "edge", "--only", "owner_mismatch", "--apply", "--json")
    done = [a for a in profile_entry(report, "edge")["actions"] if a["session_id"] == sid]
    assert [a["status"] for a in done] == ["applied"], done
    with s.read() as conn:
        assert conn.execute("SELECT profile_name FROM sessions WHERE id = ?", (sid,)).fetchone() == ("edge",)
    assert not [f for f in profile_entry(report, "edge")["findings"] if f["session_id"] == sid]
