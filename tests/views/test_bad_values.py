"""Values no reader expects: JSON nested ~1000 levels, text that is not UTF-8, NUL and
control characters. Every page, the search, both exports and the checks keep
working, and say what they could not show as it is.

Deep JSON is written by the real hermes-agent 0.19.0 ``append_message`` (it stores
such tool calls as they come); broken text by plain sqlite3 the way salvaged pages
and other writers leave it (``CAST(x'…' AS TEXT)``).
"""

import json
import re
import sqlite3

import pytest

from sessions_app.checks.runner import run_store_checks
from tests.checks.helpers import hermes, store_of
from tests.conftest import IDS

pytestmark = pytest.mark.django_db

SID = IDS["cli_main"]
DEPTH = 980


def body(response) -> str:
    if response.streaming:
        return b"".join(response.streaming_content).decode()
    return response.content.decode()


def row_count(home, sid=SID) -> int:
    conn = sqlite3.connect(f"file:{home / 'state.db'}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT COUNT(*) FROM messages WHERE session_id = ? AND active = 1", (sid,)).fetchone()[0]
    finally:
        conn.close()


@pytest.fixture
def deep(hermes_home):
    """cli_main gets an assistant turn whose tool_calls nest DEPTH lists deep and a
    user turn whose structured content does, both through 0.19.0's own writer."""
    out = hermes(store_of(hermes_home), f"""
        deep = []
        cur = deep
        for _ in range({DEPTH}):
            nxt = []
            cur.append(nxt)
            cur = nxt
        calls = [{{"id": "call_deep", "type": "function",
                   "function": {{"name": "probe", "arguments": "{{}}"}}, "extra": deep}}]
        a = db.append_message({SID!r}, role="assistant", content="calling deep", tool_calls=calls)
        u = db.append_message({SID!r}, role="user", content=[{{"type": "text", "text": "deep part", "x": deep}}])
        print(json.dumps([a, u]))
    """)
    assistant, user = json.loads(out)
    conn = sqlite3.connect(hermes_home / "state.db")
    stored = conn.execute("SELECT tool_calls, content FROM messages WHERE id = ?", (assistant,)).fetchone()
    structured = conn.execute("SELECT CAST(content AS BLOB) FROM messages WHERE id = ?", (user,)).fetchone()[0]
    conn.close()
    assert stored[0].count("[") > DEPTH and structured.startswith(b"\x00json:") and structured.count(b"[") > DEPTH
    return assistant, user


def test_session_page_shows_deep_json_as_undecodable_in_place(admin_client, hermes_home, deep):
    assistant, user = deep
    response = admin_client.get(f"/p/default/s/{SID}/?size=200")
    assert response.status_code == 200
    html = body(response)
    block = re.search(rf'<article [^>]*id="m{assistant}">(.*?)</article>', html, re.S).group(1)
    assert "calling deep" in block
    assert 'data-field="tool_calls"' in block and "undecodable: nested deeper than 64 levels" in block
    block = re.search(rf'<article [^>]*id="m{user}">(.*?)</article>', html, re.S).group(1)
    assert 'data-field="content"' in block and "undecodable: nested deeper than 64 levels" in block


def test_model_config_nested_too_deep_is_shown_as_undecodable(admin_client, hermes_home):
    conn = sqlite3.connect(hermes_home / "state.db")
    conn.execute("UPDATE sessions SET model_config = ? WHERE id = ?", ("[" * 3000 + "]" * 3000, SID))
    conn.commit()
    conn.close()
    response = admin_client.get(f"/p/default/s/{SID}/")
    assert response.status_code == 200
    assert "undecodable: nested deeper than 64 levels" in body(response)


def test_jsonl_export_is_complete_with_deep_json(admin_client, hermes_home, deep):
    assistant, user = deep
    lines = body(admin_client.get(f"/p/default/s/{SID}/export.jsonl")).splitlines()
    parsed = [json.loads(line) for line in lines]
    assert parsed[0]["role"] == "session_meta"
    assert all(p["role"] != "export_error" for p in parsed)
    assert len(parsed) == 1 + row_count(hermes_home)
    rows = {p["id"]: p for p in parsed[1:]}
    assert rows[assistant]["_undecodable"] == {"tool_calls": "nested deeper than 64 levels"}
    assert rows[assistant]["tool_calls"].startswith('[{"id": "call_deep"')  # the stored text, whole
    assert rows[user]["_undecodable"] == {"content": "nested deeper than 64 levels"}
    assert rows[user]["content"].startswith("\x00json:")


def test_markdown_export_is_complete_with_deep_json(admin_client, hermes_home, deep):
    assistant, user = deep
    md = body(admin_client.get(f"/p/default/s/{SID}/export.md"))
    assert "Export stopped early" not in md
    assert len(re.findall(r"^## #\d+ ", md, re.M)) == row_count(hermes_home)
    assert f"## #{user} user" in md and "content is undecodable JSON (nested deeper than 64 levels)" in md


def test_checks_do_not_die_on_deep_json(hermes_home, deep):
    report = run_store_checks(store_of(hermes_home))
    assert report.status == "ok" and report.failed_checks == [] and report.error is None
    report = run_store_checks(store_of(hermes_home), session_id=SID)
    assert report.failed_checks == []


