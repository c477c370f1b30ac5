"""``manage.py watch_stores``: damage reported within minutes, not at the next night.

Every cycle (``interval`` seconds), holding the run lock shared with
``heal_sessions`` and browser jobs (``locks.run_lock``; a cycle that finds it taken
is skipped and says by whom):

1. dead runs are settled (``runs.settle_dead_runs``);
2. a **light pass** over every store: file state, WAL size, status and the cheap
   store-level checks (``checks.registry.light_codes``), recorded as a run
   (mode ``check``, trigger ``watch``, ``only`` the light codes; kind
   ``watch_light`` in the metrics). A store that became unreadable, or a new
   critical light finding (``wal_generation_split``), is notified at once;
3. a **full pass** (the whole catalog, check only, never a repair) of each store
   that changed since the latest whole pass of its profile began and has been
   idle (no write) for ``idle`` seconds; recorded as a whole check pass, so the
   health pages, the metrics and the new-critical notifications see it.

"Changed" and "idle" come from ``os.stat`` of ``state.db`` (the later of its
modification and change time: a ``chmod`` counts) and of ``state.db-wal`` (its
modification time only: SQLite running as root ``fchown``s the WAL on every open,
a reader's too, which moves its change time); no descriptor on a store file
(rule 5 of docs/architecture.md §2). Runs found running past ``HERMES_STUCK_SECONDS`` are notified on every
cycle, lock or not (their holder is usually what keeps the lock).

Stopping: :meth:`Watcher.stop` (SIGTERM, SIGINT) sets an event the loop waits on
and interrupts the statements of every read connection (``stores.connection.
interrupt_all``), so a pass in the middle of a ``quick_check`` ends at once; the
run it was recording is marked failed ("stopped"), without a notification.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Callable

from django.db import connections

from . import notify, runs
from .actions.engine import Applier
from .actions.heal import heal
from .checks.registry import light_codes
from .locks import RunLocked, run_lock
from .models import HealRun
from .stores import registry
from .stores.connection import interrupt_all, make_reads_stoppable

log = logging.getLogger("sessions_app.watch")
ACTOR = "watch_stores"
STOPPED = "stopped: watch_stores was told to stop (SIGTERM) during this pass"


class Stopped(BaseException):
    """Raised inside a pass once a stop was asked for (not an ``Exception``: the
    per-store error handling of a heal run must not swallow it)."""


def last_change(store) -> float | None:
    """Epoch seconds of the newest write to the store: ``state.db``'s later of
    ``st_mtime`` and ``st_ctime``, the ``-wal``'s ``st_mtime`` (see the module
    docstring); None when ``state.db`` does not exist."""
    try:
        st = os.stat(store.path)
    except OSError:
        return None
    times = [st.st_mtime, st.st_ctime]
    try:
        times.append(os.stat(f"{store.path}-wal").st_mtime)
    except OSError:
        pass
    return max(times)


def latest_pass_starts(keys) -> dict[str, float]:
    """Per profile key, when the latest finished whole pass that covered it began
    (epoch seconds). A run's ``profiles`` are the keys it was asked for (empty:
    every profile)."""
    wanted, found = set(keys), {}
    rows = (HealRun.objects.filter(status=HealRun.Status.DONE, plans=[], only=[], mode__in=("check", "apply"))
            .exclude(started_at=None).order_by("-started_at").values_list("started_at", "profiles"))
    for started, profiles in rows.iterator(chunk_size=100):
        for key in (set(profiles) & wanted) if profiles else wanted:
            found.setdefault(key, started.timestamp())
        if len(found) == len(wanted):
            break
    return found


class Watcher:
    """The loop of the module docstring. ``say(line)`` prints one line of progress
    (the command's stdout); ``roots`` override ``HERMES_ROOTS`` like ``--root``."""

    def __init__(self, interval: float, idle: float, roots: list[str] | None = None,
                 say: Callable[[str], None] = print):
        self.interval, self.idle, self.roots, self.say = float(interval), float(idle), roots or None, say
        self.stopping = threading.Event()
        self.current: HealRun | None = None  # the run being recorded right now

    # ----------------------------------------------------------------- control

    def stop(self) -> None:
        """Ask the loop to end (safe from a signal handler or another thread)."""
        self.stopping.set()
        interrupt_all()

    def loop(self, once: bool = False) -> None:
        """Cycles until stopped (or one cycle with ``once``)."""
        make_reads_stoppable()
        try:
            while not self.stopping.is_set():
                started = time.monotonic()
                try:
                    self.cycle()
                except Stopped:
                    break
                except Exception:  # one bad cycle must not end the watch
                    log.exception("watch cycle failed")
                    self.say("cycle failed; see the log")
                finally:
                    connections.close_all()  # this thread's connections: nothing held between cycles
                if once:
                    break
                self.stopping.wait(max(0.0, self.interval - (time.monotonic() - started)))
        finally:
            connections.close_all()

    def settle_current(self) -> None:
        """Mark the run being recorded failed ("stopped"), without a notification
        (the main thread calls this when the loop did not end in time)."""
        run = self.current
        if run is not None:
            fresh = HealRun.objects.filter(pk=run.pk, status=HealRun.Status.RUNNING).first()
            if fresh is not None:
                runs.fail(fresh, STOPPED, notify=False)

    # ----------------------------------------------------------------- one cycle

    def cycle(self) -> None:
        notify.check_stuck()
        try:
            with run_lock("heal", label=ACTOR):
                runs.settle_dead_runs()
                registry.scan(self.roots)
                stores = registry.stores()
                if not stores:
                    self.say("no profiles found")
                    return
                light = self._pass(stores, stores, light_codes())
                due = self.due(stores)
                full = self._pass(due, stores, []) if due else None
        except RunLocked as exc:
            self.say(f"cycle skipped: {exc}")
            return
        line = f"light pass run #{light.pk}: {self._summary(light)}"
        if full is not None:
            line += f"; full pass of {', '.join(s.key for s in due)} run #{full.pk}: {self._summary(full)}"
        self.say(line)

    def due(self, stores, now: float | None = None) -> list:
        """Stores changed since their profile's latest whole pass began, idle for ``idle`` s."""
        now = time.time() if now is None else now
        starts = latest_pass_starts([s.key for s in stores])
        out = []
        for store in stores:
            changed = last_change(store)
            if changed is None:
                continue
            began = starts.get(store.key)
            if (began is None or changed > began) and now - changed >= self.idle:
                out.append(store)
        return out

    def _pass(self, selected, everything, only: list[str]) -> HealRun:
        run = runs.begin(runs.create("check", "watch", actor_label=ACTOR, profiles=[s.key for s in selected],
                                     only=only, total=len(selected)))
        self.current = run
        update = runs.progress(run)

        def progress(message: str, done: int, total: int) -> None:
            update(message, done, total)
            if self.stopping.is_set():
                raise Stopped()

        try:
            if self.stopping.is_set():
                raise Stopped()
            report = heal(selected, all_stores=everything, only=only, apply=False,
                          applier=Applier(actor_label=ACTOR, run=run), progress=progress)
        except Stopped:
            runs.fail(run, STOPPED, notify=False)
            raise
        except BaseException as exc:
            runs.fail(run, f"{exc.__class__.__name__}: {exc}")
            raise
        finally:
            self.current = None
        runs.finish(run, report, done=len(selected))
        if not only:
            runs.record_snapshot(run, report)  # a whole pass: the health-over-time views count it
        return run

    @staticmethod
    def _summary(run: HealRun) -> str:
        s = run.report["summary"]
        bad = [p["profile"] for p in run.report["profiles"] if p["status"] not in ("ok", "missing")]
        text = f"{s['profiles']} profile(s), {s['critical']} critical, {s['warning']} warning, {s['info']} info"
        return text + (f"; not readable: {', '.join(bad)}" if bad else "")
