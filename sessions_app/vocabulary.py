"""The words runs, audit events and pages use for what a write did, and for kinds of runs.

Defined once here (docs/architecture.md §6, "Outcomes and run kinds"): the
guarded write's ``Outcome``, the run report (``runs.RunReport``), the
``AuditEvent.outcome`` choices, the run pages and the audit trail all say the
same word for the same thing. Nothing here reads a store or the database.
"""

from __future__ import annotations

# What one write (one repair, one session deleted, one restore, one flag, one
# prune batch) ended as. A dry run's "planned" never reaches the audit trail.
OUTCOMES = {
    "planned": "a check run found the repair; nothing was written (apply it to write)",
    "applied": "written in one transaction and verified (or committed with the problem that followed named)",
    "skipped": "nothing written: the session or store changed since it was planned, the store stayed locked, "
               "or the plan does not apply to this store; a later run may do it",
    "refused": "nothing written: a guard said no (an agent holds the session, a hazard beside the store, "
               "a missing permission, an invalid or used confirmation)",
    "failed": "an error stopped it: nothing written, or committed but not verified; needs a look",
}
# The outcomes of writes that were attempted: the audit trail's values, the
# counters of a run report's summary, in the order pages list them.
WRITE_OUTCOMES = ("applied", "skipped", "refused", "failed")
WRITE_OUTCOME_MEANINGS = {word: OUTCOMES[word] for word in WRITE_OUTCOMES}  # the audit trail's legend

# What a page calls each write of a run that is no repair (repairs: actions.registry.TITLES).
WRITE_TITLES = {
    "delete_session": "Delete the session",
    "restore_session": "Restore the session",
    "set_session_flag": "Change a flag",
    "rename_session": "Rename the session",
}

# Kinds of runs (``runs.kind``) with the name pages give them.
RUN_KINDS = {
    "check": "check",  # every check over the chosen profiles, nothing written
    "partial_check": "partial check",  # only some checks (``--only``)
    "light_check": "light check",  # the light checks of ``watch_stores``
    "heal": "heal",  # check, apply every safe repair, check again
    "repair": "repair",  # one previewed repair of one finding
    "recovery": "recovery",  # one previewed ``recover_messages``: messages back from copies on disk
    "move": "move",  # one previewed ``move_to_owner_store``
    "migration": "migration",  # the migration page's imports and moves, or ``migrate_transcripts``
    "deletion": "deletion",  # one confirmed deletion run on a fleet host (a local one is no run)
    "bulk_deletion": "bulk deletion",  # selected sessions deleted by a background job
    "restore": "restore",  # trash entries put back by a run (a fleet host's; a local restore is no run)
    "prune": "prune",  # retention pruning
    "prune_check": "prune check",  # ``prune_sessions`` without --apply: what would go, nothing written
    "flags": "flag change",  # archive, pin, hide… on selected sessions
}

# What pages call each kind of liveness evidence (``stores.liveness.Evidence.source``).
LIVENESS_SOURCES = {
    "turn_lease": "turn lease", "compression_lock": "compression lock", "registry": "active-session registry",
    "gateway": "gateway routing", "activity": "recent activity", "unknown": "unreadable evidence",
}
