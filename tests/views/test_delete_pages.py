"""Issue 5 in the browser face: liveness on the session page, the two-step
confirmation, refusals re-showing the evidence, the trash, restore, bulk deletion as
a background job, and permissions (server side, every request, CSRF included)."""

import re

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.test import Client

from sessions_app import trash
from sessions_app.actions import deletion
from sessions_app.models import AuditEvent, HealRun
from sessions_app.stores import registry
from tests.actions.conftest import age_store
from tests.actions.delete_helpers import agent, dump, rows, stop
from tests.checks.helpers import hermes, hermes_background, own_pidns
from tests.conftest import ids

from .test_health_pages import text, wait_for
from .test_roles import ensure_roles

pytestmark = pytest.mark.django_db(transaction=True)
DAY = 86_400


@pytest.fixture
def home(hermes_home, settings, tmp_path):
    settings.HERMES_ADMIN_JOB_RUNNER = "thread"
    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir()
    for db in [hermes_home / "state.db", *hermes_home.glob("profiles/*/state.db")]:
        age_store(db, 40 * DAY)
    ensure_roles()
    return hermes_home


def user(role, name=None):
    u = User.objects.create_user(name or role.lower(), password="pw-long-enough-" + role)
    if role in ("Auditor", "Operator", "Admin"):
        u.groups.add(Group.objects.get(name=role))
    c = Client()
    c.force_login(u)
    return c


def token_of(html):
    return re.search(r'name="token" value="([^"]+)"', html).group(1)


def test_session_page_shows_evidence_with_source_age_and_verdict(home):
    admin, auditor = user("Admin"), user("Auditor")
    s = registry.get("default")
    sid = ids("default")["long"]
    idle = text(admin.get(f"/p/default/s/{sid}/"))
    assert "not live" in idle and 'class="rename-form"' in idle and "Archive</button>" in idle
    proc = hermes_background(s, f"""
holder = f"pid={{os.getpid()}}:pidns={own_pidns()}:tid=1:agent=1:nonce=ab"
assert db.try_acquire_compression_lock({sid!r}, holder, ttl_seconds=3600)
print("READY", flush=True)
time.sleep(600)
""")
    try:
        html = text(auditor.get(f"/p/default/s/{sid}/"))
        box = re.search(r'<section class="liveness liveness-live" id="liveness">(.*?)</section>', html, re.S).group(1)
        assert "compression lock" in box and "age " in box and f"pid {proc.pid}" in box
        assert "runs on this machine" in box and "process running" in box and "blocks" in box
        assert "Delete…" not in box  # auditors see the evidence, not the action
        # A live session: no Delete button for the admin either, the reason instead.
        page = text(admin.get(f"/p/default/s/{sid}/"))
        assert 'href="/p/default/s/%s/delete/"' % sid not in page and "Delete…" not in page
        assert "Deletion is refused now: an agent holds this session" in page
        # Rename and the flags would refuse too: no control, the reason once.
        assert 'class="rename-form"' not in page and "flag-form" not in page and "Archive</button>" not in page
        assert page.count("Rename, archive, pin and hide are refused now: the session looks live (compression lock)") == 1
    finally:
        stop(proc)
    html = text(auditor.get(f"/p/default/s/{sid}/"))
    assert "liveness-maybe_live" in html and "process provably dead" in html
    # The holder died: maybe live, and an admin may override (the button says so).
    page = text(admin.get(f"/p/default/s/{sid}/"))
    assert 'href="/p/default/s/%s/delete/"' % sid in page and "Delete (override)…" in page
    assert "flag-form" not in page and "refused now: the session looks maybe live" in page  # no override for flags
    deleter = User.objects.create_user("deleter-only", password="pw-long-enough-x")
    deleter.user_permissions.add(*Permission.objects.filter(codename__in=["view_dashboard", "delete_sessions"]))
    c = Client()
    c.force_login(deleter)
    page = text(c.get(f"/p/default/s/{sid}/"))  # may delete, may not override: the reason, no button
    assert 'href="/p/default/s/%s/delete/"' % sid not in page and "needs the <em>override live</em>" in page


