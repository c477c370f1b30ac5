"""Issue 4 in the browser: the migration page (plan -> apply as a job -> result with
backup paths), repairs of the two new actions through the repair preview, the
session's JSONL copy against the store, and colliding ids side by side. Permissions
are checked on the server: imports need run_heal, moves delete_sessions."""

import json
import os
import re
import time

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from sessions_app.models import AuditEvent, HealRun
from sessions_app.stores import registry
from tests.actions.conftest import age_store
from tests.checks.helpers import damage
from tests.conftest import ids
from tests.plans import decoded_values, kept_plans, planted_token
from tests.views.markup import without_bidi_markup

from .test_health_pages import wait_for
from .test_roles import ensure_roles

pytestmark = pytest.mark.django_db(transaction=True)
DAY = 86_400
LONG = ids("default")["long"]
MOVED = ids("default")["hostile"]  # not routed by a gateway; a hostile title
NEW = [{"role": "user", "content": "What did we say about the zebra?"},
       {"role": "assistant", "content": "That the zebra test is flaky."}]


@pytest.fixture
def home(hermes_home, settings, tmp_path):
    ensure_roles()
    settings.HERMES_ADMIN_JOB_RUNNER = "thread"
    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir()
    for db in [hermes_home / "state.db", *hermes_home.glob("profiles/*/state.db")]:
        age_store(db, 40 * DAY)
    s = registry.get("default")
    with s.read() as conn:
        stored = [{"role": r, "content": c, "tool_call_id": t, "tool_calls": json.loads(k) if k else None}
                  for r, c, t, k in conn.execute("SELECT role, content, tool_call_id, tool_calls FROM messages "
                                                 "WHERE session_id = ? ORDER BY id", (LONG,))]
    path = s.profile.sessions_dir / f"{LONG}.jsonl"
    lines = [json.dumps({"role": "session_meta", "source": "cli"})] + [json.dumps(m) for m in NEW + stored]
    path.write_text("\n".join(lines[:2] + ["{oops"] + lines[2:]) + "\n")
    os.utime(path, (time.time() - DAY, time.time() - DAY))
    with damage(s) as db:
        db.execute("UPDATE sessions SET session_key = 'agent:ops:telegram:dm:12345' WHERE id = ?", (MOVED,))
    return hermes_home


def client_for(role):
    user = User.objects.create_user(role.lower(), password="pw-long-enough-" + role)
    user.groups.add(Group.objects.get(name=role))
    client = Client()
    client.force_login(user)
    return client


def text(response):
    assert response.status_code == 200, response.status_code
    return without_bidi_markup(response.content.decode())


def exists(profile, sid):
    with registry.get(profile).read() as conn:
        return bool(conn.execute("SELECT 1 FROM sessions WHERE id = ?", (sid,)).fetchone())


def test_admin_previews_and_applies_the_migration_as_a_job(home):
    admin = client_for("Admin")
    page = text(admin.get("/p/default/migrate/"))
    imports = re.search(r'<table[^>]*id="imports".*?</table>', page, re.S).group(0)
    moves = re.search(r'<table[^>]*id="moves".*?</table>', page, re.S).group(0)
    assert LONG in imports and '<td class="num">2</td>' in imports  # two messages to import
    assert "line 3: broken JSON" in imports
    assert MOVED in moves and "<td>ops</td>" in moves and '<td class="num">4</td>' in moves
    assert "<script>alert" not in page
    token = re.search(r'name="plans" value="([^"]+)"', page).group(1)
    response = admin.post("/p/default/migrate/", {"plans": token})
    run = wait_for(int(re.search(r"/runs/(\d+)/", response["Location"]).group(1)))
    assert run.status == "done", run.error
    assert run.report["summary"]["applied"] == 2 and run.report["summary"]["failed"] == 0, run.report
    result = text(admin.get(f"/runs/{run.pk}/"))
    assert "backup-path" in result and "import_jsonl_transcript" in result and "move_to_owner_store" in result
    assert "backup of ops:" in result  # the target store's backup too
    # Writes and checks by title, each with its code beside (as the health pages name them).
    assert "Import the JSONL transcript <code>import_jsonl_transcript</code>" in result
    assert "Move to the owner's store <code>move_to_owner_store</code>" in result or \
        "Move to the owner&#x27;s store <code>move_to_owner_store</code>" in result
    header = result[result.index("; checks: "):].split("</p>")[0]
    assert re.search(r"; checks: [A-Z][^<]+ <code>transcript_on_disk_only</code>", header), header
    assert not exists("default", MOVED) and exists("ops", MOVED)
    with registry.get("default").read() as conn:
        first = conn.execute("SELECT content FROM messages WHERE session_id = ? AND active = 1 ORDER BY id LIMIT 1",
                             (LONG,)).fetchone()
    assert first == (NEW[0]["content"],)
    assert {e.profile for e in AuditEvent.objects.filter(action="move_to_owner_store")} == {"default", "ops"}
    assert "No JSONL transcript holds messages" in text(admin.get("/p/default/migrate/"))


