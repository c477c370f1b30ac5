"""Findings a person can act on (issue 15): check titles beside their codes, a next
step for every finding without a repair, repairs offered in their order, how old a
stored check is against its store, and repairing every finding of one kind."""

import datetime
import os
import re
import time

import pytest

from django.contrib.auth.models import Group, User
from django.test import Client

from sessions_app.checks import registry as checks
from sessions_app.checks import run_store_checks
from sessions_app.models import HealRun
from sessions_app.stores import registry
from tests.checks.helpers import damage
from tests.conftest import IDS
from tests.views.markup import without_bidi_markup

from tests.actions.conftest import heal as heal_command

from .test_health_pages import home, wait_for  # noqa: F401  (fixture and helper)
from .test_roles import ensure_roles

pytestmark = pytest.mark.django_db(transaction=True)
DAY = 86_400


def text(response):
    assert response.status_code == 200, response.status_code
    return without_bidi_markup(response.content.decode())


def check_pass(client, profile="default") -> HealRun:
    """A whole check pass of ``profile`` through the browser's own button."""
    response = client.post("/checks/run/", {"profile": profile})
    run = wait_for(int(re.search(r"/runs/(\d+)/", response["Location"]).group(1)))
    assert run.status == "done", run.error
    return run


def unanswered(store, sid=None):
    """A last user message with no reply (no copy on disk holds one): no repair."""
    with damage(store) as db:
        db.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', 'still there?', ?)",
                   (sid or IDS["long"], time.time() - 40 * DAY))


def test_every_check_has_a_title_and_a_next_step():
    for entry in checks.catalog():
        assert 3 <= len(entry["title"]) <= 60, entry["code"]
        assert entry["next_step"].endswith((".", ")")) and len(entry["next_step"]) > 40, entry["code"]
    # The health filter's options: titles, with the code still there and still the value.
    labels = dict(checks.choices())
    assert set(labels) == set(checks.codes())
    assert labels["duplicate_live_rows"] == "Message written twice (duplicate_live_rows)"


def test_the_health_filter_lists_titles_and_still_filters_by_code(admin_client, home):
    page = text(admin_client.get("/sessions/"))
    assert '<option value="duplicate_live_rows">Message written twice (duplicate_live_rows)</option>' in page
    assert '<option value="counter_drift">counter_drift</option>' not in page
    assert text(admin_client.get("/sessions/?check=duplicate_live_rows")).count("<option") > 0


def test_a_finding_without_repair_says_what_to_do_next(admin_client, home):
    unanswered(registry.get("default"))
    step = checks.get("unanswered_turn").next_step
    session = text(admin_client.get(f"/p/default/s/{IDS['long']}/"))
    assert "A turn got no reply <code>unanswered_turn</code>" in session
    assert f'<div class="next-step small" data-check="unanswered_turn"><strong>Next step:</strong> {step}</div>' in session
    check_pass(admin_client)
    health = text(admin_client.get("/p/default/health/"))
    assert "A turn got no reply <code>unanswered_turn</code>" in health
    assert f"<strong>Next step:</strong> {step}</p>" in health
    # A check whose findings all carry a repair shows no next step.
    assert 'class="next-step" data-check="counter_drift"' not in health


def duplicate_without_count(store, sid):
    with store.read() as conn:
        [(content, ts)] = conn.execute("SELECT content, timestamp FROM messages WHERE session_id = ? AND role = 'user' "
                                       "ORDER BY id LIMIT 1", (sid,)).fetchall()
    with damage(store) as db:
        db.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
                   (sid, content, ts))


def test_the_hide_is_offered_before_the_recount_it_makes_unneeded(admin_client, home):
    sid = IDS["long"]
    duplicate_without_count(registry.get("default"), sid)
    check_pass(admin_client)
    health = text(admin_client.get("/p/default/health/"))
    assert health.index('id="check-duplicate_live_rows"') < health.index('id="check-counter_drift"')
    drift = health[health.index('id="check-counter_drift"'):]
    row = drift[drift.index(f'>{sid}</code>'):]
    row = row[:row.index("</tr>")]
    assert f'href="/p/default/s/{sid}/repair/?check=duplicate_live_rows" class="first">Preview first: Hide the duplicate messages' in row
    assert "Preview: Recount the session</a>" not in row

    session = text(admin_client.get(f"/p/default/s/{sid}/"))
    box = session[session.index('id="findings"'):]
    assert box.index("duplicate_live_rows") < box.index("counter_drift")
    assert "Preview first: Hide the duplicate messages</a>" in box and "Preview: Recount the session" not in box

    preview = text(admin_client.get(f"/p/default/s/{sid}/repair/?check=counter_drift"))
    assert 'class="notice repair-first">Repair first: ' in preview
    assert "Message written twice (hide_duplicates)</a>" in preview
    assert 'class="notice repair-first"' not in text(admin_client.get(f"/p/default/s/{sid}/repair/?check=duplicate_live_rows"))

    # The heal pass lists them in the order it applies them, the recount waiting for the hide.
    confirm = text(admin_client.get("/p/default/heal/"))
    hide = confirm.index(f"<code>hide_duplicates</code> on <a href=\"/p/default/s/{sid}/\">")
    recount = confirm.index(f"<code>recount_session</code> on <a href=\"/p/default/s/{sid}/\">")
    assert hide < recount and "after hide_duplicates on this session" in confirm[recount:recount + 400]


