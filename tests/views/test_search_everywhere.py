"""Search across profiles (/search/) and the bounded scan of what an index misses
(/p/<profile>/search/scan/), on the fixture stores the real releases wrote."""

import re
import sqlite3
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from sessions_app.stores.coverage import coverage
from tests.checks.helpers import damage, hermes, store_of
from tests.conftest import PROFILES, ids
from tests.stores.lock_holders import holding
from tests.views.markup import without_bidi_markup

pytestmark = pytest.mark.django_db


def html_of(response) -> str:
    assert response.status_code == 200, response.status_code
    return without_bidi_markup(response.content.decode())


def section(html: str, profile: str) -> str:
    start = html.index(f'<section class="profile-results" id="profile-')
    found = re.search(rf'<section class="profile-results" id="profile-\d+" data-profile="{re.escape(profile)}">(.*?)</section>',
                      html[start:], re.S)
    assert found, profile
    return found.group(1)


def hits(html: str) -> list[str]:
    return re.findall(r'<li data-message="(\d+)">', html)


def counts(html: str) -> dict[str, str]:
    table = html[html.index('<table class="grid counts">'):]
    table = table[:table.index("</table>")]
    return {key: re.sub(r"<[^>]+>", "", cell).strip() for key, cell in
            re.findall(r'<tr data-profile="([^"]+)">.*?<td class="num">(.*?)</td>', table, re.S)}


def db_of(home: Path, profile: str) -> Path:
    return home / "state.db" if profile == "default" else home / "profiles" / profile / "state.db"


def fts_count(home: Path, profile: str, expression: str) -> int:
    conn = sqlite3.connect(f"file:{db_of(home, profile)}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH ?", (expression,)).fetchone()[0]
    finally:
        conn.close()


def test_hits_from_three_profiles_at_once_with_counts_per_profile_and_in_all(admin_client, hermes_home):
    """0.19.0, 0.13.0 and the newest shape searched in one request: every hit links to
    its own profile's session page, counts are each store's own FTS count and their sum."""
    chosen = ["default", "archive", "edge"]
    html = html_of(admin_client.get("/search/", {"q": "tokenizer", "profile": chosen}))
    per = counts(html)
    assert set(per) == set(chosen)
    expected = {p: fts_count(hermes_home, p, '"tokenizer"') for p in chosen}
    assert all(expected[p] > 0 for p in chosen)
    assert {p: int(n) for p, n in per.items()} == expected
    assert re.search(rf'data-total="{sum(expected.values())}"', html)
    for profile in chosen:
        part = section(html, profile)
        found = hits(part)
        assert len(found) == expected[profile]
        assert [int(i) for i in found] == sorted((int(i) for i in found), reverse=True)  # newest first
        assert all(href.startswith(f"/p/{profile}/s/") for href in re.findall(r'href="(/p/[^"]+/s/[^"]+)"', part))
    assert "data-profile=\"ops\"" not in html


def test_a_compression_lineage_is_one_group_of_its_sessions(admin_client, hermes_home):
    """root -> mid -> tip of the compression chain: one group, three sessions."""
    html = html_of(admin_client.get("/search/", {"q": "tokenizer", "profile": "ops"}))
    part = section(html, "ops")
    o = ids("ops")
    groups = re.findall(r'<div class="lineage-group" data-root="([^"]*)">', part)
    assert groups == [o["compress_root"]]
    assert "One conversation in 3 segments (compression), started as Refactor the parser" in part
    sessions = re.findall(r'<div class="session-hits" data-session="([^"]*)">', part)
    assert set(sessions) == {o["compress_root"], o["compress_mid"], o["compress_tip"]}


def test_session_ids_and_titles_match_too(admin_client, hermes_home):
    html = html_of(admin_client.get("/search/", {"q": "flaky build"}))
    for profile in PROFILES:
        part = section(html, profile)
        assert re.findall(r'<li data-session="([^"]+)">', part) == [ids(profile)["cli_main"]], profile
    html = html_of(admin_client.get("/search/", {"q": "f00bad", "profile": "legacy"}))
    assert re.findall(r'<li data-session="([^"]+)">', section(html, "legacy")) == [ids("legacy")["hostile"]]
    assert 'data-total="0"' in html


