"""A store known damaged (the demo home's ``laptop``: a page of its messages index is
garbage) offers no write: its session pages offer no rename or flag, its health page
no heal or migration, and every page gives the same salvage advice (that of the
``store_corrupt`` check). Its 503 page does not log an ERROR per view (ground rule 9).
A write asked for anyway (a POST, a command, a background job) is refused by the
guarded write itself, audited as ``refused`` with the same advice, and nothing is
written; once the store's files change (salvaged, replaced) the old finding no
longer refuses."""

import json
import logging
import os
import re

import pytest
from django.contrib.auth.models import User

from sessions_app.checks.registry import BY_CODE as CHECKS
from sessions_app.context_processors import DEMO_MARKER
from sessions_app.models import AuditEvent
from sessions_app.stores import registry
from tests.actions.conftest import heal, run_command
from tests.conftest import copy_home_of

from .test_health_pages import wait_for

# Background jobs (bulk flags, heal runs) write from their own thread.
pytestmark = pytest.mark.django_db(transaction=True)

ADVICE = CHECKS["store_corrupt"].next_step


@pytest.fixture
def laptop(demo_home, use_roots, tmp_path, settings, client):
    """A private copy of the demo home, checked once; an admin logged in. Returns the
    ``laptop`` profile's session ids by kind."""
    home = copy_home_of(demo_home, tmp_path / "demo-home")
    settings.HERMES_ADMIN_JOB_RUNNER = "thread"  # background jobs in this process, on this database
    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir()
    use_roots(home)
    heal("--all-profiles", "--json")
    client.force_login(User.objects.create_superuser("root", password="x"))
    return json.loads((home / DEMO_MARKER).read_text())["profiles"]["laptop"]["session_ids"]


def text(response) -> str:
    return response.content.decode().replace("&#x27;", "'").replace("&lt;", "<").replace("&gt;", ">")


def test_session_pages_of_a_damaged_store_offer_no_rename_or_flag(client, laptop):
    for sid in (laptop["cli_main"], laptop["slack_ended"]):
        page = client.get(f"/p/laptop/s/{sid}/")
        assert page.status_code == 200
        body = text(page)
        assert 'class="rename-form"' not in body and 'class="inline flag-form"' not in body
        assert f"/p/laptop/s/{sid}/rename/" not in body
        assert 'id="no-writes"' in body and "this store is damaged" in body and ADVICE in body


def test_health_page_of_a_damaged_store_offers_no_heal_or_migration(client, laptop):
    body = text(client.get("/p/laptop/health/"))
    assert "Heal profile…" not in body and "Migration…" not in body
    assert "/p/laptop/heal/" not in body and "/p/laptop/migrate/" not in body
    assert 'id="no-writes"' in body and ADVICE in body
    assert "Check now" in body  # reading it again is still offered
    assert "/repair/?check=" not in body and "/repair-all/" not in body  # no repair of any finding
    # A healthy store keeps its controls.
    assert "Heal profile…" in text(client.get("/p/default/health/"))


def test_profile_page_gives_the_same_advice_and_logs_no_error_per_view(client, laptop, caplog):
    with caplog.at_level(logging.INFO):
        pages = [client.get("/p/laptop/") for _ in range(3)]
    assert [p.status_code for p in pages] == [503, 503, 503]
    body = text(pages[0])
    assert ADVICE in body and "--inspect-only" not in body
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]


def files_of(profile: str) -> dict:
    """``os.stat`` of the store and its -wal: (size, mtime_ns) per existing file."""
    path = registry.get(profile).path
    out = {}
    # -shm left out: every reader updates it (SQLite's shared index), writing nothing.
    for name in (path, path.with_name(path.name + "-wal")):
        if name.exists():
            st = os.stat(name)
            out[name.name] = (st.st_size, st.st_mtime_ns)
    return out


def refusals(**filters):
    return list(AuditEvent.objects.filter(profile="laptop", outcome="refused", **filters))


def assert_refused_as_damaged(events):
    assert events, "no refusal recorded"
    for event in events:
        assert "this store is damaged" in event.reason and ADVICE in event.reason, event.reason
        assert event.rows_changed == 0 and event.changes == []
    assert not AuditEvent.objects.filter(profile="laptop").exclude(outcome="refused").exists()


def test_a_write_posted_anyway_is_refused_and_audited(client, laptop):
    sid = laptop["cli_main"]
    before = files_of("laptop")
    renamed = client.post(f"/p/laptop/s/{sid}/rename/", {"title": "new", "expected_digest": "none"}, follow=True)
    archived = client.post(f"/p/laptop/s/{sid}/flags/", {"action": "archive"}, follow=True)
    for response in (renamed, archived):
        said = [str(m) for m in response.context["messages"]]
        assert any("not changed (refused): this store is damaged" in m and ADVICE in m for m in said), said
    assert_refused_as_damaged(refusals())
    assert len(refusals()) == 2
    assert files_of("laptop") == before


def test_bulk_flags_on_a_damaged_store_are_refused_each(client, laptop):
    before = files_of("laptop")
    chosen = [f"laptop {laptop['cli_main']}", f"laptop {laptop['slack_ended']}"]
    response = client.post("/sessions/flags/", {"action": "pin", "s": chosen})
    assert response.status_code == 302
    run = wait_for(int(re.search(r"/runs/(\d+)/", response["Location"]).group(1)))
    assert run.status == "done", run.error
    events = refusals(run=run)
    assert len(events) == 2
    assert_refused_as_damaged(events)
    assert files_of("laptop") == before


