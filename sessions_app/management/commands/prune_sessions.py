"""``manage.py prune_sessions``: retention pruning into the dashboard's trash, for cron.

    python manage.py prune_sessions --all-profiles --older-than 90          # what would go
    python manage.py prune_sessions --profile work --empty --apply --json   # prune, report JSON

Criteria AND together and select ended sessions only: ``--older-than DAYS``
(ended before), ``--source NAME`` (repeatable), ``--empty`` (never held a
message; compacted or rewound rows are history, not emptiness), ``--match
PATTERN`` (id or title; ``*``, ``?``, ``[…]``, else a substring). At least one is
needed. Without ``--apply`` nothing is written. With it, every unit (a whole
compression lineage with its delegate children) goes into the trash as a
deletion does, restorable, in batches of one transaction each; pinned sessions,
sessions an agent may hold and lineages not wholly selected stay, archived
sessions too unless ``--include-archived`` (as upstream's ``hermes sessions
prune``; docs/store.md §10.4). The rules and
the report are in ``actions/prune.py`` and ``actions/prune_run.py``.
"""

from __future__ import annotations

import json
import sys

from django.template.defaultfilters import filesizeformat

from ... import runs
from ...actions.prune import BATCH_ROWS, BATCH_UNITS
from ...actions.prune_run import Pruner, exit_status, run_prune
from ...stores.retention import Criteria, CriteriaError
from ..base import StoreCommand

SHOWN_SPARED = 10  # spared groups listed per profile without --json

EPILOG = """\
exit status: 0 nothing (left) to prune; 1 sessions remain that the criteria select
(check mode found some, or --apply left some: live, changed meanwhile, busy store);
2 a store could not be read, a batch failed, another run holds the lock, a root was
skipped, or the arguments were wrong.

output: without --json, one line per profile with what goes (sessions, message rows,
content bytes, files) and what is spared and why, then a summary line. With --json,
one JSON document on stdout, also on an argument error, a lock another run
holds, or a run that failed: {"version": 2, "error": "...", "profiles": []}.
A non-zero exit also writes one line to stderr saying what tripped it, even
with --json.
"""


def _size(n: int) -> str:
    """``n`` bytes as the Prune page shows them (Django's ``filesizeformat``: 1024
    bytes is "1.0 KB"), so the command and the page print the same numbers; plain
    spaces, not the filter's non-breaking ones, on a terminal."""
    return filesizeformat(n).replace("\xa0", " ")


