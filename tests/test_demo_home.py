"""The demo home (``manage.py make_demo_home``, ``scripts/demo_home.py``): stores of
the real releases with weeks of history and the damage of every family the product
handles, seen through the check engine as a user would see it; the live demo agent
(``scripts/demo_agent.py``); and the banner that says it is a demo."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.urls import reverse

from sessions_app.checks import run_store_checks
from sessions_app.context_processors import DEMO_MARKER
from sessions_app.models import HealRun
from sessions_app.management.commands.make_demo_home import demo_builder
from sessions_app.stores.discovery import discover
from sessions_app.stores.liveness import evidence_for
from sessions_app.stores.store import Store

from .conftest import copy_home, copy_home_of

REPO = Path(__file__).resolve().parents[1]
DAY = 86400
# (profile, check code, session kind or None for a store-level finding): what a
# newcomer finds, each made the way it happens in the field (scripts/demo_home.py).
EXPECTED = {
    ("default", "placeholder_session", "deleted_live"),  # deleted under a live agent, came back 'unknown'
    ("default", "history_lost", "deleted_live"),  # ... and its snapshot holds the turns the store lost
    ("default", "unanswered_turn", "unanswered"),
    ("default", "owner_mismatch", "misfiled"),
    ("default", "compression_without_continuation", "interrupted"),
    ("ops", "orphan_messages", "cli_main"),  # session row deleted with foreign keys off
    ("ops", "dangling_parent", "delegate_child"),  # ... its delegate child lost its parent
    ("ops", "counter_drift", "long"),  # two rows deleted by hand
    ("ops", "leftover_files", "dumped"),  # an empty per-session dump outlived its session
    ("ops", "history_lost", "dumped"),  # ... and its request dump holds a message the store lacks
    ("research", "duplicate_live_rows", "retried"),
    ("research", "stale_open", "stale"),
    ("legacy", "transcript_on_disk_only", "legacy_jsonl"),
    ("edge", "stale_lease", None),  # its holder pid is dead
    ("laptop", "store_corrupt", None),  # a page of the messages index is garbage
}
RELEASE_SCHEMAS = {"default": 22, "ops": 19, "research": 16, "legacy": 13, "archive": 11, "edge": 31}


def marker(home: Path) -> dict:
    return json.loads((home / DEMO_MARKER).read_text())


def stores(home: Path) -> dict[str, Store]:
    return {p.key: Store(p) for p in discover([home.resolve()]).profiles}


@pytest.fixture(scope="module")
def reports(demo_home):
    found = stores(demo_home)
    return {key: run_store_checks(s, other_stores=[o for k, o in found.items() if k != key])
            for key, s in found.items()}


def test_the_plan_is_what_the_test_expects(demo_home):
    planned = {(p["profile"], p["check"], p["kind"]) for p in marker(demo_home)["planned"]}
    assert planned == EXPECTED


@pytest.mark.parametrize("profile, code, kind", sorted(EXPECTED, key=str))
def test_each_planned_finding_appears_in_its_profile(demo_home, reports, profile, code, kind):
    session_id = marker(demo_home)["profiles"][profile]["session_ids"][kind] if kind else None
    found = [f for f in reports[profile].findings if f.check == code]
    assert [f for f in found if f.session_id == session_id], (code, session_id, reports[profile].findings)


def test_every_profile_and_nothing_else(demo_home, reports):
    assert sorted(reports) == ["archive", "default", "edge", "laptop", "legacy", "ops", "research"]
    for key, report in reports.items():
        if key == "laptop":
            assert report.status == "corrupt" and report.error
        else:
            assert report.status == "ok" and report.schema_version == RELEASE_SCHEMAS[key], key
    # A store without damage stays healthy: only "older schema" info.
    assert {f.check for f in reports["archive"].findings} == {"schema_outdated"}


def test_timestamps_are_spread_over_weeks_and_lie_in_the_past(demo_home):
    built = marker(demo_home)["built_at"]
    for key, s in stores(demo_home).items():
        if key == "laptop":
            continue
        with s.read() as conn:
            starts = [r[0] for r in conn.execute("SELECT started_at FROM sessions")]
            newest = conn.execute("SELECT MAX(timestamp) FROM messages").fetchone()[0]
            # Within a session, messages are minutes apart, never one batch second.
            spans = conn.execute("SELECT MAX(timestamp) - MIN(timestamp) FROM messages "
                                 "GROUP BY session_id HAVING COUNT(*) >= 4").fetchall()
        assert len({int(t) for t in starts}) == len(starts), key  # no two start in the same second
        assert max(starts) - min(starts) > 4 * 7 * DAY, key
        assert newest < built
        assert spans and all(span > 10 for (span,) in spans), key


def test_the_session_deleted_under_an_agent_left_a_full_snapshot(demo_home):
    default = marker(demo_home)["profiles"]["default"]
    sid = default["session_ids"]["deleted_live"]
    assert default["append_failures"] == 1  # the agent's first append after the deletion: FOREIGN KEY
    snapshot = json.loads((demo_home / "sessions" / f"session_{sid}.json").read_text())
    assert set(snapshot) == {"session_id", "model", "base_url", "platform", "session_start", "last_updated",
                             "system_prompt", "tools", "message_count", "messages"}
    with stores(demo_home)["default"].read() as conn:
        source, count = conn.execute("SELECT source, message_count FROM sessions WHERE id = ?", (sid,)).fetchone()
        rows = [r[0] for r in conn.execute("SELECT content FROM messages WHERE session_id = ? ORDER BY id", (sid,))]
    user_turns = [m["content"] for m in snapshot["messages"] if m["role"] == "user"]
    assert source == "unknown" and len(user_turns) == 5 and snapshot["message_count"] == len(snapshot["messages"])
    # The store kept the two turns after the deletion; the snapshot has all five.
    assert rows == [m["content"] for m in snapshot["messages"][-4:]] and count == 4
    assert user_turns[3:] == [rows[0], rows[2]]


@pytest.fixture
def demo_client(client, use_roots, demo_home, settings):
    use_roots(demo_home)
    client.force_login(User.objects.create_superuser("demo-admin", password="x"))
    return client


@pytest.mark.django_db
def test_banner_on_every_page_says_demo_and_where(demo_client, demo_home, client):
    ids = marker(demo_home)["profiles"]["default"]["session_ids"]
    pages = {"/": 200, "/sessions/": 200, "/runs/": 200, "/p/default/": 200, "/p/default/health/": 200,
             f"/p/default/s/{ids['cli_main']}/": 200, "/p/laptop/": 503}  # the damaged store's own error page
    for url, status in pages.items():
        page = demo_client.get(url)
        text = page.content.decode().replace("<wbr>", "")  # paths may break after a "/"
        assert page.status_code == status, url
        assert "Demo home." in text and f"<code>{demo_home}</code>" in text, url
    demo_client.logout()
    login = client.get(reverse("login"))
    assert login.status_code == 200 and 'name="password"' in login.content.decode()
    text = login.content.decode()
    assert "Demo home." in text and str(demo_home) not in text  # no paths for anonymous visitors


@pytest.mark.django_db
def test_no_banner_for_a_real_home(admin_client, hermes_home):
    assert "Demo home." not in admin_client.get("/").content.decode()


@pytest.mark.django_db
def test_the_secret_is_masked_when_masking_is_on(demo_client, demo_home, settings):
    sid = marker(demo_home)["profiles"]["default"]["session_ids"]["secret"]
    secret = demo_builder().DEMO_SECRET
    settings.HERMES_ADMIN_MASK_SECRETS = False
    assert secret in demo_client.get(f"/p/default/s/{sid}/").content.decode()  # an admin reads transcripts
    settings.HERMES_ADMIN_MASK_SECRETS = True
    text = demo_client.get(f"/p/default/s/{sid}/").content.decode()
    assert secret not in text and "[secret masked: OpenAI key]" in text


# --------------------------------------------------------------------------- the live demo agent

def lock_rows(home: Path) -> list[tuple]:
    conn = sqlite3.connect(f"file:{home / 'state.db'}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT session_id, holder FROM compression_locks").fetchall()
    finally:
        conn.close()


def wait_for(predicate, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("condition not reached")


def start_agent(home: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, str(REPO / "scripts" / "demo_agent.py"), str(home)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.startswith("READY"):
        proc.kill()
        raise AssertionError(f"demo agent did not start: {line!r} {proc.stderr.read()}")
    return proc


@pytest.mark.django_db
def test_demo_agent_makes_its_session_live_and_releases_the_lock_on_sigterm(demo_home):
    agent = marker(demo_home)["live_agent"]
    proc = start_agent(demo_home)
    try:
        s = stores(demo_home)["default"]
        with s.read() as conn:
            live = evidence_for(s, conn, s.capabilities(conn), agent["session_id"], time.time())
        assert live.verdict == "live"
        [lock] = [e for e in live.evidence if e.source == "compression_lock"]
        assert lock.holder_pid == proc.pid and lock.blocks
        assert [r[0] for r in lock_rows(demo_home)] == [agent["session_id"]]
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    assert lock_rows(demo_home) == []


def test_demo_agent_stops_with_its_parent_and_takes_over_a_lock_left_by_a_killed_run(demo_home):
    # Killed outright: its lock stays behind, held by a pid that is gone.
    proc = start_agent(demo_home)
    proc.kill()
    proc.wait()
    assert len(lock_rows(demo_home)) == 1
    # dashboard.sh starts the agent, then exec's the server: the server is its parent.
    shell = subprocess.Popen(["sh", "-c", f'"{sys.executable}" "{REPO}/scripts/demo_agent.py" "{demo_home}" & '
                                          "exec sleep 3"], stdout=subprocess.PIPE, text=True)
    assert shell.stdout.readline().startswith("READY")  # it took the lock over
    [(_, holder)] = lock_rows(demo_home)
    assert f"pid={proc.pid}:" not in holder
    shell.wait(timeout=30)  # the "server" exits
    wait_for(lambda: lock_rows(demo_home) == [])


@pytest.mark.django_db
def test_the_agent_writes_once_so_a_check_after_its_start_stays_current(demo_client, demo_home):
    # Its lock is taken once with a TTL of hours (a refresh is a store write the
    # pages notice); dashboard.sh checks the demo after READY, as done here.
    proc = start_agent(demo_home)
    try:
        conn = sqlite3.connect(f"file:{demo_home / 'state.db'}?mode=ro", uri=True)
        [(acquired, expires)] = conn.execute("SELECT acquired_at, expires_at FROM compression_locks").fetchall()
        conn.close()
        assert expires - acquired >= 6 * 3600
        with pytest.raises(SystemExit):  # findings remain: that is what the demo shows
            call_command("heal_sessions", "--root", str(demo_home), "--all-profiles", "--json",
                         stdout=open(os.devnull, "w"), stderr=open(os.devnull, "w"))
        page = demo_client.get(reverse("overview")).content.decode()
        assert "after this check" not in page
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


@pytest.mark.django_db
def test_a_check_group_heading_says_the_severities_of_its_findings(demo_client, demo_home):
    # ops: two rows deleted by hand (warning) and an /undo rewind upstream never
    # recounts (info), both counter_drift.
    with pytest.raises(SystemExit):
        call_command("heal_sessions", "--root", str(demo_home), "--profile", "ops", "--json",
                     stdout=open(os.devnull, "w"), stderr=open(os.devnull, "w"))
    page = demo_client.get("/p/ops/health/").content.decode()
    group = page[page.index('id="check-counter_drift"'):]
    group = group[:group.index("</section>")]
    heading = group[:group.index("</h2>")]
    assert '<span class="sev sev-warning">warning</span>' in heading and "(2: 1 warning, 1 info)" in heading
    rows = group[group.index("<tbody>"):]
    assert rows.index("sev-warning") < rows.index("sev-info")  # each row says its own, most severe first


# --------------------------------------------------------------------------- the command

@pytest.mark.django_db
def test_make_demo_home_keeps_a_current_demo_and_replaces_only_demo_homes(demo_home, tmp_path, settings):
    settings.DATA_DIR = tmp_path / "data"
    dest = tmp_path / "data" / "demo-home"
    call_command("make_demo_home", stdout=open(os.devnull, "w"))
    built = marker(dest)["built_at"]
    # Checked once, so the overview shows findings from the first page on.
    [run] = HealRun.objects.all()
    assert run.mode == "check" and run.status == HealRun.Status.DONE and str(dest) in run.report["profiles"][0]["root"]
    assert run.report["summary"]["critical"] >= 3  # orphans, a JSONL-only transcript, a corrupt store
    (dest / "note.txt").write_text("a repair made while exploring")
    call_command("make_demo_home", stdout=open(os.devnull, "w"))
    assert marker(dest)["built_at"] == built and (dest / "note.txt").exists()  # kept
    call_command("make_demo_home", "--force", stdout=open(os.devnull, "w"))
    assert marker(dest)["built_at"] > built and not (dest / "note.txt").exists()
    assert HealRun.objects.count() == 2  # kept: not checked again; rebuilt: checked
    # A demo of the earlier kind (the fixture copied as it was) is rebuilt.
    old = copy_home(tmp_path / "old-demo")
    call_command("make_demo_home", "--dest", str(old), stdout=open(os.devnull, "w"))
    assert marker(old)["version"] == demo_builder().DEMO_VERSION
    # Anything else is never replaced.
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(CommandError, match="is not a demo home"):
        call_command("make_demo_home", "--dest", str(mine), "--force")
    assert (mine / "notes.txt").read_text() == "mine"


def test_the_marker_name_is_the_one_the_banner_looks_for():
    assert demo_builder().MARKER == DEMO_MARKER


@pytest.mark.django_db
def test_the_legacy_transcript_can_be_imported_on_its_old_schema(demo_home, tmp_path):
    """The legacy showcase is no dead end: the JSONL outgrew the store after its last
    row, so the import appends the six later messages even on 0.15.0's schema."""
    from sessions_app.actions.engine import Applier, plan_for

    home = copy_home_of(demo_home, tmp_path / "demo-home")
    sid = marker(home)["profiles"]["legacy"]["session_ids"]["legacy_jsonl"]
    legacy = stores(home)["legacy"]
    [finding] = [f for f in run_store_checks(legacy).findings if f.check == "transcript_on_disk_only"]
    assert finding.session_id == sid and finding.heal == "import_jsonl_transcript"
    with legacy.read() as conn:
        plan = plan_for(legacy, conn, legacy.capabilities(conn), finding)
    assert plan.blocked == ""
    assert Applier(actor_label="test").apply(legacy, plan).status == "applied"
    with legacy.read() as conn:
        contents = [r[0] for r in conn.execute("SELECT content FROM messages WHERE session_id = ? ORDER BY id", (sid,))]
    assert len(contents) == 10 and contents[0].startswith("can you remind me") and contents[-1].startswith("Any time")
    assert not [f for f in run_store_checks(legacy).findings if f.session_id == sid]


