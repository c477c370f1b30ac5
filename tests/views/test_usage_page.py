"""The usage page (/usage/) and its CSV (/usage/export.csv) on the fixture home."""

import csv
import io
import re
import sqlite3

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import Client

from tests.checks.helpers import damage, store_of
from tests.conftest import PROFILES, ids
from tests.stores.lock_holders import holding
from tests.views.markup import without_bidi_markup

pytestmark = pytest.mark.django_db
ALL = "date_from=&date_to="


@pytest.fixture(autouse=True)
def fresh_cache():
    cache.clear()
    yield
    cache.clear()


def html_of(response) -> str:
    assert response.status_code == 200
    return without_bidi_markup(response.content.decode())


def table(html: str) -> dict[str, list[str]]:
    """First cell -> the other cells of the usage table's body and footer."""
    body = html[html.index('<table class="grid usage">'):html.index("</table>")]
    out = {}
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S):
        cells = [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row, re.S)]
        if cells and cells[0] not in ("Profile", "Model", "Source", "Task", "Day", "Week"):
            out[cells[0]] = cells[1:]
    return out


def csv_rows(response) -> list[dict]:
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    text = b"".join(response.streaming_content).decode()
    return list(csv.DictReader(io.StringIO(text)))


def test_totals_by_profile_over_every_release(admin_client, hermes_home):
    cells = table(html_of(admin_client.get(f"/usage/?{ALL}&group=profile")))
    assert set(cells) == set(PROFILES) | {"All"}
    # Sessions, total tokens, then the figures; every fixture store holds the same two sessions' usage.
    for profile in PROFILES:
        assert cells[profile][1] == "4,520" and cells[profile][2] == "2,750", profile
    assert cells["All"][1] == f"{4520 * len(PROFILES):,}"
    sessions = 0
    for profile in PROFILES:
        home = hermes_home if profile == "default" else hermes_home / "profiles" / profile
        conn = sqlite3.connect(f"file:{home}/state.db?mode=ro", uri=True)
        sessions += conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
        conn.close()
    assert cells["All"][0] == str(sessions)


def test_profiles_source_and_grouping(admin_client, hermes_home):
    cells = table(html_of(admin_client.get(f"/usage/?{ALL}&profile=ops&profile=edge&source=telegram&group=source")))
    assert set(cells) == {"telegram", "All"}
    assert cells["All"][0] == "2" and cells["All"][2] == "1,800"
    days = table(html_of(admin_client.get(f"/usage/?{ALL}&group=day")))
    assert list(days)[:-1] == ["2026-11-30"]


def test_auditors_see_usage_and_people_without_a_role_do_not(hermes_home):
    auditor = User.objects.create_user("aud", password="x")
    from django.contrib.auth.models import Permission
    auditor.user_permissions.add(Permission.objects.get(codename="view_dashboard"))
    nobody = User.objects.create_user("nobody", password="x")
    for user, status in ((auditor, 200), (nobody, 403)):
        client = Client()
        client.force_login(user)
        assert client.get(f"/usage/?{ALL}").status_code == status
        assert client.get(f"/usage/export.csv?{ALL}").status_code == status


def test_bad_periods_get_a_clear_error_and_show_nothing(admin_client, hermes_home):
    html = html_of(admin_client.get("/usage/?date_from=2026-12-05&date_to=2026-12-01"))
    assert "The period starts after it ends" in html and '<table class="grid usage">' not in html
    html = html_of(admin_client.get("/usage/?date_from=yesterday"))
    assert "Started from: Enter a valid date." in html
    assert 'value="yesterday"' in html  # what was typed is kept
    response = admin_client.get("/usage/export.csv?date_from=yesterday")
    assert response.status_code == 400 and b"nothing was exported" in response.content
    for junk in ("group=nope", "bucket=month", "metric=x", "profile=nope", "source=%00"):
        assert "Select a valid choice" in html_of(admin_client.get(f"/usage/?{ALL}&{junk}")), junk