def test_confirm_delete_trash_and_restore(home):
    admin = user("Admin")
    sids = ids("default")
    s = registry.get("default")
    before = dump(s)
    page = admin.get(f"/p/default/s/{sids['cli_main']}/delete/")
    html = text(page)
    assert page.status_code == 200 and "not live" in html
    assert sids["delegate_child"] in html and "delegate child" in html and "session_model_usage" in html
    other = re.search(r"Rows of other tables: (.*?)</p>", html).group(1)
    assert re.fullmatch(r"<code>\w+</code> \d+( · <code>\w+</code> \d+)*\.", other), other
    response = admin.post(f"/p/default/s/{sids['cli_main']}/delete/apply/", {"token": token_of(html)})
    assert response.status_code == 302 and response["Location"].startswith("/trash/")
    entry_id = response["Location"].split("/")[2]
    assert rows(s, "SELECT COUNT(*) FROM sessions WHERE id IN (?, ?)", (sids["cli_main"], sids["delegate_child"])) == [(0,)]
    assert admin.get(f"/p/default/s/{sids['cli_main']}/").status_code == 404
    listing = text(admin.get("/trash/"))
    assert entry_id in listing and sids["cli_main"] in listing
    detail = text(admin.get(f"/trash/{entry_id}/")).replace("<wbr>", "")  # paths break after "/"
    assert "Restore" in detail and str(trash.get_entry(entry_id).path) in detail
    response = admin.post(f"/trash/{entry_id}/restore/")
    assert response.status_code == 302 and response["Location"] == f"/p/default/s/{sids['cli_main']}/"
    assert dump(s) == before
    assert list(AuditEvent.objects.values_list("action", "outcome", "actor__username").order_by("id")) == [
        ("delete_session", "applied", "admin"), ("restore_session", "applied", "admin")]
    assert AuditEvent.objects.filter(request_address="127.0.0.1").count() == 2


def test_a_write_between_the_steps_refuses_and_shows_the_evidence_again(home):
    admin = user("Admin")
    sid = ids("default")["long"]
    s = registry.get("default")
    html = text(admin.get(f"/p/default/s/{sid}/delete/"))
    hermes(s, f"db.append_message({sid!r}, 'user', 'wait, one more thing')")
    response = admin.post(f"/p/default/s/{sid}/delete/apply/", {"token": token_of(html)})
    page = text(response)
    assert response.status_code == 409
    assert 'id="refusal"' in page and "an agent wrote since" in page and "last message id" in page
    assert "recent activity" in page and "maybe live" in page  # the new write is evidence now
    assert rows(s, "SELECT COUNT(*) FROM sessions WHERE id = ?", (sid,)) == [(1,)]
    [event] = AuditEvent.objects.all()
    assert event.outcome == "refused"


def test_live_session_is_refused_and_the_override_needs_its_permission(home):
    sids = ids("edge")
    s = registry.get("edge")
    sid = sids["long"]
    admin, deleter_only = user("Admin"), user("none", "deleter")
    User.objects.get(username="deleter").user_permissions.add(
        *Permission.objects.filter(codename__in=["view_dashboard", "delete_sessions"]))
    html = text(admin.get(f"/p/edge/s/{sid}/delete/"))
    token = token_of(html)
    proc = agent(s, sid)
    try:
        page = text(admin.get(f"/p/edge/s/{sid}/delete/"))
        assert "liveness-live" in page and "Deletion is refused" in page and 'name="token"' not in page
        response = admin.post(f"/p/edge/s/{sid}/delete/apply/", {"token": token})
        assert response.status_code == 409 and "Not deleted" in text(response)
    finally:
        stop(proc)
    page = text(admin.get(f"/p/edge/s/{sid}/delete/"))
    assert "liveness-maybe_live" in page and 'name="override_id"' in page
    token = token_of(page)
    own = text(deleter_only.get(f"/p/edge/s/{sid}/delete/"))
    assert 'name="override_id"' not in own
    response = deleter_only.post(f"/p/edge/s/{sid}/delete/apply/", {"token": token_of(own), "override_id": sid})
    assert response.status_code == 403
    refusal = AuditEvent.objects.filter(outcome="refused", actor__username="deleter").get()  # audited too
    assert "override_live permission" in refusal.reason and refusal.session_ids == [sid]
    assert admin.post(f"/p/edge/s/{sid}/delete/apply/", {"token": token}).status_code == 409
    response = admin.post(f"/p/edge/s/{sid}/delete/apply/", {"token": token, "override_id": sid})
    assert response.status_code == 302
    event = AuditEvent.objects.filter(outcome="applied").get()
    assert event.check_code == "override_live" and "OVERRIDE" in event.reason and event.actor.username == "admin"
    assert AuditEvent.objects.filter(outcome="refused").count() == 3


