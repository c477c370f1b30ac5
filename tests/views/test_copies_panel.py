"""The session page's *Copies on disk* panel: computed before rendering, hostile
content inert, previews only for those who may read transcripts."""

import json
import re

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from tests.checks.helpers import store_of
from tests.conftest import IDS

from .test_roles import ensure_roles

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
    assert "missing from the store" in html
    assert HOSTILE not in html and "&lt;script&gt;alert(&#x27;copy&#x27;)&lt;/script&gt;" in html
    # The dump that is not JSON: listed, incomplete, its text never quoted.
    assert f"request_dump_{SID}_20260301_091500_000001.json" in html and "invalid JSON" in html
    assert "&lt;html&gt;" not in html
    page = admin_client.get(f"/p/default/s/{SID}/copies/").content.decode()
    assert "<title>" in page and "Copies on disk" in page  # a page of its own without htmx


def test_auditor_sees_the_copies_but_no_message_text(snapshot):
    ensure_roles()
    user = User.objects.create_user("auditor", password="pw-auditor-long-enough")
    user.groups.add(Group.objects.get(name="Auditor"))
    client = Client()
    client.force_login(user)
    html = client.get(f"/p/default/s/{SID}/copies/", HTTP_HX_REQUEST="true").content.decode()
    assert "missing from the store" in html and 'class="preview"' not in html
    assert "alert" not in html and "and then?" not in html


def test_no_copy(admin_client, hermes_home, settings, tmp_path):
    settings.DATA_DIR = tmp_path / "data"
    html = admin_client.get(f"/p/default/s/{SID}/copies/", HTTP_HX_REQUEST="true").content.decode()
    assert "No copy of this session on disk" in html
    assert not re.search(r"<table", html)
