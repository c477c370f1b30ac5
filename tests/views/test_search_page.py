"""Full-text search across a profile (/p/<profile>/search/), on every release's store."""

import re
import sqlite3

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from sessions_app.stores.search import fts_expression, split_snippet
from tests.conftest import PROFILES, ids
from tests.views.markup import without_bidi_markup

pytestmark = pytest.mark.django_db


def html_of(response) -> str:
    return without_bidi_markup(response.content.decode())


def hits(html: str) -> list[str]:
    return re.findall(r'<li data-message="(\d+)">', html)


def add_message(home, content: str, role: str = "user") -> None:
    """Append one message to cli_main of the default (0.19.0) store with plain
    sqlite3; the store's own FTS triggers index it."""
    conn = sqlite3.connect(home / "state.db")
    conn.execute("INSERT INTO messages(session_id, role, content, timestamp) VALUES (?, ?, ?, 1796008075.0)",
                 (ids("default")["cli_main"], role, content))
    conn.commit()
    conn.close()


@pytest.mark.parametrize("profile", PROFILES)
def test_search_finds_messages_and_links_to_their_page(admin_client, hermes_home, profile):
    """The hostile session's user message holds "alert(1)": found through the store's
    own index, newest first, linked to the session page at that message."""
    sid = ids(profile)["hostile"]
    response = admin_client.get(f"/p/{profile}/search/?q=onerror")
    assert response.status_code == 200
    html = html_of(response)
    found = hits(html)
    assert found, html
    with sqlite3.connect(f"file:{hermes_home}/{'state.db' if profile == 'default' else f'profiles/{profile}/state.db'}?mode=ro",
                         uri=True) as conn:
        first = conn.execute("SELECT id FROM messages WHERE session_id = ? AND role = 'user' ORDER BY id LIMIT 1",
                             (sid,)).fetchone()[0]
    assert str(first) in found
    assert f'/p/{profile}/s/{sid}/?at={first}' in html
    assert [int(i) for i in found] == sorted((int(i) for i in found), reverse=True)
    page = admin_client.get(f"/p/{profile}/s/{sid}/?at={first}")
    assert page.status_code == 200 and f'id="m{first}"' in html_of(page)


def test_snippets_are_escaped_and_matches_marked(admin_client, hermes_home):
    html = html_of(admin_client.get("/p/default/search/?q=alert"))
    assert "<script>alert(1)</script>" not in html
    assert "<img src=x onerror" not in html
    assert "&lt;script&gt;" in html
    assert "<mark>alert</mark>" in html
    assert "<script>alert('title')</script>" not in html  # the session title, in the hit's link


def test_every_word_must_match_and_syntax_is_never_passed_through(admin_client, hermes_home):
    both = hits(html_of(admin_client.get("/p/default/search/?q=onerror+alert")))
    one = hits(html_of(admin_client.get("/p/default/search/?q=onerror+zzznotthere")))
    assert both and not one
    for raw in ['"unterminated', "NEAR(a b)", "content:alert", "a AND OR", "*", "^alert", "((("]:
        response = admin_client.get("/p/default/search/", {"q": raw})
        assert response.status_code == 200, raw


def test_prefix_and_phrase(admin_client, hermes_home):
    assert hits(html_of(admin_client.get("/p/default/search/?q=onerr*")))
    assert not hits(html_of(admin_client.get("/p/default/search/?q=onerr")))
    assert hits(html_of(admin_client.get('/p/default/search/', {"q": '"src x onerror"'})))


def test_pages_older_matches_by_message_id(admin_client, hermes_home):
    """Every fixture store has the 60-message 'long' session: page 20 at a time."""
    first = html_of(admin_client.get("/p/default/search/?q=answer*&size=20"))
    page1 = hits(first)
    older = re.search(r'href="\?q=answer%2A&amp;size=20&amp;before=(\d+)"', first)
    if older is None:
        pytest.skip("fewer than 21 matches in this fixture")
    page2 = hits(html_of(admin_client.get(f"/p/default/search/?q=answer*&size=20&before={older.group(1)}")))
    assert page2 and max(map(int, page2)) < min(map(int, page1))


def test_no_query_shows_the_form_only(admin_client, hermes_home):
    response = admin_client.get("/p/default/search/")
    assert response.status_code == 200
    assert 'name="q"' in html_of(response) and not hits(html_of(response))
    assert "Type at least one word" in html_of(admin_client.get("/p/default/search/?q=%22%22+***"))


def test_store_without_an_index_says_so(admin_client, hermes_home):
    db = hermes_home / "profiles" / "legacy" / "state.db"
    conn = sqlite3.connect(db)
    conn.execute("DROP TABLE messages_fts")
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' "
                                "AND name LIKE 'messages_fts\\_%' ESCAPE '\\' AND name NOT LIKE '%trigram%'").fetchall():
        conn.execute(f"DROP TRIGGER {name}")
    conn.commit()
    conn.close()
    response = admin_client.get("/p/legacy/search/?q=alert")
    assert response.status_code == 200
    assert 'data-problem="no_index"' in html_of(response)