def test_bad_queries_get_a_clear_answer(admin_client, hermes_home):
    assert "Type at least one word" in html_of(admin_client.get("/search/", {"q": "*** ((("}))
    html = html_of(admin_client.get("/search/", {"q": "x" * 300}))
    assert "Ensure this value has at most 200 characters" in html and 'value="' + "x" * 300 + '"' in html
    assert "Select a valid choice" in html_of(admin_client.get("/search/", {"q": "a", "profile": "nope"}))
    assert "Select a valid choice" in html_of(admin_client.get("/search/", {"q": "a", "size": "7"}))
    html = html_of(admin_client.get("/search/"))
    assert "<section" not in html and 'name="q"' in html
    for raw in ['"unterminated', "NEAR(a b)", "content:alert", "a AND OR", "^alert", "%_\\"]:
        assert admin_client.get("/search/", {"q": raw}).status_code == 200, raw
        assert admin_client.get("/p/edge/search/scan/", {"q": raw, "all": "1"}).status_code == 200, raw
    assert admin_client.get("/p/edge/search/scan/", {"q": "alert", "before": "-5"}).status_code == 200
    assert admin_client.get("/p/edge/search/scan/", {"q": "alert", "before": "x"}).status_code == 200
    assert admin_client.get("/p/edge/search/scan/", {"q": "alert", "before": str(2**70)}).status_code == 200


def test_snippets_need_the_transcript_permission(hermes_home):
    user = User.objects.create_user("aud", password="x")
    user.user_permissions.add(Permission.objects.get(codename="view_dashboard"))
    client = Client()
    client.force_login(user)
    assert client.get("/search/?q=alert").status_code == 403
    assert client.get("/p/edge/search/scan/?q=alert").status_code == 403


def test_a_busy_store_says_so_and_the_others_are_searched(admin_client, hermes_home, settings):
    settings.HERMES_READ_TIMEOUT = 30
    with holding((db_of(hermes_home, "ops"), "wal_exclusive")):
        html = html_of(admin_client.get("/search/", {"q": "tokenizer"}))
    assert re.search(r'data-status="busy">Not searched: busy — store is locked', section(html, "ops"))
    assert counts(html)["ops"] == "—"
    for profile in set(PROFILES) - {"ops"}:
        assert hits(section(html, profile)), profile


def smash_index(db: Path) -> None:
    """The index's data pages overwritten, as in the bench's ``damaged`` profile."""
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute("DELETE FROM messages_fts_data")
    conn.commit()
    conn.close()


def test_a_damaged_index_is_said_and_its_profile_can_be_scanned(admin_client, hermes_home):
    smash_index(db_of(hermes_home, "research"))
    html = html_of(admin_client.get("/search/", {"q": "tokenizer"}))
    part = section(html, "research")
    assert 'data-problem="damaged"' in part and "Scan its messages for these words" in part
    assert hits(section(html, "default"))
    scan = html_of(admin_client.get("/p/research/search/scan/", {"q": "tokenizer", "all": "1"}))
    found = hits(scan)
    conn = sqlite3.connect(f"file:{db_of(hermes_home, 'research')}?mode=ro", uri=True)
    expected = [r[0] for r in conn.execute(
        "SELECT id FROM messages WHERE content LIKE '%tokenizer%' OR tool_calls LIKE '%tokenizer%' "
        "OR tool_name LIKE '%tokenizer%' ORDER BY id DESC")]
    conn.close()
    assert [int(i) for i in found] == expected and expected
    assert 'data-stopped="end"' in scan


# --------------------------------------------------------------------------- what the index misses

LONG_TOOL = "line of build output\n" * 500 + "the needle quasar sits past the index's prefix\n" + "tail\n" * 10


def add_long_tool_row(store, version: str | None) -> None:
    """A 10 kB tool output whose only 'quasar' lies past the 8,192nd character,
    written by the release itself (or, for the newest shape, by plain SQL: its own
    FTS triggers index it)."""
    sid = ids(store.key)["cli_main"]
    if version:
        hermes(store, f"db.append_message({sid!r}, 'tool', {LONG_TOOL!r}, tool_call_id='call_1', "
                      f"tool_name='terminal')", version)
    else:
        with damage(store) as conn:
            conn.execute("INSERT INTO messages(session_id, role, content, tool_call_id, tool_name, timestamp) "
                         "VALUES (?, 'tool', ?, 'call_1', 'terminal', 1796008090.0)", (sid, LONG_TOOL))


