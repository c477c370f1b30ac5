"""A prune over several stores: preview each, then (``apply``) its batches, and the report.

The report (``manage.py prune_sessions --json`` prints it, a prune run keeps it),
version ``runs.REPORT_VERSION``::

    {"version": 2, "mode": "check" | "apply", "criteria": {...}, "started_at", "finished_at",
     "profiles": [{"profile", "path", "status", "error", "backup",
                   "units": [{"root", "sessions", "delegates", "messages", "content_bytes", "files",
                              "ended_at", "title", "source", "status", "reason", "trash_entry"}],
                   "spared": [{"session_ids", "reason", "detail"}],
                   "batches": [{"status", "reason", "units", "audit_event"}]}],
     "summary": {"profiles", "units", "sessions", "messages", "content_bytes", "files",
                 "applied", "skipped", "refused", "failed", "spared", "spared_pinned", "spared_live",
                 "remaining"}}

A unit's ``status`` (``vocabulary.OUTCOMES``): ``planned`` (check mode), ``applied``,
``refused`` (spared when its batch ran because an agent may hold it: live, maybe live,
routed by a live gateway), ``skipped`` (spared when its batch ran for another reason:
changed, pinned meanwhile, busy store), ``failed``. ``remaining``: units not
pruned plus sessions spared for a passing reason (an agent holds them, recent
activity, changed meanwhile): what a later run may still prune. ``spared_live``
also counts sessions a gateway routes a chat to (``routed``), which stay as long as
it does. Sizes are bytes, times epoch seconds. ``summary`` also
carries ``critical``/``warning``/``info`` (always 0) so run pages read it like a
heal report.
"""

from __future__ import annotations

import sqlite3
import time

from ..runs import REPORT_VERSION, iso
from ..stores import registry
from ..stores.retention import Criteria
from ..stores.store import Store, Unavailable
from .deletion.resume import finish_unfinished
from .guarded import GuardedWriter
from .prune import BATCH_ROWS, BATCH_UNITS, HELD, TRANSIENT, PruneWrite, Unit, batches, plan_units

REPORT_UNITS = 2000  # units listed per profile in a report (counts stay exact)


class Pruner(GuardedWriter):
    """The writer of a prune run: one backup per store, one audit event per batch."""

    backup_label = "prune"


PRUNED_TABLES = ("sessions", "messages")  # what a prune reads and moves, with their indexes


def _check_structure(conn) -> None:
    """Raise ``sqlite3.DatabaseError`` (classified ``corrupt``) when a page of a table
    a prune reads is damaged. The criteria alone decide which pages the preview
    touches (``--empty`` may never read the messages index), so a damaged store
    could pass as "nothing to prune": ``quick_check`` of those tables (and their
    indexes) reads them all, whatever the criteria (ground rule 9: damaged is said)."""
    for table in PRUNED_TABLES:
        lines = [str(r[0]) for r in conn.execute(f'PRAGMA quick_check("{table}")')]
        if lines != ["ok"]:
            raise sqlite3.DatabaseError(f"database disk image is malformed (quick_check of {table}: "
                                        f"{'; '.join(lines[:3])})")


def preview_store(store: Store, criteria: Criteria, now: float | None = None, verify: bool = True):
    """``(preview, None)`` or ``(None, (status, reason))`` when the store cannot be
    read, or (``verify``) cannot be read fully: a damaged page of ``sessions`` or
    ``messages`` (or of their indexes) is ``corrupt`` whatever the criteria select.
    ``verify`` reads both tables whole (about 4.5 s for a 460 MB store on a loaded
    machine): the command and the prune job do; the page's in-request preview does
    not (its apply job does, before any batch)."""
    try:
        with store.browse() as (conn, caps):
            preview = plan_units(store, conn, caps, criteria, now)
            if verify:
                _check_structure(conn)
            return preview, None
    except Unavailable as exc:
        return None, (exc.status.status, exc.status.reason)


