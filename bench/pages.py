"""Pages measured interleaved: the product, its floor, the product with masking on,
and Hermes' own dashboard API, in one run (issue 16).

Each round requests every page once from every system, the systems' order rotated
from round to round (A B C D, B C D A, …), so that whatever else the shared machine
does at a moment weighs on all of them alike. Per page and system the report gives
the median over rounds and the spread (25th-75th percentile); the ratios
``product ÷ floor`` and ``product ÷ Hermes`` are taken round by round (the two
requests of one round ran seconds apart at most) and summarised the same way.

Systems:

- ``app``: the product (gunicorn, one sync worker, ``DEBUG`` off, a logged-in
  superuser), served with ``bench/settings.py`` (the product's settings and URLs,
  plus the floor routes);
- ``floor``: the floor views of ``bench/floor.py`` on that same server;
- ``masked``: a second, identical server with ``HERMES_ADMIN_MASK_SECRETS=1``;
- ``hermes``: ``hermes dashboard`` of the real release on a backup-API copy of the
  store; a page with two Hermes calls (a session page: the session's detail, then its
  messages) costs their sum. Hermes' slow calls (search) run in the first
  ``hermes_rounds`` rounds only.
"""

from __future__ import annotations

import statistics
import time
from urllib.parse import quote

SYSTEMS = ("app", "floor", "masked", "hermes")


def _q(text: str) -> str:
    return quote(text or "", safe="")


def page_specs(manifest: dict, profile: str, hermes_total: int | None) -> dict[str, dict]:
    """Page name -> ``{"label", "app", "floor", "hermes": [paths], "hermes_slow"}``."""
    info = manifest["profiles"][profile]
    big, small = info.get("big_session"), info.get("small_session")
    marks = info.get("big_session_marks") or {}
    rows = info.get("big_session_rows") or 0
    terms = manifest["search_terms"]
    # A release store has no (session_id, id) index: the product walks the rowid for
    # its big session, and so does the floor.
    walk = "" if info.get("newest_shape") else "&walk=rowid"
    pages: dict[str, dict] = {}
    if small:
        pages["session_small"] = {
            "label": "session page, the 100-message session",
            "app": f"/p/{profile}/s/{_q(small)}/?size=100",
            "floor": f"/bench-floor/p/{profile}/s/{_q(small)}/?size=100",
            "hermes": [f"/api/sessions/{_q(small)}", f"/api/sessions/{_q(small)}/messages?limit=100"]}
    if big:
        for name, label, app_q, hermes_q in (
                ("session_big_first", "session page of the 300k session: first 100", "", "limit=100"),
                ("session_big_middle", "… 100 from the middle (`?at=`)", f"&at={marks.get('middle')}",
                 f"limit=100&offset={rows // 2}"),
                ("session_big_last", "… last 100 (`?before=-1`)", "&before=-1",
                 f"limit=100&offset={max(0, rows - 100)}")):
            pages[name] = {
                "label": label,
                "app": f"/p/{profile}/s/{_q(big)}/?size=100{app_q}",
                "floor": f"/bench-floor/p/{profile}/s/{_q(big)}/?size=100{app_q}{walk}",
                "hermes": [f"/api/sessions/{_q(big)}", f"/api/sessions/{_q(big)}/messages?{hermes_q}"]}
    pages["list_one"] = {
        "label": "sessions list, one profile, first 50 (by start time)",
        "app": f"/sessions/?profile={profile}&size=50&order=started",
        "floor": f"/bench-floor/sessions/?profile={profile}&order=started",
        "hermes": ["/api/sessions?limit=50"]}
    pages["list_one_recent"] = {
        "label": "… by last activity (app `order=activity`, Hermes `order=recent`)",
        "app": f"/sessions/?profile={profile}&size=50&order=activity",
        "floor": f"/bench-floor/sessions/?profile={profile}&order=activity",
        "hermes": ["/api/sessions?limit=50&order=recent"], "hermes_slow": True}
    n = len(manifest["profiles"])
    pages["list_all"] = {"label": f"sessions list, all {n} profiles, first 50",
                         "app": "/sessions/?size=50", "floor": "/bench-floor/sessions/"}
    pages["list_all_recent"] = {"label": "… by last activity", "app": "/sessions/?size=50&order=activity",
                                "floor": "/bench-floor/sessions/?order=activity"}
    pages["health"] = {"label": "health page of the profile", "app": f"/p/{profile}/health/",
                       "floor": f"/bench-floor/p/{profile}/health/"}
    pages["overview"] = {"label": f"profiles overview ({n} stores)", "app": "/", "floor": "/bench-floor/"}
    for label, term in terms.items():
        pages[f"search_{label}"] = {
            "label": f"full-text search `{term}`" + {"rare": " (~50 hits)", "medium": " (~1 %)",
                                                     "common": " (~10 %)"}.get(label, ""),
            "app": f"/p/{profile}/search/?q={_q(term)}&size=50",
            "floor": f"/bench-floor/p/{profile}/search/?q={_q(term)}",
            "hermes": [f"/api/sessions/search?q={_q(term)}&limit=50"], "hermes_slow": True}
    return pages


