"""Every page on stores written by every release (schemas 11 to 22) and the newest shape."""

import json
import re

import pytest

from tests.conftest import IDS, MANIFEST, PROFILES, ids

pytestmark = pytest.mark.django_db


def text_of(response) -> str:
    if response.streaming:
        return b"".join(response.streaming_content).decode()
    return response.content.decode()


def visible(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def message_ids(html: str) -> list[int]:
    """Ids of the messages a session page shows as rows of their own, in page order
    (a hand-made row may carry id 0 or a negative one)."""
    return [int(i) for i in re.findall(r'<article class="msg[^"]*" id="m(-?\d+)"', html)]


def test_pages_need_a_login(client, hermes_home):
    for url in ["/", "/sessions/", "/p/default/", f"/p/default/s/{IDS['cli_main']}/",
                f"/p/default/s/{IDS['cli_main']}/export.jsonl"]:
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith("/login/")


def test_overview_lists_every_profile_with_its_facts(admin_client, hermes_home):
    html = text_of(admin_client.get("/"))
    for name, info in MANIFEST["profiles"].items():
        row = re.search(rf'<tr data-profile="{name}">(.*?)</tr>', html, re.S).group(1)
        cells = visible(row)
        assert " readable " in cells
        assert f" {info['schema_version']} " in cells
        assert f" {len(info['sessions_by_id'])} " in cells
        assert f" {info['messages']} " in cells
        assert " wal " in cells


def test_overview_shows_a_profile_created_while_running(admin_client, hermes_home):
    admin_client.get("/")
    new = hermes_home / "profiles" / "late"
    new.mkdir()
    html = text_of(admin_client.get("/"))
    assert 'data-profile="late"' in html
    assert "missing" in visible(re.search(r'<tr data-profile="late">(.*?)</tr>', html, re.S).group(1))


def test_sessions_list_across_all_profiles(admin_client, hermes_home):
    total = sum(len(p["sessions_by_id"]) for p in MANIFEST["profiles"].values())
    html = text_of(admin_client.get("/sessions/?size=200"))
    assert f"{total} sessions" in html
    for name in PROFILES:
        assert f"/p/{name}/s/{ids(name)['cli_main']}/" in html


@pytest.mark.parametrize("profile", PROFILES)
def test_sessions_list_filters_by_profile_source_and_state(admin_client, hermes_home, profile):
    sessions = MANIFEST["profiles"][profile]["sessions_by_id"]
    html = text_of(admin_client.get(f"/sessions/?profile={profile}&size=200"))
    assert f"{len(sessions)} session" in html
    assert set(re.findall(r'href="/p/([^/]+)/s/', html)) == {profile}
    for sid in sessions:
        assert f"/p/{profile}/s/{sid}/" in html

    html = text_of(admin_client.get(f"/sessions/?profile={profile}&source=telegram"))
    found = set(re.findall(rf'href="/p/{profile}/s/([^/]+)/"', html))
    assert found == {sid for sid, s in sessions.items() if s["source"] == "telegram"}

    html = text_of(admin_client.get(f"/sessions/?profile={profile}&state=open&size=200"))
    found = set(re.findall(rf'href="/p/{profile}/s/([^/]+)/"', html))
    assert found == {sid for sid, s in sessions.items() if not s["ended"]}


def test_sessions_list_search_on_id_and_title(admin_client, hermes_home):
    html = text_of(admin_client.get("/sessions/?q=flaky&profile=default"))
    assert set(re.findall(r'href="/p/default/s/([^/]+)/"', html)) == {IDS["cli_main"]}
    html = text_of(admin_client.get(f"/sessions/?q={IDS['cron'][:12]}&profile=default"))
    assert set(re.findall(r'href="/p/default/s/([^/]+)/"', html)) == {IDS["cron"]}


def test_sessions_list_date_range_excludes_everything_outside(admin_client, hermes_home):
    html = text_of(admin_client.get("/sessions/?date_to=2000-01-01"))
    assert "No sessions match" in html
    html = text_of(admin_client.get("/sessions/?date_from=2000-01-01&profile=ops"))
    assert f"{len(MANIFEST['profiles']['ops']['sessions_by_id'])} sessions" in html


@pytest.mark.parametrize("order", ["", "&order=started", "&order=activity", "&order=messages", "&order=title",
                                   "&order=source", "&order=title&dir=desc", "&order=activity&dir=asc"])
def test_sessions_list_keyset_pages_cover_everything_once(admin_client, hermes_home, order):
    seen = []
    url = "/sessions/?size=25" + order
    pages = 0
    while url:
        html = text_of(admin_client.get(url))
        seen += re.findall(r'href="(/p/[^/]+/s/[^/]+/)"', html)
        nxt = re.search(r'rel="next" href="([^"]+)"', html)
        url = "/sessions/" + nxt.group(1).replace("&amp;", "&") if nxt else None
        pages += 1
        assert pages < 20
    total = sum(len(p["sessions_by_id"]) for p in MANIFEST["profiles"].values())
    assert len(seen) == total == len(set(seen))


@pytest.mark.parametrize("order", ["started", "activity", "messages", "title&dir=desc", "source"])
def test_sessions_list_previous_page_link_goes_back(admin_client, hermes_home, order):
    first = text_of(admin_client.get(f"/sessions/?size=25&order={order}"))
    nxt = re.search(r'rel="next" href="([^"]+)"', first).group(1).replace("&amp;", "&")
    second = text_of(admin_client.get("/sessions/" + nxt))
    prev = re.search(r'rel="prev" href="([^"]+)"', second).group(1).replace("&amp;", "&")
    back = text_of(admin_client.get("/sessions/" + prev))
    links = lambda html: re.findall(r'href="(/p/[^/]+/s/[^/]+/)"', html)  # noqa: E731
    assert links(back) == links(first)


def test_sessions_list_htmx_request_gets_only_the_table(admin_client, hermes_home):
    response = admin_client.get("/sessions/?profile=edge", HTTP_HX_REQUEST="true")
    html = text_of(response)
    assert html.lstrip().startswith('<div id="session-table">')
    assert "<html" not in html


def test_sessions_list_tampered_cursor_falls_back_to_first_page(admin_client, hermes_home):
    html = text_of(admin_client.get("/sessions/?after=not-a-cursor"))
    assert "no longer valid" in html
    html = text_of(admin_client.get("/sessions/?after=zzz&before=%27%22"))
    assert html.count("no longer valid") == 1  # both links stale: said once


def test_sessions_list_cursor_of_one_order_is_refused_by_the_other(admin_client, hermes_home):
    first = text_of(admin_client.get("/sessions/?size=25"))
    token = re.search(r'rel="next" href="[^"]*after=([^"&]+)', first).group(1)
    assert "no longer valid" not in text_of(admin_client.get(f"/sessions/?size=25&after={token}"))
    html = text_of(admin_client.get(f"/sessions/?size=25&order=activity&after={token}"))
    assert "no longer valid" in html


def test_sessions_list_says_which_order_it_uses(admin_client, hermes_home):
    default = visible(text_of(admin_client.get("/sessions/")))
    assert "Started ↓" in default and "Last activity ↓" not in default
    active = visible(text_of(admin_client.get("/sessions/?order=activity")))
    assert "Last activity ↓" in active and "Started ↓" not in active
    bogus = visible(text_of(admin_client.get("/sessions/?order=bogus&profile=ops&size=200")))
    assert "Started ↓" in bogus and "(this filter is ignored)" in bogus
    # The other filters still apply.
    assert f"{len(MANIFEST['profiles']['ops']['sessions_by_id'])} sessions" in bogus


@pytest.mark.parametrize("profile", PROFILES)
def test_session_page_shows_metadata_and_transcript(admin_client, hermes_home, profile):
    sessions = MANIFEST["profiles"][profile]["sessions_by_id"]
    for sid, info in sessions.items():
        html = text_of(admin_client.get(f"/p/{profile}/s/{sid}/?size=500"))
        assert f"{info['active_messages']} visible messages" in html, sid
        ids = message_ids(html)
        nested = re.findall(r'id="m(-?\d+)">#\d+</a>', html)
        assert len(ids) + len(nested) == info["active_messages"], sid


@pytest.mark.parametrize("profile", PROFILES)
def test_tool_calls_are_shown_with_their_results(admin_client, hermes_home, profile):
    html = text_of(admin_client.get(f"/p/{profile}/s/{ids(profile)['cli_main']}/"))
    call = html[html.index('class="tool-call"'):]
    assert "terminal" in call[:400]
    assert "Result" in call and "No result stored" not in call


@pytest.mark.parametrize("profile", PROFILES)
def test_lineage_edges_are_labelled(admin_client, hermes_home, profile):
    sids = ids(profile)
    html = visible(text_of(admin_client.get(f"/p/{profile}/s/{sids['cli_main']}/")))
    # Releases before 0.17 wrote delegate children with the parent's source and no
    # _delegate_from marker, so upstream's own rules cannot tell them apart.
    child = MANIFEST["profiles"][profile]["sessions_by_id"][sids["delegate_child"]]
    expected = "delegate" if child["source"] == "subagent" else "other"
    assert f"{expected} {sids['delegate_child']}" in html
    html = visible(text_of(admin_client.get(f"/p/{profile}/s/{sids['compress_mid']}/")))
    assert "Parent (compression)" in html
    assert "compression Refactor the parser #3" in html
    html = text_of(admin_client.get(f"/p/{profile}/s/{sids['compress_tip']}/"))
    assert html.count('<ol class="chain">') == 1
    for key in ("compress_root", "compress_mid"):
        assert sids[key] in html
    html = visible(text_of(admin_client.get(f"/p/{profile}/s/{sids['branch_child']}/")))
    assert "Parent (branch)" in html


def test_transcript_paginates_by_id(admin_client, hermes_home):
    url = f"/p/default/s/{IDS['long']}/?size=50"
    first = text_of(admin_client.get(url))
    ids1 = message_ids(first)
    assert len(ids1) == 50 and ids1 == sorted(ids1)
    nxt = re.search(r'rel="next" href="\?([^"#]+)', first).group(1).replace("&amp;", "&")
    second = text_of(admin_client.get(f"/p/default/s/{IDS['long']}/?{nxt}"))
    ids2 = message_ids(second)
    assert len(ids2) == 10 and min(ids2) > max(ids1)
    last = text_of(admin_client.get(f"/p/default/s/{IDS['long']}/?size=50&before=-1"))
    assert message_ids(last) == (ids1 + ids2)[-50:]
    at = text_of(admin_client.get(f"/p/default/s/{IDS['long']}/?size=50&at={ids2[0]}"))
    assert message_ids(at) == ids2
    # Positions holding no message (before the first id, past the last): no link to
    # "after=None", but the first and last pages.
    for query in ("before=0", f"at={max(ids2) + 1000}"):
        empty = text_of(admin_client.get(f"/p/default/s/{IDS['long']}/?size=50&{query}"))
        assert "None" not in re.findall(r'href="([^"]*)"', empty).__repr__(), query
        assert 'rel="next"' not in empty and "no messages at this position" in empty, query
        assert 'href="?size=50#transcript">First</a>' in empty and "before=-1#transcript\">Last</a>" in empty, query


def test_previous_link_only_where_rows_come_before(admin_client, hermes_home):
    """The first page offers no way back; a later page does. A row written by hand
    with id -1 (below anything AUTOINCREMENT gives) is still the first page's first."""
    import sqlite3

    conn = sqlite3.connect(hermes_home / "state.db")
    with conn:
        conn.execute("INSERT INTO messages (id, session_id, role, content, timestamp) VALUES (-1, ?, 'user', 'hand-made', 1)",
                     (IDS["long"],))
    conn.close()
    first = text_of(admin_client.get(f"/p/default/s/{IDS['long']}/?size=50"))
    ids1 = message_ids(first)
    assert ids1[0] == -1 and 'rel="prev"' not in first
    nxt = re.search(r'rel="next" href="\?([^"#]+)', first).group(1).replace("&amp;", "&")
    second = text_of(admin_client.get(f"/p/default/s/{IDS['long']}/?{nxt}"))
    ids2 = message_ids(second)
    assert ids2[0] > ids1[-1] and f'before={ids2[0]}#transcript">' in second and 'rel="prev"' in second


def test_inactive_rows_are_behind_a_toggle_and_marked(admin_client, hermes_home):
    sids = ids("edge")
    info = MANIFEST["profiles"]["edge"]["sessions_by_id"][sids["compacted"]]
    html = text_of(admin_client.get(f"/p/edge/s/{sids['compacted']}/"))
    assert "state-compacted" not in html
    html = text_of(admin_client.get(f"/p/edge/s/{sids['compacted']}/?inactive=1"))
    assert f"({info['message_count']} rows)" in html
    assert "badge-compacted" in html
    html = text_of(admin_client.get(f"/p/edge/s/{sids['undo']}/?inactive=1"))
    assert "badge-rewound" in html


def test_structured_content_is_decoded(admin_client, hermes_home):
    html = text_of(admin_client.get(f"/p/edge/s/{ids('edge')['telegram_open']}/"))
    assert "\\u0000json" not in html and "\x00json:" not in html
    assert "Structured content (JSON)" in html


def test_epoch_timestamps_arrive_intact(admin_client, hermes_home):
    html = text_of(admin_client.get(f"/p/archive/s/{ids('archive')['cli_main']}/"))
    started = visible(re.search(r"<dt[^>]*data-column=\"started_at\"[^>]*>Started</dt><dd[^>]*>(.*?)</dd>", html, re.S).group(1)).strip()
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(.* ago\)", started)


def test_unknown_session_is_404(admin_client, hermes_home):
    assert admin_client.get("/p/default/s/nope/").status_code == 404
    assert admin_client.get("/p/default/s/nope/export.jsonl").status_code == 404


@pytest.mark.parametrize("url", ["/p/..%2F..%2Fetc/", "/p/default@x/", "/p/%2Fetc%2Fpasswd/s/x/",
                                 "/p/..%2Fprofiles%2Fops/s/x/"])
def test_crafted_profile_in_url_is_404(admin_client, hermes_home, url):
    assert admin_client.get(url).status_code == 404


@pytest.mark.parametrize("profile", PROFILES)
def test_export_jsonl_has_every_message(admin_client, hermes_home, profile):
    sids = ids(profile)
    info = MANIFEST["profiles"][profile]["sessions_by_id"][sids["cli_main"]]
    response = admin_client.get(f"/p/{profile}/s/{sids['cli_main']}/export.jsonl")
    assert response["Content-Disposition"].startswith("attachment;")
    lines = [json.loads(line) for line in text_of(response).splitlines()]
    assert lines[0]["role"] == "session_meta" and lines[0]["session"]["id"] == sids["cli_main"]
    assert len(lines) - 1 == info["active_messages"]
    row_ids = [line["id"] for line in lines[1:]]
    assert row_ids == sorted(row_ids)


def test_a_large_export_is_written_in_chunks_and_loses_nothing(admin_client, hermes_home):
    """Lines are joined into writes of about 64 KB; the bytes are those of the
    row-by-row export, every message once, in id order."""
    import sqlite3

    from sessions_app.stores import export, registry

    sid = ids("default")["cli_main"]
    conn = sqlite3.connect(hermes_home / "state.db")
    conn.executemany("INSERT INTO messages(session_id, role, content, timestamp) VALUES (?, 'tool', ?, 1.7e9)",
                     [(sid, f"output {i} " + "x" * 30_000) for i in range(8)])
    conn.commit()
    conn.close()
    response = admin_client.get(f"/p/default/s/{sid}/export.jsonl")
    chunks = [c.decode() for c in response.streaming_content]
    assert len(chunks) >= 3 and all(len(c) >= 64 * 1024 for c in chunks[:-1])
    assert "".join(chunks) == "".join(export.jsonl(registry.get("default"), sid))
    lines = [json.loads(line) for line in "".join(chunks).splitlines()]
    assert [line["content"][:9] for line in lines[-8:]] == [f"output {i} " for i in range(8)]


def test_export_of_the_whole_compression_chain(admin_client, hermes_home):
    profile = MANIFEST["profiles"]["default"]["sessions_by_id"]
    response = admin_client.get(f"/p/default/s/{IDS['compress_mid']}/export.jsonl?lineage=1")
    lines = [json.loads(line) for line in text_of(response).splitlines()]
    metas = [line["session"]["id"] for line in lines if line["role"] == "session_meta"]
    assert metas == [IDS["compress_root"], IDS["compress_mid"], IDS["compress_tip"]]
    expected = sum(profile[IDS[k]]["active_messages"] for k in ("compress_root", "compress_mid", "compress_tip"))
    assert len(lines) - 3 == expected


def test_export_markdown(admin_client, hermes_home):
    md = text_of(admin_client.get(f"/p/default/s/{IDS['cli_main']}/export.md"))
    assert md.startswith("# Fix the flaky build")
    assert md.count("\n## #") == MANIFEST["profiles"]["default"]["sessions_by_id"][IDS["cli_main"]]["active_messages"]


def test_unknown_export_format_is_404(admin_client, hermes_home):
    assert admin_client.get(f"/p/default/s/{IDS['cli_main']}/export.html").status_code == 404


def test_raw_message_view_returns_full_text(admin_client, hermes_home):
    html = text_of(admin_client.get(f"/p/default/s/{IDS['cli_main']}/"))
    first = message_ids(html)[0]
    response = admin_client.get(f"/p/default/s/{IDS['cli_main']}/m/{first}/")
    assert response["Content-Type"].startswith("text/plain")
    assert "build" in response.content.decode()


def test_overview_says_when_a_root_is_not_a_hermes_home(admin_client, hermes_home, settings, tmp_path):
    stray = tmp_path / "typo"
    stray.mkdir()
    settings.HERMES_ROOTS = [str(hermes_home), str(stray)]
    html = visible(text_of(admin_client.get("/")))
    assert f"Root {stray} is skipped: not a Hermes home" in html


def test_an_orphaned_session_page_still_names_its_children(admin_client, hermes_home):
    import sqlite3

    sids = ids("default")
    conn = sqlite3.connect(hermes_home / "state.db")
    conn.execute("PRAGMA foreign_keys = OFF")
    conn.execute("DELETE FROM sessions WHERE id = ?", (sids["cli_main"],))
    conn.commit()
    conn.close()
    html = visible(text_of(admin_client.get(f"/p/default/s/{sids['cli_main']}/")))
    assert "No session row exists" in html and "No session row: nothing is known" in html
    assert sids["delegate_child"] in html and "No children" not in html