def test_operator_imports_but_cannot_move(home):
    operator = client_for("Operator")
    page = text(operator.get("/p/default/migrate/"))
    assert "needs the <em>delete sessions</em> permission" in page and "Apply 1 plan" in page
    token = re.search(r'name="plans" value="([^"]+)"', page).group(1)
    assert [p["action"] for p in kept_plans(operator, token, "migration-plans")] == ["import_jsonl_transcript"]
    admin = client_for("Admin")
    admin_page = text(admin.get("/p/default/migrate/"))
    both = re.search(r'name="plans" value="([^"]+)"', admin_page).group(1)
    # the admin's token is the admin's: refused and audited for anyone else
    assert operator.post("/p/default/migrate/", {"plans": both}).status_code == 400
    assert "previewed by another user" in AuditEvent.objects.get(action="migrate_apply", outcome="refused").reason
    # a move plan kept for the operator (as a faulty page could) is still refused on the server
    kept = planted_token(operator, User.objects.get(username="operator"), "migration-plans",
                         kept_plans(admin, both, "migration-plans"))
    assert operator.post("/p/default/migrate/", {"plans": kept}).status_code == 403
    assert not HealRun.objects.exists()
    response = operator.post("/p/default/migrate/", {"plans": token})
    run = wait_for(int(re.search(r"/runs/(\d+)/", response["Location"]).group(1)))
    assert run.status == "done" and run.report["summary"]["applied"] == 1
    assert exists("default", MOVED) and not exists("ops", MOVED)


def test_auditor_sees_the_plan_but_cannot_apply(home):
    auditor = client_for("Auditor")
    page = text(auditor.get("/p/default/migrate/"))
    assert LONG in page and 'name="plans"' not in page
    admin_page = text(client_for("Admin").get("/p/default/migrate/"))
    token = re.search(r'name="plans" value="([^"]+)"', admin_page).group(1)
    assert auditor.post("/p/default/migrate/", {"plans": token}).status_code == 403
    assert not HealRun.objects.exists()


def test_a_move_through_the_repair_preview_needs_the_delete_permission(home):
    url = f"/p/default/s/{MOVED}/repair/?check=owner_mismatch"
    operator, admin = client_for("Operator"), client_for("Admin")
    page = text(operator.get(url))
    assert "move_to_owner_store" in page and "needs the <em>delete sessions</em> permission" in page
    assert 'name="plan"' not in page
    page = text(admin.get(url))
    token = re.search(r'name="plan" value="([^"]+)"', page).group(1)
    apply = f"/p/default/s/{MOVED}/repair/apply/"
    assert operator.post(apply, {"plan": token, "check": "owner_mismatch"}).status_code == 400  # the admin's
    kept = planted_token(operator, User.objects.get(username="operator"), "repair-plan",
                         kept_plans(admin, token, "repair-plan"))
    assert operator.post(apply, {"plan": kept, "check": "owner_mismatch"}).status_code == 403
    response = admin.post(apply, {"plan": token, "check": "owner_mismatch"})
    run = wait_for(int(re.search(r"/runs/(\d+)/", response["Location"]).group(1)))
    assert run.status == "done" and run.report["summary"]["applied"] == 1, run.report
    assert exists("ops", MOVED) and not exists("default", MOVED)


