"""Retention pruning on a big store (issue 14): preview, batches, the write lock, restore.

    .venv/bin/python bench/generate.py --messages 1000000 --profiles 1 --out var/bench/home-1m
    .venv/bin/python bench/prune.py --home var/bench/home-1m --older-than 170 [--json out.json]

Works on a backup-API copy of the home's ``default`` store (hermes-agent 0.19.0's
schema; ``--profile edge``: the newest shape; the generated one is never written),
in this process with Django set up on a private data folder. ``--older-than`` bounds how much goes (the generator spreads
sessions over 180 days, so 170 takes about 1/18 of them): the run stays within a few
minutes. Measured, once each (a prune cannot be repeated on the same rows):

- the preview (``plan_units`` over the whole store: candidates, lineages, liveness of
  every session with evidence, rows and content bytes of each unit);
- check mode as ``prune_sessions`` runs it without ``--apply`` (``run_prune``: the
  preview and its report), and the Prune page at the same age (Django's test client,
  a superuser: the preview, Hermes' auto-prune section, the template);
- Hermes' own auto-prune preview at the same retention (``stores.autoprune``);
- ``prune_sessions --apply`` (``run_prune``, batches of ``--batch-size`` units): wall
  time, units and message rows per second, the backup, and for every batch the time the
  store's write lock was held (``BEGIN IMMEDIATE`` to ``COMMIT``, the part a live agent
  waits for), while a separate process writes to the store every 50 ms with Hermes'
  own write budget (a 20 s busy timeout) and records how long each write waited;
- restoring 20 of the trash entries;
- hermes-agent 0.19.0's own ``prune_sessions`` (one transaction, nothing kept) on a
  second copy, at the same age, for comparison.

Peak RSS is ``ru_maxrss`` of this process after each step (it only grows).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

WRITER = """
import json, signal, sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], timeout=20, isolation_level=None)
waits = []
def done(*_):
    print(json.dumps(waits), flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, done)
stop = time.time() + float(sys.argv[2])
print("ready", flush=True)
while time.time() < stop:
    start = time.perf_counter()
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO state_meta (key, value) VALUES ('bench_writer', ?) "
                 "ON CONFLICT(key) DO UPDATE SET value = excluded.value", (str(time.time()),))
    conn.execute("COMMIT")
    waits.append(time.perf_counter() - start)
    time.sleep(0.05)
print(json.dumps(waits), flush=True)
"""


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def copy_store(src: Path, dst: Path) -> None:
    """SQLite's backup API, one step (never file I/O on a store)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    s = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    d = sqlite3.connect(dst)
    s.backup(d, pages=-1)
    d.execute("PRAGMA journal_mode=WAL")
    d.close()
    s.close()


def stats(db: Path) -> dict:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {"sessions": conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0],
                "messages": conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0],
                "bytes": os.stat(db).st_size}
    finally:
        conn.close()


