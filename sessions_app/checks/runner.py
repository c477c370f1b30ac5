"""Run the catalog over one store and report, never raising for store problems.

Ground rule 9: a busy store is "busy, retry" and a damaged one "damaged, here is
why" — as a status with an error text and a finding (``store_busy``,
``store_corrupt``, ``schema_malformed``, ``store_unreadable``), never as a
traceback or an empty list. Everything is read through one read-only
connection (ground rule 1); each statement is its own short read transaction.

The store under check waits the full read timeout for a lock; the other profiles'
stores that cross-store checks read are only glanced at first, and a locked one is
left out with a note: in a pass over every profile a locked store is waited for
once, by its own pass, which reports it ``store_busy`` (docs/store.md §5.2, locked stores).
"""

from __future__ import annotations

import logging

import sqlite3
import time
from dataclasses import dataclass, field
from typing import Iterable

from ..stores.connection import classify_error
from ..stores.liveness import Evidence, LiveIndex, index_for, live_sessions
from ..stores.schema import Capabilities
from .base import SEVERITIES, CheckContext, Finding, Thresholds
from .registry import BY_CODE, select

log = logging.getLogger("sessions_app.checks")


@dataclass
class StoreReport:
    """Result of one pass over one store.

    ``status``: ``ok`` | ``busy`` | ``unreadable`` | ``corrupt`` | ``missing``;
    ``error``: plain-language reason when not ok; ``findings`` in catalog order;
    ``notes``: remarks about checks that could not look at something;
    ``failed_checks``: codes of checks that raised (their note says why): the report
    is incomplete, which heal runs treat as an error (exit 2), never as "healthy".
    """

    profile: str
    path: str
    status: str = "ok"
    schema_version: int | None = None
    error: str | None = None
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    failed_checks: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """Findings per severity: ``{"critical": n, "warning": n, "info": n}``."""
        out = {s: 0 for s in SEVERITIES}
        for f in self.findings:
            out[f.severity] = out.get(f.severity, 0) + 1
        return out

    def to_dict(self) -> dict:
        return {
            "profile": self.profile, "path": self.path, "status": self.status,
            "schema_version": self.schema_version, "error": self.error,
            "findings": [f.to_dict() for f in self.findings], "notes": list(self.notes),
            "failed_checks": list(self.failed_checks),
        }


def _access_finding(code: str, detail: str, severity: str | None = None) -> Finding:
    # evidence "source": a read that failed, as opposed to a check that looked.
    return BY_CODE[code].finding(None, 1, detail, {"source": "read_error", "error": detail}, severity=severity)


def _fail(report: StoreReport, exc: BaseException) -> None:
    """Record a store-level failure as status + error + finding."""
    status, reason = classify_error(exc)
    if reason.startswith("SQLite refuses the schema"):
        code = "schema_malformed"
    else:
        code = {"busy": "store_busy", "corrupt": "store_corrupt"}.get(status, "store_unreadable")
    report.status, report.error = status, reason
    if not any(f.check == code for f in report.findings):
        report.findings.append(_access_finding(code, reason))


def _capabilities(store, conn, report: StoreReport) -> Capabilities:
    """The store's capabilities, even when a damaged FTS table cannot be constructed.

    ``stores.schema.read_capabilities`` tolerates ``OperationalError`` on a virtual
    table but not ``DatabaseError`` ("vtable constructor failed", SQLITE_CORRUPT),
    which is what a damaged FTS shadow table raises; then the columns are read here
    with that table left out, so FTS-only damage does not hide every other check.
    """
    try:
        return store.capabilities(conn)
    except sqlite3.DatabaseError as exc:
        status, reason = classify_error(exc)
        if status != "corrupt" or reason.startswith("SQLite refuses the schema"):
            raise
        report.notes.append(f"schema read hit damage ({exc}); tables that cannot load are left out")
    tables: dict[str, tuple[str, ...]] = {}
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view') "
                                "AND name NOT LIKE 'sqlite_%' ORDER BY name").fetchall():
        try:
            quoted = '"' + name.replace('"', '""') + '"'
            tables[name] = tuple(r[1] for r in conn.execute(f"PRAGMA table_info({quoted})"))
        except sqlite3.DatabaseError:
            continue
    version = None
    if "schema_version" in tables:
        row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
        version = row[0] if row and isinstance(row[0], int) else None
    return Capabilities(tables=tables, schema_version=version)


def reachable_others(others: list, report: StoreReport, codes: list[str]) -> list:
    """The stores of ``others`` that cross-store checks may read now.

    Each is looked at with a glance (``Store.glance``: a short busy timeout, or at
    once busy when found locked moments ago); a busy one is left out with a note
    in ``report`` naming the checks (``codes``) that did not compare with it, so a
    locked store costs a glance here instead of the full read timeout once per
    other store. Other problems (damage, missing) are left to the
    checks, which say what they could not compare.
    """
    kept = []
    for other in others:
        status = other.glance().readiness()
        if status is not None and status.status == "busy":
            report.notes.append(f"profile {other.key} is busy (locked by another process): "
                                f"{', '.join(codes)} did not compare with it")
            continue
        kept.append(other)
    return kept