def test_an_import_through_the_repair_preview(home):
    operator = client_for("Operator")
    page = text(operator.get(f"/p/default/s/{LONG}/repair/?check=transcript_on_disk_only"))
    assert "import_jsonl_transcript" in page and "bad line(s) are not imported: line 3: broken JSON" in page
    token = re.search(r'name="plan" value="([^"]+)"', page).group(1)
    response = operator.post(f"/p/default/s/{LONG}/repair/apply/", {"plan": token, "check": "transcript_on_disk_only"})
    run = wait_for(int(re.search(r"/runs/(\d+)/", response["Location"]).group(1)))
    assert run.status == "done" and run.report["summary"]["applied"] == 1, run.report
    assert run.report["profiles"][0]["findings"] == []


def test_the_session_page_links_its_jsonl_copy_and_shows_the_differences(home):
    operator, auditor = client_for("Operator"), client_for("Auditor")
    detail = text(operator.get(f"/p/default/s/{LONG}/"))
    assert f"sessions/{LONG}.jsonl" in detail and f"/p/default/s/{LONG}/jsonl/" in detail
    page = text(operator.get(f"/p/default/s/{LONG}/jsonl/"))
    assert "2 messages of the file are missing from the store" in page
    assert re.search(r'id="bad-lines">\s*<li>line 3: broken JSON</li>', page)
    missing = re.findall(r'<tr class="diff-missing">.*?</tr>', page, re.S)
    assert len(missing) == 2 and "zebra" in missing[0]
    assert page.count('class="diff-matched"') == 60
    assert auditor.get(f"/p/default/s/{LONG}/jsonl/").status_code == 403
    assert operator.get(f"/p/default/s/{MOVED}/jsonl/").status_code == 404
    assert operator.get("/p/default/s/..%2F..%2Fconfig/jsonl/").status_code == 404


def test_colliding_ids_are_shown_side_by_side_and_never_merged(home):
    sid = ids("default")["cli_main"]
    with damage(registry.get("ops")) as db:
        db.execute("INSERT INTO sessions (id, source, started_at, title) VALUES (?, 'cli', 1.7e9, 'A different one')", (sid,))
        db.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', 'hello from ops', 1.7e9)", (sid,))
    operator, auditor = client_for("Operator"), client_for("Auditor")
    detail = text(operator.get(f"/p/default/s/{sid}/"))
    assert "The same id is also in ops" in detail and f"/p/default/s/{sid}/collision/" in detail
    page = text(operator.get(f"/p/default/s/{sid}/collision/"))
    assert "Fix the flaky build" in page and "A different one" in page and "hello from ops" in page
    assert page.count('<section class="copy') == 2
    quiet = text(auditor.get(f"/p/default/s/{sid}/collision/"))
    assert "A different one" in quiet and "hello from ops" not in quiet


# --------------------------------------------------------------------------- review of issue 4

SECRET = "sk-ant-api03-" + "Q7" * 24  # an Anthropic-shaped key: masked as "[secret masked: Anthropic key]"


def append_jsonl(sid, *lines):
    path = registry.get("default").profile.sessions_dir / f"{sid}.jsonl"
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("".join(line + "\n" for line in lines))
    os.utime(path, (time.time() - DAY, time.time() - DAY))
    return path


def test_odd_jsonl_lines_are_bad_lines_on_every_page(home):
    from tests.actions.test_import_transcripts import DEEP, HUGE_TS, SURROGATE

    append_jsonl(LONG, DEEP, SURROGATE, HUGE_TS)  # lines 65, 66, 67
    page = text(client_for("Admin").get("/p/default/migrate/"))
    assert "line 65: nested deeper than 64 levels" in page and "line 66: a lone surrogate" in page
    page = text(client_for("Operator").get(f"/p/default/s/{LONG}/jsonl/"))
    assert "<li>line 65: nested deeper than 64 levels</li>" in page and "a huge timestamp" in page


def test_a_plan_that_fails_is_shown_and_the_others_still_apply(home, monkeypatch):
    from sessions_app.actions.transcripts import ImportJsonlTranscript

    def broken(self, ctx, finding):
        raise TypeError("an unexpected value in the file")

    monkeypatch.setattr(ImportJsonlTranscript, "plan", broken)
    admin = client_for("Admin")
    page = text(admin.get("/p/default/migrate/"))
    assert "Not applicable now: planning failed: TypeError: an unexpected value in the file" in page
    assert MOVED in page and "Apply 1 plan" in page
    token = re.search(r'name="plans" value="([^"]+)"', page).group(1)
    assert [p["action"] for p in kept_plans(admin, token, "migration-plans")] == ["move_to_owner_store"]


