"""Runs: their lifecycle and their typed report (docs/architecture.md §6, "Runs, jobs, audit").

A run is a :class:`~sessions_app.models.HealRun` row: a check pass, a heal, the
repair of previewed plans, a bulk deletion (its kinds: :func:`kind`, named in
``vocabulary.RUN_KINDS``; what it did and found in words: :func:`result`). Every run is created by
:func:`create`, started by :func:`begin`, advanced by :func:`progress`, and
ends in :func:`finish` or :func:`fail`; :func:`mark_if_dead` settles a run whose
process was killed (browser jobs and commands alike record their pid), so no
page polls a dead run forever. Every end of a run (finished, failed, found dead)
is handed to ``notify.run_ended``, which tells admins what calls for it
(issue 18; nothing when no channel is configured, never an error for the run).

The report a run keeps (and ``heal_sessions --json`` prints) is built from the
dataclasses below — the one place its shape is written (``REPORT_VERSION``, 2)::

    {"version": 2, "mode", "started_at", "finished_at",
     "profiles": [{"profile", "root", "path", "status", "schema_version", "error",
                   "findings": [...], "actions": [...], "backup"}],
     "summary": {"profiles", "critical", "warning", "info",
                 "planned", "applied", "skipped", "refused", "failed"}}

An action's ``status`` is one of ``vocabulary.OUTCOMES`` (``planned`` only when
nothing was applied); ``summary`` counts each (``refused`` and ``planned`` were
added to version 1 later: a reader of older reports takes them as 0). Version 2 changed
what ``skipped`` means: a write a guard refused (liveness, a hazard) used to be counted as
``skipped`` and is ``refused`` since, so a version-1 ``skipped`` may hold refusals.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import asdict, dataclass, field

import psutil
from django.utils import timezone

from .checks.base import SEVERITIES
from .models import FindingSnapshot, HealRun
from .vocabulary import OUTCOMES as OUTCOME_MEANINGS
from .vocabulary import RUN_KINDS, WRITE_OUTCOMES

#: The ``version`` of every run report and ``--json`` document (module docstring).
REPORT_VERSION = 2

OUTCOMES = ("planned", *WRITE_OUTCOMES)  # the counters of a report's summary


def iso(ts: float) -> str:
    """Epoch seconds as an ISO 8601 UTC time (seconds)."""
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).isoformat(timespec="seconds")


def finding_json(finding) -> dict:
    """A report's finding entry from a ``checks.base.Finding``; a damage finding also
    keeps SQLite's own quick_check lines (``sqlite_report``, a list of str) for the
    pages to fold under its readable detail, and a finding whose case has its own
    next step names it (``next_step_case``)."""
    out = {"check": finding.check, "severity": finding.severity, "session_id": finding.session_id,
           "count": finding.count, "detail": finding.detail, "heal": finding.heal}
    if finding.next_step_case:
        out["next_step_case"] = finding.next_step_case
    raw = (finding.evidence or {}).get("quick_check")
    if raw:
        out["sqlite_report"] = [str(line) for line in raw]
    return out


@dataclass
class ProfileReport:
    """One profile's part of a run report. ``findings`` are ``finding_json`` dicts
    (check, severity, session_id, count, detail, heal); ``actions`` are
    ``Outcome.as_json()`` dicts (action, session_id, status, reason, changes)."""

    profile: str
    path: str
    root: str | None = None
    status: str = "ok"
    schema_version: int | None = None
    error: str | None = None
    findings: list[dict] = field(default_factory=list)
    actions: list[dict] = field(default_factory=list)
    backup: str | None = None

    def as_json(self) -> dict:
        data = asdict(self)
        if data["root"] is None:  # plan and deletion runs name no root
            data.pop("root")
            data.pop("schema_version")
            data.pop("error")
        return data


@dataclass
class RunReport:
    """The report of a run (``REPORT_VERSION``); ``mode`` ``check`` | ``apply`` | ``delete``."""

    mode: str
    profiles: list[ProfileReport] = field(default_factory=list)
    started_at: str | None = None
    finished_at: str | None = None
    skipped_roots: list[str] = field(default_factory=list)

    def profile(self, key: str, path: str = "") -> ProfileReport:
        """The entry of profile ``key``, added on first use."""
        for entry in self.profiles:
            if entry.profile == key:
                return entry
        entry = ProfileReport(profile=key, path=path)
        self.profiles.append(entry)
        return entry

    def summary(self) -> dict:
        """Counts over every profile: findings per severity, actions per outcome."""
        counts = {"profiles": len(self.profiles), **{s: 0 for s in SEVERITIES}, **{o: 0 for o in OUTCOMES}}
        for entry in self.profiles:
            for f in entry.findings:
                counts[f["severity"]] += 1
            for a in entry.actions:
                if a["status"] in OUTCOMES:
                    counts[a["status"]] += 1
        return counts

    def as_json(self) -> dict:
        data = {"version": REPORT_VERSION, "mode": self.mode}
        if self.started_at:
            data.update(started_at=self.started_at, finished_at=self.finished_at)
        data["profiles"] = [p.as_json() for p in self.profiles]
        data["summary"] = self.summary()
        if self.skipped_roots:
            data["skipped_roots"] = list(self.skipped_roots)
        return data


def exit_status(report: dict, fail_on: str = "warning") -> int:
    """The cron contract: 0 nothing at or above ``fail_on`` remains; 1 such
    findings remain; 2 a store could not be read, a check could not run (an
    ``ok`` store with an ``error``), or an action failed."""
    if any(p["status"] not in ("ok", "missing") or (p["status"] == "ok" and p["error"])
           for p in report["profiles"]) or report["summary"]["failed"]:
        return 2
    levels = SEVERITIES[: SEVERITIES.index(fail_on) + 1]
    if any(report["summary"][level] for level in levels):
        return 1
    return 0


def record_snapshot(run, report: dict) -> None:
    """Finding counts per profile and check code, and the profiles the pass checked
    (``HealRun.checked_profiles``), for the health-over-time views."""
    run.checked_profiles = checked_profiles(report)
    run.save(update_fields=["checked_profiles"])
    counts: dict[tuple, int] = {}
    for prof in report["profiles"]:
        for f in prof["findings"]:
            key = (prof["profile"], f["check"], f["severity"])
            counts[key] = counts.get(key, 0) + 1
    FindingSnapshot.objects.bulk_create(
        FindingSnapshot(run=run, profile=p, check_code=c, severity=s, count=n) for (p, c, s), n in counts.items()
    )


def checked_profiles(report: dict | None) -> list[str]:
    """Profile keys of a heal report (``checks.runner`` shape) whose store was read
    and checked (``status == "ok"``), in report order."""
    return [p["profile"] for p in (report or {}).get("profiles", []) if p.get("status") == "ok" and p.get("profile")]


# --------------------------------------------------------------------------- kinds and results

MIGRATION_COMMAND = "command:migrate_transcripts@"  # actor label prefix of that command's runs
MIGRATION_ACTIONS = ("import_jsonl_transcript", "move_to_owner_store", "recover_messages")
SINGLE_KINDS = {"recover_messages": "recovery", "move_to_owner_store": "move"}


def kind_of(mode: str, trigger: str = "", only=(), actor_label: str = "", first_action: str | None = None,
            prune_apply=True) -> str:
    """The kind of a run (a key of ``vocabulary.RUN_KINDS``) from its row's fields;
    ``first_action`` is the ``action`` of its first plan (None without plans);
    ``prune_apply``: its first plan's ``apply`` (False: ``prune_sessions`` without
    --apply, a prune check; None or missing: a prune that writes, as the browser's).
    Pages name runs by it; the metrics keep their own labels
    (``notify.events.kind_of``)."""
    if mode == "delete":
        return "deletion" if trigger == FLEET_TRIGGER else "bulk_deletion"
    if mode == "prune" and prune_apply is not None and not prune_apply:
        return "prune_check"
    if mode in ("prune", "flags", "restore"):
        return mode
    if first_action is not None:
        if len(only or ()) > 1 and first_action in MIGRATION_ACTIONS:
            return "migration"  # the migration page's plans (a single repair names its one check)
        return SINGLE_KINDS.get(first_action, "repair")
    if actor_label.startswith(MIGRATION_COMMAND):
        return "migration"
    if only:
        return "light_check" if trigger == "watch" else ("heal" if mode == "apply" else "partial_check")
    return "heal" if mode == "apply" else "check"


def kind(run: HealRun) -> str:
    """:func:`kind_of` for a loaded run."""
    plans = run.plans or []
    head = plans[0] if plans and isinstance(plans[0], dict) else None
    first = head.get("action", "") if head is not None else None
    return kind_of(run.mode, run.trigger, run.only, run.actor_label, first,
                   prune_apply=head.get("apply", True) if head is not None else True)


def outcome_words(report: dict | None) -> dict[str, str]:
    """The outcomes a report's actions (and prune units) ended as, each with its
    meaning (``vocabulary.OUTCOMES``), in the vocabulary's order: the legend of a
    run page."""
    seen = {a.get("status") for p in (report or {}).get("profiles", [])
            for a in [*p.get("actions", []), *p.get("units", [])]}
    return {word: meaning for word, meaning in OUTCOME_MEANINGS.items() if word in seen}


def took(run: HealRun) -> float | None:
    """Seconds from the start of ``run`` to its end; None while it runs or when it
    never started."""
    if run.started_at is None or run.finished_at is None:
        return None
    return max(0.0, (run.finished_at - run.started_at).total_seconds())


def run_result(run: HealRun) -> list[str]:
    """:func:`result` of a loaded run."""
    summary = (run.report or {}).get("summary")
    return result(kind(run), summary, run.mode, run.status, scoped=bool(run.plans) and run.mode == "apply")


def kind_label(key: str) -> str:
    """The name pages give a run kind (``vocabulary.RUN_KINDS``)."""
    return RUN_KINDS.get(key, key)


def _n(count: int, word: str, plural: str | None = None) -> str:
    return f"{count} {word if count == 1 else plural or word + 's'}"


def _counts(summary: dict, words) -> str:
    """``2 applied, 1 refused``: the non-zero counts of ``words``, in their order."""
    return ", ".join(f"{summary.get(w) or 0} {w}" for w in words if summary.get(w))


def _findings(summary: dict) -> str:
    return _counts(summary, SEVERITIES)


NOUNS = {  # what one action of a run kind is
    "deletion": ("session", None), "bulk_deletion": ("session", None), "flags": ("session", None),
    "restore": ("trash entry", "trash entries"), "migration": ("import or move", "imports and moves"),
    "recovery": ("recovery", "recoveries"), "move": ("move", None),
}
IDLE = {"deletion": "no session deleted", "bulk_deletion": "no session deleted", "flags": "no flag changed",
        "restore": "nothing restored"}


def result(kind_key: str, summary: dict | None, mode: str = "", status: str = HealRun.Status.DONE,
           scoped: bool = False) -> list[str]:
    """What a run did and found, as phrases the runs list and the run page show
    (``summary``: its report's ``summary``; ``mode``: ``HealRun.mode``;
    ``scoped``: the run applied previewed plans, so its findings are those of the
    repaired sessions re-checked, not of whole profiles). Zero
    counts are left out and an empty total is said in words, never as a row of
    zeros; a repair run speaks of the finding it repaired only, never of the
    whole profile's health (its report holds nothing else)."""
    if not summary:
        return ["no report: the run failed"] if status == HealRun.Status.FAILED else []
    acted = sum(summary.get(w) or 0 for w in WRITE_OUTCOMES)
    found = _findings(summary)
    if kind_key in ("prune", "prune_check"):
        units = summary.get("units") or 0
        if not units:
            head = "nothing to prune"
        else:
            sizes = f"{_n(summary.get('sessions') or 0, 'session')}, {_n(summary.get('messages') or 0, 'message row')}"
            done = _counts(summary, WRITE_OUTCOMES) or f"{units} planned"
            head = f"{_n(units, 'conversation')} ({sizes}): {done}"
        spared = summary.get("spared") or 0
        return [head] + ([f"{_n(spared, 'selected session')} spared ({summary.get('spared_pinned') or 0} pinned)"]
                         if spared else [])
    if mode == "check":  # check passes, and migrate_transcripts without --apply
        lines = [f"findings: {found}" if found else "no findings"]
        if summary.get("planned"):
            lines.append(f"{_n(summary['planned'], 'repair')} to apply")
        return lines
    noun, plural = NOUNS.get(kind_key, ("repair", None))
    lines = [f"{_n(acted, noun, plural)}: {_counts(summary, WRITE_OUTCOMES)}" if acted
             else IDLE.get(kind_key, "nothing to repair")]
    if kind_key in IDLE:  # writes of their own, no checks
        return lines
    if kind_key in ("repair", "recovery", "move"):
        if acted > 1:  # "Repair all findings of this kind" sends many plans
            lines.append(f"findings remaining on these sessions: {found}" if found else "the repaired findings are gone")
        else:
            lines.append(f"the finding remains ({found})" if found else "the repaired finding is gone")
    elif scoped:
        lines.append(f"on these sessions, findings remaining: {found}" if found else "no finding remains on these sessions")
    else:
        lines.append(f"findings remaining: {found}" if found else "no findings remain")
    return lines


