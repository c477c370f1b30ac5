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

from django.conf import settings
from django.core.management.base import CommandError

from ... import audit
from ...models import AuditEvent
from pathlib import Path

from ...stores import backup
from ...stores.still_needed import lost_rows
from ..purge import PurgeCommand


class Command(PurgeCommand):
    help = ("Remove store backups older than the retention (HERMES_ADMIN_BACKUP_RETENTION_DAYS, default 30), "
            "keeping the newest HERMES_ADMIN_BACKUP_KEEP (default 3) of each store.")
    what = "a backup"

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--keep", type=int, metavar="N",
                            help="newest verified backups of each store kept whatever their age (default: the setting)")

    def handle(self, *args, **options):
        days = self.retention(options, settings.HERMES_BACKUP_RETENTION_DAYS)
        keep = options["keep"]
        if keep is not None and keep < 1:
            raise CommandError("--keep must be 1 or more: each store keeps its newest backup", returncode=2)
        keep = max(1, settings.HERMES_BACKUP_KEEP if keep is None else keep)
        if days < 0:
            raise CommandError(f"HERMES_ADMIN_BACKUP_RETENTION_DAYS must be 0 or more, not {days:g}", returncode=2)
        # Copies made before backups carried a manifest are known from the audit trail.
        known = {e["backup_path"]: (e["store_path"], e["profile"])
                 for e in AuditEvent.objects.exclude(backup_path="").values("backup_path", "store_path", "profile")}
        label = self.actor_label()

        def record(item: backup.Backup):
            audit.record(
                actor_label=label, action="purge_backup", profile=item.profile, store_path=item.store_path,
                session_ids=[], outcome="applied",
                reason=f"backup older than {days:g} days removed ({keep} newest of its store kept): {item.path}",
                plan={"path": item.path, "size": item.size, "created_at": item.created_at, "verified": item.verified},
            )

        kept: list[str] = []

        def expired():
            # A backup holding rows of a session the store still has but lost (history
            # gone missing under a live session) may be their only copy: kept.
            items = []
            for item in backup.expired_backups(older_than_days=days, keep=keep, known=known):
                lost = lost_rows(Path(item.path) / "state.db", item.store_path) if item.store_path else 0
                if lost:
                    kept.append(f"{item.path}: still holds {lost} message row(s) its store lost")
                else:
                    items.append(item)
            return items

        items = self.purge(expired, options["dry_run"], record)
        for why in kept:
            self.stderr.write(f"kept {why}")
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
