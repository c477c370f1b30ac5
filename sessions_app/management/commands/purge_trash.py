"""Remove trash entries older than the retention (``HERMES_ADMIN_TRASH_RETENTION_DAYS``).

    manage.py purge_trash [--older-than DAYS] [--dry-run] [--json]

Removes ``<data>/trash/sessions/<entry>/`` (deleted or restored sessions' rows and
files) and ``<data>/trash/files/<stamp>/`` (leftover files moved aside by
``remove_leftover_files``) once they are older than the retention. Entries of a
deletion still running (``pending``) are never removed: a pending entry goes only
once it is also a day old (``trash.PENDING_GRACE_DAYS``), and the purge holds the
run lock that bulk deletion jobs and heal runs hold. Each purged entry is
recorded in the audit trail (action ``purge_trash``) as soon as it is removed.
Exit status 0, or 2 when the trash could not be removed (permissions) or another
run holds the lock.
"""

from __future__ import annotations

import json
import socket
from contextlib import nullcontext

from django.core.management.base import BaseCommand, CommandError

from ... import trash
from ...locks import RunLocked, run_lock
from ...models import AuditEvent


class Command(BaseCommand):
    help = "Remove trash entries older than the retention (HERMES_ADMIN_TRASH_RETENTION_DAYS, default 30)."

    def add_arguments(self, parser):
        parser.add_argument("--older-than", type=float, metavar="DAYS",
                            help="retention in days for this run (default: the setting)")
        parser.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
        parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")

    def handle(self, *args, **options):
        days = options["older_than"]
        if days is not None and days < 0:
            raise CommandError("--older-than must be 0 or more", returncode=2)
        days = trash.retention_days() if days is None else days
        label = f"command:purge_trash@{socket.gethostname()}"

        def audit(item):
            AuditEvent.objects.create(
                actor_label=label, action="purge_trash", profile=item.profile, store_path="",
                session_ids=list(item.session_ids), outcome="applied",
                reason=f"trash {item.kind} older than {days:g} days removed: {item.path}",
                plan={"path": item.path, "kind": item.kind, "state": item.state, "age_days": round(item.age_days, 2)},
            )

        try:
            # A dry run removes nothing: it needs no lock.
            with nullcontext() if options["dry_run"] else run_lock("heal", label="purge_trash"):
                items = trash.purge(older_than_days=days, dry_run=options["dry_run"], on_removed=audit)
        except RunLocked as exc:
            raise CommandError(f"{exc}; nothing purged, retry later", returncode=2)
        except OSError as exc:
            raise CommandError(f"could not remove trash ({exc})", returncode=2)
        if options["json"]:
            self.stdout.write(json.dumps({
                "version": 1, "dry_run": options["dry_run"], "retention_days": days,
                "purged": [{"kind": i.kind, "path": i.path, "profile": i.profile, "state": i.state,
                            "age_days": round(i.age_days, 2), "session_ids": list(i.session_ids)} for i in items],
            }))
            return
        verb = "would remove" if options["dry_run"] else "removed"
        for item in items:
            self.stdout.write(f"{verb} {item.kind} {item.path} ({item.age_days:.0f} days old)")
        self.stdout.write(f"{verb} {len(items)} trash item(s) older than {days:g} days")
