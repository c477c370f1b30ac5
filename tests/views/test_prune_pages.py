"""Issue 14 in the browser face: the Prune pages (preview, confirmation, job, trash),
Hermes' own auto-prune per profile, the restore warning, flags and titles on the
session page and from the list, the pinned warnings, and the permissions."""

import hashlib
import re
import sqlite3

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from sessions_app import trash
from sessions_app.actions.flags import title_digest
from sessions_app.models import AuditEvent, HealRun
from sessions_app.stores import registry
from tests.actions.conftest import age_store
from tests.actions.delete_helpers import rows
from tests.checks.helpers import damage
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


def user(role):
    u = User.objects.create_user(role.lower(), password="pw-long-enough-" + role)
    u.groups.add(Group.objects.get(name=role))
    c = Client()
    c.force_login(u)
    return c


def token_of(html):
    found = re.search(r'action="/prune/apply/".*?name="token" value="([^"]+)"', html, re.S)
    return found.group(1) if found else None


def test_preview_then_confirm_prunes_exactly_what_was_shown(home):
    admin = user("Admin")
    d = ids("default")
    s = registry.get("default")
    page = admin.get("/p/default/prune/", {"older_than": "30"})
    html = text(page)
    assert page.status_code == 200 and 'id="prune-preview"' in html
    shown = re.findall(r'<tr data-root="([^"]+)"', html.split('id="hermes-autoprune"')[0])
    assert d["long"] in shown and d["compress_root"] not in shown
    assert "lineage" in html and "a compression lineage goes only as a whole" in html
    token = token_of(html)
    assert token
    # A session written after the preview is left alone: it was not shown.
    with damage(s) as conn:
        conn.execute("INSERT INTO sessions (id, source, started_at, ended_at) VALUES ('late_one', 'cli', ?, ?)",
                     (1.0, 2.0))
    response = admin.post("/prune/apply/", {"token": token})
    assert response.status_code == 302
    run = wait_for(HealRun.objects.get(mode="prune").pk)
    assert run.status == "done", run.error
    pruned = sorted(u["root"] for p in run.report["profiles"] for u in p["units"] if u["status"] == "applied")
    assert pruned == sorted(shown)
    assert rows(s, "SELECT COUNT(*) FROM sessions WHERE id = 'late_one'") == [(1,)]
    assert len([e for e in trash.list_entries() if e.manifest.get("pruned")]) == len(shown)
    result = text(admin.get(f"/runs/{run.pk}/"))
    assert "Prune run" in result and "trash entry" in result and "not_previewed" in result
    assert admin.post("/prune/apply/", {"token": token}).status_code == 302  # same token: nothing left to do


def test_operators_preview_but_cannot_prune(home):
    operator = user("Operator")
    html = text(operator.get("/prune/", {"older_than": "30"}))
    assert 'id="prune-preview"' in html and token_of(html) is None
    assert "needs the <em>delete sessions</em> permission" in html
    assert operator.post("/prune/apply/", {"token": "x"}).status_code == 403


def test_bad_criteria_and_forged_tokens(home):
    admin = user("Admin")
    html = text(admin.get("/prune/", {"older_than": "-4"}))
    assert 'id="prune-errors"' in html and 'id="prune-preview"' not in html
    html = text(admin.get("/prune/", {"match": "", "older_than": ""}))
    assert 'id="prune-preview"' not in html
    assert admin.post("/prune/apply/", {"token": "forged"}).status_code == 400
    assert AuditEvent.objects.filter(action="prune_sessions", outcome="refused").count() == 1
    assert not HealRun.objects.filter(mode="prune").exists()


def test_pinned_sessions_are_spared_and_said_so(home):
    admin = user("Admin")
    e = ids("edge")
    assert admin.post(f"/p/edge/s/{e['long']}/flags/", {"action": "pin"}).status_code == 302
    html = text(admin.get("/p/edge/prune/", {"older_than": "30"}))
    assert "pinned session" in html and "spared" in html and "pinned-warning" in html
    shown = re.findall(r'<tr data-root="([^"]+)"', html.split('id="hermes-autoprune"')[0])
    assert e["long"] not in shown
    delete = text(admin.get(f"/p/edge/s/{e['long']}/delete/"))
    assert 'id="pinned-warning"' in delete and "durable keep" in delete


