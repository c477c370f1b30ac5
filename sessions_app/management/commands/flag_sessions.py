"""``manage.py flag_sessions``: rename, archive, pin or hide sessions from the command line.

    python manage.py flag_sessions --profile work --pin 20260301_090000_a1b2c3
    python manage.py flag_sessions --profile work --archive ID [ID ...] --json
    python manage.py flag_sessions --profile work --rename "Quarterly numbers" ID
    python manage.py flag_sessions --profile work --rename "" ID      # clears the title

One change per run, on one profile: ``--archive``/``--unarchive``, ``--pin``/
``--unpin``, ``--hide``/``--unhide`` (each session's whole compression lineage, as
Hermes sets them) on every session named, or ``--rename TITLE`` of exactly one
session (Hermes' title rules; a title another session holds is refused and names
it). The rules, the liveness refusal and the audit event per session are
``actions/flags.py``'s, the same as the session page and the list's selection;
the run holds the shared run lock and is recorded like a browser flag job.
"""

from __future__ import annotations

import json
import sys

from django.core.management.base import CommandError

from ... import runs
from ...actions.flags import Flagger, TitleError, clean_title, run_changes
from ..base import StoreCommand

CHANGES = {"archive": ("archived", 1), "unarchive": ("archived", 0), "pin": ("pinned", 1), "unpin": ("pinned", 0),
           "hide": ("hidden", 1), "unhide": ("hidden", 0)}
MAX_SESSIONS = 500  # as the list's selection

EPILOG = """\
exit status: 0 every change was made (or was already so); 1 some were not made for
a passing reason (an agent may hold the session, the store stayed locked, it
changed meanwhile): run it again later; 2 a change cannot be made as asked (no
such session, a column the store lacks, a title another session holds), a store
could not be read, a write failed, another run holds the lock, or the arguments
were wrong.

output: one line per session, then a summary line. With --json, one JSON document
on stdout (the version-2 run report, mode "flags"; each action also carries
"refused" and "retry"), also on an argument error, a held lock or a failed run:
{"version": 2, "error": "...", "profiles": []}. A non-zero exit also writes one
line to stderr saying what tripped it, even with --json.
"""


def exit_status(report: dict) -> int:
    """The contract of the epilog, from a ``run_changes`` report."""
    actions = [a for p in report["profiles"] for a in p["actions"]]
    if any(a["status"] == "failed" or (a["refused"] and not a["retry"]) for a in actions):
        return 2
    return 1 if any(a["retry"] for a in actions) else 0


class Command(StoreCommand):
    help = "Rename, archive, pin or hide sessions of one profile (each a guarded write, audited)."

    epilog = EPILOG

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("session_id", nargs="*", metavar="SESSION_ID", help="the sessions to change")
        change = parser.add_mutually_exclusive_group()
        for name, (flag, value) in CHANGES.items():
            parser_help = f"{'set' if value else 'clear'} {flag} on each session's compression lineage"
            change.add_argument(f"--{name}", dest="change", action="store_const", const=name, help=parser_help)
        change.add_argument("--rename", metavar="TITLE", default=None,
                            help="give the one SESSION_ID this title (an empty TITLE clears it)")

    def items(self, options) -> list[dict]:
        """The changes asked for; CommandError (exit 2) on bad input."""
        ids = list(dict.fromkeys(options["session_id"]))
        renaming = options["rename"] is not None
        if not renaming and not options["change"]:
            self.fail(f"say what to change: --{' / --'.join(CHANGES)} or --rename TITLE")
        if not ids:
            self.fail("name the session(s): flag_sessions --profile NAME --pin SESSION_ID [SESSION_ID ...]")
        if options["all_profiles"] or len(options["profile"]) != 1:
            self.fail("flag_sessions works on one profile: --profile NAME (session ids are per store)")
        if len(ids) > MAX_SESSIONS:
            self.fail(f"at most {MAX_SESSIONS} sessions at once")
        key = options["profile"][0]
        if renaming:
            if len(ids) != 1:
                self.fail("--rename takes exactly one SESSION_ID (titles are unique in a store)")
            try:
                title = clean_title(options["rename"])
            except TitleError as exc:
                self.fail(f"--rename: {exc}")
            return [{"profile": key, "session_id": ids[0], "rename": title}]
        flag, value = CHANGES[options["change"]]
        return [{"profile": key, "session_id": sid, "flag": flag, "value": value} for sid in ids]

    def handle(self, *args, **options):
        def prepare():  # the changes first: a wrong one is said before any root is scanned
            items = self.items(options)
            return self.select(options)[0], items

        report = self.run_locked(options, prepare, lambda p: self._run(*p))
        skipped = getattr(self, "skipped_roots", [])
        if skipped:
            report["skipped_roots"] = list(skipped)
        self._print(report, options)
        code = 2 if skipped else exit_status(report)
        if code:
            actions = [a for p in report["profiles"] for a in p["actions"]]
            later = sum(a["retry"] for a in actions)
            self.stderr.write(
                f"{self.command_name()}: exit {code}: {sum(a['status'] == 'failed' for a in actions)} failed, "
                f"{sum(a['refused'] and not a['retry'] for a in actions)} refused, {later} to retry later"
                + (f"; root(s) skipped: {'; '.join(skipped)}" if skipped else ""))
            sys.exit(code)

    def _run(self, selected, items: list[dict]) -> dict:
        runs.settle_dead_runs()
        run = runs.begin(runs.create("flags", "command", actor_label=self.actor_label(),
                                     profiles=[s.key for s in selected], plans=items, total=len(items)))
        update = runs.progress(run)

        def progress(message, done, total):
            update(message, done, total)
            self.progress(message, done, total)

        try:
            report = run_changes(Flagger(actor_label=self.actor_label(), run=run), items, progress)
        except BaseException as exc:
            runs.fail(run, repr(exc))
            raise
        runs.finish(run, report, done=len(items))
        return report

    def _print(self, report: dict, options) -> None:
        if options["json"]:
            self.stdout.write(json.dumps(report, indent=2, ensure_ascii=False))
            return
        for prof in report["profiles"]:
            for a in prof["actions"]:
                what = "refused" if a["refused"] else a["status"]
                self.stdout.write(f"{what:<8} {prof['profile']} {a['session_id']}: {a['reason']}")
            if prof.get("backup"):
                self.stdout.write(f"  backup: {prof['backup']}")
        s = report["summary"]
        self.stdout.write(f"flags: applied {s['applied']}, skipped {s['skipped']}, failed {s['failed']}")
