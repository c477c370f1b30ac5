"""``manage.py heal_sessions``: the check catalog and its repairs, for cron.

    python manage.py heal_sessions --all-profiles                # check, print the plan
    python manage.py heal_sessions --all-profiles --apply --json # repair, report JSON

Without ``--apply`` nothing is written to any store or Hermes home (the run is
recorded in the dashboard's own database). Exit status: 0 nothing at or above
``--fail-on`` remains, 1 such findings remain, 2 a store could not be read, an
action failed, another run holds the lock, or the arguments were wrong. With
``--apply`` every healable finding is repaired, JSONL imports
(``transcript_on_disk_only``) and moves to the owner's store (``owner_mismatch``)
included. The contract lives in ``management/runs.py``.
"""

from __future__ import annotations

from ..runs import HealRunCommand


class Command(HealRunCommand):
    help = "Check Hermes session stores and (with --apply) repair what is safe to repair."
