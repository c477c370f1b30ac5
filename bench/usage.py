"""The usage page on a big home (issue 14): cold and cached, against its SQL floor
and Hermes' own insights.

    .venv/bin/python bench/generate.py --messages 200000 --sessions 20000 --out var/bench/home-usage
    .venv/bin/python bench/usage.py --home var/bench/home-usage [--repeat 5] [--json out.json]

In this process, through Django's test client (logged in as a superuser; a private
data folder), it times ``/usage/`` and ``/usage/export.csv`` over every profile of
the home and over ``default`` alone, each ``--repeat`` times: *cold* (the cache
emptied before each view, so every store is read) and *cached* (nothing was
written since the first view). Peak RSS is this process's ``VmHWM``, reset before
each operation (``/proc/self/clear_refs``). The store-layer query of one store
(``stores.usage.read_usage``) is timed too, and its *floor*: the same statements
replayed by the ``sqlite3`` module alone. Hermes 0.19.0's own ``InsightsEngine
.generate()`` (what ``hermes insights`` prints) runs in the release's venv on a
backup-API copy of the ``default`` store, for comparison, with its price cache
seeded and the network refused (:func:`seed_pricing`). Printed as Markdown.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.run import peak_mb, reset_peak  # noqa: E402

# The release with its dependencies, as bench/run.py installs it (agent.insights needs them).
RELEASE = REPO / "var" / "bench" / "hermes-0.19.0-full" / "bin" / "python"
INSIGHTS = """
import json, sys, time
from pathlib import Path
from hermes_state import SessionDB
from agent.insights import InsightsEngine
db = SessionDB(db_path=Path(sys.argv[1]))  # 0.19.0 calls db_path.parent: a Path, not a str
engine = InsightsEngine(db)
times = []
for _ in range(int(sys.argv[3])):
    start = time.perf_counter()
    report = engine.generate(days=int(sys.argv[2]))
    times.append(time.perf_counter() - start)
print(json.dumps({"times": times, "sessions": report["overview"].get("total_sessions"),
                  "input_tokens": report["overview"].get("total_input_tokens")}))
"""


def timed(fn, repeat: int, before=None) -> dict:
    times, peaks, result = [], [], None
    for _ in range(repeat):
        if before:
            before()
        reset_peak()
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
        peaks.append(peak_mb())
    return {"times": times, "median": statistics.median(times), "peak_mb": max(p or 0 for p in peaks),
            "result": result}


def ms(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    return f"{seconds:,.2f} s" if seconds >= 1 else f"{seconds * 1000:,.1f} ms"


def seed_pricing(db: Path, hermes_home: Path) -> None:
    """Hermes' OpenRouter price cache (``<HERMES_HOME>/cache/openrouter_model_metadata.json``,
    fresh for an hour) with every model of ``db``, as a connected Hermes has it after its
    first fetch. Without it each ``generate()`` waits on a failed fetch per model (0.19.0
    ``agent/model_metadata.py`` caches no failure): 75 s for 415 sessions on this machine,
    which measures the network, not the report."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        models = {r[0] for r in conn.execute("SELECT DISTINCT model FROM sessions WHERE model IS NOT NULL")}
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'session_model_usage'").fetchone():
            models |= {r[0] for r in conn.execute("SELECT DISTINCT model FROM session_model_usage")}
    finally:
        conn.close()
    prices = {"prompt": "0.000003", "completion": "0.000015", "input_cache_read": "0.0000003",
              "input_cache_write": "0.00000375"}
    entries = {m: {"context_length": 200000, "max_completion_tokens": 8192, "name": m, "pricing": prices}
               for m in sorted(models)}
    (hermes_home / "cache").mkdir(parents=True, exist_ok=True)
    (hermes_home / "cache" / "openrouter_model_metadata.json").write_text(json.dumps(entries))