def test_a_token_for_another_session_user_or_forged_is_rejected_and_audited(home):
    admin, other_admin = user("Admin"), user("Admin", "admin2")
    sids = ids("default")
    s = registry.get("default")
    html = text(admin.get(f"/p/default/s/{sids['long']}/delete/"))
    assert admin.post(f"/p/default/s/{sids['hostile']}/delete/apply/", {"token": token_of(html)}).status_code == 400
    assert admin.post(f"/p/default/s/{sids['long']}/delete/apply/", {"token": "forged"}).status_code == 400
    # A genuine token, but issued to another admin: not transferable.
    assert other_admin.post(f"/p/default/s/{sids['long']}/delete/apply/", {"token": token_of(html)}).status_code == 400
    assert other_admin.post("/sessions/delete/apply/", {"token": "forged"}).status_code == 400
    assert rows(s, "SELECT COUNT(*) FROM sessions WHERE id IN (?, ?)", (sids["long"], sids["hostile"])) == [(2,)]
    audit = list(AuditEvent.objects.order_by("id"))
    assert [(e.action, e.outcome, e.actor.username, e.session_ids) for e in audit] == [
        ("delete_session", "refused", "admin", [sids["hostile"]]), ("delete_session", "refused", "admin", [sids["long"]]),
        ("delete_session", "refused", "admin2", [sids["long"]]), ("delete_session", "refused", "admin2", [])]
    assert "another session" in audit[0].reason and sids["long"] in audit[0].reason
    assert "invalid confirmation" in audit[1].reason and "another user" in audit[2].reason
    assert all(not e.backup_path and e.rows_changed == 0 for e in audit)


def test_a_confirmation_is_used_once_even_after_a_restore(home):
    """The deleted rows come back with the same fingerprint; the old confirmation
    still may not delete them again (its nonce is in the applied deletion)."""
    admin = user("Admin")
    sid = ids("default")["hostile"]
    s = registry.get("default")
    token = token_of(text(admin.get(f"/p/default/s/{sid}/delete/")))
    entry_id = admin.post(f"/p/default/s/{sid}/delete/apply/", {"token": token})["Location"].split("/")[2]
    assert admin.post(f"/trash/{entry_id}/restore/").status_code == 302
    before = dump(s)
    response = admin.post(f"/p/default/s/{sid}/delete/apply/", {"token": token})
    assert response.status_code == 409 and "already used" in text(response)
    assert dump(s) == before
    assert list(AuditEvent.objects.values_list("action", "outcome").order_by("id")) == [
        ("delete_session", "applied"), ("restore_session", "applied"), ("delete_session", "refused")]
    fresh = token_of(text(response))  # the page offers a new confirmation
    assert admin.post(f"/p/default/s/{sid}/delete/apply/", {"token": fresh}).status_code == 302


def test_a_deletion_whose_file_would_not_move_says_deleted_but(home, monkeypatch):
    """Committed, then a file would not move: the admin lands on the trash entry and
    is told the sessions are deleted and which file stayed, never "Not deleted"."""
    admin = user("Admin")
    sid = ids("default")["hostile"]
    s = registry.get("default")
    s.profile.sessions_dir.mkdir(exist_ok=True)
    (s.profile.sessions_dir / f"{sid}.jsonl").write_bytes(b"line\n")

    def stubborn(source, target):
        raise PermissionError(13, "Permission denied", str(source))

    monkeypatch.setattr(deletion.apply, "move_without_loss", stubborn)
    token = token_of(text(admin.get(f"/p/default/s/{sid}/delete/")))
    response = admin.post(f"/p/default/s/{sid}/delete/apply/", {"token": token}, follow=True)
    page = text(response)
    assert response.redirect_chain[-1][0].startswith("/trash/")
    assert "deleted, but file" in page and "Not deleted" not in page
    assert "not every file moved into the trash" in page and f"{sid}.jsonl" in page
    assert rows(s, "SELECT COUNT(*) FROM sessions WHERE id = ?", (sid,)) == [(0,)]
    [event] = AuditEvent.objects.all()
    assert event.outcome == "applied" and event.rows_changed > 0


