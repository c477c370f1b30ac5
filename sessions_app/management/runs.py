"""The run contract shared by ``heal_sessions`` and ``migrate_transcripts``.

Selection (``--root``/``--profile``/``--all-profiles``), ``--fail-on``, ``--apply``,
``--json``; the run lock shared with browser jobs; a ``HealRun`` record with the
version-2 JSON report (``actions.heal``); exit status 0 nothing at or above
``--fail-on`` remains, 1 such findings remain, 2 a store could not be read, an
action failed, another run holds the lock, or the arguments were wrong.

Output for people lists what needs a look: findings at or above ``--fail-on``, the
repairs planned for them, every repair applied, skipped, refused or failed, and stores that
could not be read; findings below ``--fail-on`` are only counted in the closing
summary line. So a run with nothing to report prints that one line. A non-zero
exit also writes one line to stderr naming what tripped it (:func:`failure_line`).
"""

from __future__ import annotations

import json
import sys

from .. import runs
from ..actions.engine import Applier
from ..actions.heal import heal
from ..checks.registry import BY_CODE as CHECKS
from ..runs import SEVERITIES, exit_status
from .base import StoreCommand

EPILOG = """\
exit status: 0 nothing at or above --fail-on remains; 1 such findings remain;
2 a store could not be read, a check or an action failed, another run holds the
lock, a root was skipped, or the arguments were wrong.

output: without --json, findings at or above --fail-on, their planned repairs and
every repair applied, skipped, refused or failed are listed, then one summary line (findings
below --fail-on are only counted there): a run with nothing to report prints that
one line. With --json, one JSON document on stdout, also on an argument error:
{"version": 2, "error": "...", "profiles": []}. A non-zero exit also writes one
line to stderr saying what tripped it, even with --json.
"""


def failure_line(command: str, code: int, report: dict, fail_on: str, skipped: list[str]) -> str:
    """The stderr line of a non-zero exit: what tripped it first, then the counts, e.g.
    ``heal_sessions: exit 1: failing: 3 info finding(s) with --fail-on info; 0 critical,
    0 warning, 3 info, 0 failed action(s), 0 store(s) not readable``."""
    summary = report["summary"]
    unreadable = sum(p["status"] not in ("ok", "missing") for p in report["profiles"])
    incomplete = sum(p["status"] == "ok" and bool(p["error"]) for p in report["profiles"])
    levels = SEVERITIES[: SEVERITIES.index(fail_on) + 1]
    tripped = []
    if unreadable:
        tripped.append(f"{unreadable} store(s) not readable")
    if incomplete:
        tripped.append(f"{incomplete} store(s) whose checks could not all run")
    if summary["failed"]:
        tripped.append(f"{summary['failed']} failed action(s)")
    if skipped:
        tripped.append(f"{len(skipped)} root(s) skipped")
    counted = [f"{summary[level]} {level}" for level in levels if summary[level]]
    if counted:
        tripped.append(f"{', '.join(counted)} finding(s) with --fail-on {fail_on}")
    roots = f"; root(s) skipped: {'; '.join(skipped)}" if skipped else ""
    return (f"{command}: exit {code}: failing: {'; '.join(tripped) or 'unknown'}; "
            f"{summary['critical']} critical, {summary['warning']} warning, {summary['info']} info, "
            f"{summary['failed']} failed action(s), {unreadable} store(s) not readable{roots}")


class HealRunCommand(StoreCommand):
    """A check-and-repair run over the selected stores.

    ``codes``: the check codes this command is about (None: the whole catalog, and
    ``--only`` narrows it).
    """

    codes: tuple[str, ...] | None = None
    epilog = EPILOG

    def add_arguments(self, parser):
        super().add_arguments(parser)
        if self.codes is None:
            parser.add_argument("--only", default=None, metavar="CODE[,CODE…]",
                                help="run only these check codes (at least one; comma-separated)")
        parser.add_argument("--fail-on", choices=SEVERITIES, default="warning",
                            help="lowest severity that makes the exit status 1 (default: warning)")
        parser.add_argument("--apply", action="store_true", help="apply every planned repair, then re-check")

    def selected_codes(self, options) -> list[str]:
        if self.codes is not None:
            return list(self.codes)
        if options.get("only") is None:
            return []
        only = [c.strip() for c in options["only"].split(",") if c.strip()]
        if not only:
            # An empty value (a crontab's unset variable) must not widen to every check.
            self.fail(f"--only needs at least one check code; known: {', '.join(sorted(CHECKS))}")
        unknown = [c for c in only if c not in CHECKS]
        if unknown:
            self.fail(f"unknown check code(s): {', '.join(unknown)}; known: {', '.join(sorted(CHECKS))}")
        return only

    def handle(self, *args, **options):
        def prepare():  # the codes first: a wrong --only is said before any root is scanned
            only = self.selected_codes(options)
            return (*self.select(options), only)

        report, run = self.run_locked(options, prepare, lambda p: self._run(*p, options))
        self._print(report, options)
        skipped = report.get("skipped_roots", [])
        code = 2 if skipped else exit_status(report, options["fail_on"])
        if code:
            # One line on stderr even with --json on stdout: cron mails it, so a
            # failing or unhealthy night never passes silently.
            self.stderr.write(failure_line(self.command_name(), code, report, options["fail_on"], skipped))
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
        levels = SEVERITIES[: SEVERITIES.index(options["fail_on"]) + 1]
        quiet = 0  # profiles with nothing to report print nothing of their own: cron mails stay short
        for prof in report["profiles"]:
            shown = [f for f in prof["findings"] if f["severity"] in levels]
            # Planned repairs are listed with their finding; applied, skipped and
            # failed ones always are (the store changed, or a repair could not run).
            planned_for = {(f["heal"], f["session_id"]) for f in shown}
            actions = [a for a in prof["actions"]
                       if a["status"] != "planned" or (a["action"], a["session_id"]) in planned_for]
            if prof["status"] in ("ok", "missing") and not prof["error"] and not shown and not actions:
                quiet += 1
                continue
            head = f"{prof['profile']} ({prof['path']}): {prof['status']}"
            if prof["error"]:
                head += f" — {prof['error']}"
            self.stdout.write(head)
            for f in shown:
                where = f" session {f['session_id']}" if f["session_id"] else ""
                heal_by = f" [heal: {f['heal']}]" if f["heal"] else ""
                self.stdout.write(f"  {f['severity']:<8} {f['check']}{where}: {f['detail']}{heal_by}")
            for a in actions:
                why = f" — {a['reason']}" if a["reason"] else ""
                self.stdout.write(f"  {a['status']:<8} {a['action']} {a['session_id'] or ''}{why}")
            if prof["backup"]:
                self.stdout.write(f"  backup: {prof['backup']}")
        s = report["summary"]
        below = sum(s[level] for level in SEVERITIES if level not in levels)
        hidden = f" ({below} below --fail-on {options['fail_on']}, not listed)" if below else ""
        self.stdout.write(
            f"{report['mode']}: {s['profiles']} profile(s), {quiet} with nothing to report; "
            f"{s['critical']} critical, {s['warning']} warning, "
            f"{s['info']} info{hidden}; applied {s['applied']}, skipped {s['skipped']}, refused {s['refused']}, "
            f"failed {s['failed']}"
        )