def test_archived_sessions_stay_unless_the_box_is_ticked(home):
    admin = user("Admin")
    e = ids("edge")
    assert admin.post(f"/p/edge/s/{e['long']}/flags/", {"action": "archive"}).status_code == 302
    html = text(admin.get("/p/edge/prune/", {"older_than": "30"}))
    assert 'name="include_archived"' in html and "Include archived sessions" in html
    shown = re.findall(r'<tr data-root="([^"]+)"', html.split('id="hermes-autoprune"')[0])
    assert e["long"] not in shown and "archived" in html
    html = text(admin.get("/p/edge/prune/", {"older_than": "30", "include_archived": "on"}))
    shown = re.findall(r'<tr data-root="([^"]+)"', html.split('id="hermes-autoprune"')[0])
    assert e["long"] in shown and "archived sessions included" in html
    response = admin.post("/prune/apply/", {"token": token_of(html)})
    assert response.status_code == 302
    run = wait_for(HealRun.objects.get(mode="prune").pk)
    assert run.status == "done", run.error
    assert rows(registry.get("edge"), "SELECT COUNT(*) FROM sessions WHERE id = ?", (e["long"],)) == [(0,)]


def test_hermes_auto_prune_is_shown_from_config_yaml_and_warned_about_on_restore(home):
    admin = user("Admin")
    d = ids("default")
    html = text(admin.get("/p/default/prune/"))
    assert "Off" in html and "deletes nothing by itself" in html
    (home / "config.yaml").write_text("sessions:\n  auto_prune: true\n  retention_days: 30\n")
    html = text(admin.get("/p/default/prune/"))
    box = html.split('id="hermes-autoprune"')[1]
    assert "will be deleted by Hermes at its next start" in box and d["long"] in box
    assert "cannot pin" in box  # a 0.19.0 store: export, or turn it off
    # Deleted, then looked at in the trash: Hermes would prune it again once restored.
    page = admin.get(f"/p/default/s/{d['long']}/delete/")
    token = re.search(r'name="token" value="([^"]+)"', text(page)).group(1)
    admin.post(f"/p/default/s/{d['long']}/delete/apply/", {"token": token})
    [entry] = trash.list_entries()
    html = text(admin.get(f"/trash/{entry.id}/"))
    assert 'id="autoprune-again"' in html and d["long"] in html
    response = admin.post(f"/trash/{entry.id}/restore/", follow=True)
    assert "auto-prune will delete 1 of these session(s) again" in text(response)


def test_flags_on_the_session_page(home):
    operator, auditor = user("Operator"), user("Auditor")
    e = ids("edge")
    html = text(operator.get(f"/p/edge/s/{e['compress_mid']}/"))
    assert 'id="flags"' in html and "whole compression lineage (3 segments)" in html
    assert 'value="pin"' in html and 'class="rename-form"' in html
    response = operator.post(f"/p/edge/s/{e['compress_mid']}/flags/", {"action": "pin"}, follow=True)
    assert "pin: 3 session(s)" in text(response)
    chain = [e["compress_root"], e["compress_mid"], e["compress_tip"]]
    s = registry.get("edge")
    assert rows(s, f"SELECT pinned FROM sessions WHERE id IN ({','.join('?' * 3)})", chain) == [(1,)] * 3
    assert 'value="pin"' not in text(auditor.get(f"/p/edge/s/{e['compress_mid']}/"))
    assert auditor.post(f"/p/edge/s/{e['compress_mid']}/flags/", {"action": "unpin"}).status_code == 403
    # A release store: no pin control, and the page says why.
    html = text(operator.get(f"/p/default/s/{ids('default')['long']}/"))
    assert 'value="pin"' not in html and "no pinned column" in html and 'value="archive"' in html


def test_rename_clash_is_a_clear_error(home):
    operator = user("Operator")
    d = ids("default")
    shown = title_digest("default", d["long"], "Long pagination session")
    assert f'name="expected_digest" value="{shown}"' in text(operator.get(f"/p/default/s/{d['long']}/"))
    response = operator.post(f"/p/default/s/{d['long']}/rename/",
                             {"title": "Fix the flaky build", "expected_digest": shown},
                             follow=True)
    page = text(response)
    assert "not changed (refused)" in page and f"already used by session {d['cli_main']}" in page
    response = operator.post(f"/p/default/s/{d['long']}/rename/",
                             {"title": "y" * 150, "expected_digest": shown},
                             follow=True)
    assert "title too long" in text(response)
    response = operator.post(f"/p/default/s/{d['long']}/rename/",
                             {"title": "A better name", "expected_digest": shown},
                             follow=True)
    assert "renamed to" in text(response)
    assert rows(registry.get("default"), "SELECT title FROM sessions WHERE id = ?", (d["long"],)) == [("A better name",)]
    # The form was made for the old title: a rename from it now is a change, refused.
    response = operator.post(f"/p/default/s/{d['long']}/rename/",
                             {"title": "Third name", "expected_digest": shown}, follow=True)
    assert "its title changed since the page was shown" in text(response)
    assert rows(registry.get("default"), "SELECT title FROM sessions WHERE id = ?", (d["long"],)) == [("A better name",)]
    response = operator.post(f"/p/default/s/{d['long']}/rename/", {"title": "Third name"}, follow=True)
    assert "did not say which title it showed" in text(response)