def hermes_prune(db: Path, days: float) -> float:
    """Seconds hermes-agent 0.19.0's own ``prune_sessions`` takes on ``db``."""
    from tests.checks.helpers import _fixture_module, release_python

    code = ("import sys, time, hermes_state\n"
            "db = hermes_state.SessionDB(db_path=__import__('pathlib').Path(sys.argv[1]))\n"
            "t = time.perf_counter(); n = db.prune_sessions(older_than_days=float(sys.argv[2]))\n"
            "print(n, time.perf_counter() - t)\n")
    home = Path(tempfile.mkdtemp(prefix="bench-hermes-home-"))
    proc = subprocess.run([str(release_python("0.19.0")), "-c", code, str(db), str(days)],
                          env=_fixture_module()._isolated_env(home), capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    count, seconds = proc.stdout.split()
    return {"sessions": int(count), "seconds": float(seconds)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, default=REPO / "var" / "bench" / "home-1m")
    parser.add_argument("--older-than", type=float, default=170.0, help="days (bounds how much goes)")
    parser.add_argument("--batch-size", type=int, default=None, help="units per batch (default: the product's)")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--no-hermes", action="store_true", help="skip hermes-agent 0.19.0's own prune")
    parser.add_argument("--profile", default="default",
                        help="profile of the home to prune a copy of (default: default; edge: the newest shape)")
    parser.add_argument("--work", type=Path, default=REPO / "var" / "bench",
                        help="folder for the copies (two of the store; removed at the end)")
    parser.add_argument("--in-place", action="store_true",
                        help="prune the home's own store (a home that is itself a throw-away copy; its "
                             "config.yaml is rewritten): no copy but the one for Hermes' own prune")
    args = parser.parse_args()

    args.work.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="prune-bench-", dir=args.work))
    home, data = work / "hermes", work / "data"
    data.mkdir(parents=True)
    started = time.perf_counter()
    profile_dir = args.home.resolve() / ("" if args.profile == "default" else f"profiles/{args.profile}")
    source = profile_dir / "state.db"
    if args.in_place:
        home = args.home.resolve()
    else:
        copy_store(source, home / "state.db")
        profile_dir = home
    (profile_dir / "config.yaml").write_text(f"sessions:\n  auto_prune: true\n  retention_days: {int(args.older_than)}\n")
    copied = time.perf_counter() - started
    twin = work / "twin" / "state.db"
    if not args.no_hermes:  # before anything is pruned (in place, the source is what goes)
        copy_store(source, twin)
    os.environ.update({"HERMES_ROOTS": str(home), "HERMES_ADMIN_DATA": str(data), "HERMES_ADMIN_SECRET_KEY": "bench",
                       "DJANGO_SETTINGS_MODULE": "hermes_admin.settings"})
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from sessions_app import trash
    from sessions_app.actions import guarded
    from sessions_app.actions.deletion import Deleter
    from sessions_app.actions.prune import BATCH_ROWS, BATCH_UNITS, plan_units
    from sessions_app.actions.prune_run import Pruner, run_prune
    from sessions_app.stores import autoprune, registry
    from sessions_app.stores.retention import Criteria

    registry.scan()
    store = registry.get(args.profile if args.in_place else "default")
    size = stats(store.path)
    criteria = Criteria(older_than_days=args.older_than)
    res: dict = {"store": size, "criteria": criteria.as_dict(), "copy_seconds": round(copied, 1),
                 "batch_units": args.batch_size or BATCH_UNITS, "batch_rows": BATCH_ROWS}

    t = time.perf_counter()
    with store.read() as conn:
        preview = plan_units(store, conn, store.capabilities(conn), criteria)
    res["preview"] = {"seconds": time.perf_counter() - t, "units": len(preview.units), "sessions": preview.sessions,
                      "messages": preview.rows, "content_bytes": preview.content_bytes,
                      "spared": preview.spared_count(), "rss_mb": rss_mb()}
    # Check mode as the command runs it (the preview plus its report) and as the Prune
    # page shows it (the same, Hermes' own auto-prune section and the template).
    t = time.perf_counter()
    checked = run_prune([store], criteria, apply=False)
    res["check"] = {"seconds": time.perf_counter() - t, "units": checked["summary"]["units"],
                    "sessions": checked["summary"]["sessions"], "spared": checked["summary"]["spared"],
                    "rss_mb": rss_mb()}
    from django.contrib.auth.models import User
    from django.test import Client

    client = Client(HTTP_HOST="localhost")
    client.force_login(User.objects.create_superuser("bench", password=None))
    page_url = f"/p/{store.key}/prune/"
    assert client.get(page_url).status_code == 200  # templates compiled, Hermes' section read once
    t = time.perf_counter()
    page = client.get(f"{page_url}?older_than={args.older_than:g}")
    assert page.status_code == 200, page.status_code
    res["page"] = {"seconds": time.perf_counter() - t, "bytes": len(page.content), "rss_mb": rss_mb()}
    t = time.perf_counter()
    auto = autoprune.preview(store)
    res["hermes_autoprune_preview"] = {"seconds": time.perf_counter() - t, "sessions": auto.count,
                                       "rule": auto.rules.name, "rss_mb": rss_mb()}

    locks: list[float] = []
    backups: list[float] = []
    real_transaction, real_backup = guarded._transaction, guarded.store_backup.backup_store

    @contextmanager
    def timed_transaction(conn):
        start = time.perf_counter()
        try:
            with real_transaction(conn) as c:
                yield c
        finally:
            locks.append(time.perf_counter() - start)

    def timed_backup(*a, **kw):
        start = time.perf_counter()
        try:
            return real_backup(*a, **kw)
        finally:
            backups.append(time.perf_counter() - start)

    guarded._transaction, guarded.store_backup.backup_store = timed_transaction, timed_backup
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(store.path), "3600"], stdout=subprocess.PIPE,
                              text=True)
    assert writer.stdout.readline().strip() == "ready"
    try:
        t = time.perf_counter()
        report = run_prune([store], criteria, apply=True, writer=Pruner(actor_label="bench"),
                           batch_units=args.batch_size or BATCH_UNITS)
        applied = time.perf_counter() - t
    finally:
        writer.terminate()
    out, _ = writer.communicate(timeout=60)
    try:
        waits = json.loads(out.strip().splitlines()[-1]) if out.strip() else []
    except (ValueError, IndexError):
        waits = []
    guarded._transaction, guarded.store_backup.backup_store = real_transaction, real_backup
    s = report["summary"]
    res["apply"] = {
        "seconds": applied, "units": s["applied"], "sessions": s["sessions"], "messages": s["messages"],
        "failed": s["failed"], "skipped": s["skipped"], "batches": len(locks),
        "units_per_second": s["applied"] / applied if applied else None,
        "rows_per_second": s["messages"] / applied if applied else None,
        "lock_median": statistics.median(locks) if locks else None, "lock_max": max(locks) if locks else None,
        "backup_seconds": sum(backups), "rss_mb": rss_mb(),
        "writer_writes": len(waits), "writer_wait_median": statistics.median(waits) if waits else None,
        "writer_wait_max": max(waits) if waits else None,
        "trash_entries": len(trash.list_entries()),
    }
    entries = [e for e in trash.list_entries() if e.state == "deleted"][:20]
    restorer = Deleter(actor_label="bench")
    restorer.backup_for(store)  # one backup per writer, as a run takes it; timed apart above
    t = time.perf_counter()
    outcomes = [restorer.restore(store, e) for e in entries]
    res["restore"] = {"entries": len(entries), "seconds": time.perf_counter() - t,
                      "applied": sum(o.status == "applied" for o in outcomes)}
    if not args.no_hermes:
        res["hermes_prune"] = hermes_prune(twin, args.older_than)
    res["after"] = stats(store.path)

    p, a = res["preview"], res["apply"]
    print(f"store: {size['messages']:,} messages, {size['sessions']:,} sessions, {size['bytes'] / 2**30:.2f} GiB; "
          f"criteria: ended more than {args.older_than:g} days ago")
    print(f"preview: {p['seconds']:.2f} s for {p['units']:,} units ({p['sessions']:,} sessions, "
          f"{p['messages']:,} message rows, {p['content_bytes'] / 2**20:.1f} MiB), {p['spared']:,} spared; "
          f"RSS {p['rss_mb']:.0f} MB")
    c, g = res["check"], res["page"]
    print(f"check mode (run_prune, apply=False): {c['seconds']:.2f} s, {c['units']:,} units; Prune page "
          f"{page_url}?older_than={args.older_than:g}: {g['seconds']:.2f} s ({g['bytes'] / 1024:.0f} KiB)")
    h = res["hermes_autoprune_preview"]
    print(f"Hermes' auto-prune preview: {h['seconds']:.2f} s, {h['sessions']:,} sessions ({h['rule']} rule)")
    print(f"apply: {a['seconds']:.1f} s, {a['units']:,} units in {a['batches']} batches ({a['units_per_second']:.1f} "
          f"units/s, {a['rows_per_second']:,.0f} rows/s), backup {a['backup_seconds']:.1f} s; write lock per batch "
          f"median {a['lock_median'] * 1000:.0f} ms, max {a['lock_max'] * 1000:.0f} ms; concurrent writer: "
          f"{a['writer_writes']} writes, wait median {(a['writer_wait_median'] or 0) * 1000:.1f} ms, "
          f"max {(a['writer_wait_max'] or 0) * 1000:.0f} ms; RSS {a['rss_mb']:.0f} MB")
    r = res["restore"]
    print(f"restore: {r['entries']} entries in {r['seconds']:.2f} s ({r['applied']} applied)")
    if "hermes_prune" in res:
        print(f"hermes-agent 0.19.0 prune_sessions: {res['hermes_prune']['sessions']:,} sessions in "
              f"{res['hermes_prune']['seconds']:.2f} s (one transaction, nothing kept)")
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
    import shutil
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