def test_a_linked_jsonl_is_never_followed_or_opened(home, tmp_path, monkeypatch):
    """``sessions/<id>.jsonl`` as a symlink (to any file, or to state.db) is not
    shown; as a hard link to state.db it is refused before any descriptor exists."""
    import builtins

    s = registry.get("default")
    operator, admin = client_for("Operator"), client_for("Admin")
    secret = tmp_path / "private.txt"
    secret.write_text(json.dumps({"role": "user", "content": "the private file"}) + "\n")
    path = s.profile.sessions_dir / f"{MOVED}.jsonl"
    for link in (secret, s.path):
        path.symlink_to(link)
        assert operator.get(f"/p/default/s/{MOVED}/jsonl/").status_code == 404
        assert f"/p/default/s/{MOVED}/jsonl/" not in text(operator.get(f"/p/default/s/{MOVED}/"))
        assert "the private file" not in text(admin.get("/p/default/migrate/"))
        path.unlink()
    os.link(s.path, path)
    opened, real_open, real_os_open = [], builtins.open, os.open
    monkeypatch.setattr(builtins, "open", lambda f, *a, **k: opened.append(str(f)) or real_open(f, *a, **k))
    monkeypatch.setattr(os, "open", lambda f, *a, **k: opened.append(str(f)) or real_os_open(f, *a, **k))
    page = text(operator.get(f"/p/default/s/{MOVED}/jsonl/"))
    assert "The file cannot be read: UnsafeFile: it is the store&#x27;s own database file" in page
    assert str(path) not in opened and str(s.path) not in opened


def test_move_notes_and_bad_line_snippets_are_masked_for_auditors(home):
    with damage(registry.get("default")) as db:
        db.execute("UPDATE sessions SET title = ? WHERE id = ?", (f"deploy with {SECRET}", MOVED))
    with damage(registry.get("ops")) as db:  # the title is taken there: the plan's note names it
        db.execute("INSERT INTO sessions (id, source, started_at, title) VALUES ('20260101_000000_abcdef', 'cli', 1.7e9, ?)",
                   (f"deploy with {SECRET}",))
    append_jsonl(LONG, json.dumps({"role": SECRET, "content": "who am I"}))
    admin = text(client_for("Admin").get("/p/default/migrate/"))
    assert f"The title &#x27;deploy with {SECRET}&#x27; is taken in ops" in admin
    assert f"unknown role &#x27;{SECRET[:40]}" in admin
    auditor = client_for("Auditor")
    page = text(auditor.get("/p/default/migrate/"))
    assert "is taken in ops" in page and "unknown role" in page
    assert "sk-ant" not in page and "[secret masked: Anthropic key]" in page
    for url in (f"/p/default/s/{MOVED}/repair/?check=owner_mismatch", f"/p/default/s/{LONG}/repair/?check=transcript_on_disk_only"):
        page = text(auditor.get(url))  # the repair preview shows the same notes, changes and finding
        assert "[secret masked: Anthropic key]" in page and "sk-ant" not in page


def test_a_masked_users_apply_forms_carry_no_unmasked_text(home, settings):
    """The plans behind Apply hold the store's own text (titles, notes, JSONL lines);
    a user who sees it masked gets forms whose tokens decode to no part of it, and
    applying still runs the real (unmasked) plan."""
    settings.HERMES_ADMIN_MASK_SECRETS = True
    with damage(registry.get("default")) as db:
        db.execute("UPDATE sessions SET title = ? WHERE id = ?", (f"deploy with {SECRET}", MOVED))
    with damage(registry.get("ops")) as db:
        db.execute("INSERT INTO sessions (id, source, started_at, title) VALUES ('20260101_000000_abcdef', 'cli', 1.7e9, ?)",
                   (f"deploy with {SECRET}",))
    append_jsonl(LONG, json.dumps({"role": SECRET, "content": "who am I"}))
    admin = client_for("Admin")
    for url, field, shows_notes in (("/p/default/migrate/", "plans", True),
                                    (f"/p/default/s/{MOVED}/repair/?check=owner_mismatch", "plan", True),
                                    (f"/p/default/s/{LONG}/repair/?check=transcript_on_disk_only", "plan", True),
                                    ("/p/default/repair-all/owner_mismatch/", "plans", False)):
        page = admin.get(url).content.decode()
        assert f'name="{field}" value="' in page, url  # the form is there
        assert "sk-ant" not in page and ("[secret masked: Anthropic key]" in page or not shows_notes), url
        decoded = decoded_values(page)
        assert decoded and not [d for d in decoded if "sk-ant" in d or "Q7Q7Q7" in d], url
    token = re.search(r'name="plans" value="([^"]+)"', admin.get("/p/default/migrate/").content.decode()).group(1)
    assert any(SECRET in json.dumps(p) for p in kept_plans(admin, token, "migration-plans"))  # kept, unmasked
    run = wait_for(int(re.search(r"/runs/(\d+)/", admin.post("/p/default/migrate/", {"plans": token})["Location"]).group(1)))
    assert run.status == "done" and run.report["summary"]["applied"] >= 1, run.report


