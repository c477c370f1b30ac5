"""Honest runs and deletions (issue 15 point 3): every run kind's totals in its own
words, one outcome vocabulary across run pages and the audit trail, and the page
of a session that is gone (deleted, pruned, purged, or unknown) instead of a bare 404."""

import re

import pytest
from django.core.management import call_command

from sessions_app import audit as audit_mod
from sessions_app import runs, trash
from sessions_app.models import AuditEvent, HealRun
from sessions_app.stores import registry
from sessions_app.vocabulary import OUTCOMES, RUN_KINDS, WRITE_OUTCOMES
from tests.actions.prune_helpers import prune
from tests.checks.helpers import damage
from tests.conftest import IDS, ids

from .test_delete_pages import home, token_of, user  # noqa: F401  (the fixture)
from .test_health_pages import text, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def run_of(response) -> HealRun:
    return wait_for(int(re.search(r"/runs/(\d+)/", response["Location"]).group(1)))


def listed(listing: str, run: HealRun) -> str:
    """The runs list's row of ``run``."""
    return re.search(r'<tr data-run="%d"[^>]*>(.*?)</tr>' % run.pk, listing, re.S).group(0)


def test_a_single_repair_reports_its_repair_not_the_profile_health(home):
    admin = user("Admin")
    s = registry.get("default")
    with damage(s) as db:
        db.execute("DELETE FROM sessions WHERE id = ?", (IDS["long"],))  # orphan_messages: repaired below
        db.execute("UPDATE sessions SET message_count = message_count + 7 WHERE id = ?", (IDS["cron"],))  # stays
    check = run_of(admin.post("/checks/run/", {"profile": "default"}))
    assert check.status == "done", check.error
    row = listed(text(admin.get("/runs/")), check)
    assert 'data-kind="check"' in row and re.search(r"findings: (\d+ critical, )?\d+ warning", row)
    preview = text(admin.get(f"/p/default/s/{IDS['long']}/repair/?check=orphan_messages"))
    token = re.search(r'name="plan" value="([^"]+)"', preview).group(1)
    repair = run_of(admin.post(f"/p/default/s/{IDS['long']}/repair/apply/", {"plan": token, "check": "orphan_messages"}))
    assert repair.status == "done", repair.error
    listing = text(admin.get("/runs/"))
    row = listed(listing, repair)
    result = re.search(r'<td class="run-result">(.*?)</td>', row, re.S).group(1)
    assert ">repair<" in row and result == "1 repair: 1 applied; the repaired finding is gone"
    page = text(admin.get(f"/runs/{repair.pk}/"))
    assert "Repair run #" in page and "Result: 1 repair: 1 applied; the repaired finding is gone." in page
    assert "re-checked only the repaired finding" in page
    assert re.search(r'<table class="grid small stack run-actions"><thead><tr><th>Action</th>.*'
                     r'Recreate the missing session row <code>recreate_session_row</code>.*>applied</strong>', page, re.S)
    assert "the finding is gone from the session." in page and "on its session;" in page
    assert re.search(r'<table class="grid small stack plan changes">.*<tr data-op="insert">', page, re.S)  # what it wrote
    # The profile still has its warning: the fresh check after the repair says so.
    health = text(admin.get("/p/default/health/"))
    assert "counter_drift" in health
    # A heal run is "heal" in the list and on its page, with what remains.
    heal = run_of(admin.post("/p/default/heal/"))
    assert heal.status == "done", heal.error
    row = listed(text(admin.get("/runs/")), heal)
    assert 'data-kind="heal"' in row and ">heal<" in row and "applied" in row and ">apply<" not in row
    page = text(admin.get(f"/runs/{heal.pk}/"))
    assert "Heal run #" in page and re.search(r"Result: \d+ repairs?: \d+ applied", page)
    assert 'class="grid small stack findings"' in page or "no findings remain" in page
    assert AuditEvent.objects.filter(run=repair).get().outcome == "applied"


