"""bench/generate.py and bench/run.py on a tiny home, so they do not rot.

Not a benchmark (issue 7: benchmarks live in bench/, never in timed tests): it only
checks that a home is generated in the real schemas and that the runner measures
the app's pages, functions and SQL floor on it and writes its report. Hermes'
own server is not started here.
"""

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_generator_and_runner_on_a_tiny_home(tmp_path):
    home = tmp_path / "home"
    work = tmp_path / "work"
    gen = subprocess.run([sys.executable, "bench/generate.py", "--messages", "3000", "--edge-messages", "1500",
                          "--profiles", "4", "--out", str(home)], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert gen.returncode == 0, gen.stderr
    manifest = json.loads((home / "manifest.json").read_text())
    assert set(manifest["profiles"]) == {"default", "edge", "ops", "research"}
    default = manifest["profiles"]["default"]
    assert default["messages"] >= 3000 and default["big_session_rows"] >= 900
    conn = sqlite3.connect(f"file:{home / 'state.db'}?mode=ro", uri=True)
    try:
        assert conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] == 22  # 0.19.0's store
        fts = conn.execute("SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH 'deploy'").fetchone()[0]
        assert fts > 0  # the store's own triggers filled its index
        assert conn.execute("PRAGMA quick_check").fetchone()[0] == "ok"
    finally:
        conn.close()
    report = tmp_path / "benchmarks.md"
    run = subprocess.run([sys.executable, "bench/run.py", "--home", str(home), "--var", str(work), "--no-hermes",
                          "--repeat", "1", "--slow-repeat", "1",
                          "--ops", "list_first,transcript_small,search_common,check_pass",
                          "--write", str(report)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    text = report.read_text()
    assert "## Budgets (issue 7)" in text and "sessions list, first page" in text
    results = json.loads((work / "results-home.json").read_text())
    for table in ("app_page", "app_function", "floor"):
        assert results[table], table
    for key, item in results["app_page"].items():
        assert item["status"] == [200], (key, item)
    assert results["app_function"]["default:check_pass"]["result"] > 0  # the sprinkled damage is found


def test_locked_stores_bench_runs(tmp_path):
    """bench/busy.py (issue 13): the table it prints has every page, the locked store's
    own page answering 503 and every other page 200, and the check run exiting 2."""
    out = tmp_path / "busy.json"
    run = subprocess.run([sys.executable, "bench/busy.py", "--read-timeout", "0.5", "--repeat", "2",
                          "--json", str(out)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads(out.read_text())["results"]
    assert len(results) == 6 and "| overview `/` |" in run.stdout
    for label, item in results.items():
        if label.startswith("the locked store's own"):
            assert item["status"] == [503, 503]
        elif label.startswith("`heal_sessions"):
            assert item["status"] == [2] and item["busy"] == ["archive", "ops"]
        else:
            assert item["status"] == [200, 200], label


def test_metrics_bench_on_the_fixture_home(tmp_path):
    """bench/metrics.py (issue 18) on a copy of the fixture home: it scrapes through
    the bearer token, parses every scrape, and prints its table."""
    import shutil

    home = tmp_path / "home"
    shutil.copytree(REPO / "tests" / "fixtures" / "hermes_home", home, ignore=shutil.ignore_patterns("*-wal", "*-shm"))
    out = tmp_path / "metrics.json"
    run = subprocess.run([sys.executable, "bench/metrics.py", "--home", str(home), "--repeat", "2", "--runs", "50",
                          "--json", str(out)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert "| later scrapes (cached probes) |" in run.stdout and "| light pass over every store" in run.stdout
    raw = json.loads(out.read_text())
    assert raw["results"]["first scrape (every probe taken)"]["samples"] > 100