def insights(db: Path, days: int, repeat: int, python: Path = RELEASE) -> dict | None:
    """Hermes 0.19.0's insights on a backup-API copy of ``db`` (its SessionDB opens
    read-write), or None without the release's venv."""
    if not python.exists():
        return None
    with tempfile.TemporaryDirectory(prefix="usage-bench-") as tmp:
        copy = Path(tmp) / "state.db"
        src = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        dst = sqlite3.connect(copy)
        src.backup(dst, pages=-1)
        src.close()
        dst.close()
        seed_pricing(copy, Path(tmp))
        # Any other network call fails at once (nothing listens on port 9): the time is
        # Hermes' own work, not a connect timeout of a machine without the internet.
        env = dict(os.environ, HERMES_HOME=tmp, PYTHONDONTWRITEBYTECODE="1", HTTPS_PROXY="http://127.0.0.1:9",
                   HTTP_PROXY="http://127.0.0.1:9", NO_PROXY="")
        proc = subprocess.run([str(python), "-c", INSIGHTS, str(copy), str(days), str(repeat)], capture_output=True,
                              text=True, env=env, timeout=3600)
        if proc.returncode != 0:
            print(f"(Hermes insights failed: {proc.stderr[-800:]})", file=sys.stderr)
            return None
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        out["median"] = statistics.median(out["times"])
        return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, default=REPO / "var" / "bench" / "home-usage")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--hermes-python", type=Path, default=RELEASE,
                        help="python of a venv with hermes-agent 0.19.0 and its dependencies")
    args = parser.parse_args()
    home = args.home.resolve()
    data = Path(tempfile.mkdtemp(prefix="usage-bench-data-"))
    os.environ.update({"HERMES_ROOTS": str(home), "HERMES_ADMIN_DATA": str(data), "HERMES_ADMIN_SECRET_KEY": "bench",
                       "DJANGO_SETTINGS_MODULE": "hermes_admin.settings"})
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.core.cache import cache
    from django.core.management import call_command
    from django.test import Client

    from sessions_app.stores import registry
    from sessions_app.stores.usage import read_usage

    call_command("migrate", verbosity=0)
    client = Client(HTTP_HOST="localhost")
    client.force_login(User.objects.create_superuser("bench", password=None))
    stores = {s.key: s for s in registry.stores()}
    sizes = {}
    for key, store in stores.items():
        with store.read() as conn:
            sizes[key] = conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]

    def get(path):
        response = client.get(path)
        assert response.status_code == 200, (path, response.status_code)
        if response.streaming:
            return sum(len(c) for c in response.streaming_content)
        return len(response.content)

    all_time = "date_from=&date_to="
    pages = {
        "all profiles, last 30 days (default view), by profile": "/usage/",
        "all profiles, all time, by profile": f"/usage/?{all_time}",
        "all profiles, all time, by model": f"/usage/?{all_time}&group=model",
        "all profiles, all time, by day, chart by week": f"/usage/?{all_time}&group=day&bucket=week",
        "`default` only, all time, by source": f"/usage/?{all_time}&profile=default&group=source",
        "CSV export, all profiles, all time": f"/usage/export.csv?{all_time}",
    }
    results: dict[str, dict] = {}
    for label, path in pages.items():
        get(path)  # warm the page cache of the files and Django's templates
        cold = timed(lambda: get(path), args.repeat, before=cache.clear)
        cached = timed(lambda: get(path), args.repeat)
        results[label] = {"path": path, "cold": cold, "cached": cached}

    functions = {}
    for key in ("default", "edge"):
        store = stores.get(key)
        if store is None:
            continue
        statements: list[str] = []
        with store.read() as conn:
            caps = store.capabilities(conn)
            read = timed(lambda: len(read_usage(conn, caps, 0.0, 253402300800.0).rows), args.repeat)
            conn.set_trace_callback(statements.append)
            read_usage(conn, caps, 0.0, 253402300800.0)
            conn.set_trace_callback(None)
        floor_conn = sqlite3.connect(f"file:{store.path}?mode=ro", uri=True)

        def replay():
            return sum(1 for sql in statements for _ in floor_conn.execute(sql))

        floor = timed(replay, args.repeat)
        floor_conn.close()
        functions[key] = {"read_usage": read, "floor": floor, "statements": len(statements),
                          "sessions": sizes[key]}
    hermes = insights(stores["default"].path, 3650, args.repeat, args.hermes_python)

    total = sum(sizes.values())
    print(f"Home `{home.name}`: {len(stores)} profiles, {total:,} sessions ({sizes.get('default', 0):,} in "
          f"`default`, {sizes.get('edge', 0):,} in `edge`); medians of {args.repeat} views.\n")
    print("| page | cold (cache emptied) | cold peak RSS | cached | cached peak RSS |")
    print("|---|---:|---:|---:|---:|")
    for label, item in results.items():
        c, w = item["cold"], item["cached"]
        print(f"| {label} | {ms(c['median'])} | {c['peak_mb']:.0f} MB | {ms(w['median'])} | {w['peak_mb']:.0f} MB |")
    print("\n| store-layer query (all time) | sessions | `read_usage` | raw sqlite3 floor | statements |")
    print("|---|---:|---:|---:|---:|")
    for key, item in functions.items():
        print(f"| `{key}` | {item['sessions']:,} | {ms(item['read_usage']['median'])} | {ms(item['floor']['median'])} "
              f"| {item['statements']} |")
    if hermes:
        print(f"\nHermes 0.19.0 `InsightsEngine.generate(days=3650)` on a copy of `default`: {ms(hermes['median'])} "
              f"({hermes['sessions']:,} sessions).")
    if args.json:
        args.json.write_text(json.dumps({"home": str(home), "sizes": sizes, "pages": results, "functions": functions,
                                         "hermes": hermes}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