def test_damaged_index_is_reported_on_the_page_not_as_a_traceback(admin_client, hermes_home):
    db = hermes_home / "state.db"
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    page = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'messages_fts_data'").fetchone()[0]
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    with open(db, "r+b") as fh:  # a private test copy nothing holds open (cf. test_store_level)
        fh.seek((page - 1) * size)
        fh.write(b"\xff" * size)
    response = admin_client.get("/p/default/search/?q=alert")
    assert response.status_code == 503
    html = html_of(response)
    assert 'data-problem="damaged"' in html
    assert admin_client.get(f"/p/default/s/{ids('default')['cli_main']}/").status_code == 200


def test_search_needs_the_transcript_permission(hermes_home):
    import importlib

    from django.apps import apps
    importlib.import_module("sessions_app.migrations.0003_roles").create_roles(apps, None)
    anonymous = Client()
    assert anonymous.get("/p/default/search/?q=alert").status_code == 302
    for role, expected in (("Auditor", 403), ("Operator", 200)):
        user = User.objects.create_user(role.lower(), password="pw-long-enough-" + role)
        user.groups.add(Group.objects.get(name=role))
        client = Client()
        client.force_login(user)
        assert client.get("/p/default/search/?q=alert").status_code == expected, role
    assert anonymous.get("/p/nosuch/search/?q=x").status_code == 302


def test_unknown_profile_is_404(admin_client, hermes_home):
    assert admin_client.get("/p/nosuch/search/?q=x").status_code == 404


def test_secrets_in_snippets_are_masked_when_masking_is_on(admin_client, hermes_home, settings):
    key = "sk-ant-" + "A1b2C3d4" * 5
    add_message(hermes_home, f"use the key {key} for the zanzibar deploy")
    assert key in html_of(admin_client.get("/p/default/search/?q=zanzibar"))
    settings.HERMES_ADMIN_MASK_SECRETS = True
    html = html_of(admin_client.get("/p/default/search/?q=zanzibar"))
    assert key not in html and "secret masked" in html


def test_a_snippet_that_cuts_a_secret_is_hidden_when_masking_is_on(admin_client, hermes_home, settings):
    """The snippet window (24 words) starts inside the key, so the snippet alone
    holds a tail of it that no secret pattern recognises."""
    tail = "Q9w8E7r6" * 5
    words = " ".join(f"word{i}" for i in range(21))
    add_message(hermes_home, f"my key is sk-ant-api03-{tail} and {words} zanzibar")
    assert tail in html_of(admin_client.get("/p/default/search/?q=zanzibar"))  # the snippet does cut into it
    settings.HERMES_ADMIN_MASK_SECRETS = True
    html = html_of(admin_client.get("/p/default/search/?q=zanzibar"))
    assert tail not in html and "touches a masked secret" in html


def test_prefix_searches_do_not_spell_out_a_masked_secret(admin_client, hermes_home, settings):
    add_message(hermes_home, "token sk-ant-api03-" + "Zq7Xv3Lm" * 5 + " for the build")
    assert 'data-message="' in html_of(admin_client.get("/p/default/search/?q=Zq7X*"))
    settings.HERMES_ADMIN_MASK_SECRETS = True
    html = html_of(admin_client.get("/p/default/search/?q=Zq7X*"))
    nothing = html_of(admin_client.get("/p/default/search/?q=Qq0Zz9*"))  # a true no-match
    assert 'data-message="' not in html and "No messages match" in html
    csrf = re.compile(r'"x-csrftoken": "[^"]+"|name="csrfmiddlewaretoken" value="[^"]+"')
    assert csrf.sub("", html.replace("Zq7X", "Qq0Zz9")) == csrf.sub("", nothing)  # nothing tells them apart
    assert 'data-message="' in html_of(admin_client.get("/p/default/search/?q=build"))  # the message itself stays


def test_the_masking_window_is_placed_at_the_snippet_not_at_an_earlier_word(admin_client, hermes_home, settings):
    """The snippet's first word also occurs earlier in the message, far from the
    secret: the text masked must be the snippet's own surroundings."""
    tail = "Rt5Yu6Io" * 5
    early = "build started " + "filler " * 2000
    words = " ".join(f"w{i}" for i in range(21))
    add_message(hermes_home, f"{early} key sk-ant-api03-{tail} build {words} zanzibar")
    assert tail in html_of(admin_client.get("/p/default/search/?q=zanzibar"))
    settings.HERMES_ADMIN_MASK_SECRETS = True
    html = html_of(admin_client.get("/p/default/search/?q=zanzibar"))
    assert tail not in html and 'data-message="' in html


