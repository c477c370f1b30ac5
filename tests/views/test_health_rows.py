"""The health page's rows are rendered in Python (``templatetags/transcript.py``,
``health_rows``) with the links its presenter built from one reversed prefix: the
markup is the template loop's (``reference_health_rows.html``), the links are what
``reverse()`` gives, whatever the session id."""

import pytest
from django.contrib.auth.models import User
from django.template import Context, Template
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from pathlib import Path

from sessions_app.models import HealRun
from sessions_app.presenters.health import health_page, session_url_maker
from sessions_app.stores import registry
from sessions_app.templatetags.transcript import health_rows

pytestmark = pytest.mark.django_db
REFERENCE = Template((Path(__file__).parent / "reference_health_rows.html").read_text())
ODD_IDS = ["20260301_080000_5a1ac4e0", "a/b", "sp ace", "ü-ñ", "x?y#z", "50%", "<script>", "a&b", "..", "-",
           "cron_job.1~2", "//lead", "tab\there"]


def finding(check, sid, heal=None, detail="detail <b>&</b> 'quoted'", count=1):
    return {"check": check, "severity": "warning", "session_id": sid, "count": count, "detail": detail, "heal": heal}


@pytest.fixture
def stored(hermes_home):
    findings = [finding("counter_drift", sid, "recount_session") for sid in ODD_IDS]
    findings += [finding("id_collision", sid) for sid in ODD_IDS[:5]]
    findings += [finding("fts_damaged", None, count=3), finding("lineage_cycle", "c1", detail=""),
                 finding("stale_lease", None, "clear_stale_lease")]
    findings += [finding("orphan_tool_result", f"s{i}") for i in range(250)]  # past the 200 shown
    HealRun.objects.create(mode="check", trigger="command", actor_label="cron", status="done",
                           finished_at=timezone.now(),
                           report={"profiles": [{"profile": "default", "status": "ok", "findings": findings}]})
    return findings


def test_rows_are_the_template_loops_markup(stored):
    user = User.objects.create_superuser("rows", password="x")
    page = health_page(registry.get("default"), user=user)
    assert sum(len(g["rows"]) for g in page.groups) == len(stored) - 50
    for group in page.groups:
        assert health_rows(group["rows"]) == REFERENCE.render(Context({"group": group})), group["code"]
    assert {g["code"]: g["total"] for g in page.groups}["orphan_tool_result"] == 250


@pytest.mark.parametrize("name", ["session", "repair_preview", "session_collision"])
def test_links_from_one_prefix_are_reverse_itself(hermes_home, name):
    url = session_url_maker(name, "default")
    for sid in ODD_IDS + ["ok", "日本語"]:
        assert url(sid) == reverse(name, args=["default", sid]), sid
    with pytest.raises(NoReverseMatch):  # an id the route cannot hold is refused as reverse() refuses it
        url("new\nline")
