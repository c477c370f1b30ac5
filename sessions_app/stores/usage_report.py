"""Usage across stores: one period, one grouping, totals, the series for the chart.

Reads each store through :func:`.usage.store_usage` (cached per store under its
file signature) and merges in Python: the per-store results are already grouped by
(UTC day, source, model, task), so merging costs nothing next to the queries. A store
that cannot be read now is listed in ``errors`` with its status and the others are
shown (ground rule 9).
"""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import dataclass, field

from .store import Store, Unavailable, _log_once
from .usage import DAY, END_OF_TIME, NAMES, TOTAL_PARTS, Row, StoreUsage, store_usage

GROUPS = {"profile": "profile", "model": "model", "source": "source", "task": "task", "day": "day",
          "week": "week"}  # value -> label
BUCKETS = ("day", "week")
MAIN_TASK = "main loop"  # how task '' is shown


@dataclass(frozen=True)
class Period:
    """Sessions started in ``[lo, hi)`` (epoch seconds); the dates are the inclusive
    UTC days the user chose (``None``: open on that side)."""

    date_from: dt.date | None
    date_to: dt.date | None

    @property
    def lo(self) -> float:
        return 0.0 if self.date_from is None else _epoch(self.date_from)

    @property
    def hi(self) -> float:
        return END_OF_TIME if self.date_to is None else _epoch(self.date_to + dt.timedelta(days=1))


def _epoch(day: dt.date) -> float:
    return dt.datetime.combine(day, dt.time.min, tzinfo=dt.timezone.utc).timestamp()


def day_date(day: int) -> dt.date:
    """The UTC date of a day index (days since 1970-01-01)."""
    return dt.date(1970, 1, 1) + dt.timedelta(days=day)


def week_start(day: int) -> int:
    """Day index of the Monday starting the ISO week of ``day`` (1970-01-01 was a Thursday)."""
    return day - (day + 3) % 7


@functools.lru_cache(maxsize=4096)
def bucket_label(day: int, bucket: str) -> str:
    date = day_date(day)
    if bucket == "week":
        year, week, _ = date.isocalendar()
        return f"{year}-W{week:02d} (from {date.isoformat()})"
    return date.isoformat()


@dataclass
class Line:
    """One line of the table: ``key`` its label, ``sort`` what orders it,
    ``sessions`` (see :attr:`Report.sessions_note`), ``values`` per name of
    :data:`.usage.NAMES` (None: no store in this line records the figure),
    ``actual_known`` parts with an actual cost recorded."""

    key: str
    sort: object = None
    sessions: int = 0
    actual_known: int = 0
    values: dict = field(default_factory=lambda: {n: None for n in NAMES})

    def add(self, values: dict, actual_known: int = 0) -> None:
        mine = self.values
        for name, value in values.items():
            if value is not None:
                held = mine[name]
                mine[name] = value if held is None else held + value
        self.actual_known += actual_known

    @property
    def total_tokens(self):
        parts = [self.values[n] for n in TOTAL_PARTS if self.values[n] is not None]
        return sum(parts) if parts else None


@dataclass
class Report:
    """What the usage page and its CSV show.

    ``lines`` grouped by ``group``; ``total`` over everything; ``series``: one
    ``(bucket start day, Line)`` per ``bucket`` in the period (gaps filled, for the
    chart); ``rows``: ``(profile key, Row)`` at full granularity (the CSV);
    ``errors``: profile key -> ``(status, reason)`` of stores not read;
    ``missing``: figure name -> profile keys lacking it; ``without_model_usage``:
    profile keys whose store has no ``session_model_usage`` (models and tasks there
    are the session's own model and the main loop); ``undated``: profile key ->
    sessions in no period.
    """

    group: str
    bucket: str
    lines: list[Line] = field(default_factory=list)
    total: Line = field(default_factory=lambda: Line("all"))
    series: list[tuple[int, Line]] = field(default_factory=list)
    rows: list[tuple[str, Row]] = field(default_factory=list)
    errors: dict[str, tuple[str, str]] = field(default_factory=dict)
    missing: dict[str, list[str]] = field(default_factory=dict)
    without_model_usage: list[str] = field(default_factory=list)
    undated: dict[str, int] = field(default_factory=dict)
    profiles: list[str] = field(default_factory=list)

    @property
    def sessions_note(self) -> str:
        if self.group in ("model", "task"):
            return "a session that used several models or tasks counts in each of them"
        return ""


