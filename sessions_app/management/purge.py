"""What ``purge_trash`` and ``purge_backups`` share: the arguments, the run lock, one
audit event per removal as it happens, and the exit statuses (0, or 2 when a folder
could not be removed or another run holds the lock)."""

from __future__ import annotations

import shutil
import socket
from contextlib import nullcontext

from django.core.management.base import BaseCommand, CommandError

from ..locks import RunLocked, run_lock


class PurgeCommand(BaseCommand):
    """Base of the purge commands; subclasses list what is expired and say how each
    removal is audited and printed."""

    what = "items"  # for messages: "trash", "backups"

    def add_arguments(self, parser):
        parser.add_argument("--older-than", type=float, metavar="DAYS",
                            help="retention in days for this run (default: the setting)")
        parser.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
        parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")

    def retention(self, options, default: float) -> float:
        """``--older-than`` or ``default`` (days); CommandError (exit 2) when negative."""
        days = options["older_than"]
        if days is not None and days < 0:
            raise CommandError("--older-than must be 0 or more", returncode=2)
        return default if days is None else days

    def actor_label(self) -> str:
        return f"command:{self.__module__.rsplit('.', 1)[-1]}@{socket.gethostname()}"

    def purge(self, expired, dry_run: bool, on_removed) -> list:
        """List ``expired()`` and remove each folder (``item.path``) unless ``dry_run``,
        calling ``on_removed(item)`` right after each removal, so an error midway
        leaves every removal before it recorded. The listing and the removals hold
        the run lock heal runs hold (a dry run removes nothing and needs no lock)."""
        try:
            with nullcontext() if dry_run else run_lock("heal", label=self.actor_label()):
                items = expired()
                if not dry_run:
                    for item in items:
                        shutil.rmtree(item.path)
                        on_removed(item)
        except RunLocked as exc:
            raise CommandError(f"{exc}; nothing purged, retry later", returncode=2)
        except OSError as exc:
            raise CommandError(f"could not remove {self.what} ({exc})", returncode=2)
        return items
