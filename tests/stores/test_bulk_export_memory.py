"""A 5,000-session bulk export in bounded memory, measured in a subprocess.

The default (0.19.0) store of a copied fixture home gets N more sessions of four
2.5 kB messages each, written with plain SQL (the store's own FTS triggers index
them); every other profile stays as the releases wrote it. The export runs in a
fresh process (``bulk_export_worker.py``), its chunks written to a file as a
response would send them; the bound is on that process's peak RSS, never on time.
"""

import json
import sqlite3
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import copy_home

WORKER = Path(__file__).with_name("bulk_export_worker.py")
TEXT = "lorem ipsum dolor sit amet, consectetur adipiscing elit " * 45  # ~2.5 kB


def grow(home: Path, n: int) -> None:
    conn = sqlite3.connect(home / "state.db", isolation_level=None)
    conn.execute("BEGIN")
    base = 1790000000.0
    for i in range(n):
        sid = f"20260101_000000_bulk{i:06d}"
        conn.execute("INSERT INTO sessions(id, source, model, started_at, ended_at, end_reason, message_count, title) "
                     "VALUES (?, 'cli', 'anthropic/claude-sonnet-4', ?, ?, 'cli_close', 4, ?)",
                     (sid, base + i, base + i + 50, f"bulk session {i}"))
        conn.executemany("INSERT INTO messages(session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
                         [(sid, role, f"message {j} of bulk session {i}: {TEXT}", base + i + j)
                          for j, role in enumerate(("user", "assistant", "user", "assistant"))])
    conn.execute("COMMIT")
    conn.close()


def export(home: Path, tmp: Path) -> tuple[dict, Path]:
    out = tmp / f"{home.name}.zip"
    data = tmp / f"{home.name}-data"
    data.mkdir()
    proc = subprocess.run([sys.executable, str(WORKER), str(home), str(out), str(data)], capture_output=True,
                          text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), out


def sessions_in(home: Path) -> int:
    total = 0
    for db in [home / "state.db", *sorted((home / "profiles").glob("*/state.db"))]:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        total += conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
        conn.close()
    return total


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bulk")
    out = {}
    for n in (500, 5000):
        home = copy_home(tmp / f"home-{n}")
        grow(home, n)
        out[n] = (home, *export(home, tmp))
    return out


def test_a_5000_session_export_stays_in_bounded_memory(measured):
    small, small_zip = measured[500][1:]
    big, big_zip = measured[5000][1:]
    with zipfile.ZipFile(big_zip) as zf:
        exported = sum(info.file_size for info in zf.infolist())
    # More than 100 MB of transcripts went through a process that grew by a small
    # fraction of that, and ten times the sessions cost little more than the small export.
    assert exported > 100 * 2**20
    assert big["peak_mb"] - big["rss_before_mb"] < 32, big
    assert big["peak_mb"] - small["peak_mb"] < 24, (small, big)
    assert big["peak_mb"] < 160, big


def test_the_5000_session_archive_is_complete_and_valid(measured):
    home, _, path = measured[5000]
    total = sessions_in(home)
    with zipfile.ZipFile(path) as zf:
        assert zf.testzip() is None
        names = zf.namelist()
        top = names[0].split("/")[0]
        assert len(names) == 2 * total + 2
        lines = zf.read(f"{top}/default/20260101_000000_bulk004999.jsonl").decode().splitlines()
        assert len(lines) == 5 and json.loads(lines[0])["session"]["title"] == "bulk session 4999"
        assert json.loads(lines[-1])["content"].startswith("message 3 of bulk session 4999: lorem")
        rows = zf.read(f"{top}/sessions.csv").decode().splitlines()
        assert len(rows) == total + 1
        assert f"export of {total} session(s)" in zf.read(f"{top}/export-notes.txt").decode()