def test_a_check_older_than_its_store_says_so_and_offers_a_re_check(admin_client, home):
    run = check_pass(admin_client, "ops")
    overview = text(admin_client.get("/"))
    assert 'data-stale="ops"' not in overview  # nothing written since the pass
    assert 'data-stale="ops"' not in text(admin_client.get("/p/ops/health/"))

    # The pass ran 20 minutes ago; an agent wrote 12 minutes after it read the store
    # (a real write, dated by its files' times: the dashboard only stats them).
    shift = datetime.timedelta(minutes=20)
    HealRun.objects.filter(pk=run.pk).update(created_at=run.created_at - shift, started_at=run.started_at - shift,
                                             finished_at=run.finished_at - shift)
    s = registry.get("ops")
    with damage(s) as db:
        db.execute("UPDATE sessions SET title = 'renamed meanwhile' WHERE id = (SELECT MIN(id) FROM sessions)")
    written = (run.started_at - shift).timestamp() + 12 * 60 + 5
    for path in (s.path, s.path.with_name("state.db-wal")):
        if path.exists():
            os.utime(path, (written, written))
    overview = text(admin_client.get("/"))
    cell = overview[overview.index('data-stale="ops"'):]
    assert "store changed 12 min 5 s after this check" in cell[:cell.index("</div>")]
    assert 'action="/checks/run/"' in cell[:cell.index("</div>")] and "Re-check</button>" in cell
    health = text(admin_client.get("/p/ops/health/"))
    assert "The store changed 12 min 5 s after this check" in health and "Re-check now</button>" in health
    assert 'data-stale="default"' not in overview

    # The re-check is a new pass; once it read the store, the warning is gone.
    check_pass(admin_client, "ops")
    assert 'data-stale="ops"' not in text(admin_client.get("/p/ops/health/"))


def test_an_auditor_sees_the_staleness_without_a_re_check_button(home):
    # A cron pass (heal_sessions), then the store is written an hour later.
    code, _ = heal_command("--profile", "ops", "--json")
    s = registry.get("ops")
    later = time.time() + 3600
    os.utime(s.path, (later, later))
    ensure_roles()
    user = User.objects.create_user("audra", password="pw-audra-long-enough")
    user.groups.add(Group.objects.get(name="Auditor"))
    client = Client()
    client.force_login(user)
    health = text(client.get("/p/ops/health/"))
    assert 'data-stale="ops"' in health and "The store changed 1 h" in health and "Re-check now" not in health
    overview = text(client.get("/"))
    assert 'data-stale="ops"' in overview and "Re-check</button>" not in overview


def run_of(response) -> HealRun:
    assert response.status_code == 302, response.status_code
    run = wait_for(int(re.search(r"/runs/(\d+)/", response["Location"]).group(1)))
    assert run.status == "done", run.error
    return run


def test_repair_all_findings_of_one_kind(admin_client, home):
    s = registry.get("default")
    dupes = [IDS["long"], IDS["cli_main"]]
    for sid in dupes:
        duplicate_without_count(s, sid)
    drifted = IDS["branch_parent"]  # a counter wrong for no other reason
    with damage(s) as db:
        db.execute("UPDATE sessions SET message_count = message_count + 3 WHERE id = ?", (drifted,))
    check_pass(admin_client)
    health = text(admin_client.get("/p/default/health/"))
    assert 'href="/p/default/repair-all/duplicate_live_rows/">Repair all findings of this kind (2)…</a>' in health

    # The recounts of the sessions with a duplicate wait for the hide; the other one is offered.
    recounts = text(admin_client.get("/p/default/repair-all/counter_drift/"))
    for sid in dupes:
        row = recounts[recounts.index(f'<tr data-session="{sid}" class="held">'):]
        assert "left out: <code>hide_duplicates</code> first" in row[:row.index("\n    </tr>")]
    assert f'<tr data-session="{drifted}">' in recounts
    # Its plan is the heal page's change table: the field's label, before and after.
    row = recounts[recounts.index(f'<tr data-session="{drifted}">'):]
    row = row[:row.index("\n    </tr>")]  # the plan row, its change table included
    assert 'class="grid small stack plan changes"' in row and "Set message_count" not in row
    assert 'title="message_count"' in row

    preview = text(admin_client.get("/p/default/repair-all/duplicate_live_rows/"))
    assert "Apply 2 repairs</button>" in preview
    token = re.search(r'name="plans" value="([^"]+)"', preview).group(1)
    run = run_of(admin_client.post("/p/default/repair-all/duplicate_live_rows/apply/", {"plans": token}))
    actions = run.report["profiles"][0]["actions"]
    assert sorted(a["session_id"] for a in actions) == sorted(dupes)
    assert {a["status"] for a in actions} == {"applied"}
    page = text(admin_client.get(f"/runs/{run.pk}/"))  # two repairs: their words say so
    assert "re-checked only the repaired findings on their sessions;" in page
    assert "Checked again after the repairs: the findings are gone from their sessions." in page
    assert "the finding is gone from the session" not in page and "on its session" not in page
    # The fresh pass after it (the plan job's own): no duplicate left, and the hides
    # recounted their sessions; only the unrelated drift remains.
    health = text(admin_client.get("/p/default/health/"))
    assert 'id="check-duplicate_live_rows"' not in health
    with s.read() as conn:
        for sid in dupes:
            [(count, active)] = conn.execute(
                "SELECT message_count, (SELECT COUNT(*) FROM messages WHERE session_id = s.id AND active = 1) "
                "FROM sessions s WHERE id = ?", (sid,)).fetchall()
            assert count == active
    left = {f.session_id for f in run_store_checks(s, only=["counter_drift"]).findings if f.severity == "warning"}
    assert left == {drifted}

    # A token is bound to its profile and check.
    assert admin_client.post("/p/default/repair-all/counter_drift/apply/", {"plans": token}).status_code == 400
    assert admin_client.post("/p/ops/repair-all/duplicate_live_rows/apply/", {"plans": token}).status_code == 400
    assert admin_client.post("/p/default/repair-all/duplicate_live_rows/apply/", {"plans": "forged"}).status_code == 400
    assert admin_client.get("/p/default/repair-all/no_such_check/").status_code == 404