def test_a_live_child_is_named_on_the_confirmation(home):
    admin = user("Admin")
    sids = ids("default")
    s = registry.get("default")
    proc = hermes_background(s, f"""
assert db.try_acquire_compression_lock({sids['branch_child']!r}, f"pid={{os.getpid()}}:tid=1", ttl_seconds=3600)
print("READY", flush=True)
time.sleep(600)
""")
    try:
        page = text(admin.get(f"/p/default/s/{sids['branch_parent']}/delete/"))
    finally:
        stop(proc)
    assert "Deletion is refused: an agent holds " + sids["branch_child"] in page
    assert "which this deletion would detach" in page and 'name="token"' not in page
    assert re.search(r'<ul class="detach">.*verdict-live', page, re.S)


def test_a_maybe_live_continuation_refuses_deleting_its_parent_without_an_override(home):
    """An agent just wrote into the compression continuation the deletion would
    detach: refused, no override offered (not even to an admin), no form at all."""
    admin = user("Admin")
    sids = ids("default")
    s = registry.get("default")
    hermes(s, f"db.append_message({sids['compress_mid']!r}, 'user', 'and the totals for March?')")
    page = text(admin.get(f"/p/default/s/{sids['compress_root']}/delete/"))
    assert f"Deletion is refused: {sids['compress_mid']}, which this deletion would detach, may be live" in page
    assert 'name="token"' not in page and 'name="override_id"' not in page
    assert re.search(r'<ul class="detach">.*verdict-maybe_live', page, re.S)


def lock(store, sid):
    """A real Hermes process (0.19.0's SessionDB) holding ``sid``'s compression lock."""
    return hermes_background(store, f"""
assert db.try_acquire_compression_lock({sid!r}, f"pid={{os.getpid()}}:tid=1", ttl_seconds=3600)
print("READY", flush=True)
time.sleep(600)
""")


def test_bulk_delete_counts_only_what_goes_and_says_refused_like_the_audit(home):
    admin = user("Admin")
    sids = ids("default")
    s = registry.get("default")
    listing = text(admin.get("/sessions/?profile=default"))
    assert 'form="bulk-delete"' in listing and 'id="bulk-delete"' in listing
    chosen = [sids["hostile"], sids["long"], sids["cron"], sids["cli_main"], sids["delegate_child"]]
    held = lock(s, sids["long"])
    try:
        page = text(admin.post("/sessions/delete/", {"s": [f"default {sid}" for sid in chosen]}))
        assert "goes with its parent" in page
        # The live session is left out of the confirmation and of the button's count.
        row = re.search(r'<tr data-session="%s" class="left-out">(.*?)</tr>' % sids["long"], page, re.S).group(1)
        assert "left alone: deletion is refused while an agent holds it" in row
        assert "Delete 3 sessions (4 with delegate children)</button>" in page
        assert "3 will be deleted</strong> (4 sessions with their delegate children)" in page
        assert "<strong>1 left alone</strong>" in page
        assert {i["session_id"] for i in deletion.unsign(token_of(page), User.objects.get(username="admin").pk)} == {sids["hostile"], sids["cron"],
                                                                              sids["cli_main"]}
        # An agent takes one of the confirmed sessions before the job runs: refused.
        taken = lock(s, sids["cron"])
        try:
            response = admin.post("/sessions/delete/apply/", {"token": token_of(page)})
            run = wait_for(int(re.search(r"/runs/(\d+)/", response["Location"]).group(1)))
        finally:
            stop(taken)
    finally:
        stop(held)
    assert run.status == "done", run.error
    statuses = {a["session_id"]: a["status"] for a in run.report["profiles"][0]["actions"]}
    assert statuses == {sids["hostile"]: "applied", sids["cron"]: "refused", sids["cli_main"]: "applied"}
    refused = next(a for a in run.report["profiles"][0]["actions"] if a["status"] == "refused")
    assert "compression_lock" in refused["reason"]
    assert run.report["summary"]["applied"] == 2 and run.report["summary"]["refused"] == 1
    left = {r[0] for r in rows(s, "SELECT id FROM sessions")}
    assert {sids["long"], sids["cron"]} <= left and not left & {sids["hostile"], sids["cli_main"], sids["delegate_child"]}
    events = AuditEvent.objects.filter(run=run)
    assert sorted(events.values_list("session_ids", "outcome")) == sorted(
        [([sids["hostile"]], "applied"), ([sids["cron"]], "refused"), ([sids["cli_main"], sids["delegate_child"]], "applied")])
    assert len({e.backup_path for e in events if e.backup_path}) == 1  # one backup of the store for the job
    page = text(admin.get(f"/runs/{run.pk}/"))
    assert "Bulk deletion run #" in page and "trash entry" in page
    assert "Result: 3 sessions: 2 applied, 1 refused." in page
    assert "No findings" not in page and "finding" not in page.split('class="run-result"')[1].split("</div>")[0]
    cron_row = re.search(r'<tr class="outcome-refused" data-session="%s">(.*?)</tr>' % sids["cron"], page, re.S).group(1)
    assert "<strong" in cron_row and ">refused</strong>" in cron_row
    # The deletion's title with its code, under the one heading; no column of dashes for changes it never lists.
    assert "Delete the session <code>delete_session</code>" in cron_row and "<th>Action</th>" in page
    assert "<th>Changes</th>" not in page and "—</td>" not in cron_row
    listing = text(admin.get("/runs/"))
    assert re.search(r'data-run="%d" data-kind="bulk_deletion">.*?bulk deletion.*?3 sessions: 2 applied, 1 refused'
                     % run.pk, listing, re.S)
    audit = text(admin.get("/audit/?outcome=refused"))
    assert sids["cron"] in audit and ">refused</strong>" in audit


