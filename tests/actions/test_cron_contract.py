"""The cron contract of heal_sessions and migrate_transcripts, exactly as the README's
cron section and ``--help`` state it, with the real commands run as subprocesses
(as cron runs them): a JSON error document on every argument error, ``--only ""``
refused, the ``--fail-on`` line naming what tripped it, ``logs/`` present after
setup, and "a run with nothing to report prints one summary line" true when only
findings below ``--fail-on`` exist."""

import json
import subprocess
import sys

import pytest

from tests.checks.helpers import damage
from tests.conftest import ids

from .conftest import PROJECT, manage_env, run_manage, store

COMMANDS = ("heal_sessions", "migrate_transcripts")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A data folder set up the way scripts/dashboard.sh sets it up (``migrate``)."""
    folder = tmp_path_factory.mktemp("cron-data")
    done = run_manage(["migrate", "-v0"], folder)
    assert done.returncode == 0, done.stderr
    return folder


def command(name, *args, data, home=None):
    root = ["--root", str(home)] if home is not None else []
    return run_manage([name, *root, *args], data)


def error_document(out) -> dict:
    """The JSON error document of a refused run, with its one stderr line."""
    assert out.returncode == 2, (out.stdout, out.stderr)
    document = json.loads(out.stdout)
    assert set(document) == {"version", "error", "profiles"}
    assert document["version"] == 2 and document["profiles"] == [] and document["error"]
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    return document


ARGPARSE_ERRORS = [
    (("--all-profiles", "--fail-on", "bogus"), "argument --fail-on: invalid choice: 'bogus'"),
    (("--all-profiles", "--no-such-flag"), "unrecognized arguments: --no-such-flag"),
    (("--all-profiles", "--profile"), "argument --profile: expected one argument"),
    (("--all-profiles", "--root"), "argument --root: expected one argument"),
    (("--all-profiles", "--fail-on"), "argument --fail-on: expected one argument"),
]


@pytest.mark.parametrize("name", COMMANDS)
@pytest.mark.parametrize("args, message", ARGPARSE_ERRORS)
def test_argparse_errors_print_a_json_document_with_json(hermes_home, data, name, args, message):
    # --json before the bad argument and after it (where argparse stops at the
    # error before ever reading --json).
    for ordered in (("--json", *args), (*args, "--json")):
        out = command(name, *ordered, data=data, home=hermes_home)
        document = error_document(out)
        assert message in document["error"] and message in out.stderr


@pytest.mark.parametrize("name", COMMANDS)
def test_an_abbreviated_json_flag_counts(hermes_home, data, name):
    document = error_document(command(name, "--all-profiles", "--js", "--fail-on", "bogus", data=data, home=hermes_home))
    assert "invalid choice: 'bogus'" in document["error"]


@pytest.mark.parametrize("name", COMMANDS)
def test_without_json_an_argparse_error_is_usage_on_stderr(hermes_home, data, name):
    out = command(name, "--all-profiles", "--fail-on", "bogus", data=data, home=hermes_home)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("usage: ") and "invalid choice: 'bogus'" in out.stderr


@pytest.mark.parametrize("only, message", [
    ("", "--only needs at least one check code"),
    (",", "--only needs at least one check code"),
    (" , ", "--only needs at least one check code"),
    ("bogus", "unknown check code(s): bogus"),
    ("bogus,nope", "unknown check code(s): bogus, nope"),
])
def test_only_without_a_known_code_is_an_error_not_every_check(hermes_home, data, only, message):
    document = error_document(command("heal_sessions", "--all-profiles", "--only", only, "--json",
                                      data=data, home=hermes_home))
    assert message in document["error"]
    out = command("heal_sessions", "--all-profiles", "--only", only, data=data, home=hermes_home)
    assert out.returncode == 2 and out.stdout == "" and message in out.stderr


def test_migrate_transcripts_has_no_only_and_says_so_in_json(hermes_home, data):
    document = error_document(command("migrate_transcripts", "--all-profiles", "--only", "counter_drift", "--json",
                                      data=data, home=hermes_home))
    assert "unrecognized arguments: --only counter_drift" in document["error"]


@pytest.mark.parametrize("name", COMMANDS)
def test_selection_errors_print_a_json_document_too(hermes_home, data, name):
    document = error_document(command(name, "--json", data=data, home=hermes_home))
    assert "--profile NAME" in document["error"]
    document = error_document(command(name, "--profile", "nope", "--json", data=data, home=hermes_home))
    assert "unknown profile(s): nope" in document["error"]


def test_fail_on_names_the_count_that_tripped_it(hermes_home, data):
    # schema_outdated is info on every store older than the newest shape: five of six.
    only = ("--only", "schema_outdated")
    report = json.loads(command("heal_sessions", "--all-profiles", *only, "--json", data=data, home=hermes_home).stdout)
    infos = report["summary"]["info"]
    assert infos == 5 and report["summary"]["warning"] == report["summary"]["critical"] == 0

    out = command("heal_sessions", "--all-profiles", *only, "--fail-on", "info", data=data, home=hermes_home)
    assert out.returncode == 1
    [line] = out.stderr.strip().splitlines()
    assert line.startswith(f"heal_sessions: exit 1: failing: {infos} info finding(s) with --fail-on info; ")
    assert f"0 critical, 0 warning, {infos} info" in line

    s = store(hermes_home, "default")
    with damage(s) as db:  # a warning: message_count off by 3
        db.execute("UPDATE sessions SET message_count = message_count + 3 WHERE id = ?", (ids("default")["cli_main"],))
    out = command("heal_sessions", "--all-profiles", "--only", "schema_outdated,counter_drift", "--json",
                  data=data, home=hermes_home)
    assert out.returncode == 1 and json.loads(out.stdout)["summary"]["warning"] == 1
    [line] = out.stderr.strip().splitlines()
    assert "failing: 1 warning finding(s) with --fail-on warning; " in line  # infos do not trip warning


def test_a_run_with_only_findings_below_fail_on_prints_one_summary_line(hermes_home, data):
    only = ("--only", "schema_outdated,orphan_messages")
    out = command("heal_sessions", "--all-profiles", *only, data=data, home=hermes_home)
    assert out.returncode == 0 and out.stderr == ""
    assert out.stdout.strip().splitlines() == [
        "check: 6 profile(s), 6 with nothing to report; 0 critical, 0 warning, 5 info "
        "(5 below --fail-on warning, not listed); applied 0, skipped 0, refused 0, failed 0"
    ]
    # --fail-on info lists them (and fails).
    out = command("heal_sessions", "--all-profiles", *only, "--fail-on", "info", data=data, home=hermes_home)
    lines = out.stdout.strip().splitlines()
    assert out.returncode == 1 and sum("info     schema_outdated" in line for line in lines) == 5
    assert lines[-1].startswith("check: 6 profile(s), 1 with nothing to report; 0 critical, 0 warning, 5 info;")


def test_findings_at_fail_on_are_listed_with_their_planned_repair(hermes_home, data):
    s = store(hermes_home, "ops")
    sid = ids("ops")["long"]
    with damage(s) as db:
        db.execute("UPDATE sessions SET message_count = 99 WHERE id = ?", (sid,))
    out = command("heal_sessions", "--profile", "ops", "--only", "schema_outdated,counter_drift",
                  data=data, home=hermes_home)
    lines = out.stdout.strip().splitlines()
    assert out.returncode == 1
    assert any(line.startswith(f"  warning  counter_drift session {sid}: ") for line in lines)
    assert any(line.startswith("  planned  recount_session " + sid) for line in lines)
    assert not any("schema_outdated" in line for line in lines)  # info, below --fail-on warning


def test_logs_folder_exists_after_setup_and_the_readme_cron_line_works(hermes_home, data):
    assert (data / "logs").is_dir()
    # The README's line, with the demo's --root and this data folder for var/.
    line = (f"{sys.executable} manage.py heal_sessions --root {hermes_home} --all-profiles --apply --json "
            f"--only orphan_messages > {data}/logs/heal-$(date +%F).json")
    done = subprocess.run(["sh", "-c", line], cwd=PROJECT, env=manage_env(data),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    [written] = list((data / "logs").glob("heal-*.json"))
    assert json.loads(written.read_text())["mode"] == "apply"


@pytest.mark.parametrize("name", COMMANDS)
def test_help_states_the_contract_the_tests_above_check(data, name):
    out = run_manage([name, "--help"], data)
    assert out.returncode == 0
    text = out.stdout
    assert "exit status: 0 nothing at or above --fail-on remains; 1 such findings remain;\n2 a store" in text
    assert '{"version": 2, "error": "...", "profiles": []}' in text
    assert "a run with nothing to report prints that\none line" in text
    assert ("--only CODE[,CODE…]" in text) == (name == "heal_sessions")


@pytest.mark.parametrize("name, first_lines", [
    ("prune_sessions", "exit status: 0 nothing (left) to prune; 1 sessions remain that the criteria select\n(check"),
    ("flag_sessions", "exit status: 0 every change was made (or was already so); 1 some were not made for\na passing"),
])
def test_help_of_the_other_store_commands_ends_with_their_contract(data, name, first_lines):
    """Each store command's epilog (``StoreCommand.epilog``), its line breaks kept."""
    out = run_manage([name, "--help"], data)
    assert out.returncode == 0
    assert first_lines in out.stdout and '{"version": 2, "error": "...", "profiles": []}' in out.stdout