def test_the_flag_command_on_a_damaged_store_is_refused(laptop):
    before = files_of("laptop")
    code, report = run_command("flag_sessions", "--profile", "laptop", "--archive", laptop["cli_main"], "--json")
    assert code != 0
    assert "this store is damaged" in json.dumps(report)
    assert_refused_as_damaged(refusals())
    assert files_of("laptop") == before


def test_heal_apply_on_a_damaged_store_writes_nothing(client, laptop):
    """A heal pass finds the store corrupt again and plans no repair for it; nothing is
    written whether from the command or the health page's POST."""
    before = files_of("laptop")
    code, report = heal("--profile", "laptop", "--apply", "--json")
    [entry] = report["profiles"]
    assert entry["status"] == "corrupt" and entry["actions"] == []
    response = client.post("/p/laptop/heal/")
    assert response.status_code == 302
    run = wait_for(int(re.search(r"/runs/(\d+)/", response["Location"]).group(1)))
    assert run.status == "done", run.error
    assert files_of("laptop") == before
    assert not AuditEvent.objects.filter(profile="laptop").exclude(outcome="refused").exists()


def test_a_store_changed_since_its_check_is_no_longer_refused_as_damaged(client, laptop):
    """Salvaged or replaced after the pass that found the damage, its files are newer
    than that pass: the old finding no longer refuses (the next pass judges the file)."""
    sid = laptop["cli_main"]
    os.utime(registry.get("laptop").path)  # what installing a salvaged copy does to the stat
    response = client.post(f"/p/laptop/s/{sid}/flags/", {"action": "archive"}, follow=True)
    said = [str(m) for m in response.context["messages"]]
    assert not any("this store is damaged" in m for m in said), said
    [event] = AuditEvent.objects.filter(profile="laptop", action="set_session_flag")
    assert "this store is damaged" not in event.reason


def test_health_page_gives_the_salvage_advice_once_and_sqlites_text_folded(client, laptop):
    body = text(client.get("/p/laptop/health/")).split('<details class="catalog">')[0]  # the catalog aside
    assert body.count(ADVICE) == 1 and body.count("hermes sessions recover") == 1  # the banner's
    assert 'see <a href="#no-writes">the notice above</a>' in body
    # The finding says it readably; SQLite's own lines stay, folded away.
    assert "found 1 problem in idx_messages_session" in body
    detail, raw = body.split("SQLite's own report</summary>", 1)
    assert "*** in database main ***" not in detail and "*** in database main ***" in raw.split("</details>")[0]


def test_the_damaged_profile_page_links_its_health_page(client, laptop):
    page = client.get("/p/laptop/")
    assert page.status_code == 503 and 'href="/p/laptop/health/"' in page.content.decode()
    # Its sessions are not listed, but what still reads can be found and saved.
    body = text(page)
    assert 'id="still-readable"' in body and 'href="/p/laptop/search/"' in body
    found = text(client.get("/p/laptop/search/", {"q": "build"}))
    assert f'href="/p/laptop/s/{laptop["cli_main"]}/' in found


def test_a_damaged_stores_session_page_gives_its_advice_once(client, laptop):
    body = text(client.get(f"/p/laptop/s/{laptop['cli_main']}/"))
    assert body.count(ADVICE) == 1 and 'see <a href="#no-writes">the notice below</a>' in body
    notice = body[body.index('id="no-writes"'):]
    notice = notice[:notice.index("</p>")]
    assert "Store is structurally damaged" not in notice and "writes nothing to it" in notice


def test_overview_and_usage_say_which_figures_come_from_the_damaged_store(client, laptop):
    overview = text(client.get("/"))
    row = overview.split('<tr data-profile="laptop">')[1].split("</tr>")[0]
    assert "(damaged store, not listed)" in row and "/sessions/?profile=laptop" not in row  # no link to an empty list
    assert "/sessions/?profile=default" in overview  # a readable store keeps its link
    listed = text(client.get("/sessions/", {"profile": "laptop"}))
    assert "was skipped: <bdi>corrupt</bdi>" in listed and "No sessions match" not in listed
    usage = text(client.get("/usage/", {"days": "365"}))
    [notice] = re.findall(r"<p class=\"notice critical\" data-damaged>(.*?)</p>", usage, re.S)
    assert "laptop" in notice and "default" not in notice
    assert usage.count("damaged store</span>") == 1  # its row, grouped by profile


def test_search_everywhere_says_a_damaged_store_was_searched_but_is_damaged(client, laptop):
    """The index of a damaged store can still answer: its row says the store is
    damaged (linking its health), not "ok"; an intact store's row says "ok"."""
    html = text(client.get("/search/", {"q": "the"}))
    row = re.search(r'<tr data-profile="laptop">.*?</tr>', html, re.S).group(0)
    assert "searched, but the store is damaged" in row and "/p/laptop/health/" in row
    other = re.search(r'<tr data-profile="ops">.*?</tr>', html, re.S).group(0)
    assert "damaged" not in other


def test_migration_and_prune_pages_of_a_damaged_store_offer_nothing(client, laptop):
    for url, what in (("/p/laptop/migrate/", "No import or move here"), ("/p/laptop/prune/", "No prune here")):
        body = text(client.get(url))
        assert 'id="no-writes"' in body and what in body and ADVICE in body, url
    migrate = text(client.get("/p/laptop/migrate/"))
    assert "--apply" not in migrate and "Apply " not in migrate
    prune = text(client.get("/p/laptop/prune/", {"older_than": "1"}))
    assert "prune-form" not in prune and "Show what would go" not in prune and "prune-confirm" not in prune
    assert "prune-form" in text(client.get("/p/default/prune/"))  # a readable store keeps its form
