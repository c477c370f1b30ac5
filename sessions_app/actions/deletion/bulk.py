"""The background job of a bulk deletion: each session judged and deleted on its own."""

from __future__ import annotations

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
    profiles: dict[str, dict] = {}
    summary = {"profiles": 0, "critical": 0, "warning": 0, "info": 0, "applied": 0, "skipped": 0, "failed": 0}
    items = list(run.plans)
    for n, item in enumerate(items, start=1):
        key = str(item.get("profile", ""))
        store = registry.get(key)
        entry = profiles.setdefault(key, {"profile": key, "path": str(store.path) if store else "", "status": "ok",
                                          "findings": [], "actions": [], "backup": None})
        sid = str(item.get("session_id", ""))
        if store is None:
            status, reason, trash_id = "failed", "the profile no longer exists", ""
            deleter.note(None, DELETE_ACTION, [sid], "failed", reason, profile=key)
        else:
            outcome = deleter.delete(store, item)
            status = outcome.report_status
            reason, trash_id = outcome.reason, outcome.entry.id if outcome.entry else ""
            backup = deleter.backups.get(str(store.path))
            entry["backup"] = backup.path if backup else None
        entry["actions"].append({"action": DELETE_ACTION, "session_id": sid, "status": status, "reason": reason,
                                 "trash_entry": trash_id, "changes": []})
        summary[status] = summary.get(status, 0) + 1
        progress(f"delete {sid}: {status}", n, len(items))
    summary["profiles"] = len(profiles)
    return {"version": 1, "mode": "delete", "profiles": list(profiles.values()), "summary": summary}