def test_tool_output_past_the_newest_index_prefix_is_found_by_the_scan(admin_client, hermes_home):
    assert LONG_TOOL.index("quasar") > 8192
    add_long_tool_row(store_of(hermes_home, "edge"), None)
    add_long_tool_row(store_of(hermes_home, "default"), "0.19.0")
    html = html_of(admin_client.get("/search/", {"q": "quasar", "profile": ["edge", "default"]}))
    # 0.19.0 indexes whole rows (inline layout): found, and nothing is said missing.
    assert len(hits(section(html, "default"))) == 1 and "data-gap" not in section(html, "default")
    edge = section(html, "edge")
    assert hits(edge) == [] and 'data-gap="cut"' in edge and "first 8,192 characters" in edge
    link = re.search(r'href="(/p/edge/search/scan/\?q=quasar)"', edge).group(1)
    scan = html_of(admin_client.get(link))
    assert len(hits(scan)) == 1 and "<mark>quasar</mark>" in scan
    assert "the rows the index misses" in scan and 'data-stopped="end"' in scan


def test_a_structured_tool_result_is_not_in_the_newest_index_but_the_scan_finds_it(admin_client, hermes_home):
    """substr() in messages_fts_src stops at the NUL of "\\x00json:": the newest
    shape indexes nothing of such a tool row; 0.19.0's inline index has it."""
    content = '\x00json:[{"type": "text", "text": "the wombat report"}]'
    for profile in ("edge", "default"):
        with damage(store_of(hermes_home, profile)) as conn:
            conn.execute("INSERT INTO messages(session_id, role, content, tool_call_id, tool_name, timestamp) "
                         "VALUES (?, 'tool', ?, 'call_1', 'terminal', 1796008090.0)", (ids(profile)["cli_main"], content))
    assert fts_count(hermes_home, "edge", '"wombat"') == 0 and fts_count(hermes_home, "default", '"wombat"') == 1
    html = html_of(admin_client.get("/search/", {"q": "wombat", "profile": ["edge", "default"]}))
    assert len(hits(section(html, "default"))) == 1 and hits(section(html, "edge")) == []
    assert "nothing after a NUL character" in section(html, "edge")
    scan = html_of(admin_client.get("/p/edge/search/scan/", {"q": "wombat"}))
    assert len(hits(scan)) == 1 and "<mark>wombat</mark>" in scan


def test_coverage_reads_the_window_the_stale_mark_and_a_missing_trigger(hermes_home):
    store = store_of(hermes_home, "edge")
    with store.read() as conn:
        caps = store.capabilities(conn)
        assert [g.kind for g in coverage(conn, caps).gaps] == ["cut"]
    with damage(store) as conn:
        conn.execute("INSERT INTO state_meta(key, value) VALUES ('fts_rebuild_high_water', '60'), "
                     "('fts_rebuild_progress', '40')")
    with store.read() as conn:
        found = coverage(conn, store.capabilities(conn))
        window = [g for g in found.gaps if g.kind == "window"][0]
        assert "#41 to #60" in window.text and not found.whole
        where, params = found.scan_where()
        rows = {r[0] for r in conn.execute(f"SELECT id FROM messages WHERE {where}", params)}
        assert set(range(41, 61)) <= rows
    with damage(store) as conn:
        conn.execute("INSERT INTO state_meta(key, value) VALUES ('fts_stale', '1')")
    with store.read() as conn:
        found = coverage(conn, store.capabilities(conn))
        assert "stale" in [g.kind for g in found.gaps] and found.whole and found.scan_where() == ("1", ())
    legacy = store_of(hermes_home, "legacy")
    with damage(legacy) as conn:
        conn.execute("DROP TRIGGER messages_fts_insert")
    with legacy.read() as conn:
        assert [g.kind for g in coverage(conn, legacy.capabilities(conn)).gaps] == ["no_trigger"]