def test_an_apply_token_is_refused_for_another_user(home):
    admin, other = client_for("Admin"), Client()
    other.force_login(User.objects.create_superuser("another", password="pw-long-enough-x"))
    url = f"/p/default/s/{MOVED}/repair/?check=owner_mismatch"
    token = re.search(r'name="plan" value="([^"]+)"', text(admin.get(url))).group(1)
    response = other.post(f"/p/default/s/{MOVED}/repair/apply/", {"plan": token, "check": "owner_mismatch"})
    assert response.status_code == 400 and b"previewed by another user" in response.content
    event = AuditEvent.objects.get(action="repair_apply", outcome="refused")
    assert event.actor.username == "another" and event.session_ids == [MOVED]
    assert not HealRun.objects.exists() and exists("default", MOVED)


def test_excerpts_are_masked_before_they_are_cut(home, settings):
    """A secret straddling the excerpt's end: cut first, its head no longer matches
    the pattern and would show; masked first, nothing of it does."""
    settings.HERMES_ADMIN_MASK_SECRETS = True
    straddling = "x" * 290 + " " + SECRET
    s = registry.get("default")
    with damage(s) as db:
        db.execute("UPDATE messages SET content = ? WHERE id = (SELECT MIN(id) FROM messages WHERE session_id = ?)",
                   (straddling, LONG))
    append_jsonl(LONG, json.dumps({"role": "user", "content": straddling}))
    operator = client_for("Operator")
    page = text(operator.get(f"/p/default/s/{LONG}/jsonl/"))
    assert page.count("x" * 290) == 2 and "sk-an" not in page
    sid = ids("default")["cli_main"]
    with damage(registry.get("ops")) as db:
        db.execute("INSERT INTO sessions (id, source, started_at, title) VALUES (?, 'cli', 1.7e9, 'A different one')", (sid,))
        db.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', ?, 1.7e9)",
                   (sid, "y" * 295 + SECRET))
    page = text(operator.get(f"/p/default/s/{sid}/collision/"))
    assert "y" * 295 in page and "sk-an" not in page


def test_another_stores_read_error_is_reported_inline_on_the_collision_page(home):
    """A damaged ops store no longer replaces default's collision page with an error
    page about default: the copies that can be read are shown, ops is named inline."""
    import sqlite3

    sid = ids("default")["cli_main"]
    ops = registry.get("ops")
    with damage(ops) as db:
        db.execute("INSERT INTO sessions (id, source, started_at, title) VALUES (?, 'cli', 1.7e9, 'A different one')", (sid,))
    conn = sqlite3.connect(ops.path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    roots = [r for (r,) in conn.execute("SELECT rootpage FROM sqlite_master WHERE tbl_name = 'messages' "
                                        "AND type IN ('table', 'index') AND rootpage > 0")]
    conn.close()
    with open(ops.path, "r+b") as fh:  # the messages pages are damaged, the schema and sessions are not
        for root in roots:
            fh.seek((root - 1) * size)
            fh.write(b"\xff" * size)
    page = text(client_for("Operator").get(f"/p/default/s/{sid}/collision/"))
    assert "Fix the flaky build" in page and page.count('<section class="copy') == 1
    assert re.search(r'id="unreadable-stores">\s*<li><a href="/p/ops/">ops</a>: corrupt: ', page)
