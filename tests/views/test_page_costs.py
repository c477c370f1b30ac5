"""What the pages no longer redo on every view (issue 16), and that what they show still
follows the stores: stored reports decoded once per run, other profiles' copies from
the stored pass, probe counts and gateway routes read again only after a write."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from sessions_app.models import HealRun
from sessions_app.stores import connection as store_connection
from sessions_app.stores import registry
from sessions_app.stores.store import Store
from tests.checks.helpers import damage, files_aged
from tests.conftest import IDS
from tests.views.markup import without_bidi_markup

pytestmark = pytest.mark.django_db
SID = IDS["cli_main"]


def stored_pass(findings, status="ok", error=None):
    return HealRun.objects.create(
        mode="check", trigger="command", actor_label="cron", status="done", finished_at=timezone.now(),
        report={"profiles": [{"profile": "default", "status": status, "error": error, "findings": findings}]})


def collision(sid, *others):
    return {"check": "id_collision", "severity": "warning", "session_id": sid, "count": len(others),
            "detail": f"the same session id also exists in profile {', '.join(others)}", "heal": None}


@pytest.fixture
def statements(monkeypatch):
    """SQL run on the stores' plain connections during the test."""
    seen = []
    real = store_connection.ReadConnection.execute

    def execute(self, sql, parameters=()):
        seen.append((str(self.db_path), sql))
        return real(self, sql, parameters)

    monkeypatch.setattr(store_connection.ReadConnection, "execute", execute)
    return seen


def test_other_copies_come_from_the_stored_pass_without_opening_other_stores(admin_client, hermes_home,
                                                                           statements, monkeypatch):
    stored_pass([collision(SID, "ops", "research")])
    monkeypatch.setattr(registry, "other_copies", lambda *a: pytest.fail("opened the other stores"))
    html = without_bidi_markup(admin_client.get(f"/p/default/s/{SID}/").content.decode())
    assert "The same id is also in ops, research" in html and f"/p/default/s/{SID}/collision/" in html
    default = str(registry.get("default").path)
    assert {path for path, _ in statements} == {default}  # only the page's own store was read


def test_a_pass_that_could_not_compare_leaves_it_to_a_live_lookup(admin_client, hermes_home):
    with damage(registry.get("ops")) as db:
        db.execute("INSERT INTO sessions (id, source, started_at, title) VALUES (?, 'cli', 1.7e9, 'Copy')", (SID,))
    stored_pass([], error="check(s) could not run: id_collision could not run: disk I/O error")
    html = without_bidi_markup(admin_client.get(f"/p/default/s/{SID}/").content.decode())
    assert "The same id is also in ops" in html


def test_a_finished_runs_report_is_decoded_once(admin_client, hermes_home):
    run = stored_pass([collision(SID, "ops")])
    admin_client.get("/p/default/health/")
    with CaptureQueriesContext(connection) as queries:
        html = admin_client.get("/p/default/health/").content.decode()
        admin_client.get(f"/p/default/s/{SID}/")
    assert "id_collision" in html
    # No query reads the report column again (a filter on it is no read of the document).
    assert not any('"report"' in q["sql"].split(" FROM ")[0] and q["sql"].startswith("SELECT")
                   and '"log_tail"' not in q["sql"] for q in queries.captured_queries), \
        [q["sql"] for q in queries.captured_queries]
    # A run written again under the same id (a test database reusing it) is read again.
    HealRun.objects.filter(pk=run.pk).update(finished_at=timezone.now(), report={"profiles": [
        {"profile": "default", "status": "ok", "findings": []}]})
    assert "id_collision" not in admin_client.get("/p/default/health/").content.decode().split("catalog")[0]


def test_overview_counts_are_read_again_only_after_a_write(admin_client, hermes_home, monkeypatch):
    calls = []
    real = Store._counts
    monkeypatch.setattr(Store, "_counts", lambda self, *a: (calls.append(self.key), real(self, *a))[1])

    def messages_shown():
        html = admin_client.get("/").content.decode()
        row = html.split('<tr data-profile="default">', 1)[1].split("</tr>", 1)[0]
        return row

    messages_shown()  # the first read of a WAL store creates its empty -wal (a new file state)
    files_aged(registry.get("default"))
    first = messages_shown()
    assert "default" in calls
    calls.clear()
    assert messages_shown() == first and "default" not in calls
    with damage(registry.get("default")) as db:
        db.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', 'more', 1.8e9)",
                   (SID,))
    after = messages_shown()
    assert after != first and "default" in calls
    # Written within the last second: a write in the same tick could leave the file
    # state as it is, so nothing read now is kept (memo.settled) and the next view reads again.
    calls.clear()
    messages = '<td data-label="Messages"'
    assert messages_shown().split(messages)[1] == after.split(messages)[1] and "default" in calls


