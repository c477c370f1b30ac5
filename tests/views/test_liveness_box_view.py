"""The session page reads liveness once for its box and its own checks
(``liveness.page_indexes``), each with its own view of the evidence: the box is
deletion's (a session's own end closes what its recent activity suggested), the
checks' the other. Swapped, an ended session with recent activity would ask for an
override to delete."""

import re
import sqlite3
import time

import pytest

from sessions_app.stores import liveness, registry
from tests.conftest import ids

pytestmark = pytest.mark.django_db


def box(admin_client, sid) -> str:
    html = admin_client.get(f"/p/default/s/{sid}/").content.decode()
    found = re.search(r'<section class="liveness[^"]*" id="liveness">(.*?)</section>', html, re.S).group(0)
    return " ".join(re.sub("<[^>]+>", " ", found).split())


def ended_after_recent_activity(sid) -> None:
    now = time.time()
    with sqlite3.connect(registry.get("default").path) as db:
        db.execute("UPDATE messages SET timestamp = ? WHERE id = (SELECT MAX(id) FROM messages WHERE session_id = ?)",
                   (now - 60, sid))
        db.execute("UPDATE sessions SET ended_at = ? WHERE id = ?", (now - 10, sid))


def test_the_box_shows_deletions_view_of_an_ended_session(admin_client, hermes_home):
    sid = ids("default")["long"]
    ended_after_recent_activity(sid)
    shown = box(admin_client, sid)
    assert "not live" in shown and "maybe live" not in shown and "override" not in shown, shown


def test_swapped_views_would_show_on_the_page(admin_client, hermes_home, monkeypatch):
    """What the test above guards against, shown to be visible: the two views differ here."""
    sid = ids("default")["long"]
    ended_after_recent_activity(sid)
    real = liveness.page_indexes
    monkeypatch.setattr(liveness, "page_indexes", lambda *a, **k: tuple(reversed(real(*a, **k))))
    assert "maybe live" in box(admin_client, sid)
