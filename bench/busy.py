"""Page times with two stores locked by other processes (issue 13, point 4).

    .venv/bin/python bench/busy.py [--read-timeout 5] [--repeat 3] [--json out.json]

On a copy of the test fixture home (6 profiles written by hermes-agent 0.13.0 to
0.19.0) two stores are locked by real processes until killed: ``archive`` switched to
a rollback journal and held in ``BEGIN EXCLUSIVE``, ``ops`` (WAL) by a holder in
``locking_mode=EXCLUSIVE`` that wrote once (``tests/stores/lock_holders.py``). Then,
in this process through Django's test client (logged in as a superuser), it times the
overview, the sessions list, the session and search pages of an unrelated profile
(``research``) and the locked store's own session page, each ``--repeat`` times in a
row (the first with no store remembered as locked), and a check-mode ``manage.py
heal_sessions --all-profiles --json`` subprocess. Printed as a Markdown table (first
view, then the median of the following views). Runs on older checkouts too, for a
before/after: copy this file and ``tests/stores/lock_holders.py`` into one.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.stores.lock_holders import holding  # noqa: E402

FIXTURE = REPO / "tests" / "fixtures" / "hermes_home"
LOCKS = (("archive", "rollback"), ("ops", "wal_exclusive"))


def _db(home: Path, profile: str) -> Path:
    return home / "state.db" if profile == "default" else home / "profiles" / profile / "state.db"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--read-timeout", type=float, default=5.0, help="HERMES_ADMIN_READ_TIMEOUT, seconds")
    parser.add_argument("--repeat", type=int, default=3, help="views of each page in a row")
    parser.add_argument("--json", type=Path, help="write the raw times here")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="busy-bench-"))
    home, data = work / "hermes", work / "data"
    shutil.copytree(FIXTURE, home, ignore=shutil.ignore_patterns("*-wal", "*-shm"))
    data.mkdir()
    env = {"HERMES_ROOTS": str(home), "HERMES_ADMIN_DATA": str(data), "HERMES_ADMIN_SECRET_KEY": "bench",
           "HERMES_ADMIN_READ_TIMEOUT": str(args.read_timeout), "DJANGO_SETTINGS_MODULE": "hermes_admin.settings"}
    os.environ.update(env)
    # Its own database in its own data folder, never the one DATABASE_URL names (a
    # PostgreSQL test run shares that server; the bench's admin user would clash).
    os.environ.pop("DATABASE_URL", None)
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.test import Client

    call_command("migrate", verbosity=0)
    client = Client(HTTP_HOST="localhost")
    client.force_login(User.objects.create_superuser("bench", password=None))
    ids = json.loads((FIXTURE / "manifest.json").read_text())["profiles"]
    pages = {
        "overview `/`": "/",
        "sessions list `/sessions/`": "/sessions/",
        "session page of an unrelated profile": f"/p/research/s/{ids['research']['session_ids']['cli_main']}/",
        "search page of an unrelated profile": "/p/research/search/?q=build",
        "the locked store's own session page": f"/p/ops/s/{ids['ops']['session_ids']['cli_main']}/",
    }
    results: dict[str, dict] = {}
    with holding(*((_db(home, p), kind) for p, kind in LOCKS)):
        for label, path in pages.items():
            try:  # each page's first view finds no store remembered as locked
                from sessions_app.stores import busy

                busy.reset()
            except ImportError:  # a checkout from before glances
                pass
            times, statuses = [], []
            for _ in range(max(1, args.repeat)):
                start = time.perf_counter()
                statuses.append(client.get(path).status_code)
                times.append(time.perf_counter() - start)
            results[label] = {"times": times, "status": statuses}
        start = time.perf_counter()
        heal = subprocess.run([sys.executable, "manage.py", "heal_sessions", "--all-profiles", "--json"], cwd=REPO,
                              env={k: v for k, v in dict(os.environ, **env).items() if k != "DATABASE_URL"}, capture_output=True, text=True, timeout=3600)
        elapsed = time.perf_counter() - start
        report = json.loads(heal.stdout)
        busy = sorted(p["profile"] for p in report["profiles"] if p["status"] == "busy")
        results["`heal_sessions --all-profiles --json` (check mode)"] = {
            "times": [elapsed], "status": [heal.returncode], "busy": busy}
    shutil.rmtree(work, ignore_errors=True)

    print(f"Read timeout {args.read_timeout:g} s; locked: "
          + ", ".join(f"{p} ({k})" for p, k in LOCKS) + "\n")
    print("| page | first view | later views (median) | status |")
    print("|---|---:|---:|---|")
    for label, item in results.items():
        times = item["times"]
        later = f"{statistics.median(times[1:]):.2f} s" if len(times) > 1 else "—"
        print(f"| {label} | {times[0]:.2f} s | {later} | {', '.join(map(str, item['status']))} |")
    if args.json:
        args.json.write_text(json.dumps({"read_timeout": args.read_timeout, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
