"""The session page's *Copies on disk* panel: computed before rendering, hostile
content inert, previews only for those who may read transcripts."""

import json
import re

import pytest

from tests.checks.helpers import store_of
from tests.conftest import IDS

from .test_roles import role_client

pytestmark = pytest.mark.django_db
SID = IDS["cli_main"]
HOSTILE = "<script>alert('copy')</script>"


@pytest.fixture
def snapshot(hermes_home, settings, tmp_path):
    """A snapshot of ``cli_main`` holding its rows and one reply the store lacks
    (hostile text), plus a request dump that is not JSON."""
    settings.DATA_DIR = tmp_path / "data"
    s = store_of(hermes_home, "default")
    with s.read() as conn:
        rows = conn.execute("SELECT role, content, tool_call_id, tool_calls, tool_name FROM messages "
                            "WHERE session_id = ? ORDER BY id", (SID,)).fetchall()
    messages = []
    for role, content, call_id, calls, name in rows:
        m = {"role": role, "content": content}
        m.update({k: v for k, v in (("tool_call_id", call_id), ("tool_name", name)) if v})
        if calls:
            m["tool_calls"] = json.loads(calls)
        messages.append(m)
    messages += [{"role": "user", "content": "and then?"}, {"role": "assistant", "content": HOSTILE}]
    folder = s.profile.sessions_dir
    folder.mkdir(exist_ok=True)
    (folder / f"session_{SID}.json").write_text(json.dumps({"session_id": SID, "messages": messages}))
    (folder / f"request_dump_{SID}_20260301_091500_000001.json").write_text("<html>" + HOSTILE)
    return s


def test_session_page_loads_the_panel(admin_client, snapshot):
    html = admin_client.get(f"/p/default/s/{SID}/").content.decode()
    assert f'hx-get="/p/default/s/{SID}/copies/"' in html


def test_panel_lists_copies_and_compares_them(admin_client, snapshot):
    html = admin_client.get(f"/p/default/s/{SID}/copies/", HTTP_HX_REQUEST="true").content.decode()
    assert html.lstrip().startswith('<section class="copies-box"')  # the fragment, no page around it
    assert f"session_{SID}.json" in html and "session snapshot" in html
    assert "2 messages the store lacks can be recovered" in html
    assert "Preview: Recover the lost messages</a>" in html  # as the health page names it
    assert "missing from the store" in html
    assert HOSTILE not in html and "&lt;script&gt;alert(&#x27;copy&#x27;)&lt;/script&gt;" in html
    # The dump that is not JSON: listed, incomplete, its text never quoted.
    assert f"request_dump_{SID}_20260301_091500_000001.json" in html and "invalid JSON" in html
    assert "&lt;html&gt;" not in html
    page = admin_client.get(f"/p/default/s/{SID}/copies/").content.decode()
    assert "<title>" in page and "Copies on disk" in page  # a page of its own without htmx


def test_auditor_sees_the_copies_but_no_message_text(snapshot):
    html = role_client("Auditor").get(f"/p/default/s/{SID}/copies/", HTTP_HX_REQUEST="true").content.decode()
    assert "missing from the store" in html and 'class="preview"' not in html
    assert "alert" not in html and "and then?" not in html


def test_no_copy(admin_client, hermes_home, settings, tmp_path):
    settings.DATA_DIR = tmp_path / "data"
    html = admin_client.get(f"/p/default/s/{SID}/copies/", HTTP_HX_REQUEST="true").content.decode()
    assert "No copy of this session on disk" in html
    assert not re.search(r"<table", html)


KEY = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123"


def _preview(client):
    return client.get(f"/p/default/s/{SID}/repair/?check=history_lost").content.decode()


def _with_key(snapshot):
    """The snapshot's missing user message carries an API key."""
    path = snapshot.profile.sessions_dir / f"session_{SID}.json"
    data = json.loads(path.read_text())
    data["messages"][-2]["content"] = f"and then? my key is {KEY} \x1b[31m"
    path.write_text(json.dumps(data))


def test_recovery_preview_shows_the_text_it_will_insert(admin_client, snapshot, settings):
    _with_key(snapshot)
    html = _preview(admin_client)
    assert "Recover 2 message(s)" in html
    box = html[html.index('id="inserted"'):html.index("</details>", html.index('id="inserted"'))]
    assert "The 2 messages it writes" in box
    # In the order they go in, with their role, source copy and place; hostile text inert.
    user, reply = box.index("<strong><bdi>user</bdi></strong>"), box.index("<strong><bdi>assistant</bdi></strong>")
    assert user < reply and f"session_{SID}.json" in box and "after row" in box
    assert f"and then? my key is {KEY} \ufffd[31m" in box and "\x1b" not in html  # controls shown, inert
    assert HOSTILE not in box and "&lt;script&gt;alert(&#x27;copy&#x27;)&lt;/script&gt;" in box
    settings.HERMES_ADMIN_MASK_SECRETS = True
    masked = _preview(admin_client)
    assert KEY not in masked and "secret masked" in masked and "and then? my key is" in masked


def test_recovery_preview_keeps_the_text_from_those_who_may_not_read_transcripts(snapshot):
    html = _preview(role_client("Auditor"))
    assert "Recover 2 message(s)" in html
    assert "The text of the 2 messages it writes is shown to users who may read transcripts." in html
    assert "and then?" not in html and "alert" not in html and 'class="preview"' not in html


def test_the_kept_plan_carries_no_message_text(admin_client, snapshot):
    """What Apply executes (kept in the login session, and what its audit event records)
    is the plan, which names each message by copy and index: the texts are the preview's only."""
    from sessions_app.presenters.health import repair_preview
    from sessions_app.views.common import PLANS_SESSION_KEY

    _with_key(snapshot)
    shown = repair_preview(snapshot, SID, "history_lost", masked=False, texts=True)
    assert KEY in shown.inserted[0]["text"] and shown.inserted_total == 2
    assert KEY not in json.dumps(shown.plan_data) and "and then?" not in json.dumps(shown.plan_data)
    assert "Recover 2 message(s)" in _preview(admin_client)
    kept = json.dumps(admin_client.session[PLANS_SESSION_KEY])
    assert "recover_messages" in kept and KEY not in kept and "and then?" not in kept
