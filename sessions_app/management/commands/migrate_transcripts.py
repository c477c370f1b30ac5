"""``manage.py migrate_transcripts``: bring what only copies on disk hold into the stores.

    python manage.py migrate_transcripts --all-profiles                # what would be imported
    python manage.py migrate_transcripts --all-profiles --apply --json # import, report JSON

The ``transcript_on_disk_only`` check with its ``import_jsonl_transcript`` repair
(legacy JSONL transcripts, ``actions/transcripts.py``) and the ``history_lost``
check with ``recover_messages`` (snapshots, request dumps, backups, the trash:
``actions/recovery.py``), nothing else: the same engine, selection, ``--apply``,
``--json``, run lock, report and exit statuses as ``heal_sessions``
(``management/runs.py``). Without ``--apply`` nothing is written anywhere but the
dashboard's own database.
"""

from __future__ import annotations

from ..runs import HealRunCommand


class Command(HealRunCommand):
    help = ("Import messages that exist only in sessions/<id>.jsonl files, and recover messages other copies "
            "on disk hold, into the session stores.")
    codes = ("transcript_on_disk_only", "history_lost")
