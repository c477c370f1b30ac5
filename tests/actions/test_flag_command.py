"""``manage.py flag_sessions``: flags and titles from the command line, on stores written
by the real releases (and the newest shape); the cron contract (exit codes, ``--json``,
the run lock, the run record), in-process and as a separate process."""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from sessions_app.actions import flags
from sessions_app.locks import run_lock
from sessions_app.models import AuditEvent, HealRun
from tests.checks.helpers import hermes
from tests.conftest import ids

from .conftest import run_command, run_manage, store
from .delete_helpers import dump, rows, stop
from .prune_helpers import lock_holder

pytestmark = pytest.mark.django_db


def flag_cmd(*args):
    return run_command("flag_sessions", *args)


def actions(report):
    return [a for p in report["profiles"] for a in p["actions"]]


def test_archive_a_lineage_on_0_19_0_and_the_release_reads_it(aged_home):
    s = store(aged_home, "default")
    d = ids("default")
    chain = [d["compress_root"], d["compress_mid"], d["compress_tip"]]
    code, report = flag_cmd("--profile", "default", "--archive", d["compress_mid"], d["long"], "--json")
    assert code == 0, report
    assert report["version"] == 2 and report["mode"] == "flags"
    assert [(a["session_id"], a["status"]) for a in actions(report)] == [(d["compress_mid"], "applied"),
                                                                        (d["long"], "applied")]
    assert rows(s, "SELECT COUNT(*) FROM sessions WHERE archived = 1") == [(4,)]
    out = hermes(s, f"print([db.get_session(sid)['archived'] for sid in {chain + [d['long'], d['cron']]!r}])")
    assert out.strip() == "[1, 1, 1, 1, 0]"  # what the real release reads back
    events = AuditEvent.objects.filter(action=flags.FLAG_ACTION, outcome="applied")
    assert events.count() == 2 and all(e.actor_label.startswith("command:flag_sessions@") for e in events)
    [run] = HealRun.objects.filter(mode="flags", trigger="command")
    assert run.status == "done" and run.report["summary"]["applied"] == 2
    # Again: already so, nothing to do, exit 0.
    code, again = flag_cmd("--profile", "default", "--archive", d["long"], "--json")
    assert code == 0 and actions(again)[0]["status"] == "skipped" and "already archived" in actions(again)[0]["reason"]


def test_pin_on_the_newest_shape_and_unpin(aged_home):
    edge = store(aged_home, "edge")
    sid = ids("edge")["long"]
    assert flag_cmd("--profile", "edge", "--pin", sid)[0] == 0
    assert rows(edge, "SELECT pinned FROM sessions WHERE id = ?", (sid,)) == [(1,)]
    code, text = flag_cmd("--profile", "edge", "--unpin", sid)
    assert code == 0 and "applied" in text and "flags: applied 1" in text
    assert rows(edge, "SELECT pinned FROM sessions WHERE id = ?", (sid,)) == [(0,)]


def test_a_rename_clash_exits_2_and_names_the_session_holding_the_title(aged_home):
    s = store(aged_home, "default")
    d = ids("default")
    before = dump(s)
    code, report = flag_cmd("--profile", "default", "--rename", "Fix the flaky build", d["long"], "--json")
    assert code == 2
    [action] = actions(report)
    assert action["refused"] and not action["retry"] and d["cli_main"] in action["reason"]
    assert dump(s) == before
    code, report = flag_cmd("--profile", "default", "--rename", "  Quarterly\u200b numbers ", d["long"], "--json")
    assert code == 0 and actions(report)[0]["status"] == "applied"
    assert hermes(s, f"print(db.get_session({d['long']!r})['title'])").strip() == "Quarterly numbers"
    assert flag_cmd("--profile", "default", "--rename", "", d["long"])[0] == 0  # clears it
    assert rows(s, "SELECT title FROM sessions WHERE id = ?", (d["long"],)) == [(None,)]


def test_a_live_session_exits_1_to_retry_later(aged_home):
    s = store(aged_home, "default")
    sid = ids("default")["long"]
    holder = lock_holder(s, sid)
    try:
        code, report = flag_cmd("--profile", "default", "--archive", sid, "--json")
    finally:
        stop(holder)
    assert code == 1
    [action] = actions(report)
    assert action["refused"] and action["retry"] and "compression_lock" in action["reason"]
    assert rows(s, "SELECT archived FROM sessions WHERE id = ?", (sid,)) == [(0,)]


def test_what_cannot_be_done_as_asked_exits_2(aged_home):
    a = ids("archive")
    code, report = flag_cmd("--profile", "archive", "--archive", a["long"], "--json")  # 0.13.0: no column
    assert code == 2 and "no archived column" in actions(report)[0]["reason"]
    code, report = flag_cmd("--profile", "default", "--archive", "no_such_session", "--json")
    assert code == 2 and "no longer exists" in actions(report)[0]["reason"]


@pytest.mark.parametrize("args, words", [
    (("--profile", "default", "X"), "say what to change"),
    (("--profile", "default", "--pin"), "name the session"),
    (("--all-profiles", "--pin", "X"), "one profile"),
    (("--profile", "default", "--profile", "edge", "--pin", "X"), "one profile"),
    (("--profile", "default", "--rename", "t", "X", "Y"), "exactly one"),
    (("--profile", "default", "--rename", "t" * 101, "X"), "too long"),
    (("--profile", "nope", "--pin", "X"), "unknown profile"),
])
def test_wrong_arguments_exit_2_with_a_json_error_document(aged_home, args, words):
    out = StringIO()
    with pytest.raises(CommandError) as raised:
        call_command("flag_sessions", *args, "--json", stdout=out, stderr=StringIO())
    assert raised.value.returncode == 2 and words in str(raised.value)
    document = json.loads(out.getvalue())
    assert document["profiles"] == [] and words in document["error"]


def test_another_run_holding_the_lock_exits_2_with_the_error_document(aged_home):
    out = StringIO()
    with run_lock("heal", label="run #7 by alice"):
        with pytest.raises(CommandError) as raised:
            call_command("flag_sessions", "--profile", "default", "--pin", "X", "--json", stdout=out,
                         stderr=StringIO())
    assert raised.value.returncode == 2
    assert "another heal run is in progress" in json.loads(out.getvalue())["error"]
    assert not AuditEvent.objects.exists()


def test_as_cron_runs_it(aged_home, tmp_path):
    data = tmp_path / "cron-data"
    data.mkdir()
    assert run_manage(["migrate", "-v0"], data).returncode == 0
    d = ids("default")
    proc = run_manage(["flag_sessions", "--root", str(aged_home), "--profile", "default", "--archive", d["long"],
                       "--json"], data)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["summary"]["applied"] == 1 and proc.stderr == ""
    proc = run_manage(["flag_sessions", "--root", str(aged_home), "--profile", "default", "--rename",
                       "Fix the flaky build", d["long"]], data)
    assert proc.returncode == 2 and proc.stderr.count("\n") <= 1
    assert "flag_sessions: exit 2: 0 failed, 1 refused" in proc.stderr and d["cli_main"] in proc.stdout
    proc = run_manage(["flag_sessions", "--root", str(aged_home), "--profile", "default", "--pin", "--unpin", "X",
                       "--json"], data)
    assert proc.returncode == 2 and "not allowed with" in json.loads(proc.stdout)["error"]
