"""The one lister of ``sessions/`` files: Hermes' own naming rules and the store-file guard."""

import ast
import hashlib
import json
import os
import re

import pytest

from sessions_app.checks import run_store_checks
from sessions_app.stores import session_files as sf
from tests.checks.helpers import findings, newest_timestamp, release_python, store_of
from tests.conftest import IDS

HOUR = 3600


def _upstream_safe_component():
    """0.19.0's own ``_safe_session_filename_component``, taken from the release's
    ``run_agent.py`` (the module itself needs the whole agent's dependencies)."""
    source = (release_python("0.19.0").parents[1] / "lib" / "python3.11" / "site-packages" / "run_agent.py").read_text()
    tree = ast.parse(source)
    [fn] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_safe_session_filename_component"]
    namespace = {"re": re, "hashlib": hashlib}
    exec(compile(ast.Module([fn], []), "run_agent.py", "exec"), namespace)
    return namespace["_safe_session_filename_component"]


@pytest.mark.parametrize("sid", [
    "20260301_090000_a1b2c3", "cron_3f9a1c2b7d4e_20260301_060000", "../../../../etc/pwned", "a.b",
    "agent:main:telegram:dm:42", "_lead", "x" * 120, "", "  spaced  ", "ümlaut-ßession", "dots.", "a/b\\c",
])
def test_safe_component_is_upstreams(sid):
    assert sf.safe_component(sid) == _upstream_safe_component()(sid)


@pytest.mark.parametrize("name, expected", [
    ("session_20260301_090000_a1b2c3.json", ("snapshot", "20260301_090000_a1b2c3", "")),
    ("request_dump_20260301_090000_a1b2c3_20260301_091500_123456.json",
     ("request_dump", "20260301_090000_a1b2c3", "20260301_091500_123456")),
    ("20260301_090000_a1b2c3.jsonl", ("jsonl", "20260301_090000_a1b2c3", "")),
    ("20260301_090000_a1b2c3.json", ("json", "20260301_090000_a1b2c3", "")),
    ("request_dump_oddly_named.json", ("json", "request_dump_oddly_named", "")),
    ("session_.json", ("json", "session_", "")),
])
def test_names(name, expected):
    parts = sf.parse_name(name)
    assert (parts.kind, parts.component, parts.stamp) == expected


@pytest.mark.parametrize("name", ["sessions.json", ".hidden.json", "state.db", "state.db-wal", "x.json-wal",
                                  "state.db.json", "notes.txt", ".jsonl", "saved"])
def test_not_session_files(name):
    assert sf.parse_name(name) is None


def test_sanitised_names_map_back_to_the_store_id(tmp_path):
    sid = "agent:main:telegram:dm:42"
    safe = sf.safe_component(sid)
    assert safe != sid
    folder = tmp_path / "sessions"
    folder.mkdir()
    (folder / f"session_{safe}.json").write_text("{}")
    (folder / f"request_dump_{safe}_20260301_091500_123456.json").write_text("{}")
    (folder / "session_someone_else.json").write_text("{}")
    listed = sf.list_session_files(folder, store_paths=[tmp_path / "state.db"], known_ids=[sid])
    by_name = {f.name: f for f in listed}
    assert by_name[f"session_{safe}.json"].session_id == sid
    assert by_name[f"session_{safe}.json"].kind == "snapshot"
    assert by_name[f"request_dump_{safe}_20260301_091500_123456.json"].session_id == sid
    assert by_name["session_someone_else.json"].session_id == "someone_else"  # unknown: the component itself
    assert sf.belongs_to(f"session_{safe}.json", sid) and not sf.belongs_to("session_someone_else.json", sid)


