"""The ``/metrics`` figures as a ``prometheus_client`` collector (issue 18).

Every figure comes from something already stored or cheap to look at, never
from a check pass run for the scrape:

- per profile, from ``os.stat`` and ``Store.preflight`` on each scrape: store file
  and WAL bytes; from the cached probe (:mod:`.probes`): store status, sessions,
  messages, live sessions;
- per profile, from the latest whole check or heal pass that covered it (the
  same pass the health pages show, ``health.latest``): findings by severity and
  by check code (what ``runs.record_snapshot`` stores as ``FindingSnapshot``
  rows), the pass's end time and age; a report is summarised once per process
  and run, so a big report is not parsed again on every scrape, and the runs
  table is read incrementally (:mod:`.runindex`);
- per profile, from the data folder (cached): trash entries and bytes, backups
  and bytes;
- per run kind (``notify.run_kind``): the last finished run's outcome, duration
  and end time, and the runs still running with the age of the oldest.

Metric names and labels are documented in the README (*Metrics*); every name
starts with ``hermes_``. Times are epoch seconds, sizes bytes, durations seconds.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from pathlib import Path

from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ..checks.base import SEVERITIES
from ..checks.registry import codes as catalog_codes
from ..models import HealRun
from ..notify.events import KINDS
from ..runs import exit_status
from ..stores import registry
from . import probes, runindex

STATUSES = ("ok", "missing", "busy", "unreadable", "corrupt")
OUTCOMES = ("clean", "findings", "error", "failed")
SUMMARY_CACHE_SIZE = 64

# (run id, end time) -> summary: the end time keeps a reused id (a test database
# rolled back) from reading another run's summary.
_summaries: "OrderedDict[tuple, dict]" = OrderedDict()
_summaries_lock = threading.Lock()


def summarise(run: HealRun) -> dict:
    """``{"profiles": {key: {"status", "severity": {...}, "checks": {...}}}, "outcome"}``
    of a finished run, cached by run id (a finished run's report never changes)."""
    key = (run.pk, run.finished_at)
    with _summaries_lock:
        if key in _summaries:
            _summaries.move_to_end(key)
            return _summaries[key]
    report = run.report if isinstance(run.report, dict) else {}
    profiles = {}
    try:
        for entry in report.get("profiles", []):
            severity = {s: 0 for s in SEVERITIES}
            checks: dict[str, int] = {}
            for f in entry.get("findings", []):
                severity[f.get("severity")] = severity.get(f.get("severity"), 0) + 1
                checks[f.get("check")] = checks.get(f.get("check"), 0) + 1
            profiles[entry.get("profile")] = {"status": entry.get("status"), "severity": severity, "checks": checks}
        outcome = _outcome(run, report)
    except (AttributeError, KeyError, TypeError, ValueError, IndexError):
        # A report of another shape (hand-edited, a future version): never a failed scrape.
        outcome = "error"
    summary = {"profiles": profiles, "outcome": outcome}
    with _summaries_lock:
        _summaries[key] = summary
        while len(_summaries) > SUMMARY_CACHE_SIZE:
            _summaries.popitem(last=False)
    return summary


def _outcome(run: HealRun, report: dict) -> str:
    """``clean`` | ``findings`` | ``error`` (exit status 0, 1, 2) | ``failed`` (no report)."""
    if run.status == HealRun.Status.FAILED:
        outcome = "failed"
    elif "summary" not in report:
        outcome = "clean"
    elif run.mode == "delete" or run.plans:  # entries without a store status: actions decide
        outcome = "error" if report["summary"].get("failed") else "clean"
    else:  # the cron contract's exit status (0, 1, 2)
        outcome = OUTCOMES[2 if report.get("skipped_roots") else exit_status(report)]
    return outcome


def _summary_of(pk: int, finished_at) -> dict:
    """The cached summary of run ``pk``, reading its report only the first time."""
    with _summaries_lock:
        cached = _summaries.get((pk, finished_at))
    return cached if cached is not None else summarise(HealRun.objects.get(pk=pk))


def latest_passes(keys, state=None) -> dict[str, tuple[int, object, dict]]:
    """Per profile key, ``(run id, end time, summary)`` of the latest finished whole
    pass that covered it (the rule of ``health.latest``); reports are read through
    :func:`summarise`'s cache, so a scrape reads none it has read before."""
    wanted, found = set(keys), {}
    for row in runindex.whole_passes_newest_first(state or runindex.refresh()):
        summary = _summary_of(row.pk, row.finished_at)
        for key in summary["profiles"]:
            if key in wanted and key not in found:
                found[key] = (row.pk, row.finished_at, summary)
        if len(found) == len(wanted):
            break
    return found


class HermesCollector(Collector):
    """Collects the figures of the module docstring on every scrape."""

    def collect(self):
        started = time.perf_counter()
        state = runindex.refresh()  # the runs table, read once per scrape (incrementally)
        yield from self._stores(state)
        yield from self._runs(state)
        scrape = GaugeMetricFamily("hermes_metrics_scrape_seconds", "Seconds this scrape took to collect.")
        scrape.add_metric([], time.perf_counter() - started)
        yield scrape

    # ----------------------------------------------------------------- per profile

    def _stores(self, state):
        registry.scan()
        stores = registry.stores()
        g = {
            "status": GaugeMetricFamily("hermes_store_status", "1 for the store's current status, 0 for the others "
                                        "(cached probe; file problems seen at each scrape).", labels=["profile", "status"]),
            "file": GaugeMetricFamily("hermes_store_file_bytes", "Size of state.db in bytes (os.stat).", labels=["profile"]),
            "wal": GaugeMetricFamily("hermes_store_wal_bytes", "Size of state.db-wal in bytes (os.stat; 0 when absent).",
                                     labels=["profile"]),
            "sessions": GaugeMetricFamily("hermes_store_sessions", "Session rows (cached probe).", labels=["profile"]),
            "messages": GaugeMetricFamily("hermes_store_messages", "Message rows (cached probe; the highest id when "
                                          "the count ran past its budget, see hermes_store_messages_exact).",
                                          labels=["profile"]),
            "exact": GaugeMetricFamily("hermes_store_messages_exact", "1 when hermes_store_messages is an exact count.",
                                       labels=["profile"]),
            "live": GaugeMetricFamily("hermes_store_live_sessions", "Sessions with live evidence, by verdict "
                                      "(cached probe).", labels=["profile", "verdict"]),
            "probe_age": GaugeMetricFamily("hermes_store_probe_age_seconds", "Age of the cached probe.",
                                           labels=["profile"]),
            "severity": GaugeMetricFamily("hermes_findings", "Findings of the latest check pass, by severity.",
                                          labels=["profile", "severity"]),
            "check": GaugeMetricFamily("hermes_findings_by_check", "Findings of the latest check pass, by check code.",
                                       labels=["profile", "check"]),
            "pass_time": GaugeMetricFamily("hermes_check_pass_timestamp_seconds", "End of the latest check pass "
                                           "that covered the profile (epoch seconds).", labels=["profile"]),
            "pass_age": GaugeMetricFamily("hermes_check_pass_age_seconds", "Seconds since that pass ended.",
                                          labels=["profile"]),
            "pass_run": GaugeMetricFamily("hermes_check_pass_run", "Run number of that pass (its page: /runs/N/).",
                                          labels=["profile"]),
            "trash": GaugeMetricFamily("hermes_trash_entries", "Trash entries (deleted sessions kept for restore).",
                                       labels=["profile"]),
            "trash_bytes": GaugeMetricFamily("hermes_trash_bytes", "Bytes of the trash entries.", labels=["profile"]),
            "backups": GaugeMetricFamily("hermes_backups", "Store backups in the data folder.", labels=["profile"]),
            "backup_bytes": GaugeMetricFamily("hermes_backup_bytes", "Bytes of those backups.", labels=["profile"]),
        }
        profiles = GaugeMetricFamily("hermes_profiles", "Profiles discovered.")
        profiles.add_metric([], len(stores))
        passes = latest_passes([s.key for s in stores], state)
        now = time.time()
        codes = catalog_codes()
        for store in stores:
            key = store.key
            problem = store.preflight()  # stat only: a store removed or emptied shows at once
            probe = probes.store_probe(store)
            status = problem.status if problem is not None else probe.status
            for s in STATUSES:
                g["status"].add_metric([key, s], 1.0 if s == status else 0.0)
            g["file"].add_metric([key], probes.stat_size(store.path) or 0)
            g["wal"].add_metric([key], probes.stat_size(Path(f"{store.path}-wal")) or 0)
            if problem is None and probe.sessions is not None:
                g["sessions"].add_metric([key], probe.sessions)
            if problem is None and probe.messages is not None:
                g["messages"].add_metric([key], probe.messages)
                g["exact"].add_metric([key], 1.0 if probe.messages_exact else 0.0)
            if problem is None and probe.live:
                for verdict, n in probe.live.items():
                    g["live"].add_metric([key, verdict], n)
            g["probe_age"].add_metric([key], max(0.0, now - probe.taken_at))
            latest = passes.get(key)
            if latest is not None:
                pk, finished_at, summary = latest
                entry = summary["profiles"][key]
                for s in SEVERITIES:
                    g["severity"].add_metric([key, s], entry["severity"].get(s, 0))
                for code in codes:
                    g["check"].add_metric([key, code], entry["checks"].get(code, 0))
                ended = finished_at.timestamp()
                g["pass_time"].add_metric([key], ended)
                g["pass_age"].add_metric([key], max(0.0, now - ended))
                g["pass_run"].add_metric([key], pk)
        trash_figures, backup_figures = probes.trash_by_profile(), probes.backups_by_profile()
        for key in sorted({s.key for s in stores} | set(trash_figures)):
            count, size = trash_figures.get(key, (0, 0))
            g["trash"].add_metric([key], count)
            g["trash_bytes"].add_metric([key], size)
        for key in sorted({s.key for s in stores} | set(backup_figures)):
            count, size = backup_figures.get(key, (0, 0))
            g["backups"].add_metric([key or "unknown"], count)
            g["backup_bytes"].add_metric([key or "unknown"], size)
        yield profiles
        yield from g.values()

    # ----------------------------------------------------------------- per run kind

    def _runs(self, state):
        outcome = GaugeMetricFamily("hermes_run_last_outcome", "1 for the outcome of the last finished run of this "
                                    "kind (clean, findings: exit 1, error: exit 2, failed: no report).",
                                    labels=["kind", "outcome"])
        duration = GaugeMetricFamily("hermes_run_last_duration_seconds", "Duration of that run.", labels=["kind"])
        ended = GaugeMetricFamily("hermes_run_last_finished_timestamp_seconds", "End of that run (epoch seconds).",
                                  labels=["kind"])
        running = GaugeMetricFamily("hermes_runs_running", "Runs of this kind still running.", labels=["kind"])
        oldest = GaugeMetricFamily("hermes_run_running_seconds", "How long the oldest running run of this kind has "
                                   "been running.", labels=["kind"])
        now = timezone.now()
        last, active = state.last, runindex.running_by_kind(state)
        for kind in KINDS:
            row = last.get(kind)
            if row is not None:
                cached = _summary_of(row.pk, row.finished_at)
                for o in OUTCOMES:
                    outcome.add_metric([kind, o], 1.0 if o == cached["outcome"] else 0.0)
                start = row.started_at or row.created_at
                duration.add_metric([kind], max(0.0, (row.finished_at - start).total_seconds()))
                ended.add_metric([kind], row.finished_at.timestamp())
            rows = [r for r in active.get(kind, []) if r.status == HealRun.Status.RUNNING]
            running.add_metric([kind], len(rows))
            ages = [(now - r.started_at).total_seconds() for r in rows if r.started_at is not None]
            oldest.add_metric([kind], max(ages) if ages else 0.0)
        yield from (outcome, duration, ended, running, oldest)
