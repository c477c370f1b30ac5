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


# --------------------------------------------------------------------------- repair previews

DAY = 86_400


@pytest.fixture
def home(hermes_home, settings, tmp_path):
    from tests.actions.conftest import age_store

    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir()
    for db in [hermes_home / "state.db", *hermes_home.glob("profiles/*/state.db")]:
        age_store(db, 40 * DAY)
    return hermes_home


def cells(html: str, table_class: str = "changes") -> list[list[str]]:
    table = re.search(rf'<table class="[^"]*\b{table_class}\b[^"]*">(.*?)</table>', html, re.S).group(1)
    return [[re.sub(r" ([,;])", r"\1", visible(c)) for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S)]
            for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table, re.S)]


def test_a_recreated_session_row_previews_as_a_table_of_labelled_fields(admin_client, home):
    from sessions_app.stores import registry
    from tests.checks.helpers import damage

    with damage(registry.get("default")) as db:
        first = db.execute("SELECT MIN(timestamp) FROM messages WHERE session_id = ?", (IDS["long"],)).fetchone()[0]
        db.execute("DELETE FROM sessions WHERE id = ?", (IDS["long"],))
    html = admin_client.get(f"/p/default/s/{IDS['long']}/repair/?check=orphan_messages").content.decode()
    rows = cells(html)
    assert rows[0] == ["Change", "Row", "Field", "Before", "After"]
    assert len(rows) == 2  # one change: the session row
    op, row, field, before, after = rows[1]
    assert (op, row, field, before) == ("Add", f"Session {IDS['long']}", "—", "—")
    assert re.search(r"Started \d+ (months?|weeks?)\b.* ago", after) and "Source unknown" in after and "Profile default" in after
    exact = dt.datetime.fromtimestamp(first, dt.timezone.utc)
    assert f'title="{exact:%Y-%m-%d %H:%M:%S} UTC"' in html
    page = visible(html)
    assert not REPR.search(page), REPR.search(page)
    assert "started_at" not in page and "{" not in page



def test_a_recount_previews_before_and_after_under_the_fields_label(admin_client, home):
    import sqlite3

    conn = sqlite3.connect(home / "state.db")
    conn.execute("UPDATE sessions SET message_count = 99 WHERE id = ?", (IDS["cli_main"],))
    conn.commit()
    real = conn.execute("SELECT COUNT(*) FROM messages WHERE session_id = ?", (IDS["cli_main"],)).fetchone()[0]
    conn.close()
    html = admin_client.get(f"/p/default/s/{IDS['cli_main']}/repair/?check=counter_drift").content.decode()
    rows = cells(html)
    assert ["Change", f"Session {IDS['cli_main']}", "Messages", "99", str(real)] in rows, rows
    assert 'title="message_count"' in html  # the raw column on hover


# --------------------------------------------------------------------------- session facts

def test_session_facts_are_labelled_and_unknown_columns_keep_their_name(admin_client, hermes_home):
    import sqlite3

    conn = sqlite3.connect(hermes_home / "state.db")
    conn.execute("ALTER TABLE sessions ADD COLUMN future_mood TEXT")  # a newer schema's column
    conn.execute("UPDATE sessions SET future_mood = 'calm' WHERE id = ?", (IDS["delegate_child"],))
    conn.commit()
    conn.close()
    html = admin_client.get(f"/p/default/s/{IDS['delegate_child']}/").content.decode()
    meta = re.search(r'<section class="meta">(.*?)</section>', html, re.S).group(1)
    terms = [visible(t) for t in re.findall(r"<dt[^>]*>(.*?)</dt>", meta, re.S)]
    for label in ("Session id", "Title", "Source", "Model", "Started", "Messages", "Parent session"):
        assert label in terms, terms
    assert not {"started_at", "message_count", "parent_session_id", "source"} & set(terms)
    assert "future_mood" in terms  # shown under its raw name
    assert re.search(r'<dt[^>]*data-column="future_mood"[^>]*><code dir="auto">future_mood</code></dt>'
                     r'<dd dir="auto"><bdi>calm</bdi></dd>', meta)
    parent = re.search(r'<dt[^>]*data-column="parent_session_id"[^>]*>.*?</dt><dd[^>]*>(.*?)</dd>', meta, re.S)
    assert f'href="/p/default/s/{IDS["cli_main"]}/"' in parent.group(1)
    started = re.search(r'data-column="started_at"[^>]*>Started</dt><dd[^>]*>(.*?)</dd>', meta, re.S).group(1)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(.+\)", visible(started))
    side = re.search(r'<section class="side">(.*?)<h2>Lineage', html, re.S).group(1)
    assert "Input tokens" in visible(side) and "input_tokens" not in visible(side)


