"""Where a page's time goes, in one process: the product's view beside its floor view.

    .venv/bin/python bench/cpu.py --home var/bench/home-100k --data var/bench/data-100k \\
        --page session_small [--page list_one ...] [--repeat 30] [--cprofile 25] [--masked]

A development aid for issue 16, not a measurement for ``docs/benchmarks.md`` (that is
``bench/run.py``: real server, interleaved with Hermes). Here the product's views and
the floor views (``bench/floor.py``) run through Django's test client in this one
process, with a logged-in superuser, on the pages of ``bench/pages.py``; the data
folder gets two stored check passes first (as ``bench/run.py`` does) when it has
fewer. Printed per page: the median CPU time (``time.process_time``, so another
process on the machine weighs little) of the product and of its floor, their ratio,
the median wall times beside them,
and with ``--cprofile N`` the N heaviest functions of the product's view by
cumulative time.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def _cpu(client, path: str, repeat: int) -> tuple[float, float]:
    """Median (CPU ms, wall ms) of ``repeat`` requests: a wall time well above the CPU
    time means the view waits (file system, locks) rather than computes."""
    cpu, wall = [], []
    for _ in range(repeat):
        start, start_wall = time.process_time(), time.perf_counter()
        response = client.get(path)
        cpu.append(time.process_time() - start)
        wall.append(time.perf_counter() - start_wall)
        if response.status_code != 200:
            raise SystemExit(f"{path}: HTTP {response.status_code}")
    return statistics.median(cpu) * 1000, statistics.median(wall) * 1000


def _counts(client, path: str) -> str:
    """Statements (every connection's trace callback, Django's and plain ones),
    connections opened (``sqlite3.connect``) and ``stat``/``lstat`` calls of one view
    of ``path`` (after one warm-up view), as text."""
    import sqlite3
    import sqlite3.dbapi2

    client.get(path)
    counts = {"statements": 0, "connections": 0, "stats": 0}
    connect, stat, lstat = sqlite3.connect, os.stat, os.lstat

    def counting_connect(*args, **kwargs):
        conn = connect(*args, **kwargs)
        counts["connections"] += 1
        conn.set_trace_callback(trace)
        return conn

    def counting(real):
        def call(*args, **kwargs):
            counts["stats"] += 1
            if os.environ.get("BENCH_SQL_SHOW"):
                print("   STAT", args[0])
            return real(*args, **kwargs)
        return call

    from django.db import connections

    def trace(sql):
        counts["statements"] += 1
        if os.environ.get("BENCH_SQL_SHOW"):
            print("   SQL", sql[:160].replace("\n", " "))

    for conn in connections.all(initialized_only=True):
        if conn.connection is not None:
            conn.connection.set_trace_callback(trace)
    sqlite3.connect = sqlite3.dbapi2.connect = counting_connect
    os.stat, os.lstat = counting(stat), counting(lstat)
    try:
        client.get(path)
    finally:
        sqlite3.connect = sqlite3.dbapi2.connect = connect
        os.stat, os.lstat = stat, lstat
        for conn in connections.all(initialized_only=True):
            if conn.connection is not None:
                conn.connection.set_trace_callback(None)
    return ", ".join(f"{v} {k}" for k, v in counts.items())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--data", type=Path, required=True, help="dashboard data folder (kept between runs)")
    parser.add_argument("--page", action="append", default=[], help="page name of bench/pages.py (repeatable)")
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--cprofile", type=int, default=0, metavar="N")
    parser.add_argument("--masked", action="store_true", help="HERMES_ADMIN_MASK_SECRETS=1")
    parser.add_argument("--sql", action="store_true",
                        help="also count per view of the product: SQL statements, connections opened, stat calls")
    args = parser.parse_args(argv)

    from bench import run as bench_run
    from bench.pages import page_specs

    home, data = args.home.resolve(), args.data.resolve()
    data.mkdir(parents=True, exist_ok=True)
    bench_run.ensure_passes(home, data)
    if args.masked:
        os.environ["HERMES_ADMIN_MASK_SECRETS"] = "1"
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    os.environ["BENCH_FLOOR_HOME"] = str(home)
    bench_run._django(home, data)
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.test import Client

    settings.ALLOWED_HOSTS = ["*"]
    user = User.objects.filter(username="bench").first() or User.objects.create_superuser("bench", password=None)
    client = Client()
    client.force_login(user)
    manifest = bench_run.manifest_of(home)
    specs = page_specs(manifest, bench_run.PROFILE, None)
    names = args.page or list(specs)
    for name in names:
        spec = specs[name]
        app_ms, app_wall = _cpu(client, spec["app"], args.repeat + 2)
        floor_ms, floor_wall = _cpu(client, spec["floor"], args.repeat + 2) if spec.get("floor") else (None, None)
        ratio = f"{app_ms / floor_ms:.2f}x" if floor_ms else "-"
        wall = f"  (wall {app_wall:.2f} / {floor_wall:.2f} ms)" if floor_wall else f"  (wall {app_wall:.2f} ms)"
        print(f"{name:24} app {app_ms:7.2f} ms  floor {floor_ms or 0:7.2f} ms  {ratio}{wall}", flush=True)
        if args.sql:
            print(f"{'':24} per view: {_counts(client, spec['app'])}", flush=True)
        if args.cprofile:
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(10):
                client.get(spec["app"])
            prof.disable()
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats(os.environ.get("BENCH_SORT", "cumulative")).print_stats(args.cprofile)
            print(out.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
