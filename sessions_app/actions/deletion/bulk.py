"""Background jobs of deletions and restores: each session judged and written on its own.

Both jobs may run twice for one run: a fleet worker killed mid-job gets its task
handed out again (docs/architecture.md §10). So each starts by settling what an
interrupted process left halfway in the stores it touches (``resume.py``), and
an item already done by an earlier delivery of the same run is reported as done,
not written again: a deletion is known by its confirmation nonce and run id,
which its trash entry records; a restore by the run id the job writes into the
entry before it starts.
"""

from __future__ import annotations

from ... import trash
from ...runs import RunReport
from ...stores import registry
from .plan import DELETE_ACTION, RESTORE_ACTION


def _settle(deleter, stores: dict, key: str):
    """The store of ``key`` (None when gone), its unfinished entries settled once per job."""
    from .resume import finish_unfinished

    if key not in stores:
        stores[key] = registry.get(key)
        if stores[key] is not None:
            finish_unfinished(stores[key], deleter)
    return stores[key]


def _deleted_before(run, key: str, nonce: str) -> trash.TrashEntry | None:
    """The entry an earlier delivery of ``run`` made deleting confirmation item ``nonce``."""
    if not nonce:
        return None
    return next((e for e in trash.list_entries(key) if e.manifest.get("nonce") == nonce
                 and e.manifest.get("run") == run.pk and e.state in ("deleted", "restoring", "restored")), None)


def run_bulk_delete(run, progress) -> dict:
    """The background job of a bulk deletion (``HealRun.mode == "delete"``).

    ``run.plans`` holds the confirmed items; each session is judged and deleted
    on its own (its own transaction, its own audit event). Returns a report in
    the heal report shape the run page shows.
    """
    from . import Deleter

    deleter = Deleter(actor=run.actor, actor_label=run.actor_label, run=run, request_address=run.request_address)
    report = RunReport(mode="delete")
    items, stores = list(run.plans), {}
    for n, item in enumerate(items, start=1):
        key = str(item.get("profile", ""))
        store = _settle(deleter, stores, key)
        entry = report.profile(key, str(store.path) if store else "")
        sid = str(item.get("session_id", ""))
        done = _deleted_before(run, key, str(item.get("nonce") or "")) if store is not None else None
        if store is None:
            status, reason, trash_id = "failed", "the profile no longer exists", ""
            deleter.note(None, DELETE_ACTION, [sid], "failed", reason, profile=key)
        elif done is not None:
            status, trash_id = "applied", done.id
            reason = f"deleted by an earlier delivery of this run (trash entry {done.id}); nothing deleted again"
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


def run_restore(run, progress) -> dict:
    """The background job of restores (``HealRun.mode == "restore"``).

    ``run.plans``: ``[{"profile", "trash_entry"}]`` (entry folder names of this
    host's trash). Each entry goes back through ``Deleter.restore`` (the guarded
    write); report in the heal report shape, one action per entry.
    """
    from . import Deleter

    deleter = Deleter(actor=run.actor, actor_label=run.actor_label, run=run, request_address=run.request_address)
    report = RunReport(mode="restore")
    items, stores = list(run.plans), {}
    for n, item in enumerate(items, start=1):
        key, entry_id = str(item.get("profile", "")), str(item.get("trash_entry", ""))
        store = _settle(deleter, stores, key)
        found = trash.get_entry(entry_id)
        part = report.profile(key, str(store.path) if store else "")
        sid = (found.manifest.get("session_id") if found else "") or ""
        if found is None:
            status, reason = "failed", f"there is no trash entry {entry_id}"
            deleter.note(store, RESTORE_ACTION, [], "failed", reason, profile=key)
        elif found.state == "restored" and found.manifest.get("restore_run") == run.pk:
            status, reason = "applied", "restored by an earlier delivery of this run; nothing inserted again"
        else:
            if found.state == "deleted":
                found.update(restore_run=run.pk)
            outcome = deleter.restore(store, found)
            status, reason = outcome.report_status, outcome.reason
            backup = deleter.backups.get(str(store.path)) if store else None
            part.backup = backup.path if backup else None
        part.actions.append({"action": RESTORE_ACTION, "session_id": sid, "status": status, "reason": reason,
                             "trash_entry": entry_id, "changes": []})
        progress(f"restore {entry_id}: {status}", n, len(items))
    return report.as_json()