def _line_key(group: str, profile: str, row: Row, bucket_of) -> tuple[object, str]:
    if group == "profile":
        return profile, profile
    if group == "model":
        return row.model, row.model
    if group == "source":
        return row.source, row.source or "(none)"
    if group == "task":
        return row.task, row.task or MAIN_TASK
    start = bucket_of(row.day)
    return start, bucket_label(start, group)


def build(stores: list[Store], period: Period, source: str | None = None, group: str = "profile",
          bucket: str = "day") -> Report:
    """Usage of ``stores`` (each one read or listed in ``errors``) for ``period``,
    optionally one ``source``, grouped by ``group`` (a key of :data:`GROUPS`), the
    chart series by ``bucket`` (``day`` or ``week``)."""
    group = group if group in GROUPS else "profile"
    bucket = bucket if bucket in BUCKETS else "day"
    report = Report(group=group, bucket=bucket)
    results: list[tuple[str, StoreUsage]] = []
    for store in stores:
        try:
            usage = store_usage(store, period.lo, period.hi, source)
        except Unavailable as exc:  # busy, damaged, not a store: said per profile, the rest shown
            if exc.status.status != "missing":
                report.errors[store.key] = (exc.status.status, exc.status.reason)
                _log_once(store.path, exc.status.status, exc.status.reason)
            continue
        results.append((store.key, usage))
    own_bucket = week_start if bucket == "week" else (lambda d: d)
    line_bucket = week_start if group == "week" else (lambda d: d)
    lines: dict[object, Line] = {}
    series: dict[int, Line] = {}
    for key, usage in results:
        report.profiles.append(key)
        for name in usage.missing:
            report.missing.setdefault(name, []).append(key)
        if not usage.has_model_usage:
            report.without_model_usage.append(key)
        if usage.undated:
            report.undated[key] = usage.undated
        for row in usage.rows:
            report.rows.append((key, row))
            sort, label = _line_key(group, key, row, line_bucket)
            line = lines.get((sort, label))
            if line is None:  # not setdefault: a Line per row only to throw it away
                line = lines[(sort, label)] = Line(label, sort)
            line.add(row.values, row.actual_known)
            if group in ("model", "task"):
                line.sessions += row.sessions
            report.total.add(row.values, row.actual_known)
            start = own_bucket(row.day)
            bar = series.get(start)
            if bar is None:
                bar = series[start] = Line(bucket_label(start, bucket), start)
            bar.add(row.values)
        for (day, src), count in usage.session_days.items():
            report.total.sessions += count
            if group not in ("model", "task"):
                fake = Row(day=day, source=src, model="", task="", sessions=count, actual_known=0, values={})
                sort, label = _line_key(group, key, fake, line_bucket)
                lines.setdefault((sort, label), Line(label, sort)).sessions += count
    for name in NAMES:  # recorded by some store read, nothing in the period: zero, not missing
        if report.total.values[name] is None and len(report.missing.get(name, ())) < len(results):
            report.total.values[name] = 0
    report.lines = _ordered(group, list(lines.values()))
    report.series = _filled(series, period, bucket, own_bucket)
    return report


def _ordered(group: str, lines: list[Line]) -> list[Line]:
    if group in ("day", "week"):
        return sorted(lines, key=lambda line: line.sort)
    # Biggest first (as Hermes' insights sorts models), then by name.
    return sorted(lines, key=lambda line: (-(line.total_tokens or 0), -line.sessions, str(line.sort)))


MAX_BUCKETS = 400  # bars in the chart; a longer period shows its used span only


def _filled(series: dict[int, Line], period: Period, bucket: str, bucket_of) -> list[tuple[int, Line]]:
    """Every bucket of the period with a line (empty ones too), so the chart's time
    axis is even; an open end is bounded by the data."""
    if not series and (period.date_from is None or period.date_to is None):
        return []
    first = bucket_of(int(period.lo // DAY)) if period.date_from is not None else min(series)
    last = bucket_of(int(period.hi // DAY) - 1) if period.date_to is not None else max(series)
    if series:
        first, last = min(first, min(series)), max(last, max(series))
    step = 7 if bucket == "week" else 1
    if (last - first) // step + 1 > MAX_BUCKETS:
        first, last = min(series), max(series)
    out = []
    day = first
    while day <= last and len(out) < MAX_BUCKETS:
        out.append((day, series.get(day) or Line(bucket_label(day, bucket), day)))
        day += step
    return out
