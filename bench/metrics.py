"""What a Prometheus scrape of ``/metrics`` and a ``watch_stores`` cycle cost (issue 18).

    .venv/bin/python bench/metrics.py --home var/bench/home-300k [--repeat 7] [--runs 8640] [--json out.json]

On a generated home (``bench/generate.py``), in a private data folder: one check
pass (``heal_sessions --all-profiles``, as cron leaves it), then ``--runs`` finished
light-pass runs added to the dashboard's database (8,640: a month of
``watch_stores`` at its default 5-minute interval, so the per-kind queries read a
realistic table). Then, through Django's test client with the bearer token:

- the first scrape (every probe taken: counts, live sessions, trash, backups; the
  latest report summarised once);
- later scrapes (median of ``--repeat``), which reuse the cached probes as every
  scrape within ``HERMES_ADMIN_METRICS_PROBE_SECONDS`` does;
- the probe of the biggest store alone, and a light pass and a full check pass
  over every store (what a ``watch_stores`` cycle runs), each timed once.

Printed as a Markdown table; ``--json`` keeps the raw times.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
TOKEN = "bench-token"


def _rss_mb() -> float:
    """Resident memory of this process now (``VmRSS``), MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True, help="a home made by bench/generate.py")
    parser.add_argument("--repeat", type=int, default=7, help="warm scrapes to take the median of")
    parser.add_argument("--runs", type=int, default=8640, help="finished light-pass runs to add first")
    parser.add_argument("--json", type=Path, help="write the raw times here")
    args = parser.parse_args()

    data = Path(tempfile.mkdtemp(prefix="metrics-bench-"))
    os.environ.update({"HERMES_ROOTS": str(args.home.resolve()), "HERMES_ADMIN_DATA": str(data),
                       "HERMES_ADMIN_SECRET_KEY": "bench", "HERMES_ADMIN_METRICS_TOKEN": TOKEN,
                       "HERMES_ADMIN_LOG_FILE": "", "DJANGO_SETTINGS_MODULE": "hermes_admin.settings"})
    import django

    django.setup()
    from django.core.management import call_command
    from django.test import Client
    from django.utils import timezone
    from prometheus_client.parser import text_string_to_metric_families

    from sessions_app.actions.heal import heal
    from sessions_app.checks.registry import light_codes
    from sessions_app.metrics import probes
    from sessions_app.models import HealRun
    from sessions_app.runs import RunReport
    from sessions_app.stores import registry

    call_command("migrate", verbosity=0)
    registry.scan()
    stores = registry.stores()
    sizes = {s.key: probes.stat_size(s.path) or 0 for s in stores}
    biggest = max(stores, key=lambda s: sizes[s.key])
    results: dict[str, dict] = {}

    start = time.perf_counter()
    try:  # exit status 1 (findings remain) is what a generated home gives
        call_command("heal_sessions", "--all-profiles", "--json", stdout=open(os.devnull, "w"),
                     stderr=open(os.devnull, "w"))
    except SystemExit:
        pass
    results["check pass (heal_sessions --all-profiles, setup)"] = {"times": [time.perf_counter() - start]}
    now = timezone.now()
    light = light_codes()
    HealRun.objects.bulk_create(
        HealRun(mode="check", trigger="watch", actor_label="watch_stores", only=light, status="done",
                started_at=now, finished_at=now, report=RunReport(mode="check").as_json())
        for _ in range(args.runs))

    client = Client(HTTP_HOST="localhost")

    def scrape() -> tuple[float, int, int]:
        t = time.perf_counter()
        response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
        elapsed = time.perf_counter() - t
        assert response.status_code == 200, response.status_code
        families = list(text_string_to_metric_families(response.content.decode()))
        return elapsed, len(response.content), sum(len(f.samples) for f in families)

    from sessions_app.metrics import collector, runindex

    rss_before = _rss_mb()
    first, body, samples = scrape()
    rss_first = _rss_mb()
    results["first scrape (every probe taken)"] = {"times": [first], "bytes": body, "samples": samples}
    warm = [scrape()[0] for _ in range(max(1, args.repeat))]
    results["later scrapes (cached probes)"] = {"times": warm}
    rss_warm = _rss_mb()

    # What the first scrape spends, part by part.
    runindex.reset()
    t = time.perf_counter()
    state = runindex.refresh()
    results[f"… of which: reading the runs table the first time ({args.runs + 1:,} runs)"] = {
        "times": [time.perf_counter() - t]}
    [latest] = runindex.whole_passes_newest_first(state)[:1]
    collector._summaries.clear()
    run = HealRun.objects.get(pk=latest.pk)
    report_bytes = len(json.dumps(run.report))
    t = time.perf_counter()
    collector.summarise(run)
    findings = sum(len(p["findings"]) for p in run.report["profiles"])
    results[f"… summarising the latest pass's report ({findings:,} findings, {report_bytes / 2**20:.1f} MiB JSON)"] = {
        "times": [time.perf_counter() - t]}
    t = time.perf_counter()
    HealRun.objects.get(pk=latest.pk)
    results["… loading that report from the dashboard's database"] = {"times": [time.perf_counter() - t]}

    probes.reset()
    t = time.perf_counter()
    probe = probes.store_probe(biggest)
    results[f"probe of the biggest store alone ({biggest.key}: {probe.messages:,} messages)"] = {
        "times": [time.perf_counter() - t]}

    t = time.perf_counter()
    heal(stores, all_stores=stores, only=light, apply=False)
    results["light pass over every store (one watch_stores cycle)"] = {"times": [time.perf_counter() - t]}
    t = time.perf_counter()
    heal(stores, all_stores=stores, apply=False)
    results["full check pass over every store (a changed, idle store's pass)"] = {
        "times": [time.perf_counter() - t]}

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    results["resident memory (MB): before scraping, after the first, after the later ones"] = {
        "rss_mb": [round(rss_before), round(rss_first), round(rss_warm)]}
    total_messages = sum((probes.store_probe(s).messages or 0) for s in stores)
    print(f"Home {args.home}: {len(stores)} profiles, {total_messages:,} messages, "
          f"biggest store {sizes[biggest.key] / 2**30:.2f} GiB; {args.runs:,} earlier light-pass runs in the "
          f"dashboard's database; scrape body {body:,} bytes, {samples:,} samples; peak RSS of the whole "
          f"benchmark (the check pass included) {peak} MB.\n")
    print("| operation | time |")
    print("|---|---:|")
    for label, item in results.items():
        if "rss_mb" in item:
            print(f"| {label} | {' / '.join(str(v) for v in item['rss_mb'])} |")
            continue
        times = item["times"]
        shown = _ms(statistics.median(times)) + (f" (median of {len(times)})" if len(times) > 1 else "")
        print(f"| {label} | {shown} |")
    if args.json:
        args.json.write_text(json.dumps({"home": str(args.home), "results": results, "peak_rss_mb": peak}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