# --------------------------------------------------------------------------- search count

def test_search_says_how_many_hits_in_how_many_sessions(admin_client, hermes_home, settings):
    import sqlite3

    conn = sqlite3.connect(hermes_home / "state.db")
    for sid in (IDS["cli_main"], IDS["cli_main"], IDS["long"]):
        conn.execute("INSERT INTO messages(session_id, role, content, timestamp) VALUES (?, 'user', "
                     "'the zanzibar deploy', 1796008075.0)", (sid,))
    conn.commit()
    conn.close()
    html = admin_client.get("/p/default/search/?q=zanzibar").content.decode()
    assert visible(re.search(r'<p class="count"[^>]*>(.*?)</p>', html, re.S).group(1)) == "3 hits in 2 sessions"
    html = admin_client.get("/p/default/search/?q=zanzibar&size=20").content.decode()
    assert "3 hits in 2 sessions" in visible(html)
    # Users who see masked text get the count of the hits shown (a total would tell
    # how many matched only inside secrets).
    settings.HERMES_ADMIN_MASK_SECRETS = True
    html = admin_client.get("/p/default/search/?q=zanzibar").content.decode()
    assert "3 hits in 2 sessions on this page" in visible(html)
    assert 'class="count"' not in admin_client.get("/p/default/search/?q=zzznotthere").content.decode()


def test_search_count_stops_at_the_cap_and_says_more_than(hermes_home):
    import sqlite3

    from sessions_app.stores.search import count_hits

    with sqlite3.connect(f"file:{hermes_home / 'state.db'}?mode=ro", uri=True) as conn:
        n, sessions, capped = count_hits(conn, "answer*")
        assert not capped and n > 3 and sessions >= 1
        assert count_hits(conn, "answer*", cap=3) == (3, count_hits(conn, "answer*", cap=3)[1], True)
        with pytest.raises(ValueError):
            count_hits(conn, "***")


# --------------------------------------------------------------------------- audit and trash

def test_an_audit_event_shows_its_changes_as_a_table(admin_client, home):
    import sqlite3

    from sessions_app.models import AuditEvent
    from tests.actions.conftest import heal

    conn = sqlite3.connect(home / "state.db")
    conn.execute("PRAGMA foreign_keys=OFF")
    conn.execute("DELETE FROM sessions WHERE id = ?", (IDS["long"],))
    conn.commit()
    conn.close()
    code, report = heal("--profile", "default", "--apply", "--only", "orphan_messages", "--json")
    event = AuditEvent.objects.get(action="recreate_session_row")
    html = admin_client.get(f"/audit/{event.pk}/").content.decode()
    rows = cells(html)
    assert rows[0] == ["Change", "Row", "Field", "Before", "After"]
    assert rows[1][:2] == ["Add", f"Session {IDS['long']}"] and "Source unknown" in rows[1][4]
    shown = visible(re.sub(r'<details class="raw-json">.*?</details>', "", html, flags=re.S))
    assert not REPR.search(shown), REPR.search(shown)
    assert '"started_at"' in html  # the JSON as recorded stays, folded away


def test_trash_entry_titles_say_what_happened_once(home):
    from django.contrib.auth.models import User
    from django.test import Client

    admin = Client()
    admin.force_login(User.objects.create_superuser("root", password="pw-long-enough-x"))
    sid = IDS["slack_ended"]
    page = admin.get(f"/p/default/s/{sid}/delete/").content.decode()
    token = re.search(r'name="token" value="([^"]+)"', page).group(1)
    entry = admin.post(f"/p/default/s/{sid}/delete/apply/", {"token": token})["Location"].split("/")[2]
    html = admin.get(f"/trash/{entry}/").content.decode()
    h1 = visible(re.search(r"<h1[^>]*>(.*?)</h1>", html, re.S).group(1))
    assert h1 == f"Deleted {sid}"
    admin.post(f"/trash/{entry}/restore/")
    html = admin.get(f"/trash/{entry}/").content.decode()
    assert visible(re.search(r"<h1[^>]*>(.*?)</h1>", html, re.S).group(1)) == f"Restored {sid}"
    listing = admin.get("/trash/").content.decode()
    assert re.search(r'<td><a href="/trash/[^"]+/"><time datetime="[^"]+Z" title="[^"]+ UTC">', listing)


def test_plain_and_words_filters_never_print_a_repr():
    assert render("{{ v|plain }}", v=["a.jsonl", "b.jsonl"]) == "a.jsonl, b.jsonl"
    assert render("{{ v|plain }}", v={"parent_links_dropped": 2, "files": ["x"]}) == "parent links dropped: 2; files: x"
    assert render("{{ v|plain }}", v=3) == "3"
    assert render("{{ k|words }}", k="files_kept_in_trash") == "files kept in trash"