def test_an_unreadable_store_is_named_as_what_tripped_exit_2(hermes_home, data):
    (hermes_home / "profiles" / "legacy" / "state.db").write_text("not a database at all\n" * 100)
    out = command("heal_sessions", "--all-profiles", "--only", "orphan_messages", data=data, home=hermes_home)
    assert out.returncode == 2
    [line] = out.stderr.strip().splitlines()
    # The store first; its store_unreadable finding is counted too.
    assert line.startswith("heal_sessions: exit 2: failing: 1 store(s) not readable; "
                           "1 critical finding(s) with --fail-on warning; 1 critical")
    assert "legacy (" in out.stdout and ": unreadable" in out.stdout  # the damaged store is listed


# The same start for every store command (StoreCommand.run_locked and its argparse
# hook): prune_sessions and flag_sessions, as cron runs them.
OTHER_ARGPARSE_ERRORS = [
    ("prune_sessions", ("--all-profiles", "--batch-size", "many"), "argument --batch-size: invalid int value: 'many'"),
    ("prune_sessions", ("--all-profiles", "--no-such-flag"), "unrecognized arguments: --no-such-flag"),
    ("prune_sessions", ("--all-profiles", "--older-than"), "argument --older-than: expected one argument"),
    ("flag_sessions", ("--profile", "default", "--no-such-flag"), "unrecognized arguments: --no-such-flag"),
    ("flag_sessions", ("--profile", "default", "--rename"), "argument --rename: expected one argument"),
]