def test_the_scan_keeps_its_row_and_time_budgets_and_goes_on(admin_client, hermes_home, settings):
    settings.HERMES_SCAN_ROWS = 30
    html = html_of(admin_client.get("/p/archive/search/scan/", {"q": "tokenizer", "all": "1"}))
    assert "at most 30 message ids" in html and 'data-stopped="rows"' in html
    found, pages, url = [], 0, "/p/archive/search/scan/?q=tokenizer&all=1"
    while url and pages < 20:
        page = html_of(admin_client.get(url))
        found += hits(page)
        nxt = re.search(r'rel="next" href="\?([^"]+)"', page)
        url = "/p/archive/search/scan/?" + nxt.group(1).replace("&amp;", "&") if nxt else None
        pages += 1
    assert url is None and pages > 2
    assert len(found) == len(set(found)) == fts_count(hermes_home, "archive", '"tokenizer"')
    settings.HERMES_SCAN_SECONDS = 0
    html = html_of(admin_client.get("/p/archive/search/scan/", {"q": "tokenizer", "all": "1"}))
    assert 'data-stopped="time"' in html and "stopped at the time budget" in html
    assert re.search(r'rel="next" href="\?q=tokenizer&amp;all=1&amp;before=\d+"', html)


def test_the_scan_reads_structured_content_past_its_nul(admin_client, hermes_home):
    """The multimodal user message ("look at this" plus an image) is stored
    ``\\x00json:…``: LIKE alone stops at the NUL and would never match it."""
    conn = sqlite3.connect(f"file:{db_of(hermes_home, 'ops')}?mode=ro", uri=True)
    structured = [r[0] for r in conn.execute("SELECT id FROM messages WHERE instr(content, char(0)) = 1 "
                                             "AND instr(content, 'look at this') > 0")]
    assert conn.execute("SELECT COUNT(*) FROM messages WHERE content LIKE '%look at this%'").fetchone()[0] == 0
    conn.close()
    assert len(structured) == 1
    html = html_of(admin_client.get("/p/ops/search/scan/", {"q": '"look at this"', "all": "1"}))
    assert hits(html) == [str(structured[0])] and "<mark>look at this</mark>" in html


def test_a_complete_index_needs_no_scan(admin_client, hermes_home):
    html = html_of(admin_client.get("/p/default/search/scan/", {"q": "tokenizer"}))
    assert 'data-problem="complete"' in html and hits(html) == []
    assert "scan every row anyway" in html


# --------------------------------------------------------------------------- masking

SECRET = "sk-ant-api03-" + "Q" * 40


def test_masking_hides_secrets_and_what_matched_only_inside_them(hermes_home, settings):
    settings.HERMES_ADMIN_MASK_SECRETS = True
    d = ids("default")
    with damage(store_of(hermes_home, "default")) as conn:
        conn.execute("INSERT INTO messages(session_id, role, content, timestamp) VALUES (?, 'user', ?, 1796008075.0)",
                     (d["cli_main"], f"my key is {SECRET} for the ocelot deployment"))
        conn.execute("UPDATE sessions SET title = ? WHERE id = ?", (f"Rotate {SECRET}", d["slack_ended"]))
    user = User.objects.create_superuser("root", password="x")
    client = Client()
    client.force_login(user)
    html = html_of(client.get("/search/", {"q": "ocelot", "profile": "default"}))
    assert SECRET not in html and "[secret masked" in html and len(hits(section(html, "default"))) == 1
    # Matched only inside the secret: neither the hit, nor the title, nor a count tells.
    html = html_of(client.get("/search/", {"q": "QQQQQQQQ*", "profile": "default"}))
    assert hits(section(html, "default")) == [] and 'data-total="0"' in html
    assert counts(html)["default"] == "0"
    html = html_of(client.get("/search/", {"q": "Rotate", "profile": "default"}))
    assert SECRET not in html and re.findall(r'<li data-session="([^"]+)">', html) == [d["slack_ended"]]
    html = html_of(client.get("/search/", {"q": "sk-ant-api03", "profile": "default"}))
    assert re.findall(r'<li data-session="([^"]+)">', html) == []
    scan = html_of(client.get("/p/default/search/scan/", {"q": "ocelot", "all": "1"}))
    assert SECRET not in scan and len(hits(scan)) == 1
    scan = html_of(client.get("/p/default/search/scan/", {"q": "QQQQQQQQQQ", "all": "1"}))
    assert hits(scan) == []
