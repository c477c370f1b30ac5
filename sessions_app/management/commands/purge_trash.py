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

from pathlib import Path

from ... import trash
from ...stores.still_needed import lost_rows
from ... import audit
from ..purge import PurgeCommand


class Command(PurgeCommand):
    help = "Remove trash entries older than the retention (HERMES_ADMIN_TRASH_RETENTION_DAYS, default 30)."
    what = "trash"

    def handle(self, *args, **options):
        days = self.retention(options, trash.retention_days())
        label = self.actor_label()

        def record(item):
            audit.record(
                actor_label=label, action="purge_trash", profile=item.profile, store_path="",
                session_ids=list(item.session_ids), outcome="applied",
                reason=f"trash {item.kind} older than {days:g} days removed: {item.path}",
                plan={"path": item.path, "kind": item.kind, "state": item.state, "age_days": round(item.age_days, 2)},
            )

        kept: list[str] = []

        def expired():
            # An entry that still holds rows of a session its store has again (history an
            # agent's later writes did not bring back) is the only copy of them: kept.
            items = []
            for item in trash.expired(older_than_days=days):
                entry = trash.get_entry(Path(item.path).name) if item.kind == "entry" else None
                lost = lost_rows(entry.rows_path, entry.manifest.get("store_path", "")) if entry else 0
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
                "version": 1, "dry_run": options["dry_run"], "retention_days": days,
                "purged": [{"kind": i.kind, "path": i.path, "profile": i.profile, "state": i.state,
                            "age_days": round(i.age_days, 2), "session_ids": list(i.session_ids)} for i in items],
            }))
            return
        verb = "would remove" if options["dry_run"] else "removed"
        for item in items:
            self.stdout.write(f"{verb} {item.kind} {item.path} ({item.age_days:.0f} days old)")
        self.stdout.write(f"{verb} {len(items)} trash item(s) older than {days:g} days")