def test_a_case_with_its_own_next_step_says_it_in_its_row(admin_client, home):
    """history_lost of a session whose row is gone (its snapshot remains): the row
    says why nothing is recovered; the check's general sentence, about losses no copy
    holds, is not shown for it."""
    from tests.checks.test_history_lost import SID, deleted_with_its_snapshot

    deleted_with_its_snapshot(registry.get("default"))
    check_pass(admin_client)
    health = text(admin_client.get("/p/default/health/"))
    group = health[health.index('id="check-history_lost"'):]
    group = group[:group.index("</section>")]
    row = group[group.index(f">{SID}</code>"):]
    row = row[:row.index("</tr>")]
    check = checks.get("history_lost")
    from django.utils.html import escape
    assert escape(check.next_step_for("session_gone")) in row and "no automatic repair." in row
    assert 'class="next-step" data-check="history_lost"' not in group and check.next_step not in group
    # The row's link: the session is not in the store (HTTP 404), and that page says
    # what the check found, with the same next step, and loads its copies on disk.
    assert f'<a href="/p/default/s/{SID}/"><code>{SID}</code></a>' in group  # bidi markup stripped
    gone = admin_client.get(f"/p/default/s/{SID}/")
    assert gone.status_code == 404
    page = without_bidi_markup(gone.content.decode())
    assert "What the latest check found of this id" in page and "Part of the conversation is missing" in page
    assert escape(check.next_step_for("session_gone")) in page
    assert f'hx-get="/p/default/s/{SID}/copies/"' in page
    assert f"session_{SID}.json" in text(admin_client.get(f"/p/default/s/{SID}/copies/"))
    every = text(admin_client.get("/p/default/repair-all/history_lost/"))
    assert f"1 finding of this kind has no automatic repair. {escape(check.next_step_for('session_gone'))}" in every
    assert check.next_step not in every


def test_one_repairable_finding_is_repaired_from_its_row_not_a_repair_all(admin_client, home):
    duplicate_without_count(registry.get("default"), IDS["long"])
    check_pass(admin_client)
    health = text(admin_client.get("/p/default/health/"))
    group = health[health.index('id="check-duplicate_live_rows"'):]
    group = group[:group.index("</section>")]
    assert "Repair all findings of this kind" not in group
    assert f'href="/p/default/s/{IDS["long"]}/repair/?check=duplicate_live_rows">Preview: Hide the duplicate messages' in group


def test_a_session_removed_after_the_pass_offers_no_repair_from_its_page(admin_client, home):
    """The pass found a drift; then the session's rows went (by hand, after the pass):
    its page says what that pass found and when, that the store changed since, and
    links no repair of a session that is not there."""
    s = registry.get("default")
    sid = IDS["branch_parent"]
    with damage(s) as db:
        db.execute("UPDATE sessions SET message_count = message_count + 3 WHERE id = ?", (sid,))
    run = check_pass(admin_client)
    with damage(s) as db:
        db.execute("DELETE FROM messages WHERE session_id = ?", (sid,))
        db.execute("UPDATE sessions SET parent_session_id = NULL WHERE parent_session_id = ?", (sid,))
        db.execute("DELETE FROM sessions WHERE id = ?", (sid,))
    os.utime(s.path, (time.time() + 5, time.time() + 5))  # the change the pass did not see, whatever the clock
    gone = admin_client.get(f"/p/default/s/{sid}/")
    assert gone.status_code == 404
    page = without_bidi_markup(gone.content.decode())
    assert "counter_drift" in page and f'href="/runs/{run.pk}/">#{run.pk}</a>' in page
    assert "so no repair is offered from here" in page and "/repair/?check=" not in page
