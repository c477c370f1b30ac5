"""Transcripts routinely hold HTML and scripts: every page and export keeps them inert."""

import re
import sqlite3

import pytest

from tests.conftest import IDS, MANIFEST, PROFILES, ids

pytestmark = pytest.mark.django_db

RAW = ["<script>alert(1)</script>", "<img src=x onerror=alert(2)>", "<script>alert('title')</script>"]


def body(response) -> str:
    if response.streaming:
        return b"".join(response.streaming_content).decode()
    return response.content.decode()


@pytest.mark.parametrize("profile", PROFILES)
def test_hostile_transcript_title_and_tool_arguments_render_inert(admin_client, hermes_home, profile):
    sid = ids(profile)["hostile"]
    html = body(admin_client.get(f"/p/{profile}/s/{sid}/"))
    for raw in RAW:
        assert raw not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=alert(2)&gt;" in html
    assert "&lt;script&gt;alert(&#x27;title&#x27;)&lt;/script&gt;" in html  # <title>, <h1>
    assert not re.search(r"<a [^>]*href=[\"']?javascript:", html, re.I)
    assert "javascript:alert(3)" in html  # shown, as text
    listing = body(admin_client.get(f"/sessions/?profile={profile}&q=f00bad"))
    assert "<script>alert('title')</script>" not in listing
    assert "&lt;script&gt;alert(&#x27;title&#x27;)&lt;/script&gt;" in listing


def test_markdown_export_keeps_html_inside_fences(admin_client, hermes_home):
    md = body(admin_client.get(f"/p/default/s/{IDS['hostile']}/export.md"))
    assert md.startswith("# &lt;script&gt;")
    outside = re.sub(r"(`{3,})text\n.*?\n\1\n", "", md, flags=re.S)
    for raw in RAW:
        assert raw not in outside
    assert "<script>alert(1)</script>" in md  # kept verbatim, inside a fence


def test_jsonl_export_is_not_served_as_html(admin_client, hermes_home):
    response = admin_client.get(f"/p/default/s/{IDS['hostile']}/export.jsonl")
    assert response["Content-Type"].startswith("application/x-ndjson")
    assert response["X-Content-Type-Options"] == "nosniff"


def test_raw_message_is_plain_text(admin_client, hermes_home):
    html = body(admin_client.get(f"/p/default/s/{IDS['hostile']}/"))
    first = re.search(r'id="m(\d+)"', html).group(1)
    response = admin_client.get(f"/p/default/s/{IDS['hostile']}/m/{first}/")
    assert response["Content-Type"].startswith("text/plain")
    assert response["X-Content-Type-Options"] == "nosniff"


def test_huge_tool_output_is_cut_on_the_page_and_whole_in_the_raw_view(admin_client, hermes_home):
    db = hermes_home / "state.db"
    huge = "<b>line</b>\n" * 300_000  # ~3.6 MB
    conn = sqlite3.connect(db)
    row = conn.execute(
        "INSERT INTO messages (session_id, role, content, tool_call_id, tool_name, timestamp) "
        "VALUES (?, 'tool', ?, 'call_huge', 'terminal', 1772400000.0)",
        (IDS["long"], huge),
    )
    msg_id = row.lastrowid
    conn.commit()
    conn.close()
    html = body(admin_client.get(f"/p/default/s/{IDS['long']}/?at={msg_id}"))
    assert len(html) < 200_000
    assert "Showing the first 20 KB" in html
    assert "<b>line</b>" not in html
    raw = admin_client.get(f"/p/default/s/{IDS['long']}/m/{msg_id}/")
    assert raw.content.decode() == huge


def test_structured_content_with_html_parts_is_inert(admin_client, hermes_home):
    db = hermes_home / "state.db"
    conn = sqlite3.connect(db)
    conn.execute(
        "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', ?, 1772400000.0)",
        (IDS["long"], '\x00json:[{"type": "text", "text": "<svg onload=alert(5)>"}, '
                      '{"type": "image_url", "image_url": {"url": "javascript:alert(6)"}}]'),
    )
    conn.commit()
    conn.close()
    html = body(admin_client.get(f"/p/default/s/{IDS['long']}/?before=-1"))
    assert "<svg onload=alert(5)>" not in html and "&lt;svg onload=alert(5)&gt;" in html
    assert not re.search(r"href=[\"']?javascript:alert\(6\)", html)
    assert MANIFEST["profiles"]["default"]["sessions_by_id"][IDS["long"]]
