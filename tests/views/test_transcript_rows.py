"""The session page renders its transcript rows in Python (``templatetags/transcript.py``):
the markup is what the message template it replaced gave, byte for byte
(``reference_message.html`` is that template, kept here as the reference), for every
message of every fixture session, with findings marked, huge and structured
content, hostile text, masking on and off."""

import sqlite3
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.template import Context, Template
from django.template.defaultfilters import slugify

from sessions_app.checks import Finding
from sessions_app.presenters.session_page import message_markers, session_page
from sessions_app.stores import registry
from sessions_app.templatetags.transcript import transcript_rows
from tests.conftest import IDS, MANIFEST

pytestmark = pytest.mark.django_db
REFERENCE = Template((Path(__file__).parent / "reference_message.html").read_text())


def reference_rows(page, markers, store, session_id) -> str:
    return "".join(REFERENCE.render(Context({"m": m, "markers": markers, "store": store, "session_id": session_id}))
                   for m in page.messages if not m.nested)


def pages(user, profile, **kwargs):
    store = registry.get(profile)
    for sid in MANIFEST["profiles"][profile]["session_ids"].values():
        for inactive in (False, True):
            shown = session_page(store, sid, user=user, size=500, include_inactive=inactive, **kwargs)
            yield store, sid, shown


@pytest.mark.parametrize("masked", [False, True])
def test_rows_are_the_templates_markup_for_every_fixture_session(hermes_home, settings, masked):
    settings.HERMES_ADMIN_MASK_SECRETS = masked
    user = User.objects.create_superuser("rows", password="x")
    compared = marked = 0
    for profile in MANIFEST["profiles"]:
        for store, sid, shown in pages(user, profile):
            ids = [m.id for m in shown.page.messages]
            markers = {**shown.markers, **message_markers([  # findings marked on rows, as checks mark them
                Finding("unanswered_turn", "warning", sid, 1, "no <reply> & more", None, {"message_id": i})
                for i in ids[::7]] + [
                Finding("duplicate_live_rows", "info", sid, 2, "twice 'the same'", "hide_duplicates", {"hide": ids[::5]})])}
            ours = transcript_rows(shown.page, markers, store, sid)
            assert ours == reference_rows(shown.page, markers, store, sid), (profile, sid)
            compared += len(shown.page.messages)
            marked += len(markers)
    assert compared > 500 and marked > 100


def test_huge_hostile_and_odd_rows_too(hermes_home):
    conn = sqlite3.connect(hermes_home / "state.db")
    start = conn.execute("SELECT MAX(timestamp) FROM messages").fetchone()[0] + 1
    rows = [
        ("tool", "<b>line</b> & 'quotes' \"double\"\n" * 2000, "call_x", "ter<m>inal", start),
        ("assistant", "\x00json:[{\"type\": \"text\", \"text\": \"<i>structured</i>\"}]", None, None, start + 1),
        ("assistant", "\x00json:[broken", None, None, start + 2),
        ("tool", "orphan result", None, None, "not a number"),
        ("assistant", "", None, None, 1e300),
    ]
    conn.executemany("INSERT INTO messages (session_id, role, content, tool_call_id, tool_name, timestamp) "
                     "VALUES (?, ?, ?, ?, ?, ?)", [(IDS["long"], *r) for r in rows])
    conn.execute("INSERT INTO messages (session_id, role, content, tool_calls, timestamp, reasoning) VALUES "
                 "(?, 'assistant', 'calling', ?, ?, '<think>')",
                 (IDS["long"], '[{"id": "call <1>", "function": {"name": "x&y", "arguments": "{\\"a\\": 1}"}}, '
                               '{"id": "", "function": {"name": "none"}}]', start + 3))
    conn.commit()
    conn.close()
    user = User.objects.create_superuser("rows", password="x")
    store = registry.get("default")
    shown = session_page(store, IDS["long"], user=user, size=500, include_inactive=True)
    html = transcript_rows(shown.page, shown.markers, store, IDS["long"])
    assert html == reference_rows(shown.page, shown.markers, store, IDS["long"])
    assert "Showing the first 20 KB" in html and "&lt;b&gt;line&lt;/b&gt;" in html and "<b>" not in html


@pytest.mark.parametrize("grouping", [False, True])
def test_values_are_escaped_as_the_template_escapes_them(settings, grouping):
    """``transcript._v`` (and its fast cases: text, whole numbers) is ``{{ value }}``."""
    from sessions_app.templatetags.transcript import _v

    settings.USE_THOUSAND_SEPARATOR = grouping
    template = Template("{{ value }}")
    for value in [0, 7, -12, 1234567, 2**70, True, False, None, 1.5, 1e20, float("inf"), "<b>&'\"", "", b"x",
                  ["<a>"], {"k": "<v>"}]:
        assert _v(value) == template.render(Context({"value": value})), value


def test_the_slug_memo_keeps_short_texts_only():
    """Roles and call ids are read whole: a damaged store's megabyte role is slugified
    on each view, never kept between requests."""
    from sessions_app.templatetags import transcript as rows

    rows._SLUGS.clear()
    long_role = "tool-" + "a" * 1_000_000
    assert rows._slug(long_role) == rows._v(slugify(long_role)) and not rows._SLUGS
    assert rows._slug("assistant") == "assistant" and list(rows._SLUGS) == ["assistant"]
