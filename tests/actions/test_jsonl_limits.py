"""Size limits and unreadable fields in ``sessions/<id>.jsonl`` (issue 13).

One 200 MB line once took the command-line import to 3.2 GB and wrote 843 MB into
the store. Lines past the per-line limit are reported by number and never read
into memory nor imported; a file past the per-file limit is reported and not read;
``tool_calls`` that are not a list and non-text ``content`` (Hermes cannot read
them back) are bad lines. Stores are the fixture's, sessions written by the real
0.19.0 release.
"""

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sessions_app.checks.runner import run_store_checks
from sessions_app.stores import jsonl

from .conftest import DAY, heal, profile_entry, store
from .test_import_transcripts import (EARLIER, KEPT, SID, actions, expected, findings, transcript, write_jsonl,
                                      write_session)

pytestmark = pytest.mark.django_db
PROJECT = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024


def test_iter_lines_skips_a_long_line_without_keeping_it():
    data = b'{"a": 1}\n' + b"x" * 5000 + b"\n\n" + b'{"b": 2}'
    got = list(jsonl.iter_lines(io.BytesIO(data), max_line=100))
    assert got == [(1, b'{"a": 1}', 8), (2, None, 5000), (3, b"", 0), (4, b'{"b": 2}', 8)]
    # A line cut across chunk boundaries is measured whole.
    old = jsonl.CHUNK_BYTES
    jsonl.CHUNK_BYTES = 7
    try:
        assert list(jsonl.iter_lines(io.BytesIO(data), max_line=100)) == got
        assert list(jsonl.iter_lines(io.BytesIO(b"y" * 100 + b"\n"), max_line=100)) == [(1, b"y" * 100, 100)]
        assert list(jsonl.iter_lines(io.BytesIO(b"y" * 101), max_line=100)) == [(1, None, 101)]
    finally:
        jsonl.CHUNK_BYTES = old


def test_an_oversized_line_is_reported_by_number_and_the_others_are_imported(aged_home, settings):
    settings.HERMES_JSONL_MAX_LINE_BYTES = 4096
    s = store(aged_home, "default")
    write_session(s, "default", KEPT)
    huge = {"role": "tool", "content": "z" * 10_000, "tool_call_id": "call_cal_1", "tool_name": "calendar"}
    write_jsonl(s, SID, EARLIER[:2] + [huge] + EARLIER[3:] + KEPT)
    [f] = findings(s)
    assert [b["line"] for b in f.evidence["bad_lines"]] == [3]
    assert "line 3: line of 10,0" in f.detail and "past the 4,096 bytes per-line limit" in f.detail
    code, report = heal("--profile", "default", "--only", "transcript_on_disk_only", "--apply", "--json")
    [done] = actions(report, "default")
    assert done["status"] == "applied" and "by line number: 3" in done["reason"], done
    assert transcript(s, SID) == expected(EARLIER[:2] + EARLIER[3:] + KEPT)
    assert all("z" * 100 not in (content or "") for _, content in transcript(s, SID, active_only=False))


def test_a_file_of_oversized_lines_only_is_reported_never_trashed(aged_home, settings):
    """No message could be read, the session is gone: the file is no leftover (it
    may hold a long message), so it is reported, and stays where it is."""
    settings.HERMES_JSONL_MAX_LINE_BYTES = 4096
    s = store(aged_home, "default")
    path = write_jsonl(s, SID, [{"role": "user", "content": "q" * 10_000}])
    found = [f for f in run_store_checks(s).findings if f.session_id == SID]
    assert [f.check for f in found] == ["transcript_on_disk_only"]
    assert found[0].heal is None and "was not read whole: 1 line(s) past the 4,096 bytes" in found[0].detail
    code, report = heal("--profile", "default", "--apply", "--json")
    assert path.exists()
    assert not [a for a in profile_entry(report, "default")["actions"] if a["session_id"] == SID]


def test_a_file_past_the_per_file_limit_is_not_read_nor_imported(aged_home, settings):
    settings.HERMES_JSONL_MAX_FILE_BYTES = 2048
    s = store(aged_home, "default")
    write_session(s, "default", KEPT)
    lines = [{"role": "user", "content": f"question {n} " + "w" * 40} for n in range(60)] + KEPT
    path = write_jsonl(s, SID, lines)
    parsed = jsonl.read_file(path, SID, store_path=s.path)
    assert parsed.too_large and parsed.messages == [] and parsed.sha256 == ""
    assert "past the 2,048 bytes per-file limit (HERMES_ADMIN_JSONL_MAX_FILE_BYTES)" in parsed.error
    [f] = findings(s)
    assert f.heal is None and "not read whole" in f.detail and "per-file limit" in f.detail
    code, report = heal("--profile", "default", "--apply", "--json")
    assert transcript(s, SID) == expected(KEPT) and path.exists()


