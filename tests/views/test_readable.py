"""Pages read as prose: relative times with the exact UTC time on hover, human
durations, labels instead of column names, no Python reprs (issue 15, point 2)."""

import datetime as dt
import re
import time

import pytest
from django.template import Context, Template

from sessions_app import timefmt
from tests.conftest import IDS

pytestmark = pytest.mark.django_db

REPR = re.compile(r"\{'|': |\[\{|\bNone\b|\bTrue\b|\bFalse\b|\d{10}\.\d")  # dict/list reprs, epoch floats


def render(source: str, **context) -> str:
    return Template("{% load hermes %}" + source).render(Context(context))


def visible(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).strip()


@pytest.mark.parametrize("seconds, words", [
    (0, "0 s"), (12, "12 s"), (12.9, "12 s"), (90, "1 min 30 s"), (600, "10 min"),
    (7085, "1 h 58 min"), (3600, "1 h"), (86400, "1 day"), (90000, "1 day 1 h"),
    (259200, "3 days"), (86405, "1 day"), (-5, "0 s"),
    (None, "—"), ("soon", "—"), (True, "—"),
])
def test_human_duration(seconds, words):
    assert render("{{ s|human_duration }}", s=seconds) == words


def test_reltime_is_a_time_element_with_the_exact_utc_time_on_hover():
    three_hours_ago = time.time() - 3 * 3600 - 30
    html = render("{{ t|reltime }}", t=three_hours_ago)
    exact = dt.datetime.fromtimestamp(three_hours_ago, dt.timezone.utc)
    assert html == (f'<time datetime="{exact:%Y-%m-%dT%H:%M:%SZ}" title="{exact:%Y-%m-%d %H:%M:%S} UTC">'
                    f'3 hours ago</time>')
    fixed = render("{{ t|reltime }}", t=1796187600.0)  # 2026-12-02 05:00:00 UTC
    assert 'datetime="2026-12-02T05:00:00Z" title="2026-12-02 05:00:00 UTC"' in fixed


def test_reltime_says_future_times_and_datetimes_too():
    html = render("{{ t|reltime }}", t=time.time() + 2 * 86400 + 60)
    assert "2 days from now" in visible(html)
    aware = dt.datetime(2026, 12, 2, 5, 0, tzinfo=dt.timezone.utc)
    assert 'title="2026-12-02 05:00:00 UTC"' in render("{{ t|reltime }}", t=aware)


@pytest.mark.parametrize("value, shown", [(None, "—"), ("", ""), ("n/a", "n/a"), (True, "True"),
                                          (1e300, "1e+300")])
def test_reltime_leaves_values_that_are_not_times_as_they_are(value, shown):
    assert render("{{ t|reltime }}", t=value) == shown


def test_exact_reltime_shows_the_exact_time_first():
    html = render("{{ t|exact_reltime }}", t=1796187600.0)
    assert visible(html).startswith("2026-12-02 05:00:00 UTC (")
    assert visible(html).endswith(" ago)") or visible(html).endswith("from now)")


def test_timefmt_relative_is_plain_text():
    assert timefmt.relative(time.time() - 120) == "2 minutes ago"
    assert timefmt.relative("x") is None