class Command(StoreCommand):
    help = "Prune sessions by retention criteria into the dashboard's trash (check by default, --apply to prune)."

    epilog = EPILOG

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--older-than", type=float, metavar="DAYS", help="sessions that ended more than DAYS ago")
        parser.add_argument("--source", action="append", default=[], metavar="NAME",
                            help="sessions of this source (repeatable: any of them)")
        parser.add_argument("--empty", action="store_true",
                            help="sessions that never held a message (message_count 0 and no row at all)")
        parser.add_argument("--match", default="", metavar="PATTERN",
                            help="id or title matching PATTERN (* ? [...]; without them a substring), any case")
        parser.add_argument("--include-archived", action="store_true",
                            help="also prune archived sessions (spared by default, as upstream's hermes sessions prune)")
        parser.add_argument("--apply", action="store_true", help="move what goes into the trash (restorable)")
        parser.add_argument("--batch-size", type=int, default=BATCH_UNITS, metavar="N",
                            help=f"units per transaction (default {BATCH_UNITS})")

    def criteria(self, options) -> Criteria:
        try:
            found = Criteria(options["older_than"], tuple(dict.fromkeys(options["source"])), options["empty"],
                             options["match"], options["include_archived"])
        except CriteriaError as exc:
            self.fail(str(exc))
        if not found.given:
            self.fail("say what to prune: --older-than DAYS, --source NAME, --empty or --match PATTERN "
                      "(they combine; a prune never takes every ended session by default)")
        if not 1 <= options["batch_size"] <= 500:
            self.fail("--batch-size must be between 1 and 500")
        return found

    def handle(self, *args, **options):
        def prepare():  # the criteria first: a wrong one is said before any root is scanned
            criteria = self.criteria(options)
            return self.select(options)[0], criteria

        report = self.run_locked(options, prepare, lambda p: self._run(*p, options))
        skipped = getattr(self, "skipped_roots", [])
        if skipped:
            report["skipped_roots"] = list(skipped)
        self._print(report, options)
        code = 2 if skipped else exit_status(report)
        if code:
            s = report["summary"]
            unreadable = sum(p["status"] not in ("ok", "missing") for p in report["profiles"])
            self.stderr.write(
                f"{self.command_name()}: exit {code}: {s['remaining']} unit(s) or session(s) remain to prune, "
                f"{s['failed']} failed unit(s), {unreadable} store(s) not readable"
                + (f"; root(s) skipped: {'; '.join(skipped)}" if skipped else ""))
            sys.exit(code)

    def _run(self, selected, criteria: Criteria, options) -> dict:
        runs.settle_dead_runs()
        run = runs.begin(runs.create("prune", "command", actor_label=self.actor_label(),
                                     profiles=[s.key for s in selected],
                                     plans=[{"criteria": criteria.as_dict(), "apply": options["apply"]}]))
        writer = Pruner(actor_label=self.actor_label(), run=run)
        update = runs.progress(run)

        def progress(message, done, total):
            update(message, done, total)
            self.progress(message, done, total)

        try:
            report = run_prune(selected, criteria, apply=options["apply"], writer=writer, progress=progress,
                               batch_units=options["batch_size"], batch_rows=BATCH_ROWS)
        except BaseException as exc:
            runs.fail(run, repr(exc))
            raise
        runs.finish(run, report, done=report["summary"]["units"])
        return report

    def _print(self, report: dict, options) -> None:
        if options["json"]:
            self.stdout.write(json.dumps(report, indent=2, ensure_ascii=False))
            return
        verb = "pruned" if report["mode"] == "apply" else "would prune"
        for prof in report["profiles"]:
            head = f"{prof['profile']} ({prof['path']}): {prof['status']}"
            if prof["error"]:
                self.stdout.write(f"{head} — {prof['error']}")
                continue
            t = prof["totals"]
            done = t["applied"] if report["mode"] == "apply" else t["units"]
            self.stdout.write(f"{head}: {verb} {done} of {t['units']} unit(s), {t['sessions']} session(s), "
                              f"{t['messages']} message row(s), {_size(t['content_bytes'])} of content, "
                              f"{t['files']} file(s); spared {t['spared']} session(s)")
            for unit in prof["units"]:
                if unit["status"] in ("skipped", "refused", "failed"):
                    self.stdout.write(f"  {unit['status']:<8} {unit['root']} — {unit['reason']}")
            shown = [item for item in prof["spared"] if not item.get("at_apply")]
            if shown:
                by_reason: dict[str, int] = {}
                for item in shown:
                    by_reason[item["reason"]] = by_reason.get(item["reason"], 0) + len(item["session_ids"])
                self.stdout.write("  spared: " + ", ".join(f"{n} {reason}" for reason, n in sorted(by_reason.items())))
            for item in shown[:SHOWN_SPARED]:
                self.stdout.write(f"  spared   {', '.join(item['session_ids'][:3])}"
                                  f"{' …' if len(item['session_ids']) > 3 else ''} [{item['reason']}] "
                                  f"{item['detail']}")
            if len(shown) > SHOWN_SPARED:
                self.stdout.write(f"  … and {len(shown) - SHOWN_SPARED} more group(s) spared (all of them in --json)")
            if prof["backup"]:
                self.stdout.write(f"  backup: {prof['backup']}")
        s = report["summary"]
        self.stdout.write(f"{report['mode']}: {s['profiles']} profile(s), criteria: "
                          f"{Criteria.from_dict(report['criteria']).describe()}; {s['units']} unit(s), "
                          f"{s['sessions']} session(s), {s['messages']} message row(s), "
                          f"{_size(s['content_bytes'])}; applied {s['applied']}, skipped {s['skipped']}, "
                          f"refused {s.get('refused', 0)}, failed {s['failed']}; spared {s['spared']} ({s['spared_pinned']} pinned, "
                          f"{s['spared_live']} live or changed)")