# --------------------------------------------------------------------------- lifecycle

def create(mode: str, trigger: str, *, actor=None, actor_label: str = "", request_address: str | None = None,
           **fields) -> HealRun:
    """The one place a run row is created (``trigger``: ``browser`` | ``command``)."""
    label = actor_label or (actor.get_username() if actor is not None else "")
    return HealRun.objects.create(mode=mode, trigger=trigger, actor=actor, actor_label=label,
                                  request_address=request_address, **fields)


def begin(run: HealRun) -> HealRun:
    """Mark ``run`` running in this process (its pid lets :func:`mark_if_dead` see a kill)."""
    run.status, run.started_at, run.pid = HealRun.Status.RUNNING, timezone.now(), os.getpid()
    run.save(update_fields=["status", "started_at", "pid"])
    return run


def progress(run: HealRun):
    """A ``progress(message, done, total)`` callback that keeps the run's counters
    and the last 20 lines of its log on the row (the run page polls it)."""
    def update(message: str, done: int, total: int) -> None:
        run.done, run.total = done, total
        run.log_tail = "\n".join((run.log_tail.splitlines() + [message])[-20:])
        run.save(update_fields=["done", "total", "log_tail"])
    return update


def _ended(run: HealRun, background: bool = False) -> None:
    from . import notify  # late: notify reads runs' models and this module's callers

    notify.run_ended(run, background=background)