def test_a_known_id_named_like_a_snapshot_keeps_its_json(tmp_path):
    """``session_abc.json`` is the ``<id>.json`` of a session whose id is ``session_abc``."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    (folder / "session_abc.json").write_text("{}")
    [f] = sf.list_session_files(folder, store_paths=[tmp_path / "state.db"], known_ids=["session_abc"])
    assert (f.session_id, f.kind) == ("session_abc", "json")


def test_one_sessions_files_are_the_full_listings_files_of_that_session(tmp_path):
    """Listing for given ids skips names before parsing them: it must keep exactly
    what the full listing gives those ids, for sanitised, raw, look-alike and
    overlapping ids alike."""
    ids = ["agent:main:telegram:dm:42", "abc", "abcd", "session_abc", "x" * 120, "ümlaut-ßession", "a.b",
           "20260301_090000_a1b2c3", "20260301_090000_a1b2c3_2"]
    folder = tmp_path / "sessions"
    folder.mkdir()
    for sid in [*ids, "unknown_one"]:
        for comp in sf.components(sid):
            for name in (f"{comp}.jsonl", f"{comp}.json", f"session_{comp}.json",
                         f"request_dump_{comp}_20260301_091500_123456.json"):
                (folder / name).write_text("{}")
    guard = [tmp_path / "state.db"]
    everything = sf.list_session_files(folder, store_paths=guard, known_ids=ids)
    for sid in [*ids, "unknown_one", "session_unknown_one", "nobody"]:
        expected = [f for f in everything if f.session_id == sid]
        assert sf.list_session_files(folder, store_paths=guard, known_ids=ids, only_ids=[sid]) == expected, sid
    assert any(f.session_id == "session_abc" for f in everything)  # the look-alike is a case here
    assert sf.files_of(folder, "abc", store_paths=guard) == [
        f for f in sf.list_session_files(folder, store_paths=guard, known_ids=["abc"]) if f.session_id == "abc"]


def test_store_files_are_never_listed(hermes_home):
    """A hard link to state.db (and to another profile's -wal) inside sessions/,
    named like a snapshot, a symlink and sidecar names: none is a session file."""
    s, other = store_of(hermes_home, "default"), store_of(hermes_home, "ops")
    folder = s.profile.sessions_dir
    folder.mkdir(exist_ok=True)
    sid = IDS["cli_main"]
    os.link(s.path, folder / f"session_{sid}.json")
    os.link(other.path, folder / f"request_dump_{sid}_20260301_091500_123456.json")
    os.symlink(s.path, folder / f"{sid}.jsonl")
    (folder / f"{sid}.json-wal").write_text("x")
    (folder / f"{sid}.json").write_text("{}")  # the only real session file
    listed = sf.list_session_files(folder, store_paths=sf.store_paths_of(s, [other]), known_ids=[sid])
    assert [f.name for f in listed] == [f"{sid}.json"]
    # The checks use the same lister: the hard link is no leftover and no copy.
    report = run_store_checks(s, now=newest_timestamp(s) + 2 * HOUR, other_stores=[other])
    for f in report.findings:
        assert f"session_{sid}.json" not in json.dumps(f.evidence), f
    assert os.stat(folder / f"session_{sid}.json").st_ino == os.stat(s.path).st_ino


def test_the_check_scanner_maps_snapshots_to_their_session(hermes_home):
    """The data-loss bug: ``session_<id>.json`` was read as a file of a session
    ``session_<id>`` and planned for the trash; it is session ``<id>``'s snapshot."""
    s = store_of(hermes_home, "default")
    sid = IDS["cli_main"]
    folder = s.profile.sessions_dir
    folder.mkdir(exist_ok=True)
    (folder / f"session_{sid}.json").write_text(json.dumps({"session_id": sid, "messages": []}))
    report = run_store_checks(s, now=newest_timestamp(s) + 2 * HOUR, only=["leftover_files"])
    assert not findings(report, "leftover_files")


def test_a_snapshot_holding_messages_is_never_planned_for_the_trash(hermes_home):
    """A deleted session's files: the snapshot that holds its messages stays (the
    finding says why); the empty request dump and a broken copy are handled apart."""
    s = store_of(hermes_home, "default")
    sid = "20260201_080000_dead0009"
    folder = s.profile.sessions_dir
    folder.mkdir(exist_ok=True)
    snapshot = {"session_id": sid, "message_count": 2, "messages": [
        {"role": "user", "content": "remember the boat"}, {"role": "assistant", "content": "The boat is blue."}]}
    (folder / f"session_{sid}.json").write_text(json.dumps(snapshot, indent=2))
    (folder / f"request_dump_{sid}_20260201_080100_000001.json").write_text(json.dumps({"session_id": sid}))
    (folder / f"{sid}.json").write_text('{"session_id": "' + sid + '", "messages": [{"role": "user", "con')
    [f] = findings(run_store_checks(s, now=newest_timestamp(s) + 2 * HOUR, only=["leftover_files"]), "leftover_files")
    assert f.session_id == sid
    assert f.evidence["files"] == [f"request_dump_{sid}_20260201_080100_000001.json"]
    kept = {k["file"]: k["why"] for k in f.evidence["kept"]}
    assert set(kept) == {f"session_{sid}.json", f"{sid}.json"}
    assert "2 messages the store lacks" in kept[f"session_{sid}.json"]
    assert "truncated" in kept[f"{sid}.json"]