@pytest.mark.parametrize("name, args, message", OTHER_ARGPARSE_ERRORS)
def test_prune_and_flag_argparse_errors_print_a_json_document_too(hermes_home, data, name, args, message):
    for ordered in (("--json", *args), (*args, "--json")):
        document = error_document(command(name, *ordered, data=data, home=hermes_home))
        assert message in document["error"]
    out = command(name, *args, data=data, home=hermes_home)
    assert out.returncode == 2 and out.stdout == "" and out.stderr.startswith("usage: ")


RUNS = {
    "heal_sessions": ("--all-profiles",),
    "migrate_transcripts": ("--all-profiles", "--apply"),
    "prune_sessions": ("--all-profiles", "--empty", "--apply"),
    "flag_sessions": ("--profile", "default", "--archive", ids("default")["cli_main"]),
}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_a_held_run_lock_prints_the_json_document_for_every_command(hermes_home, data, settings, name):
    """A browser job (here: this process) holds the run lock of the data folder."""
    from sessions_app.locks import run_lock

    settings.DATA_DIR = data
    before = store(hermes_home, "default").path.stat().st_mtime_ns
    with run_lock("heal", label="run #12 by alice"):
        out = command(name, *RUNS[name], "--json", data=data, home=hermes_home)
        plain = command(name, *RUNS[name], data=data, home=hermes_home)
    document = error_document(out)
    assert "another heal run is in progress" in document["error"] and "run #12 by alice" in document["error"]
    assert plain.returncode == 2 and plain.stdout == "" and "another heal run is in progress" in plain.stderr
    assert store(hermes_home, "default").path.stat().st_mtime_ns == before  # nothing written


def test_the_three_kinds_of_error_line_the_readme_names(hermes_home, data):
    """README, cron section: argparse's ``manage.py NAME: error:``, a refusal's
    ``CommandError:``, a finished run's ``NAME: exit N:``, each exit status as stated."""
    bad_flag = run_manage(["prune_sessions", "--root", str(hermes_home), "--bogus"], data)
    assert bad_flag.returncode == 2
    assert bad_flag.stderr.strip().splitlines()[-1].startswith("manage.py prune_sessions: error: ")
    refused = run_manage(["prune_sessions", "--root", str(hermes_home), "--profile", "nope", "--empty"], data)
    assert refused.returncode == 2 and refused.stderr.startswith("CommandError: unknown profile(s): nope")
    ran = run_manage(["prune_sessions", "--root", str(hermes_home), "--all-profiles", "--older-than", "0"], data)
    assert ran.returncode == 1 and ran.stderr.strip().startswith("prune_sessions: exit 1: ")
    readme = (PROJECT / "README.md").read_text()
    assert all(form in readme for form in ("`manage.py heal_sessions: error: …`", "`CommandError: …`",
                                           "`heal_sessions: exit N: …`"))