@pytest.mark.django_db
@pytest.mark.parametrize("profile, kind, check", [("legacy", "legacy_jsonl", "transcript_on_disk_only"),
                                                  ("default", "deleted_live", "history_lost"),
                                                  ("ops", "dumped", None)])
def test_the_copies_panel_links_only_a_repair_its_check_offers(demo_client, demo_home, profile, kind, check):
    """'Can be recovered' and its link follow the check's own rule (RecoveryPlan.repaired_by):
    the preview it opens has the finding, never 'nothing to repair'."""
    import re

    sid = marker(demo_home)["profiles"][profile]["session_ids"][kind]
    html = demo_client.get(reverse("session_copies", args=[profile, sid])).content.decode()
    if check is None:  # the dump outlived its session: history_lost reports it with no repair
        assert "the session has no row in the store" in html and 'id="preview-recovery"' not in html
        assert "can be recovered from the copies" not in html
        return
    assert "can be recovered from the copies" in html
    [href] = re.findall(r'id="preview-recovery" href="([^"]+)"', html)
    assert href.endswith(f"?check={check}")
    preview = demo_client.get(href.replace("&amp;", "&")).content.decode()
    assert "nothing to repair" not in preview and "Plan: <code>" in preview
    assert "This repair cannot be applied" not in preview and "Apply</button>" in preview
