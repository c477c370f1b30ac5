"""``manage.py watch_stores``: light probes every few minutes, a full pass of a store
that changed once it is idle (``sessions_app/watch.py``), until SIGTERM.

    python manage.py watch_stores                       # every 300 s, idle window 600 s
    python manage.py watch_stores --interval 60 --idle 300 --root /srv/hermes
    python manage.py watch_stores --once                # one cycle, then exit (cron, tests)

Exit status 0 after SIGTERM or SIGINT (within a second, a pass under way is
abandoned and its run marked stopped), 2 on bad arguments or an unwritable data
folder. One line per cycle on stdout (the journal under systemd).
"""

from __future__ import annotations

import os
import signal
import sys
import threading

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from ...watch import Watcher

# After a stop, how long the main thread waits for the loop to unwind before it
# settles the run itself and exits (the contract is "within a second").
STOP_GRACE_SECONDS = 0.7


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise CommandError(f"not a number of seconds: {text!r}", returncode=2) from None
    if not value > 0 or value != value or value == float("inf"):
        raise CommandError(f"seconds must be a positive number: {text!r}", returncode=2)
    return value


class Command(BaseCommand):
    help = "Watch the stores: light probes every --interval seconds, a full check of a store that changed and is idle."

    def add_arguments(self, parser):
        parser.add_argument("--interval", default=None, metavar="SECONDS",
                            help="seconds between cycles (default HERMES_ADMIN_WATCH_INTERVAL_SECONDS, 300)")
        parser.add_argument("--idle", default=None, metavar="SECONDS",
                            help="a changed store gets its full pass once unwritten this long "
                                 "(default HERMES_ADMIN_WATCH_IDLE_SECONDS, 600)")
        parser.add_argument("--root", action="append", default=[], metavar="PATH",
                            help="Hermes root to watch (repeatable; overrides HERMES_ROOTS)")
        parser.add_argument("--once", action="store_true", help="run one cycle and exit")

    def handle(self, *args, **options):
        interval = _positive(options["interval"] or str(settings.HERMES_WATCH_INTERVAL_SECONDS))
        idle = _positive(options["idle"] or str(settings.HERMES_WATCH_IDLE_SECONDS))
        for root in options["root"]:
            if not os.path.isdir(root):
                raise CommandError(f"--root {root}: no such directory", returncode=2)
        try:
            settings.DATA_DIR.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CommandError(f"the data folder {settings.DATA_DIR} is not writable ({exc.strerror})",
                               returncode=2) from None

        def say(line: str) -> None:
            self.stdout.write(f"watch_stores: {line}")
            self.stdout.flush()

        watcher = Watcher(interval, idle, roots=options["root"], say=say)
        if options["once"]:
            watcher.loop(once=True)
            return
        # The loop runs in a thread; this one only waits for a signal, so the
        # handler runs at once even while a pass is inside a long SQLite statement.
        signal.signal(signal.SIGTERM, lambda signum, frame: watcher.stop())
        signal.signal(signal.SIGINT, lambda signum, frame: watcher.stop())
        worker = threading.Thread(target=watcher.loop, name="watch-loop", daemon=True)
        say(f"watching every {interval:g} s (idle window {idle:g} s); pid {os.getpid()}")
        worker.start()
        while worker.is_alive() and not watcher.stopping.is_set():
            worker.join(0.2)
        waited = 0.0
        while worker.is_alive() and waited < STOP_GRACE_SECONDS:
            watcher.stop()  # again: a statement started since the last interrupt
            worker.join(0.1)
            waited += 0.1
        if worker.is_alive():
            watcher.settle_current()
        say("stopped")
        sys.stdout.flush()