@pytest.mark.parametrize("line, problem", [
    ({"role": "assistant", "content": "", "tool_calls": {"id": "c1"}}, "tool_calls is an object, not a list"),
    ({"role": "assistant", "content": "", "tool_calls": "call it"}, "tool_calls is text that is not a JSON list"),
    ({"role": "assistant", "content": "", "tool_calls": 7}, "tool_calls is a int, not a list"),
    ({"role": "user", "content": 42}, "content is a number (42), not text"),
    ({"role": "user", "content": 4.5}, "content is a number (4.5), not text"),
    ({"role": "user", "content": True}, "content is a boolean, not text"),
])
def test_fields_hermes_cannot_read_back_make_a_bad_line(line, problem):
    got = jsonl.classify(3, json.dumps(line).encode())
    assert got.kind == "bad" and got.problem.startswith(problem), got.problem


@pytest.mark.parametrize("line", [
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{}"}}]},
    {"role": "assistant", "content": "", "tool_calls": '[{"id": "c1"}]'},  # the stored JSON text of a list
    {"role": "assistant", "content": "", "tool_calls": []},
    {"role": "user", "content": [{"type": "text", "text": "structured"}]},
])
def test_readable_fields_stay_messages(line):
    assert jsonl.classify(1, json.dumps(line).encode()).kind == "message"


def test_unreadable_fields_are_never_imported(aged_home):
    s = store(aged_home, "default")
    write_session(s, "default", KEPT)
    write_jsonl(s, SID, [EARLIER[0], {"role": "assistant", "content": 12345},
                         {"role": "assistant", "content": "", "tool_calls": {"id": "x"}}, EARLIER[3], *KEPT])
    [f] = findings(s)
    assert [b["line"] for b in f.evidence["bad_lines"]] == [2, 3]
    heal("--profile", "default", "--only", "transcript_on_disk_only", "--apply", "--json")
    assert transcript(s, SID) == expected([EARLIER[0], EARLIER[3], *KEPT])


MEASURE = r"""
import json, os, resource, subprocess, sys
proc = subprocess.run(sys.argv[1:], capture_output=True, text=True)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # KiB on Linux
print(json.dumps({"code": proc.returncode, "peak": peak, "stdout": proc.stdout, "stderr": proc.stderr[-2000:]}))
"""


def _import_peak(home: Path, data: Path) -> dict:
    """Peak RSS (bytes) of a real ``manage.py migrate_transcripts --apply`` run, as
    its parent sees it (``RUSAGE_CHILDREN`` of a wrapper whose only child it is)."""
    env = dict(os.environ, HERMES_ADMIN_DATA=str(data), HERMES_ADMIN_SECRET_KEY="test")
    env.pop("HERMES_ROOTS", None)
    env.pop("DATABASE_URL", None)
    command = [sys.executable, "manage.py", "migrate_transcripts", "--root", str(home), "--profile", "default",
               "--apply", "--json"]
    out = subprocess.run([sys.executable, "-c", MEASURE, *command], cwd=PROJECT, env=env, capture_output=True,
                         text=True, timeout=900)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_200_mb_line_keeps_the_import_bounded_in_memory(aged_home, tmp_path):
    """Measured, not timed: the import of a file with one 200 MB line peaks within
    150 MB of the same import of a file without it, and the line is not imported."""
    s = store(aged_home, "default")
    write_session(s, "default", KEPT)
    data = tmp_path / "child-data"
    data.mkdir()
    env = dict(os.environ, HERMES_ADMIN_DATA=str(data), HERMES_ADMIN_SECRET_KEY="test")
    env.pop("DATABASE_URL", None)
    assert subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=PROJECT, env=env).returncode == 0

    path = write_jsonl(s, SID, [EARLIER[0], *KEPT])
    baseline = _import_peak(aged_home, data)
    assert baseline["code"] == 0, baseline
    assert transcript(s, SID) == expected([EARLIER[0], *KEPT])

    with path.open("w", encoding="utf-8") as fh:
        fh.write(json.dumps(EARLIER[0]) + "\n")
        fh.write('{"role": "tool", "tool_call_id": "call_big", "content": "')
        block = "b" * MIB
        for _ in range(200):
            fh.write(block)
        fh.write('"}\n')
        fh.write(json.dumps(EARLIER[3]) + "\n")
        for line in KEPT:
            fh.write(json.dumps(line) + "\n")
    old = time.time() - 2 * DAY
    os.utime(path, (old, old))
    size_before = store_bytes(s)
    measured = _import_peak(aged_home, data)
    assert measured["peak"] - baseline["peak"] < 150 * MIB, (measured["peak"] // MIB, baseline["peak"] // MIB)
    report = json.loads(measured["stdout"])
    [done] = [a for a in profile_entry(report, "default")["actions"] if a["action"] == "import_jsonl_transcript"]
    assert done["status"] == "applied" and "by line number: 2" in done["reason"], done
    assert transcript(s, SID)[-4:] == expected([EARLIER[3], *KEPT])
    assert store_bytes(s) - size_before < 10 * MIB


def store_bytes(s) -> int:
    """``state.db`` plus its ``-wal`` (``os.stat`` only)."""
    return sum(os.stat(p).st_size for p in (s.path, Path(f"{s.path}-wal")) if p.exists())
