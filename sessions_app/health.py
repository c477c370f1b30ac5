"""Health as of the latest check pass, read from the dashboard's own database.

Whole-store check passes can take seconds on big stores, so list pages show the
findings of the latest finished pass (``HealRun.report``) with its time, and the
session page runs the session's own checks live.

A finished run's report never changes (``runs.finish`` writes it once), and it is
150-250 KB of JSON on a big home: decoding it on every page view was ~6 ms of the
list, health and session pages (docs/benchmarks.md). So runs are listed without
their report, and each report is decoded once per process and kept, keyed by the
run's id and times (a test database that reuses an id has other times), along
with the groupings pages ask of each profile's findings (by session, and those of
given checks: :meth:`ProfileHealth.by_session`, :meth:`ProfileHealth.of_checks`).
Only those columns of the runs are read: SQLite walks a row's whole report
(megabytes of overflow pages) to reach a column stored after it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from django.db import router

from .models import HealRun
from .timefmt import human_duration

SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}
KEPT_REPORTS = 8  # decoded reports kept per process (the latest passes are what pages ask for)

_lock = threading.Lock()
_reports: OrderedDict[tuple, dict] = OrderedDict()  # run key -> {"report", "memo": {profile: ...}}


@dataclass(frozen=True)
class Staleness:
    """The store was written after the pass a profile's health comes from:
    ``changed_at`` (epoch seconds, the store files' mtime) is ``after`` seconds
    later than the pass read it (:func:`staleness`)."""

    changed_at: float
    after: float

    @property
    def text(self) -> str:
        return f"store changed {human_duration(self.after)} after this check"


@dataclass
class ProfileHealth:
    """Findings of one profile from the latest pass that covered it (``run`` None: never checked).

    ``entry`` and the lists :meth:`by_session` and :meth:`of_checks` return are
    shared by every page of this process: read them, copy before changing anything.
    ``stale`` is set by the pages that compare it with the store (:func:`staleness`)."""

    run: HealRun | None = None
    entry: dict = field(default_factory=dict)
    # Groupings of ``entry``'s findings, kept per (pass, profile) by _health: a big
    # profile's entry holds thousands of findings (11,706 for the 1M bench home's
    # ``default`` profile), and pages ask the same of them on every view.
    _memo: dict = field(default_factory=dict, repr=False)
    stale: Staleness | None = None

    @property
    def findings(self) -> list[dict]:
        return self.entry.get("findings", [])

    def counts(self) -> dict[str, int]:
        out = {"critical": 0, "warning": 0, "info": 0}
        for f in self.findings:
            out[f["severity"]] = out.get(f["severity"], 0) + 1
        return out

    def by_session(self) -> dict[str, list[dict]]:
        """Findings naming a session, by session id, most severe first."""
        found = self._memo.get("by_session")
        if found is None:  # two threads may both build it: the same value, one kept
            found = self._memo["by_session"] = group_by_session(self.findings)
        return found

    def of_checks(self, codes: tuple[str, ...]) -> list[dict]:
        """The findings of the checks ``codes`` (a tuple of check codes; one code is
        ``(code,)``, a bare string raises ``TypeError``), in the pass's order.
        ``checks.damage`` asks this for the session and health pages and for the
        write guard's damage test (``actions.guarded``)."""
        if not isinstance(codes, tuple):
            raise TypeError(f"of_checks takes a tuple of check codes, not {type(codes).__name__}")
        key = ("checks", codes)
        found = self._memo.get(key)
        if found is None:
            wanted = set(codes)
            found = self._memo[key] = [f for f in self.findings if f.get("check") in wanted]
        return found

    def sessions_with(self, check: str) -> set[str]:
        """Ids of the sessions holding a finding of ``check`` (a check code): the
        sessions list's and the bulk export's health filter."""
        return {f["session_id"] for f in self.of_checks((check,)) if f.get("session_id")}

    def findings_of(self, session_id: str, check: str | None = None) -> list[dict]:
        """This session's findings (of one ``check`` code), most severe first."""
        return [f for f in self.by_session().get(session_id, ()) if check is None or f["check"] == check]


def group_by_session(findings: list[dict]) -> dict[str, list[dict]]:
    """Findings naming a session, by session id, most severe first and in the pass's
    order within a severity. One stable sort of all of them, then one walk: sorting
    each session's list was ~8 ms a profile on the 1M bench home (25,000 lists,
    most of one finding), paid by the first page of every new worker."""
    out: dict[str, list[dict]] = {}
    for f in sorted((f for f in findings if f.get("session_id")), key=lambda f: SEVERITY_ORDER.get(f.get("severity"), 9)):
        items = out.get(f["session_id"])
        if items is None:
            out[f["session_id"]] = [f]
        else:
            items.append(f)
    return out


def _key(run: HealRun) -> tuple:
    return run.pk, run.created_at, run.finished_at


def _cached(run: HealRun) -> dict:
    """``{"report", "memo"}`` of a finished run, decoded once per process (``memo``:
    profile key -> the groupings :class:`ProfileHealth` keeps of its findings)."""
    key = _key(run)
    with _lock:
        found = _reports.get(key)
        if found is not None:
            _reports.move_to_end(key)
            return found
    report = HealRun.objects.filter(pk=run.pk).values_list("report", flat=True).first() or {}
    found = {"report": report, "memo": {}}
    with _lock:
        _reports[key] = found
        while len(_reports) > KEPT_REPORTS:
            _reports.popitem(last=False)
    return found


def _health(run: HealRun, cached: dict, entry: dict) -> ProfileHealth:
    with _lock:
        memo = cached["memo"].setdefault(entry.get("profile"), {})
    return ProfileHealth(run, entry, memo)


_passes_sql: dict[str, tuple] = {}  # database alias -> (sql, params) of _whole_passes
PASSES_PAGE = 20  # finished passes read per statement


def _whole_passes():
    """Finished whole passes, newest first, with their id and times only (as model
    instances, the other columns deferred), read as they are needed.

    The statement never changes, so the ORM compiles it once per database (its
    building and compiling were half of :func:`latest`'s cost, on every list and
    health page); the rows are read anew each time, ``PASSES_PAGE`` at a time."""
    db = router.db_for_read(HealRun)
    stmt = _passes_sql.get(db)
    if stmt is None:
        # Partial passes (--only, single repairs) do not describe a profile's health.
        qs = (HealRun.objects.using(db)
              .filter(status=HealRun.Status.DONE, plans=[], only=[], mode__in=("check", "apply"))
              .filter(report__isnull=False).order_by("-finished_at", "-pk")  # a total order: paged below
              .only("id", "created_at", "started_at", "finished_at", "mode"))
        stmt = _passes_sql[db] = qs.query.get_compiler(using=db).as_sql()
    sql, params = stmt
    # In pages: a raw query is read whole by PostgreSQL's client-side cursor, and a
    # month of passes is thousands of rows when the first page is all a view needs.
    # A pass finished between two pages shifts the offset by one: a pass is then read
    # twice, which latest() ignores (a profile keeps the first, newest, pass found).
    offset = 0
    while True:
        page = list(HealRun.objects.db_manager(db).raw(f"{sql} LIMIT %s OFFSET %s",
                                                       (*params, PASSES_PAGE, offset)))
        yield from page
        if len(page) < PASSES_PAGE:
            return
        offset += PASSES_PAGE


def latest(profile_keys) -> dict[str, ProfileHealth]:
    """Latest finished whole-pass result per profile key (plan-only runs excluded)."""
    wanted = set(profile_keys)
    found: dict[str, ProfileHealth] = {key: ProfileHealth() for key in wanted}
    for run in _whole_passes():
        cached = _cached(run)
        for entry in cached["report"].get("profiles", []):
            key = entry.get("profile")
            if key in wanted and found[key].run is None:
                found[key] = _health(run, cached, entry)
        if all(h.run is not None for h in found.values()):
            break
    return found


def read_at(run: HealRun) -> float | None:
    """Epoch seconds from which a pass's findings may miss a write: a check pass
    read the store after it started; a heal pass wrote first and checked again
    before it finished, so its own writes are not a change after it."""
    when = run.started_at if run.mode == "check" else run.finished_at
    when = when or run.finished_at or run.created_at
    return when.timestamp() if when else None


def staleness(store, health: ProfileHealth) -> Staleness | None:
    """A :class:`Staleness` when ``store`` was written after the pass ``health``
    comes from, else None (never checked, or not changed since). Reads the store
    files' ``os.stat`` only (``Store.changed_at``), never the store."""
    if health.run is None:
        return None
    since, changed = read_at(health.run), store.changed_at()
    if since is None or changed is None or changed <= since:
        return None
    return Staleness(changed_at=changed, after=changed - since)