@pytest.mark.parametrize("role", ["Operator", "Auditor"])
def test_operators_and_auditors_cannot_delete_or_restore(home, role):
    admin, other = user("Admin"), user(role)
    sid = ids("default")["hostile"]
    html = text(admin.get(f"/p/default/s/{sid}/delete/"))
    token = token_of(html)
    assert other.get(f"/p/default/s/{sid}/delete/").status_code == 403
    assert other.post(f"/p/default/s/{sid}/delete/apply/", {"token": token}).status_code == 403
    assert other.post(f"/p/default/s/{sid}/delete/apply/", {"token": token, "override_id": sid}).status_code == 403
    assert other.post("/sessions/delete/", {"s": [f"default {sid}"]}).status_code == 403
    assert other.post("/sessions/delete/apply/", {"token": token}).status_code == 403
    listing = text(other.get("/sessions/"))
    assert "Delete selected" not in listing
    # Operators select sessions for flag changes (change_flags), never for deletion.
    assert ('form="bulk-delete"' in listing) == (role == "Operator")
    entry_id = admin.post(f"/p/default/s/{sid}/delete/apply/", {"token": token})["Location"].split("/")[2]
    assert other.get("/trash/").status_code == 200  # the trash can be looked at
    detail = text(other.get(f"/trash/{entry_id}/"))
    assert "Restoring needs" in detail and f'action="/trash/{entry_id}/restore/"' not in detail
    assert other.post(f"/trash/{entry_id}/restore/").status_code == 403
    assert trash.get_entry(entry_id).state == "deleted"
    assert not HealRun.objects.exists()
    assert list(AuditEvent.objects.filter(outcome="applied").values_list("actor__username", flat=True)) == ["admin"]
    refused = AuditEvent.objects.filter(outcome="refused").order_by("id")
    assert [e.action for e in refused] == ["denied:delete_apply", "denied:delete_apply", "denied:bulk_delete_confirm",
                                           "denied:bulk_delete_apply", "denied:trash_restore"]
    assert all(e.actor.username == role.lower() and "nothing was done" in e.reason for e in refused)


@pytest.mark.parametrize("url", ["/p/default/s/{sid}/delete/apply/", "/sessions/delete/", "/sessions/delete/apply/",
                                 "/trash/{entry}/restore/"])
def test_csrf_is_enforced_on_every_deletion_post(home, url):
    sid = ids("default")["hostile"]
    s = registry.get("default")
    item = deletion.token_item(deletion.plan_for(s, sid))
    entry = trash.new_entry("default", sid, store_path=str(s.path), session_id=sid)
    entry.update(state="deleted", targets=[sid])
    root = User.objects.create_superuser("root", "", "pw")
    client = Client(enforce_csrf_checks=True)
    client.force_login(root)
    data = {"token": deletion.sign([item]), "s": [f"default {sid}"]}
    assert client.post(url.format(sid=sid, entry=entry.id), data).status_code == 403
    assert rows(s, "SELECT COUNT(*) FROM sessions WHERE id = ?", (sid,)) == [(1,)]
    assert not AuditEvent.objects.exists() and not HealRun.objects.exists()


def test_anonymous_is_sent_to_login(home):
    sid = ids("default")["hostile"]
    for url in (f"/p/default/s/{sid}/delete/", "/trash/"):
        response = Client().get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/")
