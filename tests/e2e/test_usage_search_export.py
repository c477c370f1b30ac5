"""Usage, search across profiles and the bulk export, driven in real Chromium."""

import csv
import io
import re
import sqlite3
import zipfile

import pytest

from tests.conftest import ids

pytestmark = pytest.mark.e2e


def test_search_hits_from_three_profiles_at_once(logged_in, live_server, hermes_home):
    page = logged_in
    page.click("header nav >> text=Search")
    page.wait_for_url("**/search/")
    page.fill("input[name=q]", "tokenizer")
    page.select_option("select[name=profile]", ["default", "archive", "edge"])
    page.click("form[role=search] button[type=submit]")
    page.wait_for_url("**q=tokenizer**")
    sections = page.locator("section.profile-results")
    assert sections.count() == 3
    assert [s.get_attribute("data-profile") for s in sections.all()] == ["default", "archive", "edge"]
    for profile in ("default", "archive", "edge"):
        section = page.locator(f'section.profile-results[data-profile="{profile}"]')
        assert section.locator("li[data-message]").count() >= 3
        assert section.locator("mark").first.inner_text().lower() == "tokenizer"
    counts = page.locator("table.counts tbody tr")
    assert counts.count() == 3
    total = sum(int(r.locator("td.num").first.inner_text()) for r in counts.all())
    assert page.locator("p.count").get_attribute("data-total") == str(total)
    # One conversation (the compression chain) per profile, its three segments inside.
    edge = page.locator('section.profile-results[data-profile="edge"]')
    assert edge.locator(".lineage-group").count() == 1 and edge.locator(".session-hits").count() == 3
    first = edge.locator("li[data-message] a").first
    message = first.inner_text().lstrip("#")
    first.click()
    page.wait_for_url(f"**/p/edge/s/**at={message}**")
    assert page.locator(f"#m{message}").count() == 1


def test_a_tool_output_past_the_index_is_found_by_the_scan(logged_in, live_server, hermes_home):
    conn = sqlite3.connect(hermes_home / "profiles" / "edge" / "state.db")
    conn.execute("INSERT INTO messages(session_id, role, content, tool_call_id, tool_name, timestamp) "
                 "VALUES (?, 'tool', ?, 'call_1', 'terminal', 1796008090.0)",
                 (ids("edge")["cli_main"], "x\n" * 5000 + "the quasar line"))
    conn.commit()
    conn.close()
    page = logged_in
    page.goto(f"{live_server.url}/search/?q=quasar&profile=edge")
    section = page.locator('section.profile-results[data-profile="edge"]')
    assert section.locator("li[data-message]").count() == 0
    assert "first 8,192 characters" in section.locator('[data-gap="cut"]').inner_text()
    section.locator("text=Scan those rows for these words").click()
    page.wait_for_url("**/p/edge/search/scan/**")
    assert page.locator("ol.search-hits li").count() == 1
    assert page.locator("ol.search-hits mark").inner_text() == "quasar"
    assert page.locator("p.scan-extent").get_attribute("data-stopped") == "end"


def test_usage_page_chart_and_csv(logged_in, live_server, hermes_home):
    page = logged_in
    page.click("header nav >> text=Usage")
    page.wait_for_url("**/usage/")
    page.click("text=all time")
    page.select_option("select[name=group]", "model")
    page.click("form.filters button[type=submit]")
    page.wait_for_url("**group=model**")
    rows = page.locator("table.usage tbody tr")
    assert rows.count() == 1 and rows.first.locator("td").first.inner_text() == "anthropic/claude-sonnet-4"
    assert page.locator("table.usage tfoot th").nth(2).inner_text() == "27,120"
    assert page.locator("figure.usage-chart svg rect.bar").count() >= 1
    with page.expect_download() as info:
        page.click("text=Export CSV")
    text = open(info.value.path(), encoding="utf-8").read()
    lines = list(csv.DictReader(io.StringIO(text)))
    assert sum(int(r["input_tokens"]) for r in lines) == 16500


def test_bulk_export_of_the_filtered_list(logged_in, live_server, hermes_home):
    page = logged_in
    page.click("header nav >> text=Sessions")
    page.select_option("select[name=profile]", "ops")
    page.wait_for_url("**profile=ops**")
    listed = page.locator("table.sessions tbody tr").count()
    with page.expect_download() as info:
        page.click("text=ZIP of transcripts (JSONL and Markdown)")
    with zipfile.ZipFile(info.value.path()) as zf:
        names = zf.namelist()
        assert zf.testzip() is None
    assert len([n for n in names if n.endswith(".jsonl")]) == listed == len([n for n in names if n.endswith(".md")])
    assert all(re.match(r"hermes-sessions-\d{8}-\d{6}/(ops/|sessions\.csv$|export-notes\.txt$)", n) for n in names)
