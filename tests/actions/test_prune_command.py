"""``manage.py prune_sessions``: the cron contract (exit codes, ``--json``, the run lock,
the run record), in-process and as a separate process the way cron runs it."""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from sessions_app import runs
from sessions_app.locks import run_lock
from sessions_app.models import AuditEvent, HealRun
from tests.conftest import copy_store, ids

from .conftest import run_command, run_manage, store
from .delete_helpers import rows, stop
from .prune_helpers import lock_holder

pytestmark = pytest.mark.django_db


def prune_cmd(*args):
    return run_command("prune_sessions", *args)


def test_check_lists_what_goes_and_exits_1_then_apply_exits_0(aged_home):
    code, report = prune_cmd("--profile", "default", "--older-than", "30", "--json")
    assert code == 1 and report["version"] == 2 and report["mode"] == "check"
    [prof] = report["profiles"]
    assert prof["status"] == "ok" and prof["units"] and all(u["status"] == "planned" for u in prof["units"])
    assert set(prof["totals"]) >= {"units", "sessions", "messages", "content_bytes", "files", "spared"}
    assert report["summary"]["messages"] == sum(u["messages"] for u in prof["units"]) > 0
    assert report["summary"]["content_bytes"] > 0
    assert not AuditEvent.objects.exclude(outcome="refused").exists()  # a check writes nothing
    [run] = HealRun.objects.filter(mode="prune")
    assert run.status == "done" and run.report["mode"] == "check"
    assert runs.kind(run) == "prune_check"  # named as a check on the runs list and its page, not as a prune

    code, report = prune_cmd("--profile", "default", "--older-than", "30", "--apply", "--json")
    assert code == 0, report["summary"]
    assert all(u["status"] == "applied" and u["trash_entry"] for u in report["profiles"][0]["units"])
    assert report["summary"]["remaining"] == 0
    code, again = prune_cmd("--profile", "default", "--older-than", "30", "--json")
    assert code == 0 and again["summary"]["units"] == 0
    assert [runs.kind(r) for r in HealRun.objects.filter(mode="prune").order_by("pk")] == [
        "prune_check", "prune", "prune_check"]


def test_a_live_session_left_behind_exits_1(aged_home):
    s = store(aged_home, "default")
    sid = ids("default")["long"]
    holder = lock_holder(s, sid)
    try:
        code, report = prune_cmd("--profile", "default", "--older-than", "30", "--apply", "--json")
    finally:
        stop(holder)
    assert code == 1
    assert report["summary"]["applied"] > 0 and report["summary"]["spared_live"] >= 1
    assert rows(s, "SELECT COUNT(*) FROM sessions WHERE id = ?", (sid,)) == [(1,)]


@pytest.mark.parametrize("args, words", [
    ((), "say what to prune"),
    (("--older-than", "-3"), "0 or more"),
    (("--older-than", "nan"), "0 or more"),
    (("--batch-size", "0", "--empty"), "--batch-size"),
    (("--match", "x" * 300), "at most"),
])
def test_wrong_arguments_exit_2_with_a_json_error_document(aged_home, args, words):
    code, message = prune_cmd("--profile", "default", *args, "--json")
    assert code == 2 and words in message


def test_unknown_profile_and_missing_selection_exit_2(aged_home):
    assert prune_cmd("--profile", "nope", "--empty")[0] == 2
    assert prune_cmd("--empty")[0] == 2


def test_another_run_holding_the_lock_exits_2(aged_home):
    with run_lock("heal", label="someone else"):
        code, message = prune_cmd("--all-profiles", "--empty")
    assert code == 2 and "another heal run is in progress" in message


def test_with_json_a_held_lock_prints_the_error_document(aged_home):
    """The shared run lock (a heal or a browser job holds it): cron parsing stdout
    gets the JSON error document, as from heal_sessions, and nothing is written."""
    out = StringIO()
    with run_lock("heal", label="run #7 by alice"):
        with pytest.raises(CommandError) as raised:
            call_command("prune_sessions", "--all-profiles", "--older-than", "30", "--apply", "--json",
                         stdout=out, stderr=StringIO())
    assert raised.value.returncode == 2
    document = json.loads(out.getvalue())
    assert document["version"] == 2 and document["profiles"] == []
    assert "another heal run is in progress" in document["error"] and "run #7 by alice" in document["error"]
    assert not HealRun.objects.exists() and not AuditEvent.objects.exists()


