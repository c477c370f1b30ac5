"""What the store commands share (``heal_sessions``, ``migrate_transcripts``,
``prune_sessions``, ``flag_sessions``): the selection arguments and how a run
starts (:meth:`StoreCommand.run_locked`).

Exit statuses: 0 clean, 1 findings at or above ``--fail-on`` remain, 2 a store
could not be read, an action failed, or the command was used wrongly.

With ``--json``, every way a run fails to start prints one JSON error document
on stdout (:func:`error_document`) and exits 2: errors argparse finds while
parsing (an unknown flag, a bad choice, a missing value; otherwise only a usage
text on stderr before the command runs at all), errors found by the command
itself (``CommandError``), another run holding the lock, an unexpected failure.
"""

from __future__ import annotations

import json
import os
import socket
import sys

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser, DjangoHelpFormatter


def error_document(message: str) -> dict:
    """The ``--json`` document of a run that could not start: ``{"version": 2,
    "error": message, "profiles": []}`` (the report's shape, without results)."""
    return {"version": REPORT_VERSION, "error": message, "profiles": []}


def json_requested(parser, argv: list[str]) -> bool:
    """Did ``argv`` ask for ``--json``? Read from the raw arguments, since parsing
    failed: ``--json`` itself, ``--json=…``, or a prefix argparse would expand to it
    (``--js``). Arguments after ``--`` are values, not options."""
    options = list(getattr(parser, "_option_string_actions", {}))
    for token in argv:
        if token == "--":
            break
        name = token.split("=", 1)[0]
        if name == "--json" or (name.startswith("--j") and [o for o in options if o.startswith(name)] == ["--json"]):
            return True
    return False

from ..locks import RunLocked, run_lock
from ..runs import REPORT_VERSION
from ..stores import registry
from ..stores.store import Store


class EpilogFormatter(DjangoHelpFormatter):
    """Django's help layout, with the epilog's paragraphs and line breaks kept."""

    def _fill_text(self, text, width, indent):
        return "".join(indent + line for line in text.splitlines(keepends=True))