def test_every_change_shape_the_actions_plan_renders_without_a_repr():
    """The shapes of ``Change`` the actions build (actions/*), rendered by the plan table."""
    from django.template.loader import render_to_string

    from sessions_app.actions.base import Change
    from sessions_app.presenters.changes import change_table

    now = 1796187600.0
    changes = [
        Change("update", "messages", {"id": 12}, "active", 1, 0),
        Change("update", "sessions", {"id": "s1"}, "ended_at", None, now),
        Change("update", "sessions", {"id": "s1"}, "parent_session_id", "p1", None),
        Change("insert", "messages", {"after_id": 41, "order": 0}, after={
            "role": "assistant", "timestamp": now, "timestamp_estimated": True, "from": "s1.jsonl", "kind": "jsonl"}),
        Change("insert", "messages", {"jsonl_line": 3}, after={"role": "user", "timestamp": now, "content_chars": 12}),
        Change("move", "messages", {"id": 7}, before=7, after="re-inserted after the imported messages, then removed"),
        Change("insert", "messages", {"copy_of": 7}, after="after the imported messages"),
        Change("insert", "ops:sessions", {"id": "s1"}, after={"messages": 4, "store": "ops", "title": "t"}),
        Change("delete", "sessions", {"id": "s1"}, before={"messages": 4}),
        Change("delete", "session_turn_leases", {"conversation_id": "c1"}, before={"holder": "pid=1", "expires_at": now}),
        Change("move", "file", {"path": "sessions/s1.jsonl"}, before="default", after="ops"),
        Change("insert", "messages", {"after_id": None, "order": 3}, after={"role": "user", "timestamp": now}),
    ]
    # Recorded changes (run reports, audit events) are the same as dicts, with lists as keys.
    recorded = [c.__dict__ for c in changes] + [
        {"op": "delete", "table": "messages", "key": {"session_id": ["a", "b"]}, "after": 12}]
    for given in (changes, recorded):
        table = change_table(given)
        assert table.tabular and table.total == len(given)
        html = render_to_string("sessions/_changes.html", {"table": table})
        text = visible(html)
        assert not REPR.search(text), REPR.search(text)
        assert "{" not in text and "[" not in text
        rows = cells(html)
        assert rows[1][:5] == ["Hide", "Message #12", "Shown", "yes", "no"]
        assert rows[2][2] == "Ended" and 'datetime="2026-12-02T05:00:00Z"' in html
        assert rows[4][1] == "Message after message #41, position 0"
        assert "Time estimated yes" in rows[4][4] and "From file s1.jsonl" in rows[4][4]
        assert rows[8][1] == "Session in profile ops s1"
        assert rows[10][1] == "Turn lease c1" and "Holder pid=1" in rows[10][3]
        assert rows[12][1] == "Message at the start of the session, position 3"  # never "#None"
    assert cells(render_to_string("sessions/_changes.html", {"table": change_table(recorded)}))[-1][1] == \
        "Message of session a, b"
    odd = change_table([{"after": {"title": "x"}}])  # an older event's free-form changes
    assert not odd.tabular
    assert "<pre" in render_to_string("sessions/_changes.html", {"table": odd, "raw": "[]"})


def test_the_heal_page_lists_planned_repairs_with_their_changes(admin_client, home):
    import sqlite3

    from tests.actions.conftest import heal

    conn = sqlite3.connect(home / "state.db")
    conn.execute("UPDATE sessions SET message_count = 99 WHERE id = ?", (IDS["cli_main"],))
    conn.commit()
    real = conn.execute("SELECT COUNT(*) FROM messages WHERE session_id = ?", (IDS["cli_main"],)).fetchone()[0]
    conn.close()
    heal("--profile", "default", "--json")  # a check pass: the plans, nothing applied
    html = admin_client.get("/p/default/heal/").content.decode()
    row = next(r for r in html.split('<tr data-action="')[1:] if f'href="/p/default/s/{IDS["cli_main"]}/"' in r)
    assert row.startswith('recount_session"') and "1 change" in visible(row)
    assert ["Change", f"Session {IDS['cli_main']}", "Messages", "99", str(real)] in cells(row)
    assert not REPR.search(visible(html))