def _one(server, paths: list[str]) -> tuple[float, list[int]]:
    total, statuses = 0.0, []
    for path in paths:
        status, _, elapsed = server.get(path)
        total += elapsed
        statuses.append(status)
    return total, statuses


def quartiles(values: list[float]) -> tuple[float, float, float] | None:
    """(25th percentile, median, 75th percentile); None for no values."""
    if not values:
        return None
    if len(values) < 4:
        return min(values), statistics.median(values), max(values)
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[1], q[2]


def measure(pages: dict[str, dict], servers: dict, rounds: int, hermes_rounds: int, say=print) -> dict:
    """Interleaved rounds over ``pages``; ``servers`` maps a system name to a
    ``run.Server`` (``floor`` is the ``app`` server; missing systems are skipped).

    Returns ``{page: {"label", system: {"times", "status", "q"}, "ratios": {name: {"values", "q"}}}}``
    with times in seconds; ``q`` is :func:`quartiles`."""
    systems = [s for s in SYSTEMS if s in servers]
    out = {name: {"label": spec["label"], **{s: {"times": [], "status": set()} for s in systems}}
           for name, spec in pages.items()}
    paths = {name: {"app": [spec["app"]], "masked": [spec["app"]], "floor": [spec["floor"]],
                    "hermes": spec.get("hermes") or []} for name, spec in pages.items()}
    say(f"  pages: warm-up round, then {rounds} interleaved rounds ({', '.join(systems)})")
    for r in range(-1, rounds):
        start = time.monotonic()
        order = systems[r % len(systems):] + systems[:r % len(systems)] if r >= 0 else systems
        for name, spec in pages.items():
            for system in order:
                if not paths[name][system]:
                    continue
                if system == "hermes" and spec.get("hermes_slow") and r >= hermes_rounds:
                    continue
                elapsed, statuses = _one(servers[system], paths[name][system])
                if r >= 0:
                    out[name][system]["times"].append(elapsed)
                    out[name][system]["status"].update(statuses)
                    out[name][system].setdefault("rounds", []).append(r)
        if r >= 0:
            say(f"    round {r + 1}/{rounds}: {time.monotonic() - start:.1f} s")
    for name, item in out.items():
        for system in systems:
            entry = item[system]
            entry["status"] = sorted(entry["status"])
            entry["q"] = quartiles(entry["times"])
        item["ratios"] = {}
        for ratio, (a, b) in {"app_floor": ("app", "floor"), "app_hermes": ("app", "hermes"),
                              "masked_app": ("masked", "app")}.items():
            if a not in item or b not in item:
                continue
            by_round_b = dict(zip(item[b].get("rounds", []), item[b]["times"]))
            values = [t / by_round_b[r] for r, t in zip(item[a].get("rounds", []), item[a]["times"])
                      if by_round_b.get(r)]
            if values:
                item["ratios"][ratio] = {"values": values, "q": quartiles(values)}
    return out


def cold_start(start_server, path: str, repeat: int) -> dict:
    """Seconds from spawning a fresh server (``start_server(wait=False)``) to the end
    of its first answer to ``path`` (retried while the port refuses), ``repeat`` times
    after one untimed start. A new process each time; the untimed one reads the
    interpreter, Django and the project back into the page cache, which the pages
    measured before (gigabytes of store) push out on this machine: as every other
    operation here, it is measured after one untimed run (on 2026-12-03 the first of
    three starts took 1.09 s, the other two 0.76 and 0.56 s)."""
    times, statuses = [], set()
    for n in range(repeat + 1):
        began = time.perf_counter()
        server = start_server()
        try:
            while True:
                try:
                    status, _, _ = server.get(path, timeout=60)
                    break
                except OSError:
                    if server.proc.poll() is not None:
                        raise RuntimeError(f"server exited with {server.proc.returncode}; see {server.log.name}")
                    time.sleep(0.002)
            if n:
                times.append(time.perf_counter() - began)
            statuses.add(status)
        finally:
            server.stop()
    return {"times": times, "q": quartiles(times), "status": sorted(statuses), "path": path, "warmup": 1}