def test_quick_periods_and_the_default_is_the_last_30_days(admin_client, hermes_home):
    store = store_of(hermes_home, "default")
    with damage(store) as conn:  # one session far in the past
        conn.execute("UPDATE sessions SET started_at = 1000000000 WHERE id = ?", (ids("default")["cli_main"],))
    default = table(html_of(admin_client.get("/usage/?profile=default")))
    everything = table(html_of(admin_client.get(f"/usage/?{ALL}&profile=default")))
    assert default["All"][2] == "900" and everything["All"][2] == "2,750"
    assert table(html_of(admin_client.get("/usage/?days=7&profile=default")))["All"][2] == "900"


def test_csv_lines_add_up_to_the_page_and_are_formula_safe(admin_client, hermes_home):
    store = store_of(hermes_home, "edge")
    with damage(store) as conn:
        conn.execute("UPDATE sessions SET model = '=HYPERLINK(\"http://x\")' WHERE id = ?", (ids("edge")["cli_main"],))
        conn.execute("UPDATE session_model_usage SET model = '@SUM(A1)' WHERE session_id = ?", (ids("edge")["cli_main"],))
    rows = csv_rows(admin_client.get(f"/usage/export.csv?{ALL}"))
    assert sum(int(r["input_tokens"]) for r in rows) == 2750 * len(PROFILES)
    assert {r["profile"] for r in rows} == set(PROFILES)
    models = {r["model"] for r in rows if r["profile"] == "edge"}
    assert "'@SUM(A1)" in models and all(not m.startswith(("=", "@", "+", "-")) for m in models)
    assert rows[0]["day"] == "2026-11-30" and rows[0]["task"] == "main loop"


def test_store_strings_are_escaped(admin_client, hermes_home):
    with damage(store_of(hermes_home, "ops")) as conn:
        conn.execute("UPDATE sessions SET model = '<script>alert(1)</script>', source = '<img src=x onerror=alert(2)>'")
    html = html_of(admin_client.get(f"/usage/?{ALL}&group=model"))
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    html = html_of(admin_client.get(f"/usage/?{ALL}&group=source"))
    assert "<img src=x" not in html


def test_a_missing_column_is_said_on_the_page(admin_client, hermes_home):
    with damage(store_of(hermes_home, "legacy")) as conn:
        conn.execute("ALTER TABLE sessions DROP COLUMN reasoning_tokens")
    html = html_of(admin_client.get(f"/usage/?{ALL}&group=profile"))
    assert re.search(r"Reasoning tokens: not recorded by the store of legacy \(the column is absent\)", html)
    cells = table(html)
    assert cells["legacy"][6] == "—" and cells["ops"][6] == "96"
    rows = csv_rows(admin_client.get(f"/usage/export.csv?{ALL}&profile=legacy"))
    assert rows and all(r["reasoning_tokens"] == "" for r in rows)


def test_a_locked_store_is_listed_busy_and_the_rest_is_shown(admin_client, hermes_home, settings):
    settings.HERMES_READ_TIMEOUT = 30
    with holding((hermes_home / "profiles" / "ops" / "state.db", "wal_exclusive")):
        html = html_of(admin_client.get(f"/usage/?{ALL}"))
    assert re.search(r'data-profile-error="ops">Profile <a href="/p/ops/">ops</a> is not counted: busy', html)
    cells = table(html)
    assert "ops" not in cells and "default" in cells


def test_the_chart_is_server_drawn_svg(admin_client, hermes_home):
    html = html_of(admin_client.get("/usage/?date_from=2026-11-24&date_to=2026-11-30&metric=calls"))
    svg = html[html.index("<svg"):html.index("</svg>")]
    assert svg.count("<rect") == 7  # one bar per day of the period
    assert "<title>2026-11-30: 36</title>" in svg  # 6 stores x (3 + 3) API calls
    assert "<script" not in svg
    html = html_of(admin_client.get("/usage/?date_from=2026-11-01&date_to=2026-11-30&bucket=week"))
    svg = html[html.index("<svg"):html.index("</svg>")]
    assert svg.count("<rect") == 6  # ISO weeks starting Monday 2026-10-26 ... Monday 2026-11-30