def test_a_refused_repair_says_refused_on_the_run_page_and_in_the_audit(home):
    admin = user("Admin")
    s = registry.get("default")
    sid = ids("default")["long"]
    with damage(s) as db:
        db.execute("UPDATE sessions SET message_count = message_count + 3 WHERE id = ?", (sid,))
    preview = text(admin.get(f"/p/default/s/{sid}/repair/?check=counter_drift"))
    token = re.search(r'name="plan" value="([^"]+)"', preview).group(1)
    from .test_delete_pages import lock, stop
    held = lock(s, sid)
    try:
        run = run_of(admin.post(f"/p/default/s/{sid}/repair/apply/", {"plan": token, "check": "counter_drift"}))
    finally:
        stop(held)
    [action] = run.report["profiles"][0]["actions"]
    assert action["status"] == "refused" and run.report["summary"]["refused"] == 1
    assert AuditEvent.objects.get(run=run).outcome == "refused"
    page = text(admin.get(f"/runs/{run.pk}/"))
    assert "Result: 1 repair: 1 refused; the finding remains (1 warning)." in page
    assert ">refused</strong>" in page and ">skipped<" not in page
    assert "<dt>refused</dt><dd>" + OUTCOMES["refused"] in page  # the legend says what the word means
    audit = text(admin.get("/audit/?outcome=refused"))
    assert "recount_session" in audit and "<dt>refused</dt><dd>" + OUTCOMES["refused"] in audit
    event = AuditEvent.objects.get(run=run)
    assert OUTCOMES["refused"] in text(admin.get(f"/audit/{event.pk}/"))
    with pytest.raises(ValueError, match="unknown audit outcome 'blocked'"):
        audit_mod.record(actor_label="t", action="x", profile="default", store_path="", outcome="blocked")


def test_a_deleted_session_page_says_when_by_whom_and_links_its_trash_entry(home):
    admin, auditor = user("Admin"), user("Auditor")
    sid = ids("default")["hostile"]
    html = text(admin.get(f"/p/default/s/{sid}/delete/"))
    entry_id = admin.post(f"/p/default/s/{sid}/delete/apply/", {"token": token_of(html)})["Location"].split("/")[2]
    for who in (admin, auditor):
        response = who.get(f"/p/default/s/{sid}/")
        page = text(response)
        assert response.status_code == 404
        box = re.search(r'<section class="deleted-session notice" id="deleted-session" data-how="deleted">(.*?)</section>',
                        page, re.S).group(1)
        assert "It was <strong>deleted</strong> on <time " in box and " UTC</time>" in box and "by admin" in box
        assert f'href="/trash/{entry_id}/"' in box
    assert "where <em>Restore</em> puts it back" in text(admin.get(f"/p/default/s/{sid}/"))
    assert "Restore" not in text(auditor.get(f"/p/default/s/{sid}/")).split('id="deleted-session"')[1].split("</section>")[0]
    # Purged from the trash: the page says so, with who purged it.
    call_command("purge_trash", older_than=0)
    assert trash.get_entry(entry_id) is None
    page = text(admin.get(f"/p/default/s/{sid}/"))
    assert "Its trash entry was <strong>purged</strong> on " in page and "command:purge_trash@" in page
    assert f'href="/trash/{entry_id}/"' not in page
    # An id nobody deleted through the dashboard: said plainly, still a 404.
    response = admin.get("/p/default/s/no-such-session-id/")
    assert response.status_code == 404 and 'data-how="unknown"' in text(response)
    assert "no record of deleting it" in text(response)


def test_a_pruned_session_page_links_its_trash_entry(home):
    admin = user("Admin")
    report = prune([registry.get("default")], apply=True, older_than_days=30)
    unit = next(u for p in report["profiles"] for u in p["units"] if u["status"] == "applied")
    sid = unit["sessions"][0]
    page = text(admin.get(f"/p/default/s/{sid}/"))
    assert 'data-how="pruned"' in page and f'href="/trash/{unit["trash_entry"]}/"' in page
    assert "It was <strong>pruned</strong> on " in page and "by tester" in page


