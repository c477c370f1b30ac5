"""Every action leaves exactly one audit event, whatever its outcome."""

import os
import time

import pytest

from sessions_app.actions.engine import Applier, plan_for
from sessions_app.checks import run_store_checks
from sessions_app.models import AuditEvent
from tests.checks.helpers import damage, hermes
from tests.conftest import IDS, ids

from .conftest import store

pytestmark = pytest.mark.django_db


def planned(s, code):
    report = run_store_checks(s, only=[code])
    with s.read() as conn:
        caps = s.capabilities(conn)
        return [plan_for(s, conn, caps, f) for f in report.findings if f.heal]


def test_applied_blocked_changed_refused_and_failed_each_leave_one_event(aged_home, data_dir):
    s = store(aged_home, "default")
    with damage(s) as db:
        db.execute("UPDATE sessions SET message_count = 50 WHERE id = ?", (IDS["cli_main"],))
        db.execute("UPDATE sessions SET message_count = 51 WHERE id = ?", (IDS["slack_ended"],))
        db.execute("UPDATE sessions SET message_count = 52 WHERE id = ?", (IDS["cron"],))
    plans = {p.session_id: p for p in planned(s, "counter_drift")}
    applier = Applier(actor_label="test")

    # applied
    assert applier.apply(s, plans[IDS["cli_main"]]).status == "applied"
    # skipped: changed after planning (a writer touched the session)
    with damage(s) as db:
        db.execute("UPDATE sessions SET message_count = 53 WHERE id = ?", (IDS["slack_ended"],))
    changed = applier.apply(s, plans[IDS["slack_ended"]])
    assert changed.status == "skipped" and "changed since" in changed.reason
    # refused: the session became live (a real 0.19.0 writer appended just now)
    hermes(s, f"db.append_message({IDS['cron']!r}, 'user', 'again')")
    [cron] = [p for p in planned(s, "counter_drift") if p.session_id == IDS["cron"]]
    live = applier.apply(s, cron)
    assert live.status == "refused" and "live" in live.reason

    events = list(AuditEvent.objects.order_by("id"))
    assert [e.outcome for e in events] == ["applied", "skipped", "refused"]
    assert events[2].session_ids == [IDS["cron"]] and "activity" in events[2].reason


def test_a_backup_that_cannot_be_written_fails_the_action_and_writes_nothing(aged_home, data_dir):
    s = store(aged_home, "edge")
    sid = ids("edge")["cli_main"]
    with damage(s) as db:
        db.execute("UPDATE sessions SET message_count = 50 WHERE id = ?", (sid,))
    [plan] = [p for p in planned(s, "counter_drift") if p.session_id == sid]
    (data_dir / "backups").write_text("not a folder")  # the copy cannot be made
    outcome = Applier(actor_label="test").apply(s, plan)
    assert outcome.status == "failed" and "no write" in outcome.reason
    with s.read() as conn:
        assert conn.execute("SELECT message_count FROM sessions WHERE id = ?", (sid,)).fetchone() == (50,)
    [event] = AuditEvent.objects.all()
    assert event.outcome == "failed" and event.backup_path == "" and event.rows_changed == 0
