"""The sessions list renders its rows in Python (``templatetags/session_rows.py``):
the markup is the template loop's it replaced (``reference_session_rows.html``),
byte for byte, for every row of every fixture profile with a stored pass's badges,
with and without the selection column, masking on and off, and for rows with
hostile titles, odd ids, flags and columns an old store lacks."""

from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.template import Context, Template
from django.utils import timezone

from sessions_app.models import HealRun
from sessions_app.presenters.session_list import list_page
from sessions_app.stores import registry
from sessions_app.stores.listing import Filters
from sessions_app.templatetags.session_rows import session_rows

pytestmark = pytest.mark.django_db
REFERENCE = Template((Path(__file__).parent / "reference_session_rows.html").read_text())


def both(rows, checked, select: bool):
    context = {"page": {"rows": rows}, "checked": checked, "can_delete": select, "can_flag": False}
    return session_rows(Context(context), rows, checked), REFERENCE.render(Context(context))


@pytest.fixture
def stored_pass(hermes_home):
    """A finished pass over ``default`` with findings on its first sessions."""
    stores = registry.glances()
    rows = list_page(stores, Filters(profiles=["default"]), user=User(is_superuser=True), limit=5).page.rows
    findings = [{"check": check, "severity": sev, "session_id": row["id"], "count": 1,
                 "detail": "detail <b>&</b> 'q' \"dq\"", "heal": None}
                for row in rows for check, sev in (("counter_drift", "warning"), ("orphan_tool_result", "error"),
                                                   ("unanswered_turn", "info"), ("stale_open", "warning"))]
    HealRun.objects.create(mode="check", trigger="command", actor_label="cron", status="done",
                           finished_at=timezone.now(),
                           report={"profiles": [{"profile": "default", "status": "ok", "findings": findings}]})
    return findings


@pytest.mark.parametrize("order", ["started", "activity"])
@pytest.mark.parametrize("mask", [False, True])
def test_rows_of_every_profile_are_the_template_loops(stored_pass, settings, order, mask):
    settings.HERMES_ADMIN_MASK_SECRETS = mask
    user = User.objects.create_superuser("rows", password="x")
    shown = list_page(registry.glances(), Filters(order=order), user=user, limit=200)
    rows = shown.page.rows
    assert len({r["profile"] for r in rows}) > 1
    assert any(r["findings"] for r in rows) and any(r["more_findings"] for r in rows)
    for select in (True, False):
        mine, reference = both(rows, shown.checked, select)
        assert mine == reference


ODD_IDS = ["a/b", "sp ace", "ü-ñ", "x?y#z", "50%", "<script>", "a&b", "-", "cron_job.1~2", "日本語"]


def test_hostile_and_sparse_rows(hermes_home):
    rows = [{"profile": "default", "id": sid, "title": f"<img src=x onerror=alert({i})> & \u202e",
             "parent_session_id": "<p>" if i % 2 else None, "source": None if i % 3 else "telegram",
             "ended_at": 0 if i % 2 else 1.7e9, "end_reason": "<b>", "message_count": None if i % 2 else 12345,
             "started_at": 1.7e9 + i, "activity": None, "pinned": i % 2, "archived": 1, "hidden": 0,
             "live_label": "ended" if i % 2 else "live <", "live_class": "x\"y",
             "live_evidence": ["pid 12 <alive>", "lease & 'held'"] if i % 2 else [],
             "findings": [{"check": "c<", "severity": "w\"", "detail": "'&'"}], "more_findings": i}
            for i, sid in enumerate(ODD_IDS)]
    rows.append({"profile": "p&q", "id": "plain"})  # an old store: no title, flags, counts
    rows.append({"profile": "default", "id": "t", "title": "", "started_at": "not a time", "activity": "2026"})
    for checked in (set(), {"default"}):
        for select in (True, False):
            mine, reference = both(rows, checked, select)
            assert mine == reference
