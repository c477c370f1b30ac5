"""Session pages of huge sessions do not run the session's checks on every view
(issue 7: a 300,000-message session's checks read every row, seconds per view)."""

import sqlite3

import pytest
from django.utils import timezone

from sessions_app.models import HealRun
from sessions_app.presenters import session_page as views
from tests.conftest import IDS

pytestmark = pytest.mark.django_db
SID = IDS["cli_main"]


@pytest.fixture
def huge(hermes_home):
    """cli_main of the default store grown past LIVE_CHECK_ROWS (message_count left
    alone, so a live check reports counter_drift)."""
    conn = sqlite3.connect(hermes_home / "state.db")
    start = conn.execute("SELECT MAX(timestamp) FROM messages WHERE session_id = ?", (SID,)).fetchone()[0]
    rows = []
    for i in range(views.LIVE_CHECK_ROWS + 1):
        role = "user" if i % 2 == 0 else "assistant"
        rows.append((SID, role, f"{role} turn {i}", start + 1 + i))
    conn.executemany("INSERT INTO messages(session_id, role, content, timestamp) VALUES (?, ?, ?, ?)", rows)
    conn.commit()
    conn.close()
    return hermes_home


def _spy(monkeypatch):
    calls = []
    real = views.run_store_checks

    def spy(*args, **kwargs):
        calls.append(kwargs.get("session_id"))
        return real(*args, **kwargs)

    monkeypatch.setattr(views, "run_store_checks", spy)
    return calls


def test_huge_session_page_shows_stored_findings_without_running_checks(admin_client, huge, monkeypatch):
    calls = _spy(monkeypatch)
    html = admin_client.get(f"/p/default/s/{SID}/").content.decode()
    assert calls == []
    assert 'id="findings-source"' in html and "no check pass has covered this profile yet" in html
    assert "recheck=1" in html
    assert 'id="m' in html  # the transcript page itself is there


def test_latest_pass_findings_are_shown_and_marked(admin_client, huge, monkeypatch):
    calls = _spy(monkeypatch)
    finding = {"check": "unanswered_tool_call", "severity": "warning", "session_id": SID, "count": 1,
               "detail": "stored finding from the nightly pass", "heal": None,
               "evidence": {"calls": [], "message_ids": [1]}}
    HealRun.objects.create(mode="check", trigger="command", actor_label="cron", status="done",
                           finished_at=timezone.now(),
                           report={"profiles": [{"profile": "default", "findings": [finding]}]})
    html = admin_client.get(f"/p/default/s/{SID}/").content.decode()
    assert calls == []
    assert "stored finding from the nightly pass" in html
    assert "the findings shown are those of the check pass finished" in html


def test_check_now_runs_the_live_checks_once(admin_client, huge, monkeypatch):
    calls = _spy(monkeypatch)
    html = admin_client.get(f"/p/default/s/{SID}/?recheck=1").content.decode()
    assert calls == [SID]
    assert 'id="findings-source"' not in html
    assert "counter_drift" in html  # message_count was left behind by the inserted rows
    assert "recheck=1" not in html.split('id="findings"', 1)[-1]  # page links do not keep re-checking


def test_ordinary_sessions_are_still_checked_live(admin_client, hermes_home, monkeypatch):
    calls = _spy(monkeypatch)
    html = admin_client.get(f"/p/default/s/{SID}/").content.decode()
    assert calls == [SID]
    assert 'id="findings-source"' not in html