def finish(run: HealRun, report: dict, done: int | None = None) -> HealRun:
    """``run`` ended with ``report`` (a ``RunReport.as_json()`` document); its
    notifications (new critical findings, unreadable stores, failed repairs) are
    sent before this returns, within ``HERMES_NOTIFY_BUDGET`` seconds."""
    run.report, run.status, run.finished_at = report, HealRun.Status.DONE, timezone.now()
    if done is not None:
        run.done = done
    run.save()
    _ended(run)
    return run


def fail(run: HealRun, error: str, notify: bool = True) -> HealRun:
    """``run`` ended without a report; ``error`` says why. ``notify`` False: a run
    that did not fail on its own (another run held the lock, the watcher was told
    to stop) sends no ``run_failed`` notification."""
    run.status, run.error, run.finished_at = HealRun.Status.FAILED, error, timezone.now()
    run.save()
    if notify:
        _ended(run)
    return run


# Runs a fleet worker executes on its host (issue 17): their pid is a process of
# that host, so only that host's worker judges it (sessions_app/fleet/tasks.py),
# and a killed worker's run is finished by the redelivered task, not failed here.
FLEET_TRIGGER = "fleet"


def process_alive(run: HealRun) -> bool:
    """Whether the process that began ``run`` (its ``pid``, on this machine) still
    runs; a pid reused by another process is told apart by its start time. A
    process we may not inspect (another user's) counts as alive."""
    if not run.pid:
        return False
    try:
        proc = psutil.Process(run.pid)
        started = run.started_at or run.created_at
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE and (
            started is None or proc.create_time() <= started.timestamp() + 1)
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True  # any doubt counts as alive: never settle a run that may still write


def mark_if_dead(run: HealRun, background: bool = False) -> HealRun:
    """A run still ``running`` whose process is gone (killed, machine restarted) is
    marked failed, so its page stops waiting. A pid reused by another process is
    told apart by its start time (it started after the run). Fleet runs
    (:data:`FLEET_TRIGGER`) are left to their host's worker. ``background``: its
    ``run_failed`` notification is sent from a thread (the run page calls this)."""
    if run.status != HealRun.Status.RUNNING or not run.pid or run.trigger == FLEET_TRIGGER:
        return run
    alive = process_alive(run)
    if not alive:
        run.status, run.error, run.finished_at = (
            HealRun.Status.FAILED, "the run's process ended without finishing", timezone.now())
        run.save(update_fields=["status", "error", "finished_at"])
        _ended(run, background=background)
    return run


def settle_dead_runs() -> int:
    """:func:`mark_if_dead` for every run still ``running``; returns how many were
    settled (called when a new run starts, so a killed cron run is reconciled)."""
    settled = 0
    for run in HealRun.objects.filter(status=HealRun.Status.RUNNING):
        if mark_if_dead(run).status == HealRun.Status.FAILED:
            settled += 1
    return settled