def test_rename_form_gives_no_masked_title_away(home, settings):
    """With masking on, a title holding a secret is neither the rename field's value
    nor a hidden field: the field starts empty, the placeholder shows it masked, and
    a rename from that form still works (it carries the title's digest)."""
    token = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
    d = ids("default")
    with sqlite3.connect(home / "state.db") as conn:
        conn.execute("UPDATE sessions SET title = ? WHERE id = ?", (f"deploy with {token}", d["long"]))
    conn.close()
    settings.HERMES_ADMIN_MASK_SECRETS = True
    operator = user("Operator")
    html = text(operator.get(f"/p/default/s/{d['long']}/"))
    assert 'class="rename-form"' in html and token not in html
    field = re.search(r'<input type="text" name="title"[^>]*>', html).group(0)
    assert 'value=""' in field and "placeholder=" in field and "secret masked" in field
    digest = re.search(r'name="expected_digest" value="([0-9a-f]{64})"', html).group(1)
    assert digest == title_digest("default", d["long"], f"deploy with {token}")
    # The digest is keyed (SECRET_KEY): a guess of the masked part cannot be checked against it.
    assert digest != hashlib.sha256(f"deploy with {token}".encode()).hexdigest()
    # The form posted as shown (its field empty) is "not typed", never "clear the title".
    for typed in ("", "  ", "\u200b", "\x01"):  # nothing left once cleaned
        response = operator.post(f"/p/default/s/{d['long']}/rename/",
                                 {"title": typed, "expected_digest": digest, "masked": "1"}, follow=True)
        assert "type the new title" in text(response), repr(typed)
    assert rows(registry.get("default"), "SELECT title FROM sessions WHERE id = ?", (d["long"],)) == [
        (f"deploy with {token}",)]
    response = operator.post(f"/p/default/s/{d['long']}/rename/", {"title": "Deploy notes", "expected_digest": digest, "masked": "1"},
                             follow=True)
    assert "renamed to" in text(response) and token not in text(response)
    assert rows(registry.get("default"), "SELECT title FROM sessions WHERE id = ?", (d["long"],)) == [("Deploy notes",)]


def test_bulk_flags_from_the_list_and_the_flag_filters(home):
    operator = user("Operator")
    e = ids("edge")
    html = text(operator.get("/sessions/", {"profile": "edge"}))
    assert 'formaction="/sessions/flags/"' in html and "Delete selected" not in html
    response = operator.post("/sessions/flags/", {"action": "archive", "s": [f"edge {e['long']}", f"edge {e['cron']}"]})
    run = wait_for(HealRun.objects.get(mode="flags").pk)
    assert response.status_code == 302 and run.status == "done"
    assert [a["status"] for p in run.report["profiles"] for a in p["actions"]] == ["applied", "applied"]
    listed = text(operator.get("/sessions/", {"profile": "edge", "archived": "yes"}))
    assert e["long"] in listed and e["cron"] in listed and e["hostile"] not in listed
    others = text(operator.get("/sessions/", {"profile": "edge", "archived": "no"}))
    assert e["long"] not in others and e["hostile"] in others
    assert "No sessions match" in text(operator.get("/sessions/", {"profile": "default", "pinned": "yes"}))
    assert operator.post("/sessions/flags/", {"action": "explode", "s": [f"edge {e['long']}"]}).status_code == 400


def test_rename_of_a_title_that_is_not_text(home):
    """A salvaged store can hold a BLOB where the title goes: the page still offers
    the rename, and the digest of what it showed lets it through."""
    d = ids("default")
    with sqlite3.connect(home / "state.db") as conn:
        conn.execute("UPDATE sessions SET title = x'deadbeef' WHERE id = ?", (d["long"],))
    conn.close()
    operator = user("Operator")
    html = text(operator.get(f"/p/default/s/{d['long']}/"))
    digest = re.search(r'name="expected_digest" value="([0-9a-f]{64})"', html).group(1)
    assert digest == title_digest("default", d["long"], b"\xde\xad\xbe\xef") != title_digest("default", d["long"], "")
    response = operator.post(f"/p/default/s/{d['long']}/rename/", {"title": "Numbered", "expected_digest": digest},
                             follow=True)
    assert "renamed to" in text(response)
    assert rows(registry.get("default"), "SELECT title FROM sessions WHERE id = ?", (d["long"],)) == [("Numbered",)]