def _profile_entry(store: Store) -> dict:
    return {"profile": store.key, "path": str(store.path), "status": "ok", "error": None, "backup": None,
            "units": [], "spared": [], "batches": [], "totals": {}}


def prune_store(store: Store, criteria: Criteria, *, apply: bool, writer: GuardedWriter | None = None,
                progress=None, only_roots: set[str] | None = None, batch_units: int = BATCH_UNITS,
                batch_rows: int = BATCH_ROWS, done_before: int = 0, total: int | None = None,
                previewed=None) -> dict:
    """One store's part of the report. ``only_roots``: prune only these units (a
    browser confirmation names what it showed; others are left and listed as spared).
    ``previewed``: the result of :func:`preview_store` when already made."""
    entry = _profile_entry(store)
    preview, problem = previewed or preview_store(store, criteria)
    if problem:
        entry["status"], entry["error"] = problem
        return entry
    units = preview.units
    spared = [s.as_json() for s in preview.spared]
    if only_roots is not None:
        left = [u for u in units if u.root not in only_roots]
        units = [u for u in units if u.root in only_roots]
        for unit in left:
            spared.append({"session_ids": unit.ids, "reason": "not_previewed",
                           "detail": "selected now but not in the preview that was confirmed; left for next time"})
    rows = {u.root: dict(u.as_json(), status="planned", reason="", trash_entry="") for u in units}
    entry["spared"] = spared
    if apply and units:
        writer = writer or Pruner(actor_label="prune")
        finish_unfinished(store, writer)  # an interrupted deletion's entry first (its files are not leftovers)
        groups = batches(units, batch_units, batch_rows)
        done = done_before
        for n, group in enumerate(groups, start=1):
            label = f"{n}/{len(groups)}"
            outcome = writer.perform(store, PruneWrite(group, criteria, label))
            report = outcome.report or {}
            pruned = {p["root"]: p for p in report.get("pruned", [])}
            for unit in group:
                row = rows[unit.root]
                if unit.root in pruned and outcome.status == "applied":
                    row.update(status="applied", trash_entry=pruned[unit.root]["trash_entry"],
                               reason=outcome.reason if outcome.problems else "")
                elif outcome.status == "failed":
                    row.update(status="failed", reason=outcome.reason)
                else:
                    mine = [s for s in report.get("spared", []) if unit.root in s["session_ids"]]
                    held = mine[0]["reason"] in HELD if mine else outcome.status == "refused"
                    row.update(status="refused" if held else "skipped",
                               reason=mine[0]["detail"] if mine else outcome.reason)
                    if mine:
                        entry["spared"].append(dict(mine[0], at_apply=True))
            backup = writer.backups.get(str(store.path))
            entry["backup"] = backup.path if backup else entry["backup"]
            entry["batches"].append({"batch": label, "status": outcome.status, "reason": outcome.reason,
                                     "units": [u.root for u in group]})
            done += len(group)
            if progress:
                progress(f"{store.key}: batch {label} {outcome.status} ({len(group)} unit(s))", done,
                         total if total is not None else done)
    entry["units"] = list(rows.values())
    return entry


def summarize(profiles: list[dict]) -> dict:
    """The report's ``summary`` (module docstring)."""
    s = {"profiles": len(profiles), "units": 0, "sessions": 0, "messages": 0, "content_bytes": 0, "files": 0,
         "applied": 0, "skipped": 0, "refused": 0, "failed": 0, "spared": 0, "spared_pinned": 0, "spared_live": 0,
         "remaining": 0, "critical": 0, "warning": 0, "info": 0}
    for prof in profiles:
        for unit in prof.get("units_all", prof["units"]):
            s["units"] += 1
            s["sessions"] += len(unit["sessions"]) + len(unit["delegates"])
            s["messages"] += unit["messages"]
            s["content_bytes"] += unit["content_bytes"]
            s["files"] += unit["files"]
            if unit["status"] in ("applied", "skipped", "refused", "failed"):
                s[unit["status"]] += 1
            if unit["status"] != "applied":
                s["remaining"] += 1
        for item in prof["spared"]:
            if item.get("at_apply"):
                continue  # already counted as a skipped unit
            n = len(item["session_ids"])
            s["spared"] += n
            if item["reason"] == "pinned":
                s["spared_pinned"] += n
            if item["reason"] in TRANSIENT or item["reason"] == "routed":
                s["spared_live"] += n
            if item["reason"] in TRANSIENT:
                s["remaining"] += n
    return s


