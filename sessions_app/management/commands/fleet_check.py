"""Start a check (or, with ``--apply``, a heal) of every profile of fleet hosts.

Run on the dashboard's machine (fleet mode: ``CELERY_BROKER_URL`` set), e.g. from
cron: one fleet run per host, of the profiles its latest heartbeat announced, sent
to its queue ``hermes.<host>``; the host's worker runs it with the same engine as
``heal_sessions`` on that host (docs/architecture.md §10). Prints ``host: run
#id`` per host and returns at once (the runs page follows them). A host that is
unknown or unreachable is not sent a run and is named on stderr; the others are
started all the same, and the exit status is then 1 (cron mails it).
"""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Start a check (--apply: a heal) run of every profile on each fleet host, on that host."

    def add_arguments(self, parser):
        parser.add_argument("--host", action="append", default=[], help="only this host (repeatable)")
        parser.add_argument("--apply", action="store_true", help="heal (apply the repairs), not only check")

    def handle(self, *args, host=(), apply=False, **options):
        from sessions_app import runs
        from sessions_app.fleet import client

        if not getattr(settings, "FLEET", False):
            raise CommandError("fleet mode is off: set CELERY_BROKER_URL (README, Many hosts)")
        views = {h.name: h for h in client.hosts()}
        wanted = list(dict.fromkeys(host)) or sorted(views)
        problems = []
        for name in wanted:
            view = views.get(name)
            if view is None or not view.reachable:
                why = "is not part of the fleet" if view is None else f"is unreachable ({view.why})"
                problems.append(f"host {name} {why}; nothing started there")
                continue
            keys = [p["key"] for p in view.profiles]
            if not keys:
                self.stdout.write(f"{name}: announced no profile; nothing started")
                continue
            run = runs.create("apply" if apply else "check", runs.FLEET_TRIGGER, actor_label="fleet_check",
                              profiles=keys, total=len(keys))
            client.start_run(run, name)
            self.stdout.write(f"{name}: run #{run.pk} ({run.mode}, {len(keys)} profile(s))")
        for problem in problems:
            self.stderr.write(problem)
        if problems:
            raise SystemExit(1)