# --------------------------------------------------------------------------- broken text

BROKEN = "7a65627261776f7264206361666520e92062656c6c0720e280aa6e756c00ff6c20656e64"
# b"zebraword cafe \xe9 bell\x07 \xe2\x80\xaanul\x00\xffl end": Latin-1 é, BEL, NUL, 0xFF


@pytest.fixture
def broken(hermes_home):
    """One user row of cli_main with invalid UTF-8, a NUL and a BEL in its content
    and a tool row whose tool_name is invalid UTF-8, through the store's own FTS
    triggers; returns the two ids."""
    conn = sqlite3.connect(hermes_home / "state.db")
    text_id = conn.execute(
        f"INSERT INTO messages(session_id, role, content, timestamp) "
        f"VALUES (?, 'user', CAST(x'{BROKEN}' AS TEXT), 1796008075.0)", (SID,)).lastrowid
    tool_id = conn.execute(
        "INSERT INTO messages(session_id, role, content, tool_call_id, tool_name, timestamp) "
        "VALUES (?, 'tool', 'tool said ok', 'call_x', CAST(x'6772e970' AS TEXT), 1796008076.0)", (SID,)).lastrowid
    conn.commit()
    conn.close()
    return text_id, tool_id


def test_session_page_shows_broken_text_with_replacement_characters(admin_client, hermes_home, broken):
    text_id, tool_id = broken
    response = admin_client.get(f"/p/default/s/{SID}/?size=200")
    assert response.status_code == 200
    html = body(response)
    block = re.search(rf'<article [^>]*id="m{text_id}">(.*?)</article>', html, re.S).group(1)
    assert "zebraword cafe \ufffd bell\ufffd" in block and "nul\ufffd\ufffdl end" in block
    assert "\x00" not in html and "\x07" not in html
    assert "gr\ufffdp" in html  # the tool row's name
    raw = admin_client.get(f"/p/default/s/{SID}/m/{text_id}/")
    assert raw.status_code == 200 and "zebraword cafe \ufffd" in raw.content.decode()


def test_search_finds_a_row_with_broken_text(admin_client, hermes_home, broken):
    text_id, _ = broken
    response = admin_client.get("/p/default/search/?q=zebraword")
    assert response.status_code == 200
    html = body(response)
    assert "damaged" not in html
    assert f'<li data-message="{text_id}">' in html
    assert "\ufffd" in html and "\x00" not in html and "\x07" not in html


def test_jsonl_export_is_complete_and_says_bytes_were_replaced(admin_client, hermes_home, broken):
    text_id, tool_id = broken
    lines = body(admin_client.get(f"/p/default/s/{SID}/export.jsonl")).splitlines()
    parsed = [json.loads(line) for line in lines]
    assert all(p["role"] != "export_error" for p in parsed)
    assert len(parsed) == 1 + row_count(hermes_home)
    notes = parsed[0]["export_notes"]
    assert len(notes) == 1 and notes[0].startswith("2 message(s) hold text that is not valid UTF-8")
    rows = {p["id"]: p for p in parsed[1:]}
    assert rows[text_id]["content"] == "zebraword cafe \ufffd bell\x07 \u202anul\x00\ufffdl end"
    assert rows[tool_id]["tool_name"] == "gr\ufffdp"


def test_markdown_export_is_complete_and_says_what_it_replaced(admin_client, hermes_home, broken):
    text_id, tool_id = broken
    md = body(admin_client.get(f"/p/default/s/{SID}/export.md"))
    assert "Export stopped early" not in md
    assert len(re.findall(r"^## #\d+ ", md, re.M)) == row_count(hermes_home)
    header = md.split("## #", 1)[0]
    assert "2 message(s) hold text that is not valid UTF-8" in header
    assert "1 message(s) hold NUL or other control characters" in header
    assert "zebraword cafe \ufffd bell\ufffd" in md and "\x00" not in md and "\x07" not in md


def test_checks_do_not_die_on_broken_text(hermes_home, broken):
    report = run_store_checks(store_of(hermes_home))
    assert report.failed_checks == [] and report.error is None


def test_a_session_pages_checks_on_its_connection_are_those_of_a_run_of_their_own(hermes_home, broken, settings):
    """The session page runs its session's checks on its own lenient connection: they
    read the text strictly as on a connection of theirs, which is lenient again after."""
    from django.contrib.auth.models import User

    from sessions_app.presenters.session_page import session_page
    from sessions_app.stores.connection import replacing_text

    settings.HERMES_ADMIN_MASK_SECRETS = False
    store = store_of(hermes_home)
    alone = run_store_checks(store, session_id=SID, now=2_000_000_000)
    with store.read(lenient=True) as conn:
        shared = run_store_checks(store, session_id=SID, now=2_000_000_000, conn=conn)
        assert conn.text_factory is replacing_text
        assert "\ufffd" in conn.execute("SELECT content FROM messages WHERE id = ?", (broken[0],)).fetchone()[0]
    assert shared == alone
    user = User.objects.create_superuser("checks", password="x")
    page = session_page(store, SID, user=user, size=200)
    assert sorted(f.check for f, *_ in page.findings) == sorted(f.check for f in alone.findings)
