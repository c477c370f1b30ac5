"""The Markdown report of ``bench/run.py`` (``--write docs/benchmarks.md``): tables
from the saved results, the budgets of issue 16, and ``bench/analysis.md`` appended."""

from __future__ import annotations

import math
import os
import platform
import sqlite3
import statistics

PROFILE = "default"
HERMES_VERSION = "0.19.0"


def ms(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds >= 10:
        return f"{seconds:,.1f} s"
    if seconds >= 1:
        return f"{seconds:,.2f} s"
    return f"{seconds * 1000:,.1f} ms" if seconds >= 0.01 else f"{seconds * 1000:,.2f} ms"


def mb(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f} MB"


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def func_ratio(f: dict | None, fl: dict | None) -> float | None:
    """A function ÷ its floor: the median of the per-round ratios when the two ran
    interleaved (``ratios``, the check pass), else the ratio of the medians."""
    if f and f.get("ratios"):
        return statistics.median(f["ratios"])
    return ratio(f and f["median"], fl and fl["median"])


def fmt_ratio(value: float | None) -> str:
    if value is None:
        return "—"
    if value < 0.01:
        return f"{value:,.4f}×"
    return f"{value:,.1f}×" if value >= 10 else f"{value:,.2f}×"


def spread(q, fmt=ms) -> str:
    """``median (p25–p75)``, the unit written once when both ends share it."""
    if not q:
        return "—"
    lo, hi = fmt(q[0]), fmt(q[2])
    if lo.endswith("×") and hi.endswith("×"):
        lo = lo[:-1]
    elif " " in lo and lo.rsplit(" ", 1)[1] == hi.rsplit(" ", 1)[-1]:
        lo = lo.rsplit(" ", 1)[0]
    return f"{fmt(q[1])} ({lo}–{hi})"


LABELS = {  # operations of the store-layer table and of the sequential page table
    "list_first": "sessions list, first page (50)",
    "list_first_recent": "… by last activity",
    "list_deep": "sessions list, deep page (last 50)",
    "list_deep_recent": "… by last activity (app `order=activity`, Hermes `order=recent`)",
    "transcript_small": "transcript page (100) of the 100-message session",
    "transcript_big_first": "300k session: first 100",
    "transcript_big_middle": "… 100 from the middle (`?at=`)",
    "transcript_big_last": "… last 100",
    "transcript_big_500": "… 500 from the middle",
    "transcript_big_recheck": "… first 100 with \"Check this session now\" (`?recheck=1`)",
    "search_rare": "full-text search `zanzibar` (~50 hits)",
    "search_medium": "full-text search `kubernetes` (~1 %)",
    "search_common": "full-text search `deploy` (~10 %)",
    "search_two_words": "full-text search `kubernetes deploy`",
    "export_big": "whole 300k session (app: streamed JSONL export; Hermes: `/messages` without limit)",
    "session_checks_big": "session-level checks of the 300k session (what `?recheck=1` runs)",
    "check_pass": "full check pass (`run_store_checks` with the home's other stores)",
    "check_command": "`manage.py heal_sessions --profile default --json` (check mode, process included)",
    "scan_messages": "reference: raw sqlite3 reads every message row once, in id order",
}


def pages_table(res: dict) -> list[str]:
    pages = {k: v for k, v in res.get("pages", {}).items() if not k.startswith("_")}
    if not pages:
        return []
    lines = ["| page | hermes-admin | floor view | app ÷ floor | masking on ÷ off | Hermes 0.19.0 API | app ÷ Hermes |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for item in pages.values():
        r = item.get("ratios", {})
        lines.append(
            f"| {item['label']} | {spread(item.get('app', {}).get('q'))} | {spread(item.get('floor', {}).get('q'))} "
            f"| {spread((r.get('app_floor') or {}).get('q'), fmt_ratio)} "
            f"| {spread((r.get('masked_app') or {}).get('q'), fmt_ratio)} "
            f"| {spread(item.get('hermes', {}).get('q'))} | {spread((r.get('app_hermes') or {}).get('q'), fmt_ratio)} |")
    return lines


def functions_table(res: dict, profile: str = PROFILE) -> list[str]:
    page, func, floor, herm = res["app_page"], res["app_function"], res["floor"], res.get("hermes", {})
    lines = ["| operation | store layer (function) | function peak RSS | raw sqlite3 floor | function ÷ floor "
             "| page (HTTP, one after the other) | page peak RSS | Hermes 0.19.0 API | Hermes peak RSS |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, label in LABELS.items():
        key = f"{profile}:{name}"
        p, f, fl = page.get(key), func.get(key), floor.get(key)
        h = herm.get(name) if profile == PROFILE else None
        if not any((p, f, fl)):
            continue
        lines.append(
            f"| {label} | {ms(f and f['median'])} | {mb(f and f['peak_rss_mb'])} | {ms(fl and fl['median'])} "
            f"| {fmt_ratio(func_ratio(f, fl))} | {ms(p and p['median'])} "
            f"| {mb(p and p['peak_rss_mb'])} | {ms(h and h['median'])} | {mb(h and h['peak_rss_mb'])} |")
    return lines


def _page_q(res: dict, name: str, system: str = "app"):
    return ((res.get("pages", {}).get(name) or {}).get(system) or {}).get("q")


def _ratio_q(res: dict, name: str, which: str):
    return (((res.get("pages", {}).get(name) or {}).get("ratios") or {}).get(which) or {}).get("q")


def budgets(res: dict, scale: list[dict]) -> list[dict]:
    """Issue 16's budgets, each ``{"budget", "measured", "target", "met"}`` (ratios are
    the medians of the per-round ratios)."""
    func, floor = res["app_function"], res["floor"]
    out = []
    pages = {k: v for k, v in res.get("pages", {}).items() if not k.startswith("_")}
    for name, item in pages.items():
        q = _ratio_q(res, name, "app_floor")
        if q:
            out.append({"budget": f"{item['label']}: app ÷ floor", "measured": q[1], "target": "≤ 2",
                        "met": q[1] <= 2})
    for name in ("list_one", "list_one_recent"):
        q = _ratio_q(res, name, "app_hermes")
        if q:
            out.append({"budget": f"{pages[name]['label']}: app ÷ Hermes `/api/sessions`", "measured": q[1],
                        "target": "≤ 0.5", "met": q[1] <= 0.5})
    for name in ("session_small", "session_big_first", "session_big_middle", "session_big_last"):
        q = _ratio_q(res, name, "app_hermes")
        if q:
            out.append({"budget": f"{pages[name]['label']}: app ÷ Hermes (detail + messages)", "measured": q[1],
                        "target": "≤ 1", "met": q[1] <= 1})
    for name in ("search_rare", "search_medium", "search_common"):
        q = _ratio_q(res, name, "app_hermes")
        if q:
            out.append({"budget": f"{pages[name]['label']}: Hermes ÷ app", "measured": 1 / q[1], "target": "≥ 50",
                        "met": 1 / q[1] >= 50})
    for name in ("session_small", "session_big_first"):
        q = _ratio_q(res, name, "masked_app")
        if q:
            out.append({"budget": f"{pages[name]['label']}: masking on ÷ off", "measured": q[1], "target": "≤ 1.3",
                        "met": q[1] <= 1.3})
    chk, chk_floor = func.get(f"{PROFILE}:check_pass"), floor.get(f"{PROFILE}:check_pass")
    if chk and chk_floor:
        # Interleaved runs (bench/run.py interleaved_check_pass): the median of the
        # per-round ratios; older results: the ratio of the medians.
        r = func_ratio(chk, chk_floor)
        out.append({"budget": "full check pass (function) ÷ raw-SQL floor", "measured": r, "target": "≤ 1.5",
                    "met": r is not None and r <= 1.5})
        cmd = func.get(f"{PROFILE}:check_command")
        if cmd:
            r = func_ratio(cmd, chk_floor)
            out.append({"budget": "`heal_sessions --profile default` (command, process start included) ÷ raw-SQL "
                                  "floor", "measured": r, "target": "≤ 1.5", "met": r is not None and r <= 1.5})
        peak = max(filter(None, (chk.get("peak_rss_mb"), (cmd or {}).get("peak_rss_mb"))), default=None)
        out.append({"budget": "full check pass peak RSS (function, command)", "measured": peak, "unit": "MB",
                    "target": "< 256 MB", "met": peak is not None and peak < 256})
    cold = res.get("cold_start")
    if cold and cold.get("q"):
        out.append({"budget": "cold start to the first page (sessions list, one profile)", "measured": cold["q"][1],
                    "unit": "s", "target": "≤ 600 ms", "met": cold["q"][1] <= 0.6})
    return out


def budgets_issue7(res: dict, scale: list[dict]) -> list[dict]:
    """The budgets of issue 7 that issue 16 leaves as they were: a deep page of the big
    session costs what a small session's page costs, the streamed export stays in
    bounded memory, and nothing grows faster than linearly with the store."""
    out = []
    small = _page_q(res, "session_small")
    bigs = [_page_q(res, n) for n in ("session_big_first", "session_big_middle", "session_big_last")]
    if small and all(bigs):
        r = max(q[1] for q in bigs) / small[1]
        out.append({"budget": "slowest 300k-session page ÷ 100-message session page (pages of 100)",
                    "measured": r, "target": "≤ 2", "met": r <= 2})
    exp_page = res["app_page"].get(f"{PROFILE}:export_big")
    if exp_page:
        grow = exp_page["peak_rss_mb"] - exp_page["base_rss_mb"] if exp_page["peak_rss_mb"] else None
        out.append({"budget": f"streamed export of the 300k session ({exp_page['bytes'] / 2**20:,.0f} MiB): "
                              "worker memory growth", "measured": grow, "unit": "MB", "target": "≤ 64 MB",
                    "met": grow is not None and grow <= 64})
    items = scaling(res, scale)
    ref = next((i["exponent"] for i in items if i["name"] == "scan_messages"), None)
    limit = max(1.1, ref + 0.1) if ref is not None else 1.1
    target = (f"exponent ≤ {limit:.2f} (1 = linear; reading every row once: {ref:.2f})" if ref is not None
              else "exponent ≤ 1.1 (1 = linear)")
    for item in items:
        if item["name"] == "scan_messages":
            continue
        out.append({"budget": f"growth with store size: {item['label']}", "measured": item["exponent"],
                    "target": target, "met": item["exponent"] is not None and item["exponent"] <= limit,
                    "exponent": True})
    return out


# Operations whose growth with store size is reported: page name (interleaved table) or
# a function/reference key.
SCALED = (("list_one", "pages"), ("session_small", "pages"), ("session_big_middle", "pages"),
          ("search_common", "pages"), ("health", "pages"), ("check_pass", "app_function"),
          ("export_big", "app_page"), ("scan_messages", "reference"))


def _scaled_value(run: dict, name: str, table: str):
    if table == "pages":
        q = _page_q(run, name)
        return q and q[1]
    item = run.get(table, {}).get(f"{PROFILE}:{name}")
    return item and item["median"]


def scaling(res: dict, scale: list[dict]) -> list[dict]:
    """Least-squares slope of log(time) on log(messages) per operation."""
    runs = sorted(scale + [res], key=lambda r: r["manifest"]["messages"])
    if len(runs) < 2:
        return []
    out = []
    for name, table in SCALED:
        pts = [(r["manifest"]["messages"], v) for r in runs if (v := _scaled_value(r, name, table))]
        if len(pts) < 2:
            continue
        xs = [math.log(x) for x, _ in pts]
        ys = [math.log(y) for _, y in pts]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        den = sum((x - mx) ** 2 for x in xs)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else None
        label = (res.get("pages", {}).get(name) or {}).get("label") or LABELS.get(name, name)
        out.append({"name": name, "label": label, "points": pts, "exponent": slope})
    return out


def scale_table(res: dict, scale: list[dict]) -> list[str]:
    items = scaling(res, scale)
    if not items:
        return []
    sizes = sorted({m for item in items for m, _ in item["points"]})
    lines = ["| operation | " + " | ".join(f"{n:,} msgs" for n in sizes) + " | growth exponent |",
             "|---|" + "---:|" * (len(sizes) + 1)]
    for item in items:
        cells = dict(item["points"])
        lines.append(f"| {item['label']} | " + " | ".join(ms(cells.get(n)) for n in sizes)
                     + f" | {item['exponent']:.2f} |")
    return lines


def machine() -> dict:
    info = {"python": platform.python_version(), "sqlite": sqlite3.sqlite_version, "os": platform.platform(),
            "cpus": os.cpu_count()}
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                info["memory_gb"] = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    try:
        import django

        info["django"] = django.get_version()
    except ImportError:
        pass
    info["hermes_agent"] = HERMES_VERSION
    return info


def _size(messages: int) -> str:
    """``1 M``, ``100k``: a store's size as the section titles say it."""
    return f"{messages / 1e6:.0f} M" if messages >= 950_000 else f"{messages / 1e3:.0f}k"


def _budget_value(b: dict) -> str:
    value = b["measured"]
    if value is None:
        return "—"
    if b.get("exponent"):
        return f"{value:.2f}"
    if b.get("unit") == "MB":
        return f"{value:,.0f} MB"
    if b.get("unit") == "s":
        return ms(value)
    return fmt_ratio(value)


def report(res: dict, scale: list[dict], analysis: str | None) -> str:
    man = res["manifest"]
    info = res.get("machine") or machine()
    dflt = man["profiles"][PROFILE]
    rounds = res.get("rounds", "?")
    passes = res.get("setup", {}).get("passes")
    peaks = res.get("pages", {}).get("_peak_rss_mb", {})
    functions = functions_table(res)
    functions = functions if len(functions) > 2 else []  # the header alone: none measured (--pages-only)
    lines = [
        "# Benchmarks",
        "",
        "Generated by `bench/run.py` (do not edit the tables by hand; the analysis section comes from "
        "`bench/analysis.md`). Issues 7 and 16.",
        "",
        "## Setup",
        "",
        f"- Machine: {info.get('cpu', '?')}, {info['cpus']} cores, {info.get('memory_gb', '?')} GB RAM, "
        f"{info['os']}; Python {info['python']}, SQLite {info['sqlite']}, Django {info.get('django', '?')}; "
        f"hermes-agent {HERMES_VERSION} from PyPI (its own venv, `hermes dashboard` on 127.0.0.1).",
        f"- Run: {res.get('measured_at', '?')}; warm page cache. Pages: {rounds} interleaved rounds after a warm-up "
        f"round (Hermes' search and `order=recent`: the first {res.get('slow_repeat', '?')}); "
        + (f"store-layer functions: medians of {res.get('repeat', '?')} runs ({res.get('slow_repeat', '?')} for the "
           "check pass, the big session's checks, exports and the `heal_sessions` command), each after one "
           "untimed run" + ("" if (res.get("app_function", {}).get(f"{PROFILE}:check_command") or {}).get("warmup")
                            else " (the command: without one, measured before the warm-up was added)")
           + ("; the check pass, its floor and the command interleaved, one run of each per round, each "
              "a fresh process, their ratios taken round by round"
              if (res.get("app_function", {}).get(f"{PROFILE}:check_pass") or {}).get("interleaved") else "")
           + "." if functions else "store-layer functions: not measured in this run.")
        + "".join(f" Measured again on {r['measured_at']}: {', '.join(r['ops'])}"
                  + ("" if any("`--" in op for op in r["ops"]) else " (`--ops`)") + "."
                  for r in res.get("partial_runs", [])),
        f"- Store (`default` profile, written by hermes-agent 0.19.0 then bulk-loaded in its schema): "
        f"{dflt['messages']:,} messages, {dflt['sessions']:,} sessions, {dflt['bytes'] / 2**30:,.2f} GiB; "
        f"one session of {dflt.get('big_session_rows', 0):,} messages, one of 100. The home has "
        f"{len(man['profiles'])} profiles ({sum(p['messages'] for p in man['profiles'].values()):,} messages in all).",
        f"- The dashboard's database holds {passes if passes is not None else 'two'} finished check passes over every "
        "profile (`heal_sessions --all-profiles`, as a nightly cron leaves them), so the pages show stored findings.",
        "- hermes-admin: gunicorn, 1 sync worker, a logged-in superuser, `DEBUG` off, `bench/settings.py` (the "
        "product's settings and URLs plus the floor views); a second identical server with "
        "`HERMES_ADMIN_MASK_SECRETS=1` for *masking on*. Hermes: the release's `hermes dashboard --skip-build` "
        "(uvicorn), its session token header, on a backup-API copy of the same store.",
        "- **Floor view** (`bench/floor.py`): a minimal Django view per page on the same server, middleware, session "
        "authentication and database, running the page's own minimal SQL with the `sqlite3` module and writing "
        "the rows as escaped HTML (no template, no ORM, no product code).",
        "- Each round requests every page from every system in a rotating order; cells are the median over rounds "
        "(25th–75th percentile in parentheses); ratios are computed round by round, then summarised alike.",
        "- Raw SQL floor of a store-layer function: every statement it ran, captured with the `sqlite3` trace "
        "callback, replayed by the `sqlite3` module alone on one read-only connection.",
        "",
        f"## Pages ({_size(dflt['messages'])}-message store, {rounds} interleaved rounds)",
        "",
        *pages_table(res),
        "",
        f"Worker peak RSS over the whole run: hermes-admin {mb(peaks.get('app'))}, with masking {mb(peaks.get('masked'))}; "
        f"Hermes {mb(peaks.get('hermes'))}.",
        "",
    ]
    if functions:
        lines += ["## Store layer, and operations measured one after the other", "", *functions, ""]
    cold = res.get("cold_start")
    if cold and cold.get("q"):
        lines += [f"Cold start (a new gunicorn process until its first page, `{cold['path']}`, has been served): "
                  f"{spread(cold['q'])} over {len(cold['times'])} starts"
                  + (", after one untimed start." if cold.get("warmup") else ".") , ""]
    edge = [line for line in functions_table(res, "edge")[2:]]
    if edge:
        e = man["profiles"].get("edge", {})
        lines += ["### Same operations on the newest-shape store (`edge` profile: "
                  f"{e.get('messages', 0):,} messages, `(session_id, id)` index, `last_activity_at`)", "",
                  "Hermes 0.19.0 is not run on it: the schema (31) is newer than the release writes (22), and its "
                  "`SessionDB` opens a store read-write.", "", *functions_table(res, "edge"), ""]
    for title, found in (("Budgets (issue 16)", budgets(res, scale)), ("Budgets (issue 7)", budgets_issue7(res, scale))):
        if not found:
            lines += [f"## {title}", "", "Not measured in this run.", ""]
            continue
        lines += [f"## {title}", "", "| budget | measured (median) | target | met |", "|---|---:|---|---|"]
        for b in found:
            lines.append(f"| {b['budget']} | {_budget_value(b)} | {b['target']} | {'yes' if b['met'] else '**no**'} |")
        lines.append("")
    st = scale_table(res, scale)
    if st:
        lines += ["", "## Growth with store size", "",
                  "Homes built with `--messages` 100k / 300k / 1M (sessions = messages / 50, the long session = 30 %); "
                  "pages: interleaved medians; the check pass as a function. Exponent: slope of log(time) over "
                  "log(messages).", "", *st]
    lines += ["", "## How to rerun", "", "```sh",
              "python3 -m venv var/bench/hermes-0.19.0-full && var/bench/hermes-0.19.0-full/bin/pip install hermes-agent==0.19.0",
              ".venv/bin/python bench/generate.py --messages 1000000 --out var/bench/home-1m          # ~30 min",
              ".venv/bin/python bench/generate.py --messages 100000 --edge-messages 0 --out var/bench/home-100k",
              ".venv/bin/python bench/generate.py --messages 300000 --edge-messages 0 --out var/bench/home-300k",
              ".venv/bin/python bench/run.py --home var/bench/home-1m --scale var/bench/home-100k var/bench/home-300k \\",
              "    --write docs/benchmarks.md",
              "```", "",
              "Raw numbers (every round's times, statuses): `var/bench/results-<home>.json`. `--no-hermes` skips "
              "Hermes' server; `--rounds N` sets the interleaved rounds, `--repeat N` the runs per function; "
              "`--pages-only` measures the pages alone; `--report-only` writes the report from saved results. Where one page's time goes: `bench/cpu.py --home <home> --data <folder> --page <name> --cprofile 40` (CPU of the view beside its floor view in one process).", ""]
    if analysis:
        lines += [analysis.rstrip(), ""]
    return "\n".join(lines)
