"""Fleet latency: a remote profile's pages against the same pages of a local one.

    # Redis and PostgreSQL running (scripts/fleet-demo.sh starts both), then:
    CELERY_BROKER_URL=redis://:PASSWORD@127.0.0.1:PORT/0 DATABASE_URL=postgres://… \\
        .venv/bin/python bench/fleet.py [--home tests/fixtures/hermes_home] [--repeat 30]

Two copies of ``--home``: one is the dashboard's own root (the local profile),
the other the root of a real Celery worker (``bench-host``, ``-P threads``) on the
same machine, so both sides read identical stores. Measured in this process with
Django's test client (no HTTP: the same cost on both sides), warm, local and
remote views interleaved, medians of ``--repeat`` views: the sessions list of one
profile, its session page with the most messages, the profile page, and the task
round trips alone (``ping``, the list's and the page's reads). Prints a Markdown
table (milliseconds; added latency = remote − local). ``--profile-page URL``
prints a cProfile of 10 views of one page instead (where a page's time goes).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", default=str(REPO / "tests" / "fixtures" / "hermes_home"))
    parser.add_argument("--profile", default="default")
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--profile-page", metavar="URL", help="print a cProfile of 10 views of URL and stop")
    args = parser.parse_args()
    if not os.environ.get("CELERY_BROKER_URL") or not os.environ.get("DATABASE_URL"):
        sys.exit("set CELERY_BROKER_URL (Redis) and DATABASE_URL (PostgreSQL) first")
    work = Path(tempfile.mkdtemp(prefix="fleet-bench-"))
    local, remote = work / "local", work / "remote"
    for dest in (local, remote):
        shutil.copytree(args.home, dest, ignore=shutil.ignore_patterns("*-wal", "*-shm"))
    os.environ.update(HERMES_ROOTS=str(local), HERMES_ADMIN_DATA=str(work / "dash"), HERMES_ADMIN_LOG_FILE="",
                      HERMES_ADMIN_ALLOWED_HOSTS="testserver", DJANGO_SETTINGS_MODULE="hermes_admin.settings")
    os.environ.pop("HERMES_ADMIN_HOST", None)
    sys.path.insert(0, str(REPO))
    import django

    django.setup()
    from django.core.management import call_command
    from django.test import Client
    from django.test.utils import setup_test_environment

    from django.contrib.auth.models import User

    from sessions_app.fleet import client as fleet
    from sessions_app.fleet.models import FleetHost

    setup_test_environment()
    from django.urls import reverse

    reverse("fleet")  # the URLconf loads now, in fleet mode (its routes exist only then)
    call_command("migrate", verbosity=0)
    env = dict(os.environ, HERMES_ROOTS=str(remote), HERMES_ADMIN_HOST="bench-host",
               HERMES_ADMIN_DATA=str(work / "worker"))
    worker = subprocess.Popen([sys.executable, "-m", "celery", "-A", "hermes_admin", "worker", "-Q", "hermes.bench-host",
                               "-P", "threads", "-c", "4", "--without-gossip", "--without-mingle", "--without-heartbeat",
                               "-l", "warning"], cwd=REPO, env=env, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            if FleetHost.objects.filter(name="bench-host", pid=worker.pid).exists():
                break
            time.sleep(0.2)
        else:
            sys.exit("the worker never announced itself")
        user, _ = User.objects.get_or_create(username="bench", defaults={"is_superuser": True, "is_staff": True})
        browser = Client()
        browser.force_login(user)
        rkey = f"{args.profile} on bench-host"
        answer = fleet.ask("bench-host", "sessions", filters={"profiles": [rkey]}, limit=200)
        sid = max(answer.data["rows"], key=lambda r: r.get("message_count") or 0)["id"]

        def interleaved(*fns):
            """Medians (ms) of ``fns`` called in turn, ``--repeat`` rounds after two
            warm-up rounds: local and remote share the machine's moments alike."""
            times = [[] for _ in fns]
            for n in range(args.repeat + 2):
                for fn, spent in zip(fns, times):
                    t = time.perf_counter()
                    fn()
                    if n >= 2:
                        spent.append((time.perf_counter() - t) * 1000)
            return [statistics.median(t) for t in times]

        def get(url, fleet_on):
            from django.conf import settings

            settings.FLEET = fleet_on
            response = browser.get(url)
            assert response.status_code == 200, (url, response.status_code)

        pages = [
            ("sessions list of one profile",
             f"/sessions/?profile={quote(args.profile)}", f"/fleet/sessions/?profile={quote(rkey)}"),
            (f"session page ({sid})",
             f"/p/{quote(args.profile)}/s/{quote(sid)}/", f"/fleet/p/{quote(rkey)}/s/{quote(sid)}/"),
            ("profile page", f"/p/{quote(args.profile)}/", f"/fleet/p/{quote(rkey)}/"),
        ]
        if args.profile_page:
            import cProfile
            import pstats

            get(args.profile_page, True)
            with cProfile.Profile() as prof:
                for _ in range(10):
                    get(args.profile_page, True)
            pstats.Stats(prof).sort_stats("cumulative").print_stats(40)
            return
        print(f"| page ({args.repeat} views each, interleaved, median) | local ms | remote ms | added ms |")
        print("|---|---:|---:|---:|")
        for label, local_url, remote_url in pages:
            lo, re_ = interleaved(lambda: get(local_url, False), lambda: get(remote_url, True))
            print(f"| {label} | {lo:.1f} | {re_:.1f} | {re_ - lo:+.1f} |")
        reads = {
            "`ping`": ("ping", {}),
            "`sessions` (the list's read)": ("sessions", {"filters": {"profiles": [rkey]}, "limit": 50}),
            "`session` (the page's read)": ("session", {"key": rkey, "session_id": sid, "size": 100}),
        }
        alone = interleaved(*[lambda op=op, kw=kw: fleet.ask("bench-host", op, **kw) for op, kw in reads.values()])
        for label, ms in zip(reads, alone):
            print(f"| task round trip alone: {label} | — | {ms:.1f} | {ms:+.1f} |")
        print(f"\nload average (1, 5, 15 min) at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())} "
              f"on {os.cpu_count()} cores")
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
