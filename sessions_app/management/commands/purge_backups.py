"""Remove store backups past the retention, keeping each store's newest copies.

    manage.py purge_backups [--older-than DAYS] [--keep N] [--dry-run] [--json]

A heal run copies a store into ``<data>/backups/`` before its first write (ground
rule 4), so a nightly cron that repairs something copies the whole store every
night. This removes backups older than ``HERMES_ADMIN_BACKUP_RETENTION_DAYS``
(default 30) except the newest ``HERMES_ADMIN_BACKUP_KEEP`` (default 3, at least 1)
verified copies of each store, whatever their age; copies made before backups
carried a manifest are recognised from the audit trail. It holds the run lock that
heal runs hold, and never removes a backup younger than an hour (a deletion from the
browser takes its backup outside that lock). Each removed backup is recorded in the
audit trail (action ``purge_backup``) as soon as it is gone. Exit status 0, or 2
when a folder could not be removed or another run holds the lock.
"""

from __future__ import annotations

import json
import socket
from contextlib import nullcontext

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from ...locks import RunLocked, run_lock
from ...models import AuditEvent
from ...stores import backup


class Command(BaseCommand):
    help = ("Remove store backups older than the retention (HERMES_ADMIN_BACKUP_RETENTION_DAYS, default 30), "
            "keeping the newest HERMES_ADMIN_BACKUP_KEEP (default 3) of each store.")

    def add_arguments(self, parser):
        parser.add_argument("--older-than", type=float, metavar="DAYS",
                            help="retention in days for this run (default: the setting)")
        parser.add_argument("--keep", type=int, metavar="N",
                            help="newest verified backups of each store kept whatever their age (default: the setting)")
        parser.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
        parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")

    def handle(self, *args, **options):
        days, keep = options["older_than"], options["keep"]
        if days is not None and days < 0:
            raise CommandError("--older-than must be 0 or more", returncode=2)
        if keep is not None and keep < 1:
            raise CommandError("--keep must be 1 or more: each store keeps its newest backup", returncode=2)
        days = settings.HERMES_BACKUP_RETENTION_DAYS if days is None else days
        keep = max(1, settings.HERMES_BACKUP_KEEP if keep is None else keep)
        if days < 0:
            raise CommandError(f"HERMES_ADMIN_BACKUP_RETENTION_DAYS must be 0 or more, not {days:g}", returncode=2)
        # Copies made before backups carried a manifest are known from the audit trail.
        known = {e["backup_path"]: (e["store_path"], e["profile"])
                 for e in AuditEvent.objects.exclude(backup_path="").values("backup_path", "store_path", "profile")}
        label = f"command:purge_backups@{socket.gethostname()}"

        def audit(item: backup.Backup):
            AuditEvent.objects.create(
                actor_label=label, action="purge_backup", profile=item.profile, store_path=item.store_path,
                session_ids=[], outcome="applied",
                reason=f"backup older than {days:g} days removed ({keep} newest of its store kept): {item.path}",
                plan={"path": item.path, "size": item.size, "created_at": item.created_at, "verified": item.verified},
            )

        try:
            # A dry run removes nothing: it needs no lock.
            with nullcontext() if options["dry_run"] else run_lock("heal", label="purge_backups"):
                items = backup.purge_backups(older_than_days=days, keep=keep, dry_run=options["dry_run"],
                                             on_removed=audit, known=known)
        except RunLocked as exc:
            raise CommandError(f"{exc}; nothing purged, retry later", returncode=2)
        except OSError as exc:
            raise CommandError(f"could not remove a backup ({exc})", returncode=2)
        if options["json"]:
            self.stdout.write(json.dumps({
                "version": 1, "dry_run": options["dry_run"], "retention_days": days, "keep": keep,
                "purged": [{"path": i.path, "profile": i.profile, "store_path": i.store_path, "size": i.size,
                            "created_at": i.created_at, "verified": i.verified} for i in items],
            }))
            return
        verb = "would remove" if options["dry_run"] else "removed"
        for item in items:
            self.stdout.write(f"{verb} {item.path} ({item.size} bytes, profile {item.profile or 'unknown'})")
        self.stdout.write(f"{verb} {len(items)} backup(s) older than {days:g} days; "
                          f"the newest {keep} of each store are kept")
