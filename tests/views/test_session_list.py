"""The sessions list: its position, its sortable columns, its liveness column, and
its count when a store is skipped (issue 15)."""

import html as htmllib
import json
import re
import subprocess
import sys

import psutil
import pytest

from sessions_app.stores import registry
from tests.conftest import MANIFEST, ids
from tests.stores.test_store_status import make_bad

pytestmark = pytest.mark.django_db

TOTAL = sum(len(p["sessions_by_id"]) for p in MANIFEST["profiles"].values())


def get(client, url) -> str:
    response = client.get(url)
    assert response.status_code == 200
    return response.content.decode()


def count_line(html: str) -> str:
    line = re.search(r'<p class="muted count">(.*?)</p>', html, re.S).group(1)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", line)).strip()


def link(html: str, rel: str) -> str:
    return "/sessions/" + htmllib.unescape(re.search(rf'rel="{rel}" href="([^"]+)"', html).group(1))


def listed(html: str) -> list[tuple[str, str]]:
    return re.findall(r'href="/p/([^/]+)/s/([^/]+)/"', html)


def test_pages_say_their_position_of_the_total(admin_client, hermes_home):
    first = get(admin_client, "/sessions/?size=25")
    assert count_line(first) == f"1–25 of {TOTAL} sessions"
    second = get(admin_client, link(first, "next"))
    assert count_line(second) == f"26–50 of {TOTAL} sessions"
    third = get(admin_client, link(second, "next"))
    assert count_line(third) == f"51–75 of {TOTAL} sessions"
    back = get(admin_client, link(third, "prev"))
    assert count_line(back) == f"26–50 of {TOTAL} sessions" and listed(back) == listed(second)
    assert count_line(get(admin_client, link(back, "prev"))) == f"1–25 of {TOTAL} sessions"