def test_a_run_that_fails_exits_2_with_the_error_document(aged_home, tmp_path):
    """A data folder never set up (no ``migrate``): the run cannot be recorded. Exit 2
    (never 1, "sessions remain"), one JSON document, one line on stderr."""
    data = tmp_path / "unmigrated"
    data.mkdir()
    proc = run_manage(["prune_sessions", "--root", str(aged_home), "--all-profiles", "--older-than", "30",
                       "--json"], data)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    document = json.loads(proc.stdout)
    assert document["error"].startswith("the run failed: OperationalError") and document["profiles"] == []
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_as_cron_runs_it(aged_home, tmp_path):
    """A separate process: exit statuses, one JSON document on stdout, one line on stderr."""
    data = tmp_path / "cron-data"
    data.mkdir()
    assert run_manage(["migrate", "-v0"], data).returncode == 0
    proc = run_manage(["prune_sessions", "--root", str(aged_home), "--all-profiles", "--older-than", "30",
                       "--json"], data)
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert len(report["profiles"]) == 6 and report["summary"]["units"] > 0
    assert proc.stderr.count("\n") <= 1 and "prune_sessions: exit 1" in proc.stderr
    proc = run_manage(["prune_sessions", "--root", str(aged_home), "--all-profiles", "--older-than", "30",
                       "--apply"], data)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "apply: 6 profile(s)" in proc.stdout and "backup:" in proc.stdout
    proc = run_manage(["prune_sessions", "--root", str(aged_home), "--all-profiles", "--json"], data)
    assert proc.returncode == 2 and json.loads(proc.stdout)["error"].startswith("say what to prune")
    proc = run_manage(["prune_sessions", "--root", str(aged_home), "--all-profiles", "--bogus", "--json"], data)
    assert proc.returncode == 2 and "error" in json.loads(proc.stdout)


def damage_messages_index(db) -> None:
    """One b-tree page of the messages index turned to garbage (a copy from a failing
    disk, as the demo's ``laptop`` profile): the sessions table still reads."""
    import sqlite3
    conn = sqlite3.connect(db)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'idx_messages_session'").fetchone()[0]
    finally:
        conn.close()
    with open(db, "r+b") as handle:
        handle.seek((root - 1) * page_size)
        handle.write(bytes((i * 37 + 11) % 256 for i in range(page_size)))


@pytest.mark.parametrize("criteria", [("--empty",), ("--older-than", "30"), ("--match", "no-such-title")])
def test_a_damaged_store_is_corrupt_and_exit_2_whatever_the_criteria(aged_home, criteria):
    """A store that cannot be read fully is never "ok: would prune 0 of 0" (ground rule 9)."""
    laptop = aged_home / "profiles" / "laptop"
    laptop.mkdir()
    copy_store(aged_home / "state.db", laptop / "state.db")
    damage_messages_index(laptop / "state.db")
    code, report = prune_cmd("--all-profiles", *criteria, "--json")
    assert code == 2
    entry = next(p for p in report["profiles"] if p["profile"] == "laptop")
    assert entry["status"] == "corrupt" and "malformed" in entry["error"]
    assert all(p["status"] == "ok" for p in report["profiles"] if p["profile"] != "laptop")
    code, text = prune_cmd("--profile", "laptop", *criteria)
    assert code == 2 and "laptop" in text and ": corrupt" in text and "would prune" not in text


def test_sizes_read_as_on_the_prune_page(aged_home):
    """One unit convention: the command prints content sizes as the page's
    ``filesizeformat`` does (1024 bytes is 1.0 KB), never KiB."""
    from django.template.defaultfilters import filesizeformat
    code, report = prune_cmd("--profile", "default", "--older-than", "30", "--json")
    size = report["summary"]["content_bytes"]
    assert size >= 1024
    code, text = prune_cmd("--profile", "default", "--older-than", "30")
    shown = filesizeformat(size).replace("\xa0", " ")
    assert f"{shown} of content" in text and "KB" in shown and "KiB" not in text