def run_prune(stores: list[Store], criteria: Criteria, *, apply: bool, writer: GuardedWriter | None = None,
              progress=None, only_roots: dict[str, set[str]] | None = None, batch_units: int = BATCH_UNITS,
              batch_rows: int = BATCH_ROWS, verify: bool = True) -> dict:
    """The report of a prune of ``stores`` (module docstring); never raises
    for store problems (a store that cannot be read is reported with its status;
    ``verify``: see :func:`preview_store`)."""
    started = time.time()
    profiles, done = [], 0
    chosen = [s for s in stores if only_roots is None or only_roots.get(s.key)]
    previews = {s.key: preview_store(s, criteria, verify=verify) for s in chosen}
    total = sum(len(p.units) if p else 0 for p, _ in previews.values())
    for store in chosen:
        roots = None if only_roots is None else set(only_roots.get(store.key, ()))
        entry = prune_store(store, criteria, apply=apply, writer=writer, progress=progress, only_roots=roots,
                            batch_units=batch_units, batch_rows=batch_rows, done_before=done, total=total,
                            previewed=previews[store.key])
        done += len(entry.get("units_all", entry["units"]))
        if len(entry["units"]) > REPORT_UNITS:
            entry["units_all"] = entry["units"]
        profiles.append(entry)
    summary = summarize(profiles)
    for entry in profiles:
        entry["totals"] = summarize([entry])
        if "units_all" in entry:
            entry["units_listed"] = REPORT_UNITS
            entry["units"] = entry.pop("units_all")[:REPORT_UNITS]
    return {"version": REPORT_VERSION, "mode": "apply" if apply else "check", "criteria": criteria.as_dict(),
            "started_at": iso(started), "finished_at": iso(time.time()), "profiles": profiles, "summary": summary}


def exit_status(report: dict) -> int:
    """0 nothing (left) to prune; 1 sessions remain that the criteria select (check
    mode found some, or apply left some: live, changed, busy); 2 a store could not
    be read or a batch failed."""
    if any(p["status"] not in ("ok", "missing") for p in report["profiles"]) or report["summary"]["failed"]:
        return 2
    return 1 if report["summary"]["remaining"] else 0


def run_prune_job(run, progress) -> dict:
    """The background job of a prune confirmed in the browser (``HealRun.mode ==
    "prune"``): ``run.plans`` is ``[{"criteria": {...}, "roots": {profile: [root, …]}}]``."""
    spec = run.plans[0] if run.plans else {}
    criteria = Criteria.from_dict(spec.get("criteria") or {})
    roots = {str(k): {str(r) for r in v} for k, v in (spec.get("roots") or {}).items()}
    registry.scan()
    stores = [s for s in registry.stores() if s.key in roots]
    writer = Pruner(actor=run.actor, actor_label=run.actor_label, run=run, request_address=run.request_address)
    run.total = sum(len(v) for v in roots.values())
    run.save(update_fields=["total"])
    report = run_prune(stores, criteria, apply=True, writer=writer, progress=progress, only_roots=roots)
    for key in sorted(set(roots) - {s.key for s in stores}):
        report["profiles"].append(_profile_entry_missing(key))
        report["summary"]["profiles"] += 1
    return report


def _profile_entry_missing(key: str) -> dict:
    return {"profile": key, "path": "", "status": "missing", "error": "the profile no longer exists", "backup": None,
            "units": [], "spared": [], "batches": [], "totals": {}}


__all__ = ["Pruner", "Unit", "exit_status", "prune_store", "run_prune", "run_prune_job", "summarize"]