def rows_of(html: str) -> list[dict]:
    """Each listed row's profile, id, title (or id), source and message count."""
    found = []
    for row in re.findall(r"<tr>(.*?)</tr>", html.split("<tbody>", 1)[1], re.S):
        cells = dict(re.findall(r'<td[^>]*data-label="([^"]+)"[^>]*>(.*?)</td>', row, re.S))
        if not cells:
            continue
        text = {k: htmllib.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", v)).strip()) for k, v in cells.items()}
        text["id"] = re.search(r'href="/p/[^/]+/s/([^/]+)/"', row).group(1)
        found.append(text)
    return found


def all_rows(client, query: str) -> list[dict]:
    url, rows = f"/sessions/?size=25&{query}", []
    while url:
        html = get(client, url)
        rows += rows_of(html)
        url = link(html, "next") if 'rel="next"' in html else None
    return rows


@pytest.mark.parametrize("order, down, key", [
    ("messages", True, lambda r: int(r["Messages"]) if r["Messages"].isdigit() else 0),
    ("messages&dir=asc", False, lambda r: int(r["Messages"]) if r["Messages"].isdigit() else 0),
    ("source", False, lambda r: r["Source"]),
    ("source&dir=desc", True, lambda r: r["Source"]),
])
def test_sorted_columns_order_every_row_across_profiles(admin_client, hermes_home, order, down, key):
    rows = all_rows(admin_client, f"order={order}")
    assert len(rows) == TOTAL
    values = [key(r) for r in rows]
    assert values == sorted(values, reverse=down)


def test_title_order_is_alphabetical_ignoring_case_with_untitled_first(admin_client, hermes_home):
    titles = {(p, sid): (info["title"] or "") for p, prof in MANIFEST["profiles"].items()
              for sid, info in prof["sessions_by_id"].items()}
    html = get(admin_client, "/sessions/?order=title&size=200")
    shown = [titles[key].lower() for key in dict.fromkeys(listed(html)) if key in titles]
    assert shown == sorted(shown) and shown[0] == "" and shown[-1] != ""


def test_ties_break_by_profile_then_id_the_same_on_every_load(admin_client, hermes_home):
    """Many sessions share a source: the order among them is fixed (profile key, then
    session id, as the cursor), so pages never repeat or skip a row."""
    html = get(admin_client, "/sessions/?order=source&size=200")
    rows = rows_of(html)
    keys = list(dict.fromkeys(listed(html)))
    assert len(keys) == TOTAL and keys == list(dict.fromkeys(listed(get(admin_client, "/sessions/?order=source&size=200"))))
    cli = [k for k, r in zip(keys, rows) if r["Source"] == "cli"]
    assert len(cli) > 2 and cli == sorted(cli)  # ascending source: ties ascending by profile key, then id


def test_headers_link_to_their_order_and_the_active_one_reverses(admin_client, hermes_home):
    html = get(admin_client, "/sessions/?profile=ops")
    heads = dict((label, htmllib.unescape(href)) for href, label in re.findall(r'<a class="sort" href="([^"]+)">([^<]+)</a>', html))
    assert heads == {
        "Session": "?profile=ops&order=title&dir=asc", "Source": "?profile=ops&order=source&dir=asc",
        "Messages": "?profile=ops&order=messages&dir=desc", "Started": "?profile=ops&order=started&dir=asc",
        "Last activity": "?profile=ops&order=activity&dir=desc"}
    assert 'aria-sort="descending"><a class="sort" href="?profile=ops&amp;order=started&amp;dir=asc">Started' in html
    by_title = get(admin_client, "/sessions/?profile=ops&order=title&dir=asc")
    assert 'aria-sort="ascending"><a class="sort" href="?profile=ops&amp;order=title&amp;dir=desc">Session' in by_title
    # The filter form says the same order, so a filter change keeps it.
    assert re.search(r'<option value="title" selected>', by_title)


def test_a_cursor_of_one_direction_is_refused_by_the_other(admin_client, hermes_home):
    first = get(admin_client, "/sessions/?size=25&order=title")
    token = re.search(r'rel="next" href="[^"]*after=([^"&]+)', first).group(1)
    assert "no longer valid" not in get(admin_client, f"/sessions/?size=25&order=title&after={token}")
    assert "no longer valid" in get(admin_client, f"/sessions/?size=25&order=title&dir=desc&after={token}")


def test_liveness_column_says_live_idle_or_ended(admin_client, hermes_home):
    """A live registry entry (a real process) makes its session live; an open session
    without evidence is idle; one its writer ended is ended."""
    sid = ids("ops")["cli_main"]
    holder = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        runtime = hermes_home / "profiles" / "ops" / "runtime"
        runtime.mkdir(parents=True, exist_ok=True)
        (runtime / "active_sessions.json").write_text(json.dumps({"entries": [{
            "session_id": sid, "pid": holder.pid, "surface": "cli",
            "process_start_time": psutil.Process(holder.pid).create_time()}]}))
        rows = {r["id"]: r["Liveness"] for r in rows_of(get(admin_client, "/sessions/?profile=ops&size=200"))}
        html = get(admin_client, "/sessions/?profile=ops&size=200")
    finally:
        holder.stdin.close()
        holder.wait(timeout=10)
    info = MANIFEST["profiles"]["ops"]["sessions_by_id"]
    assert rows[sid] == "live"
    assert f'class="live live-live" title="open in a live cli surface (pid {holder.pid})"' in html
    for other, meta in info.items():
        if other == sid:
            continue
        label = rows[other]
        # An open session routed by a gateway of a store without heartbeats (0.19.0) may be live.
        assert label.split(" (")[0] in (("ended",) if meta["ended"] else ("idle", "maybe live")), (other, label)
    assert "maybe live" in rows.values() and "idle" in rows.values()
    # The holder is gone: the session is ended again (its writer closed it).
    after = {r["id"]: r["Liveness"] for r in rows_of(get(admin_client, "/sessions/?profile=ops&size=200"))}
    assert " ".join(after[sid].replace("(", " ( ").replace(")", " ) ").split()) == "ended ( closed in the CLI )"  # a label


def test_a_store_skipped_as_corrupt_is_not_counted(admin_client, hermes_home):
    make_bad(hermes_home, "corrupt")
    registry.reset()
    both = get(admin_client, "/sessions/?size=200&profile=ops&profile=bad")
    assert "Profile <a href=\"/p/bad/\"><bdi>bad</bdi></a> was skipped: <bdi>corrupt" in both
    ops = len(MANIFEST["profiles"]["ops"]["sessions_by_id"])
    assert count_line(both) == f"1–{ops} of {ops} sessions in the profiles that could be read (1 skipped, not counted)"
    assert {p for p, _ in listed(both)} == {"ops"}
    alone = get(admin_client, "/sessions/?profile=bad")
    assert count_line(alone) == "No sessions counted: 1 profile could not be read."
    assert count_line(get(admin_client, "/sessions/?profile=ops")) == f"1–{ops} of {ops} sessions"
    # Readable profiles with nothing in the dates: no match there, not blamed on the one skipped.
    empty = get(admin_client, "/sessions/?profile=ops&profile=bad&date_from=9999-12-31")
    assert count_line(empty) == "0 sessions in the profiles that could be read (1 skipped, not counted)"
    assert "No sessions match in the profiles that could be read." in empty and "could not be read." not in empty


def test_the_empty_row_spans_every_column_with_the_select_column(hermes_home, django_user_model):
    """The select column is there for a user who may change flags but not delete:
    "No sessions match." still spans the whole table."""
    import re

    from django.contrib.auth.models import Group, Permission
    from django.test import Client

    user = django_user_model.objects.create_user("flagger", password="pw-flagger-long-enough")
    user.groups.add(Group.objects.get(name="Auditor"))
    user.user_permissions.add(Permission.objects.get(codename="change_flags"))
    assert not user.has_perm("sessions_app.delete_sessions") and user.has_perm("sessions_app.change_flags")
    client = Client()
    client.force_login(user)
    html = get(client, "/sessions/?q=no-such-session-anywhere")
    head = re.search(r"<thead>(.*?)</thead>", html, re.S).group(1)
    assert 'class="select"' in head
    [span] = re.findall(r'<td colspan="(\d+)" class="muted">No sessions match.</td>', html)
    assert int(span) == head.count("<th")