def test_kinds_and_totals_of_every_run_kind():
    kinds = [
        (("check", "browser", [], "admin", None), "check"),
        (("check", "command", ["counter_drift"], "command:heal_sessions@h", None), "partial_check"),
        (("check", "watch", ["stale_lease"], "watch", None), "light_check"),
        (("apply", "command", [], "command:heal_sessions@h", None), "heal"),
        (("apply", "browser", ["counter_drift"], "admin", "recount_session"), "repair"),
        (("apply", "browser", ["history_lost"], "admin", "recover_messages"), "recovery"),
        (("apply", "browser", ["owner_mismatch"], "admin", "move_to_owner_store"), "move"),
        (("apply", "browser", ["transcript_on_disk_only", "history_lost", "owner_mismatch"], "admin",
          "import_jsonl_transcript"), "migration"),
        (("apply", "command", ["history_lost", "transcript_on_disk_only"], "command:migrate_transcripts@h", None),
         "migration"),
        (("delete", "browser", [], "admin", None), "bulk_deletion"),
        (("delete", "fleet", [], "admin", None), "deletion"),
        (("restore", "fleet", [], "admin", None), "restore"),
        (("prune", "browser", [], "admin", None), "prune"),
        (("prune", "command", [], "command:prune_sessions@h", None, False), "prune_check"),
        (("prune", "command", [], "command:prune_sessions@h", None, True), "prune"),
        (("flags", "browser", [], "admin", None), "flags"),
    ]
    for fields, expected in kinds:
        assert runs.kind_of(*fields) == expected, fields
    assert {k for _, k in kinds} == set(RUN_KINDS)
    zero = {"profiles": 1, "critical": 0, "warning": 0, "info": 0, **{w: 0 for w in ("planned", *WRITE_OUTCOMES)}}
    assert runs.result("check", zero, "check") == ["no findings"]
    assert runs.result("check", dict(zero, info=5, planned=2), "check") == ["findings: 5 info", "2 repairs to apply"]
    assert runs.result("heal", zero, "apply") == ["nothing to repair", "no findings remain"]
    assert runs.result("heal", dict(zero, applied=2, refused=1, warning=1), "apply") == [
        "3 repairs: 2 applied, 1 refused", "findings remaining: 1 warning"]
    assert runs.result("recovery", dict(zero, applied=1), "apply", scoped=True) == [
        "1 recovery: 1 applied", "the repaired finding is gone"]
    assert runs.result("move", dict(zero, skipped=1, warning=1), "apply", scoped=True) == [
        "1 move: 1 skipped", "the finding remains (1 warning)"]
    assert runs.result("migration", dict(zero, applied=3), "apply", scoped=True) == [
        "3 imports and moves: 3 applied", "no finding remains on these sessions"]
    assert runs.result("bulk_deletion", dict(zero, applied=2, failed=1), "delete") == ["3 sessions: 2 applied, 1 failed"]
    assert runs.result("bulk_deletion", zero, "delete") == ["no session deleted"]
    assert runs.result("flags", dict(zero, applied=1), "flags") == ["1 session: 1 applied"]
    assert runs.result("restore", dict(zero, applied=1), "restore") == ["1 trash entry: 1 applied"]
    assert runs.result("deletion", dict(zero, refused=1), "delete") == ["1 session: 1 refused"]
    assert runs.result("repair", dict(zero, applied=4), "apply", scoped=True) == [
        "4 repairs: 4 applied", "the repaired findings are gone"]
    prune = {"units": 2, "sessions": 3, "messages": 40, "applied": 1, "skipped": 1, "spared": 2, "spared_pinned": 1}
    assert runs.result("prune", prune, "prune") == ["2 conversations (3 sessions, 40 message rows): 1 applied, 1 skipped",
                                                    "2 selected sessions spared (1 pinned)"]
    assert runs.result("prune", {"units": 0}, "prune") == ["nothing to prune"]
    assert runs.result("heal", None, "apply", status="failed") == ["no report: the run failed"]
    assert list(AuditEvent.Outcome.values) == list(WRITE_OUTCOMES)  # the audit trail's words are the runs' words


def test_a_prune_unit_an_agent_takes_before_its_batch_is_refused_on_the_run_page(home):
    from sessions_app.actions import prune_run
    from sessions_app.stores.retention import Criteria
    from .test_delete_pages import lock, stop
    admin = user("Admin")
    s = registry.get("default")
    sid = ids("default")["hostile"]
    criteria = Criteria(older_than_days=30)
    previewed = prune_run.preview_store(s, criteria)
    assert sid in [u.root for u in previewed[0].units]
    held = lock(s, sid)
    try:
        entry = prune_run.prune_store(s, criteria, apply=True, previewed=previewed,
                                      writer=prune_run.Pruner(actor_label="tester"))
    finally:
        stop(held)
    [unit] = [u for u in entry["units"] if u["root"] == sid]
    assert unit["status"] == "refused" and "compression" in unit["reason"]
    summary = prune_run.summarize([entry])
    assert summary["refused"] == 1 and summary["applied"] == summary["units"] - 1
    run = HealRun.objects.create(mode="prune", trigger="command", actor_label="tester", status="done",
                                 report={"version": 1, "profiles": [entry], "summary": summary})
    page = text(admin.get(f"/runs/{run.pk}/"))
    assert "1 refused" in page.split('class="run-result"')[1].split("</p>")[0]
    assert re.search(r'<tr class="outcome-refused" data-root="%s">.*?<strong>refused</strong>' % sid, page, re.S)
    assert "<dt>refused</dt>" in page


def test_a_prune_check_is_named_prune_check_on_the_runs_list_and_its_page(home):
    from tests.actions.conftest import run_command
    admin = user("Admin")
    code, report = run_command("prune_sessions", "--profile", "default", "--older-than", "30", "--json")
    assert code == 1 and report["mode"] == "check" and report["summary"]["units"]
    run = HealRun.objects.get(mode="prune")
    row = listed(text(admin.get("/runs/")), run)
    assert 'data-kind="prune_check"' in row and ">prune check<" in row
    page = text(admin.get(f"/runs/{run.pk}/"))
    assert f"Prune check run #{run.pk}" in page and "planned" in page