class StoreCommand(BaseCommand):
    """Base for commands that select profiles with --root/--profile/--all-profiles.

    ``epilog``: the text ``--help`` ends with (the command's exit statuses and
    output), its line breaks kept (:class:`EpilogFormatter`); empty for none."""

    argv: list[str] = []
    epilog = ""

    def run_from_argv(self, argv):
        self.argv = list(argv[2:])  # what the parser's error handler looks at
        super().run_from_argv(argv)

    def create_parser(self, prog_name, subcommand, **kwargs):
        if self.epilog:
            kwargs.setdefault("formatter_class", EpilogFormatter)
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parser.epilog = self.epilog or None
        parser.error = lambda message: self.argument_error(parser, message)
        return parser

    def argument_error(self, parser, message: str):
        """argparse found a wrong argument. From the command line with ``--json``:
        the JSON error document on stdout, one line on stderr, exit 2; otherwise
        Django's behaviour (usage and the error on stderr, exit 2; a CommandError
        under ``call_command``)."""
        if parser.called_from_command_line and json_requested(parser, self.argv):
            sys.stdout.write(json.dumps(error_document(message)) + "\n")
            sys.stdout.flush()
            sys.stderr.write(f"{parser.prog}: error: {message}\n")
            sys.exit(2)
        CommandParser.error(parser, message)

    def add_arguments(self, parser):
        parser.add_argument("--root", action="append", default=[], metavar="PATH",
                            help="Hermes root to use (repeatable; overrides HERMES_ROOTS)")
        parser.add_argument("--profile", action="append", default=[], metavar="NAME",
                            help="profile key to process (repeatable)")
        parser.add_argument("--all-profiles", action="store_true", help="process every profile")
        parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")

    def fail(self, message: str):
        raise CommandError(message, returncode=2)

    def fail_json(self, message: str, options) -> None:
        """Exit 2 with ``message``; with ``--json`` also the error document on stdout
        (a cron job parsing stdout gets a document saying why, not nothing)."""
        if options["json"]:
            self.stdout.write(json.dumps(error_document(message)))
        self.fail(message)

    def run_locked(self, options, prepare, work):
        """How every store command starts (the one copy): ``prepare()`` (its own
        argument checks and :meth:`select`; returns what ``work`` needs), the data
        folder check, then ``work(prepared)`` under the run lock heal runs and
        browser jobs share. Returns what ``work`` returns.

        Every way this fails is exit 2 (``CommandError``), never a traceback and
        never 1 (which means "findings remain"): a wrong argument, another run
        holding the lock, an unexpected error (a full disk, a database gone) as one
        line; with ``--json`` the error document goes to stdout first."""
        try:
            prepared = prepare()
            self.check_data_folder()
        except CommandError as exc:
            if options["json"]:
                self.stdout.write(json.dumps(error_document(str(exc))))
            raise
        try:
            with run_lock("heal", label=self.actor_label()):
                return work(prepared)
        except RunLocked as exc:
            self.fail_json(str(exc), options)
        except CommandError:
            raise
        except Exception as exc:  # a crash must not read as "findings remain" (exit 1)
            self.fail_json(f"the run failed: {exc.__class__.__name__}: {exc}", options)

    def select(self, options) -> tuple[list[Store], list[Store]]:
        """(selected stores, every known store); CommandError (exit 2) on bad input."""
        if not options["profile"] and not options["all_profiles"]:
            self.fail("say which profiles: --profile NAME (repeatable) or --all-profiles")
        if options["profile"] and options["all_profiles"]:
            self.fail("use either --profile or --all-profiles, not both")
        for root in options["root"]:
            if not os.path.isdir(root):
                self.fail(f"--root {root}: no such directory")
        found = registry.scan(options["root"] or None)
        if not found.roots:
            self.fail("no Hermes root: pass --root PATH, or set HERMES_ROOTS or HERMES_HOME")
        # A mistyped root must not pass a cron run as "nothing to do".
        # A mistyped or unmounted root must not pass a cron run as "nothing to do":
        # with no profile left it is an error now; beside good roots, the run goes
        # on and the command exits 2 at the end (``skipped_roots``).
        self.skipped_roots = [f"{path}: {reason}" for path, reason in found.bad_roots]
        # A profile whose store or files lead out of its root is never processed;
        # the run says so and exits 2, so cron notices (docs/store.md §1.2, §5.2:
        # symlinks).
        self.skipped_roots += [f"{path}: {reason}" for path, reason in found.outside.values()]
        everything = registry.stores()
        if not everything and self.skipped_roots:
            self.fail("; ".join(self.skipped_roots))
        if options["all_profiles"]:
            return everything, everything
        by_key = {s.key: s for s in everything}
        refused = [found.outside[p][1] for p in options["profile"] if p in found.outside]
        if refused:
            self.fail("; ".join(refused))
        unknown = [p for p in options["profile"] if p not in by_key]
        if unknown:
            self.fail(f"unknown profile(s): {', '.join(unknown)}; known: {', '.join(by_key) or 'none'}")
        return [by_key[p] for p in dict.fromkeys(options["profile"])], everything

    def check_data_folder(self):
        """Exit 2 before doing anything when the data folder cannot be written."""
        data = settings.DATA_DIR
        try:
            data.mkdir(parents=True, exist_ok=True)
            probe = data / f".write-test-{os.getpid()}"
            probe.write_text("")
            probe.unlink()
        except OSError as exc:
            self.fail(f"the data folder {data} is not writable ({exc.strerror}); set HERMES_ADMIN_DATA")

    def actor_label(self) -> str:
        return f"command:{self.command_name()}@{socket.gethostname()}"

    def command_name(self) -> str:
        return self.__module__.rsplit(".", 1)[-1]

    def progress(self, message: str, done: int, total: int) -> None:
        # Progress only on a terminal: cron mails stay quiet.
        if sys.stderr.isatty():
            sys.stderr.write(f"[{done}/{total}] {message}\n")
