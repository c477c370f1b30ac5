"""What deserves a notification, read from finished runs (docs/architecture.md §6).

Events, one notification each:

- ``new_critical``: a check pass (whole, or a light pass of ``watch_stores``) found
  critical findings of a profile that the previous pass of that profile did not
  have; a finding is ``(check code, session id)``, and "previous" is, per code,
  the latest earlier run whose report has the profile and that ran that code
  (a light pass only speaks for its light codes; a pass that found the store busy
  saw nothing and is passed over);
- ``store_unreadable``: a profile's store is ``unreadable`` or ``corrupt`` (or
  ``missing`` after it was ``ok``) and was not so in its previous pass; the access
  findings of that pass are part of this event, not a second one;
- ``heal_failed``: a heal or repair run ended with failed actions;
- ``run_failed``: a run ended without a report (a crash, a killed process);
- ``run_stuck``: a run still running past ``HERMES_STUCK_SECONDS``.

An event carries what an admin needs to act, never transcript content: profile,
store path, check codes with counts, status, the run's number and a link to the
dashboard page (``HERMES_ADMIN_BASE_URL`` + path).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from django.conf import settings
from django.urls import reverse
from django.utils import timezone

from ..models import HealRun

UNREADABLE = ("unreadable", "corrupt")
# Findings that only restate why a store could not be read (runner-emitted).
ACCESS_CODES = {"store_unreadable", "store_busy", "store_corrupt", "schema_malformed"}
LOOKBACK_RUNS = 200  # earlier runs read at most to find a profile's previous pass
REASON_CHARS = 300


@dataclass
class Event:
    """One thing to tell admins. ``codes``: check code (or action name) -> count;
    ``counts``: other figures; ``path``: dashboard path of the page to open."""

    kind: str
    summary: str
    profile: str = ""
    store_path: str = ""
    run_id: int | None = None
    run_kind: str = ""
    codes: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    status: str = ""
    path: str = ""

    @property
    def link(self) -> str:
        base = (getattr(settings, "HERMES_ADMIN_BASE_URL", "") or "").rstrip("/")
        return f"{base}{self.path}" if self.path else base

    def text(self) -> str:
        """The one message text (chat line, mail body): ``hermes-admin: …`` and the link."""
        return f"hermes-admin: {self.summary}" + (f" {self.link}" if self.link else "")

    def as_json(self) -> dict:
        """The generic webhook body (also the audit event's ``plan``)."""
        return {"source": "hermes-admin", "event": self.kind, "text": self.text(), "summary": self.summary,
                "profile": self.profile, "store_path": self.store_path, "run_id": self.run_id,
                "run_kind": self.run_kind, "status": self.status, "codes": dict(self.codes),
                "counts": dict(self.counts), "link": self.link}


KINDS = ("check", "apply", "check_partial", "apply_partial", "watch_light", "repair", "delete")


def kind_of(mode: str, plans, only, trigger: str) -> str:
    """``check`` | ``apply`` (whole passes), ``check_partial`` | ``apply_partial``
    (``--only``), ``watch_light`` (the light passes of ``watch_stores``), ``repair``
    (previewed plans), ``delete`` (bulk deletion)."""
    if mode == "delete":
        return "delete"
    if plans:
        return "repair"
    if only:
        return "watch_light" if trigger == "watch" else f"{mode}_partial"
    return mode


def run_kind(run: HealRun) -> str:
    """The kind of ``run`` (:func:`kind_of`): a label of the metrics and notifications."""
    return kind_of(run.mode, run.plans, run.only, run.trigger)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _codes_text(codes: dict[str, int]) -> str:
    return ", ".join(f"{code}: {n}" for code, n in sorted(codes.items()))


def _safe_error(text: str) -> str:
    """A run's error without what an exception message may quote from a store: our
    own sentences stay, an exception is named by its class only."""
    text = (text or "").strip()
    if text.startswith(("the run's process", "another heal run", "stopped")):
        return text[:REASON_CHARS]
    match = re.match(r"[A-Za-z_][\w.]*", text)
    return f"{match.group(0)} (details on the run page)" if match else "unknown error (details on the run page)"


def _run_path(run: HealRun) -> str:
    return reverse("run", args=[run.pk])


def _profile_path(profile: str) -> str:
    try:
        return reverse("profile_health", args=[profile])
    except Exception:  # a key the URL pattern cannot carry: the overview instead
        return reverse("overview")


# --------------------------------------------------------------------------- passes

class _History:
    """A profile's earlier passes, newest first, read lazily (reports are big)."""

    def __init__(self, run: HealRun):
        self._query = (HealRun.objects.filter(status=HealRun.Status.DONE, plans=[], mode__in=("check", "apply"))
                       .exclude(pk=run.pk).filter(report__isnull=False).order_by("-finished_at", "-pk"))
        if run.finished_at is not None:
            self._query = self._query.filter(finished_at__lte=run.finished_at)
        self._runs: list[HealRun] = []
        self._iter = None

    def runs(self):
        yield from self._runs
        if self._iter is None:
            self._iter = self._query[:LOOKBACK_RUNS].iterator(chunk_size=10)
        for run in self._iter:
            self._runs.append(run)
            yield run

    def entries(self, profile: str):
        """``(run, entry)`` of earlier runs that covered ``profile``, newest first."""
        for run in self.runs():
            for entry in (run.report or {}).get("profiles", []):
                if entry.get("profile") == profile:
                    yield run, entry
                    break

    def previous_status(self, profile: str) -> str | None:
        for _run, entry in self.entries(profile):
            return entry.get("status")
        return None

    def known_criticals(self, profile: str, codes: set[str]) -> set[tuple]:
        """Critical ``(code, session_id)`` keys the previous pass covering each code had."""
        pending, known = set(codes), set()
        for run, entry in self.entries(profile):
            if entry.get("status") == "busy":
                continue  # that pass could not look
            covered = pending if not run.only else pending & set(run.only)
            for f in entry.get("findings", []):
                if f.get("check") in covered and f.get("severity") == "critical":
                    known.add((f["check"], f.get("session_id")))
            pending -= covered
            if not pending:
                break
        return known


def pass_events(run: HealRun) -> list[Event]:
    """``store_unreadable`` and ``new_critical`` events of a finished check or heal pass."""
    history = _History(run)
    kind = run_kind(run)
    events = []
    for entry in (run.report or {}).get("profiles", []):
        profile, status = entry.get("profile", ""), entry.get("status", "ok")
        previous = history.previous_status(profile)
        became = (status in UNREADABLE and previous not in UNREADABLE) or (status == "missing" and previous == "ok")
        base = dict(profile=profile, store_path=entry.get("path", ""), run_id=run.pk, run_kind=kind, status=status,
                    path=_profile_path(profile))
        if became:
            reason = (entry.get("error") or "")[:REASON_CHARS]
            verb = "is gone" if status == "missing" else f"became {status}"
            events.append(Event("store_unreadable", f"profile {profile}: the store {verb}"
                                + (f" ({reason})" if reason else "") + f" [run #{run.pk}]", **base))
        criticals = {}
        for f in entry.get("findings", []):
            if f.get("severity") != "critical" or (became and f.get("check") in ACCESS_CODES):
                continue
            criticals.setdefault((f["check"], f.get("session_id")), f)
        if not criticals:
            continue
        known = history.known_criticals(profile, {code for code, _ in criticals})
        new = [key for key in criticals if key not in known]
        if not new:
            continue
        codes: dict[str, int] = {}
        for code, _sid in new:
            codes[code] = codes.get(code, 0) + 1
        total = len(criticals)
        events.append(Event(
            "new_critical",
            f"profile {profile}: {_plural(len(new), 'new critical finding')} ({_codes_text(codes)}); "
            f"{total} critical in all [run #{run.pk}]",
            codes=codes, counts={"new": len(new), "critical": total}, **base))
    return events


def heal_failed_event(run: HealRun) -> Event | None:
    """One ``heal_failed`` event for an apply or repair run with failed actions."""
    if not (run.mode == "apply" or run.plans) or not run.report:
        return None
    codes: dict[str, int] = {}
    profiles = []
    for entry in run.report.get("profiles", []):
        failed = [a for a in entry.get("actions", []) if a.get("status") == "failed"]
        for action in failed:
            codes[action.get("action", "?")] = codes.get(action.get("action", "?"), 0) + 1
        if failed:
            profiles.append(entry.get("profile", ""))
    if not codes:
        return None
    n = sum(codes.values())
    return Event("heal_failed", f"{run_kind(run)} run #{run.pk}: {_plural(n, 'repair')} failed "
                 f"({_codes_text(codes)}) in {', '.join(profiles)}",
                 profile=profiles[0] if len(profiles) == 1 else "", run_id=run.pk, run_kind=run_kind(run),
                 codes=codes, counts={"failed": n}, status="done", path=_run_path(run))


def run_failed_event(run: HealRun) -> Event:
    profiles = run.profiles or []
    return Event("run_failed", f"{run_kind(run)} run #{run.pk} failed: {_safe_error(run.error)}",
                 profile=profiles[0] if len(profiles) == 1 else "", run_id=run.pk, run_kind=run_kind(run),
                 status="failed", path=_run_path(run))


def run_stuck_event(run: HealRun, seconds: float, threshold: float) -> Event:
    hours = seconds / 3600
    profiles = run.profiles or []
    return Event("run_stuck", f"{run_kind(run)} run #{run.pk} ({run.actor_label}, pid {run.pid}) has been running "
                 f"for {hours:.1f} h (threshold {threshold / 3600:.1f} h)",
                 profile=profiles[0] if len(profiles) == 1 else "", run_id=run.pk, run_kind=run_kind(run),
                 counts={"running_seconds": int(seconds)}, status="running", path=_run_path(run))


def events_for(run: HealRun) -> list[Event]:
    """Every event of a run that just ended (done or failed)."""
    if run.status == HealRun.Status.FAILED:
        return [run_failed_event(run)]
    if run.status != HealRun.Status.DONE or not run.report:
        return []
    events = []
    if not run.plans and run.mode in ("check", "apply"):
        events.extend(pass_events(run))
    failed = heal_failed_event(run)
    if failed is not None:
        events.append(failed)
    return events


def stuck_runs(threshold: float, now=None) -> list[tuple[HealRun, float]]:
    """Runs ``running`` for longer than ``threshold`` seconds, with their age."""
    now = now or timezone.now()
    out = []
    for run in HealRun.objects.filter(status=HealRun.Status.RUNNING).exclude(started_at=None):
        age = (now - run.started_at).total_seconds()
        if age > threshold:
            out.append((run, age))
    return out
