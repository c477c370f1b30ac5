"""The run contract shared by ``heal_sessions`` and ``migrate_transcripts``.

Selection (``--root``/``--profile``/``--all-profiles``), ``--fail-on``, ``--apply``,
``--json``; the run lock shared with browser jobs; a ``HealRun`` record with the
version-1 JSON report (``actions.heal``); exit status 0 nothing at or above
``--fail-on`` remains, 1 such findings remain, 2 a store could not be read, an
action failed, another run holds the lock, or the arguments were wrong.
"""

from __future__ import annotations

import json
import sys

from django.core.management.base import CommandError

from .. import runs
from ..actions.engine import Applier
from ..actions.heal import heal
from ..checks.registry import BY_CODE as CHECKS
from ..locks import RunLocked, run_lock
from ..runs import SEVERITIES, exit_status
from .base import StoreCommand


class HealRunCommand(StoreCommand):
    """A check-and-repair run over the selected stores.

    ``codes``: the check codes this command is about (None: the whole catalog, and
    ``--only`` narrows it).
    """

    codes: tuple[str, ...] | None = None

    def add_arguments(self, parser):
        super().add_arguments(parser)
        if self.codes is None:
            parser.add_argument("--only", default="", metavar="CODE[,CODE…]", help="run only these check codes")
        parser.add_argument("--fail-on", choices=SEVERITIES, default="warning",
                            help="lowest severity that makes the exit status 1 (default: warning)")
        parser.add_argument("--apply", action="store_true", help="apply every planned repair, then re-check")

    def selected_codes(self, options) -> list[str]:
        if self.codes is not None:
            return list(self.codes)
        only = [c.strip() for c in options["only"].split(",") if c.strip()]
        unknown = [c for c in only if c not in CHECKS]
        if unknown:
            self.fail(f"unknown check code(s): {', '.join(unknown)}; known: {', '.join(sorted(CHECKS))}")
        return only

    def handle(self, *args, **options):
        try:
            only = self.selected_codes(options)
            selected, everything = self.select(options)
            self.check_data_folder()
        except CommandError as exc:
            if options["json"]:
                # A cron job parsing stdout gets a document saying why, not nothing.
                self.stdout.write(json.dumps({"version": 1, "error": str(exc), "profiles": []}))
            raise
        try:
            with run_lock("heal", label=self.actor_label()):
                report, run = self._run(selected, everything, only, options)
        except RunLocked as exc:
            self.fail(str(exc))
        except CommandError:
            raise
        except Exception as exc:  # never let a crash read as "findings remain" (exit 1)
            self.fail(f"the run failed: {exc.__class__.__name__}: {exc}")
        self._print(report, options)
        skipped = report.get("skipped_roots", [])
        code = 2 if skipped else exit_status(report, options["fail_on"])
        if code:
            # One line on stderr even with --json on stdout: cron mails it, so a
            # failing or unhealthy night never passes silently.
            summary = report["summary"]
            unreadable = sum(p["status"] not in ("ok", "missing") for p in report["profiles"])
            roots = f"; root(s) skipped: {'; '.join(skipped)}" if skipped else ""
            self.stderr.write(
                f"{self.command_name()}: exit {code}: {summary['critical']} critical, {summary['warning']} warning, "
                f"{summary['failed']} failed action(s), {unreadable} store(s) not readable{roots}"
            )
        if code:
            sys.exit(code)

    def _run(self, selected, everything, only, options):
        runs.settle_dead_runs()  # a run killed earlier (we hold the lock now) is not left "running"
        run = runs.begin(runs.create("apply" if options["apply"] else "check", "command",
                                     actor_label=self.actor_label(), profiles=[s.key for s in selected],
                                     only=only, total=len(selected)))
        applier = Applier(actor_label=self.actor_label(), run=run)
        try:
            report = heal(selected, all_stores=everything, only=only, apply=options["apply"], applier=applier,
                          progress=self.progress)
            if getattr(self, "skipped_roots", None):
                report["skipped_roots"] = list(self.skipped_roots)  # kept with the run, and exit 2
        except BaseException as exc:
            runs.fail(run, repr(exc))
            raise
        runs.finish(run, report, done=len(selected))
        runs.record_snapshot(run, report)
        return report, run

    def _print(self, report, options):
        if options["json"]:
            self.stdout.write(json.dumps(report, indent=2, ensure_ascii=False))
            return
        quiet = 0  # healthy profiles print nothing of their own: cron mails stay short
        for prof in report["profiles"]:
            if prof["status"] == "ok" and not prof["error"] and not prof["findings"] and not prof["actions"]:
                quiet += 1
                continue
            head = f"{prof['profile']} ({prof['path']}): {prof['status']}"
            if prof["error"]:
                head += f" — {prof['error']}"
            self.stdout.write(head)
            for f in prof["findings"]:
                where = f" session {f['session_id']}" if f["session_id"] else ""
                heal_by = f" [heal: {f['heal']}]" if f["heal"] else ""
                self.stdout.write(f"  {f['severity']:<8} {f['check']}{where}: {f['detail']}{heal_by}")
            for a in prof["actions"]:
                why = f" — {a['reason']}" if a["reason"] else ""
                self.stdout.write(f"  {a['status']:<8} {a['action']} {a['session_id'] or ''}{why}")
            if prof["backup"]:
                self.stdout.write(f"  backup: {prof['backup']}")
        s = report["summary"]
        self.stdout.write(
            f"{report['mode']}: {s['profiles']} profile(s), {quiet} without findings; "
            f"{s['critical']} critical, {s['warning']} warning, "
            f"{s['info']} info; applied {s['applied']}, skipped {s['skipped']}, failed {s['failed']}"
        )