def test_a_secret_deep_in_a_huge_tool_output_is_masked_in_its_snippet(admin_client, hermes_home, settings):
    key = "sk-ant-api03-" + "Hh4Jj5Kk" * 5
    log = "line of build log\n" * 120_000 + f"export KEY={key} # zanzibar\n" + "tail\n" * 1000
    add_message(hermes_home, log, role="tool")
    settings.HERMES_ADMIN_MASK_SECRETS = True
    html = html_of(admin_client.get("/p/default/search/?q=zanzibar"))
    assert "Hh4Jj5Kk" not in html and 'data-message="' in html


def test_expression_and_snippet_helpers():
    assert fts_expression('deploy "a phrase" pre*') == '"deploy" "a phrase" "pre"*'
    assert fts_expression('say "hi') == '"say" "hi"'
    assert fts_expression('x"y') == '"x""y"'
    with pytest.raises(ValueError):
        fts_expression('*** "" -- ')
    assert split_snippet("a \x02b\x03 c") == [("a ", False), ("b", True), (" c", False)]
    assert split_snippet("\x00json:[\x02x\x03]") == [("[", False), ("x", True), ("]", False)]


def test_search_page_is_linked_from_the_profile_page_and_a_one_profile_list(admin_client, hermes_home):
    profile = admin_client.get("/p/ops/").content.decode()
    assert 'action="/p/ops/search/"' in profile
    listing = admin_client.get("/sessions/?profile=ops").content.decode()
    assert 'href="/p/ops/search/"' in listing
    # Across profiles the list links no profile's search (the header links the search across profiles).
    assert not re.search(r'href="/p/[^"]+/search/"', admin_client.get("/sessions/").content.decode())


def test_a_snippet_starting_with_a_word_seen_earlier_is_still_masked_in_place(settings):
    """The snippet begins with a matched word that also occurs early in the message,
    and ends inside a secret (so the snippet alone matches no secret pattern)."""
    from sessions_app.stores.search import Hit, Results
    from sessions_app.presenters.search import HIDDEN_SNIPPET, mask_hits

    secret = "sk-ant-api03-" + "AbCdEfGh" * 6
    full = "build " + "log line\n" * 5000 + f"build {secret} done"
    cut = secret[:26]
    hit = Hit(id=7, session_id="s", role="tool", timestamp=1.0, state="active",
              parts=[("build", True), (f" {cut}…", False)])
    mask_hits(Results(query="build", hits=[hit]), {7: full})
    assert hit.parts == [(HIDDEN_SNIPPET, False)]


def test_a_sessions_title_is_masked_once_for_all_of_its_hits(monkeypatch):
    from sessions_app.stores.search import Hit, Results
    from sessions_app.presenters import search as presenter

    key = "sk-ant-api03-" + "Tt7Gg8Hh" * 5
    session = {"id": "s", "title": f"deploy with {key}"}
    hits = [Hit(id=i, session_id="s", role="user", timestamp=1.0, state="active", parts=[("deploy", True)],
                session=session) for i in (1, 2, 3)]
    titles = []
    real = presenter.mask_remembered
    monkeypatch.setattr(presenter, "mask_remembered", lambda text: (titles.append(text) if text == session["title"] else None)
                        or real(text))
    presenter.mask_hits(Results(query="deploy", hits=hits), {i: "deploy" for i in (1, 2, 3)})
    assert len(titles) == 1 and key not in session["title"] and "secret masked" in session["title"]
    assert all(h.session["title"] == session["title"] for h in hits)


def test_hit_count_follows_writes_to_the_store(admin_client, hermes_home):
    """The count is cached under the store's file signature: viewing again gives the
    same count, a message written since is counted."""
    def total():
        found = re.search(r'data-total="(\d+)"', html_of(admin_client.get("/p/default/search/?q=quokkaword")))
        return int(found.group(1)) if found else 0

    add_message(hermes_home, "a quokkaword here")
    assert total() == 1 and total() == 1
    add_message(hermes_home, "another quokkaword")
    assert total() == 2


def test_a_message_rewound_by_undo_is_still_a_hit_marked_rewound(admin_client, hermes_home):
    """Only originals a recovery wrote again (a visible byte-identical twin after them)
    are left out of search (tests/actions/test_recover_messages.py); a turn 0.19's
    own /undo rewound has no twin and stays findable, marked."""
    db = f"file:{hermes_home}/profiles/edge/state.db?mode=ro"
    with sqlite3.connect(db, uri=True) as conn:
        [(rewound,)] = conn.execute("SELECT id FROM messages WHERE session_id = ? AND active = 0 AND compacted = 0 "
                                    "AND content LIKE '%PostgreSQL, but angry%'", (ids("edge")["undo"],)).fetchall()
    html = html_of(admin_client.get('/p/edge/search/?q="PostgreSQL, but angry"'))
    assert str(rewound) in hits(html) and f"#{rewound} · user" in html and " · rewound</span>" in html
    assert "hidden original" not in html
