"""The background job of a bulk deletion: each session judged and deleted on its own."""

from __future__ import annotations

from ...runs import RunReport
from ...stores import registry
from .plan import DELETE_ACTION


def run_bulk_delete(run, progress) -> dict:
    """The background job of a bulk deletion (``HealRun.mode == "delete"``).

    ``run.plans`` holds the confirmed items; each session is judged and deleted
    on its own (its own transaction, its own audit event). Returns a report in
    the heal report shape the run page shows.
    """
    from . import Deleter

    deleter = Deleter(actor=run.actor, actor_label=run.actor_label, run=run, request_address=run.request_address)
    report = RunReport(mode="delete")
    items = list(run.plans)
    for n, item in enumerate(items, start=1):
        key = str(item.get("profile", ""))
        store = registry.get(key)
        entry = report.profile(key, str(store.path) if store else "")
        sid = str(item.get("session_id", ""))
        if store is None:
            status, reason, trash_id = "failed", "the profile no longer exists", ""
            deleter.note(None, DELETE_ACTION, [sid], "failed", reason, profile=key)
        else:
            outcome = deleter.delete(store, item)
            status = outcome.report_status
            reason, trash_id = outcome.reason, outcome.entry.id if outcome.entry else ""
            backup = deleter.backups.get(str(store.path))
            entry.backup = backup.path if backup else None
        entry.actions.append({"action": DELETE_ACTION, "session_id": sid, "status": status, "reason": reason,
                              "trash_entry": trash_id, "changes": []})
        progress(f"delete {sid}: {status}", n, len(items))
    return report.as_json()