def test_no_page_shows_an_epoch_float_or_a_python_repr(admin_client, home):
    """Every main page after a real heal pass (runs, audit events, findings exist)."""
    import sqlite3

    from sessions_app.models import AuditEvent
    from tests.actions.conftest import heal

    conn = sqlite3.connect(home / "state.db")
    conn.execute("UPDATE sessions SET message_count = 99 WHERE id = ?", (IDS["cli_main"],))
    conn.commit()
    conn.close()
    heal("--all-profiles", "--apply", "--json")
    event = AuditEvent.objects.filter(action="recount_session").latest("id")
    pages = ["/", "/p/default/", "/p/default/health/", "/p/default/heal/", f"/p/default/s/{IDS['cli_main']}/",
             f"/p/default/s/{IDS['compress_tip']}/", "/p/default/search/?q=answer*", "/trash/", "/audit/",
             f"/audit/{event.pk}/", f"/p/default/s/{IDS['cli_main']}/collision/"]
    for url in pages:
        response = admin_client.get(url)
        if response.status_code == 404:
            continue  # no collision in the fixtures
        html = response.content.decode()
        html = re.sub(r'<details class="raw-json">.*?</details>', "", html, flags=re.S)  # JSON as recorded
        html = re.sub(r"<(script|style)\b.*?</\1>", "", html, flags=re.S)
        shown = visible(html)
        assert not re.search(r"\b1[78]\d{8}(\.\d+)?\b", shown), (url, re.search(r".{40}\b1[78]\d{8}.{20}", shown))
        assert not re.search(r"\{'|\['|': ", shown), (url, re.search(r".{40}(\{'|\['|': ).{40}", shown))
    overview = admin_client.get("/").content.decode()
    assert re.search(r'<td data-label="Last activity"><time datetime="[\dT:-]+Z" title="[\d :-]+ UTC">[^<]+ ago</time></td>', overview)


def test_recorded_changes_render_as_the_plan_table_from_a_template():
    changes = [{"op": "update", "table": "sessions", "key": {"id": "s1"}, "column": "ended_at",
                "before": None, "after": 1796187600.0}]
    html = render('{% include "sessions/_changes.html" with table=changes|as_change_table %}', changes=changes)
    assert cells(html)[1][:3] == ["Change", "Session s1", "Ended"]
    assert 'title="2026-12-02 05:00:00 UTC"' in html and "1796187600" not in visible(html)


def test_relative_words_are_djangos_timesince_on_many_spans():
    """``timefmt`` writes the largest unit itself (Django's lazy strings were a quarter
    of the sessions list's CPU): the words must be Django's, past and future, across
    month ends, leap days and every unit's boundary."""
    import random

    from django.utils.timesince import timesince, timeuntil

    rng = random.Random(16)
    nows = [dt.datetime(2026, 12, 2, 5, 0, 7, tzinfo=dt.timezone.utc),
            dt.datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=dt.timezone.utc),
            dt.datetime(2026, 3, 31, 0, 0, tzinfo=dt.timezone.utc),
            dt.datetime(2026, 1, 1, 12, 30, 30, 500000, tzinfo=dt.timezone.utc)]
    spans = [60, 61, 119, 120, 3599, 3600, 3601, 86399, 86400, 604799, 604800, 2419200,
             28 * 86400, 29 * 86400, 30 * 86400, 31 * 86400, 365 * 86400, 366 * 86400, 400 * 86400]
    spans += [rng.uniform(60, 3 * 365 * 86400) for _ in range(400)]
    spans += [rng.uniform(60, 40 * 86400) for _ in range(400)]
    for now in nows:
        for span in spans:
            when = now - dt.timedelta(seconds=span)
            assert timefmt._largest_unit(when, now) == timesince(when, now, depth=1).replace("\xa0", " ")
            later = now + dt.timedelta(seconds=span)
            assert timefmt._largest_unit(now, later) == timeuntil(later, now, depth=1).replace("\xa0", " ")


def test_reltime_remembers_the_exact_time_but_says_the_relative_one_now(monkeypatch):
    """``reltime`` keeps each number's formatted exact time (a pure function of it);
    the relative words are taken at each call, so they move on with the clock."""
    from django.utils import timezone

    from sessions_app.templatetags import hermes

    hermes._TIMES.clear()
    value = 1796187600.0  # 2026-12-02 05:00:00 UTC
    first = hermes.reltime(value)
    assert value in hermes._TIMES and hermes.reltime(1796187600) == first
    later = dt.datetime(2026, 12, 2, 8, 0, 30, tzinfo=dt.timezone.utc)
    monkeypatch.setattr(timezone, "now", lambda: later)
    assert hermes.reltime(value) == ('<time datetime="2026-12-02T05:00:00Z" title="2026-12-02 05:00:00 UTC">'
                                     '3 hours ago</time>')
    monkeypatch.setattr(timezone, "now", lambda: later + dt.timedelta(days=2))
    assert "2 days ago</time>" in hermes.reltime(value)
    kept = len(hermes._TIMES)
    assert hermes.reltime(1e300) == 1e300 and hermes.reltime(None) == "—"  # not times: shown as they are
    assert len(hermes._TIMES) == kept