def run_store_checks(store, *, only: Iterable[str] | None = None, other_stores: Iterable = (),
                     session_id: str | None = None, now: float | None = None, conn=None,
                     liveness: LiveIndex | None = None) -> StoreReport:
    """Run the catalog (or the codes in ``only``) over ``store``.

    ``other_stores``: the other profiles' stores (``id_collision``).
    ``session_id``: restrict to that session's session-level findings (store-level
    checks and ``quick_check`` are skipped). ``now``: epoch seconds (default: now).
    ``conn``: an open connection of ``store.read()`` to run on (a session page's
    own, which has read the store: the file checks before opening ran for it).
    ``liveness``: with ``session_id`` and ``conn``, that session's index as
    ``stores.liveness.index_for`` reads it (``cached_routing=True``, the
    thresholds' idle time) on ``conn`` at ``now``, already read by the caller
    (``liveness.page_indexes``); None reads it here.
    Raises ValueError only for unknown codes in ``only``.
    """
    checks = select(only)
    now = time.time() if now is None else float(now)
    report = StoreReport(profile=store.key, path=str(store.path))
    if conn is not None:
        return _on_connection(store, conn, report, checks, list(other_stores), session_id, now, liveness)
    problem = store.preflight()
    if problem is not None:
        report.status, report.error = problem.status, problem.reason
        # A profile without a store yet is normal: worth knowing, not damage.
        report.findings.append(_access_finding(
            "store_unreadable", problem.reason, "info" if problem.status == "missing" else None))
        return report
    try:
        with store.read() as conn:
            _run(store, conn, report, checks, list(other_stores), session_id, now)
    except sqlite3.Error as exc:
        _fail(report, exc)
    return report


def _on_connection(store, conn, report: StoreReport, checks, other_stores, session_id, now,
                   liveness=None) -> StoreReport:
    """:func:`run_store_checks` on ``conn``, its text read as a connection of its own
    reads it (a page's lenient one reads invalid UTF-8 as U+FFFD, which the checks
    must meet as SQLite's error); its text reading is restored after."""
    shown = conn.text_factory
    conn.text_factory = str
    try:
        _run(store, conn, report, checks, other_stores, session_id, now, liveness)
    except sqlite3.Error as exc:
        _fail(report, exc)
    finally:
        conn.text_factory = shown
    return report


def _run(store, conn, report: StoreReport, checks, other_stores, session_id, now, given=None) -> None:
    caps = _capabilities(store, conn, report)
    report.schema_version = caps.schema_version
    missing = caps.missing_required()
    if missing:
        report.status = "unreadable"
        report.error = "not a Hermes session store (lacks " + ", ".join(missing) + ")"
        report.findings.append(_access_finding("store_unreadable", report.error))
        return
    thresholds = Thresholds.from_settings()
    if other_stores and any(c.reads_other_stores for c in checks):
        other_stores = reachable_others(other_stores, report, [c.code for c in checks if c.reads_other_stores])
    try:
        if session_id is not None and given is not None:
            liveness = given
        elif session_id is None:
            liveness = live_sessions(store, conn, caps, now, thresholds.idle_seconds)
        else:
            # A session's own checks (its page, a repair preview): routes as of the
            # store's file state; repairs re-check liveness inside their transaction.
            liveness = index_for(store, conn, caps, session_id, now, thresholds.idle_seconds, cached_routing=True)
    except sqlite3.Error as exc:
        if classify_error(exc)[0] == "busy":
            raise
        # Damaged pages under the liveness queries: record it, fail closed (every
        # session "maybe live") and let the other checks say what they can.
        _fail(report, exc)
        liveness = LiveIndex()
        liveness.store_wide.append(Evidence("unknown", f"liveness could not be read: {exc}"))
    ctx = CheckContext(store=store, conn=conn, caps=caps, now=now, thresholds=thresholds,
                       liveness=liveness, other_stores=other_stores, session_id=session_id)
    for check in checks:
        if check.runner_emitted or not check.applies(ctx):
            continue
        try:
            found = list(check.run(ctx))
        except sqlite3.Error as exc:
            status, reason = classify_error(exc)
            if status == "busy":
                _fail(report, exc)
                break  # every further read would wait out the same lock
            if status == "corrupt":
                _fail(report, exc)
                continue  # other checks may still read undamaged parts
            report.notes.append(f"{check.code} could not run: {reason}")
            report.failed_checks.append(check.code)
            continue
        except Exception as exc:  # a value of an unexpected type in a damaged store
            log.exception("check %s failed on %s", check.code, store.path)
            report.notes.append(f"{check.code} could not run: {exc.__class__.__name__}: {exc}")
            report.failed_checks.append(check.code)
            continue
        if check.code == "store_corrupt" and found:
            # quick_check's finding says more than a failed read: it replaces it.
            report.findings = [f for f in report.findings if f.check != "store_corrupt"]
            report.status = "corrupt"
            report.error = found[0].detail
        report.findings.extend(found)
    report.notes.extend(ctx.notes)