def test_gateway_routes_are_read_once_per_store_state(admin_client, hermes_home, statements):
    def routing_reads():
        return sum(1 for _, sql in statements if "FROM gateway_routing" in sql)

    gateway = IDS["telegram_open"]
    admin_client.get(f"/p/default/s/{gateway}/")  # creates the empty -wal: a new file state
    files_aged(registry.get("default"))
    before = routing_reads()
    admin_client.get(f"/p/default/s/{gateway}/")
    first = routing_reads()
    assert first == before + 1  # one read for the liveness box and the session's checks together
    admin_client.get(f"/p/default/s/{gateway}/")
    assert routing_reads() == first
    with damage(registry.get("default")) as db:
        db.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', 'more', 1.8e9)",
                   (SID,))
    admin_client.get(f"/p/default/s/{gateway}/")
    assert routing_reads() == first + 1
    admin_client.get(f"/p/default/s/{gateway}/")  # written within the last second: not kept
    assert routing_reads() == first + 2


def test_routes_added_by_a_write_show_on_the_session_page(admin_client, hermes_home):
    admin_client.get(f"/p/default/s/{SID}/")
    with damage(registry.get("default")) as db:
        db.execute("INSERT INTO gateway_routing (scope, session_key, entry_json, updated_at) VALUES ('', ?, ?, 1.8e9)",
                   ("agent:main:telegram:dm:42", '{"session_id": "%s"}' % SID))
    html = without_bidi_markup(admin_client.get(f"/p/default/s/{SID}/").content.decode())
    assert "routed by gateway key agent:main:telegram:dm:42" in html


@pytest.fixture
def opened(monkeypatch):
    """Paths of the store connections opened during the test."""
    import sqlite3

    seen = []
    real = sqlite3.connect

    def connect(database, *args, **kwargs):
        seen.append(str(database))
        return real(database, *args, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", connect)
    return seen


def test_a_store_page_opens_its_store_once_while_its_files_are_unchanged(admin_client, hermes_home, opened):
    """Readiness found in the same file state is not looked at again (the flags box
    reads on the page's own connection too); a store emptied, replaced or made
    unreadable since gets its error page, not a traceback."""
    stored_pass([])
    for _ in range(2):  # the first read-only open of a WAL store creates its -wal: a new file state
        assert admin_client.get("/p/default/search/?q=alert").status_code == 200
    opened.clear()
    assert admin_client.get("/p/default/search/?q=alert").status_code == 200
    assert len(opened) == 1, opened
    store = registry.get("default")
    store.path.write_bytes(b"")  # emptied (as a failed copy leaves it)
    response = admin_client.get(f"/p/default/s/{SID}/")
    assert response.status_code == 503 and "state.db is empty" in response.content.decode()


def test_the_flags_box_reads_titles_strictly_on_the_pages_connection(admin_client, hermes_home):
    """The session page reads leniently (invalid UTF-8 shown as U+FFFD); its flags
    box, which can write the title back, still refuses a title that is not UTF-8."""
    with damage(registry.get("default")) as db:
        db.execute("UPDATE sessions SET title = CAST(X'41FF42' AS TEXT) WHERE id = ?", (SID,))
    html = without_bidi_markup(admin_client.get(f"/p/default/s/{SID}/").content.decode())
    assert "A\ufffdB" in html and "flags could not be read" in html


def test_health_details_are_masked_on_every_view_when_masking_is_on(admin_client, hermes_home, settings):
    """The health page masks the stored pass's details through ``mask_remembered``:
    masked on the first view and on the next (from memory), plain with masking off."""
    key = "sk-ant-api03-" + "Pp5Oo6Ii" * 5
    stored_pass([{"check": "counter_drift", "severity": "warning", "session_id": SID, "count": 1,
                  "detail": f"the message quotes {key} here", "heal": None}])
    assert key in admin_client.get("/p/default/health/").content.decode()
    settings.HERMES_ADMIN_MASK_SECRETS = True
    for _ in range(2):
        html = admin_client.get("/p/default/health/").content.decode()
        assert key not in html and "the message quotes [secret masked: Anthropic key] here" in html


def test_session_page_texts_are_masked_on_every_view_when_masking_is_on(admin_client, hermes_home, settings):
    """The session page masks its texts through ``mask_remembered`` (messages,
    tool arguments, reasoning, title): masked on the first view and on the next (from memory),
    plain with masking off, and a text changed in the store is masked anew."""
    key = "sk-ant-api03-" + "Qq7Ww8Ee" * 5
    with damage(registry.get("default")) as db:
        msg = db.execute("SELECT MIN(id) FROM messages WHERE session_id = ?", (SID,)).fetchone()[0]
        db.execute("UPDATE messages SET content = ?, reasoning = ? WHERE id = ?",
                   (f"the user pasted {key} here", f"thinking of {key}", msg))
    assert key in admin_client.get(f"/p/default/s/{SID}/").content.decode()
    settings.HERMES_ADMIN_MASK_SECRETS = True
    for _ in range(2):
        html = admin_client.get(f"/p/default/s/{SID}/").content.decode()
        assert key not in html and "the user pasted [secret masked: Anthropic key] here" in html
        assert "thinking of [secret masked: Anthropic key]" in html
    other = "sk-ant-api03-" + "Zz9Xx8Cc" * 5
    with damage(registry.get("default")) as db:
        db.execute("UPDATE messages SET content = ? WHERE id = ?", (f"now {other} instead", msg))
    html = admin_client.get(f"/p/default/s/{SID}/").content.decode()
    assert other not in html and "now [secret masked: Anthropic key] instead" in html
