"""Benchmark runner: hermes-admin side by side with Hermes' own dashboard and raw SQLite.

    .venv/bin/python bench/generate.py --messages 1000000 --out var/bench/home-1m
    .venv/bin/python bench/run.py --home var/bench/home-1m \\
        --scale var/bench/home-100k var/bench/home-300k --write docs/benchmarks.md

On the ``default`` profile of a home built by ``bench/generate.py`` (hermes-agent
0.19.0's store, 1 M messages, 20,000 sessions, one 300,000-message session) it
measures, warm cache, medians of ``--repeat`` runs:

- **hermes-admin pages** over HTTP on loopback: the real views served by gunicorn
  (one sync worker) with a logged-in session: sessions list (first and a deep
  page), transcript pages of the 300,000- and the 100-message session, the
  full-text search page, the streamed JSONL export. Peak RSS is the worker's
  ``VmHWM``, reset before each operation (``/proc/<pid>/clear_refs``);
- **hermes-admin functions** in a fresh subprocess per operation (store layer
  only, no HTTP): the same operations, plus the full check pass of
  ``heal_sessions`` without ``--apply`` (``run_store_checks`` with the home's
  other stores, as ``--all-profiles`` passes them); peak RSS of that process;
- **the floor**: every SQL statement those functions ran (captured with
  ``sqlite3``'s trace callback, parameters expanded) replayed by the ``sqlite3``
  module alone on one read-only connection, rows fetched and dropped;
- **Hermes 0.19.0's own dashboard** (``hermes dashboard`` from the real release,
  in its own venv under ``var/bench``) on loopback, against a backup-API copy of
  the same store: ``/api/sessions``, ``/api/sessions/search``,
  ``/api/sessions/{id}/messages``; peak RSS of its server process likewise.

With ``--scale`` homes (100k, 300k messages...) the app's operations are measured
there too and the growth exponent against store size is reported (1.0 = linear).
The results go to stdout, ``var/bench/results-<home>.json`` and, with ``--write``,
to a Markdown report whose analysis part comes from ``bench/analysis.md``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import http.client
import json
import math
import os
import platform
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PY = Path(sys.executable)
DEFAULT_VAR = REPO / "var" / "bench"
BENCH_VAR = DEFAULT_VAR  # --var
HERMES_VERSION = "0.19.0"
HERMES_VENV = DEFAULT_VAR / f"hermes-{HERMES_VERSION}-full"
PROFILE = "default"
PAGE = 50  # sessions list page size (both sides)
TRANSCRIPT_PAGE = 100


# --------------------------------------------------------------------------- memory / time helpers

def _status(pid: int | str = "self") -> dict[str, int]:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(("VmHWM", "VmRSS")):
                    out[line.split(":")[0]] = int(line.split()[1])
    except OSError:
        pass
    return out


def reset_peak(pid: int | str = "self") -> bool:
    """Reset a process's peak RSS (``VmHWM``) to its current RSS (Linux >= 4.0)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def peak_mb(pid: int | str = "self") -> float | None:
    kb = _status(pid).get("VmHWM")
    return round(kb / 1024, 1) if kb else None


def rss_mb(pid: int | str = "self") -> float | None:
    kb = _status(pid).get("VmRSS")
    return round(kb / 1024, 1) if kb else None


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def timed(fn, repeat: int, warmup: int = 1) -> tuple[list[float], object]:
    result = None
    for _ in range(warmup):
        result = fn()
    reset_peak()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return times, result


# --------------------------------------------------------------------------- in-process operations (workers)

def _django(home: Path, data: Path) -> None:
    os.environ["HERMES_ROOTS"] = str(home)
    os.environ["HERMES_ADMIN_DATA"] = str(data)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hermes_admin.settings")
    sys.path.insert(0, str(REPO))
    import django

    django.setup()


def _stores():
    from sessions_app.stores import registry

    stores = registry.stores()
    return {s.key: s for s in stores}, stores


def app_operation(spec: dict):
    """A zero-argument callable running one app operation at the store layer."""
    from sessions_app.stores.listing import Filters, list_sessions

    by_key, stores = _stores()
    store = by_key[spec.get("profile", PROFILE)]
    kind = spec["kind"]
    if kind == "list":
        cursor = tuple(spec["cursor"]) if spec.get("cursor") else None
        filters = Filters(profiles=[store.key], order=spec.get("order", "started"))
        return lambda: len(list_sessions([store], filters, limit=PAGE, after=cursor).rows)
    if kind == "transcript":
        from sessions_app.stores.transcript import for_store

        def page():
            with store.read() as conn:
                caps = store.capabilities(conn)
                t = for_store(conn, caps, spec["session"])
                got = t.page(size=spec.get("size", TRANSCRIPT_PAGE), at=spec.get("at"), before=spec.get("before"))
                return len(got.messages)
        return page
    if kind == "search":
        from sessions_app.stores.search import search

        def find():
            with store.read() as conn:
                caps = store.capabilities(conn)
                return len(search(conn, caps.columns("messages"), caps.columns("sessions"), spec["q"], limit=PAGE).hits)
        return find
    if kind == "check":
        from sessions_app.checks import run_store_checks

        others = [s for s in stores if s is not store]
        return lambda: len(run_store_checks(store, other_stores=others).findings)
    if kind == "session_checks":
        from sessions_app.checks import run_store_checks

        return lambda: len(run_store_checks(store, session_id=spec["session"]).findings)
    if kind == "export":
        from sessions_app.stores import export

        def dump():
            size = 0
            for piece in export.jsonl(store, spec["session"]):
                size += len(piece)
            return size
        return dump
    raise ValueError(kind)


def worker_main(spec: dict) -> dict:
    """Run one operation in this (fresh) process: warm-up, then timed runs."""
    _django(Path(spec["home"]), Path(spec["data"]))
    op = app_operation(spec)
    base = rss_mb()
    times, result = timed(op, spec["repeat"], spec.get("warmup", 1))
    return {"times": times, "median": median(times), "peak_rss_mb": peak_mb(), "base_rss_mb": base,
            "result": result}


def capture_main(spec: dict) -> dict:
    """Run one operation once with every SQLite statement traced (parameters expanded)."""
    statements: list[str] = []

    def traced(connect):
        def wrapper(*args, **kwargs):
            conn = connect(*args, **kwargs)
            conn.set_trace_callback(statements.append)
            return conn
        return wrapper

    sqlite3.connect = traced(sqlite3.connect)
    sqlite3.dbapi2.connect = traced(sqlite3.dbapi2.connect)
    _django(Path(spec["home"]), Path(spec["data"]))
    op = app_operation(spec)
    op()  # warm caches (capabilities) the way the timed runs see them
    statements.clear()
    op()
    path = Path(spec["out"])
    path.write_text(json.dumps(statements))
    return {"statements": len(statements)}


def floor_main(spec: dict) -> dict:
    """Replay captured statements with the sqlite3 module alone (no Django)."""
    statements = json.loads(Path(spec["statements"]).read_text())
    uri = Path(spec["db"]).absolute().as_uri() + "?mode=ro"

    quick = []  # seconds spent in PRAGMA quick_check, per run

    def replay():
        conn = sqlite3.connect(uri, uri=True, isolation_level=None)
        rows, qc = 0, 0.0
        try:
            for sql in statements:
                if sql.startswith("--"):
                    continue
                start = time.perf_counter()
                for _ in conn.execute(sql):
                    rows += 1
                if sql.upper().startswith("PRAGMA QUICK_CHECK"):
                    qc += time.perf_counter() - start
        finally:
            conn.close()
        quick.append(qc)
        return rows

    base = rss_mb()
    times, rows = timed(replay, spec["repeat"], spec.get("warmup", 1))
    return {"times": times, "median": median(times), "peak_rss_mb": peak_mb(), "base_rss_mb": base,
            "result": rows, "statements": len(statements), "quick_check": median(quick[-len(times):])}


def setup_main(spec: dict) -> dict:
    """Dashboard database, a logged-in admin session, the signed deep-page cursor."""
    _django(Path(spec["home"]), Path(spec["data"]))
    from django.contrib.auth.models import User
    from django.core import signing
    from django.core.management import call_command
    from django.test import Client

    from sessions_app.stores.listing import Filters, list_sessions
    from sessions_app.views.sessions import CURSOR_SALT

    call_command("migrate", verbosity=0)
    user = User.objects.filter(username="bench").first() or User.objects.create_superuser("bench", password=None)
    client = Client()
    client.force_login(user)
    by_key, _ = _stores()
    out = {"cookie": client.cookies["sessionid"].value, "cursors": {}}
    for key in spec["profiles"]:
        store = by_key[key]
        with store.read() as conn:
            total = conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
        depth = max(1, total - PAGE)
        out["cursors"][key] = {}
        for order in ("started", "activity"):
            cursor = list_sessions([store], Filters(profiles=[key], order=order), limit=depth).next_cursor
            out["cursors"][key][order] = {
                "cursor": list(cursor) if cursor else None, "depth": depth, "total": total,
                "token": signing.dumps(list(cursor), salt=f"{CURSOR_SALT}:{order}") if cursor else None}
    return out


def _subprocess(mode: str, spec: dict, timeout: float = 3600) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(spec, fh)
        path = fh.name
    try:
        proc = subprocess.run([str(PY), str(Path(__file__).resolve()), f"--{mode}", path], capture_output=True,
                              text=True, timeout=timeout, cwd=REPO)
    finally:
        os.unlink(path)
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} failed for {spec.get('kind')}:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- servers

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A server process group we started, on 127.0.0.1 only; stopped by its own id."""

    def __init__(self, name: str, argv: list[str], env: dict, port: int, probe: str, headers: dict, cwd: Path,
                 log: Path, child: bool = False):
        self.name, self.port, self.probe, self.headers, self.child = name, port, probe, headers, child
        self.log = open(log, "w")
        self.proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.conn: http.client.HTTPConnection | None = None

    def wait(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}; see {self.log.name}")
            try:
                status, _, _ = self.get(self.probe)
                if status < 500:
                    return
            except OSError:
                self.conn = None
            time.sleep(0.5)
        raise RuntimeError(f"{self.name} did not answer on port {self.port}; see {self.log.name}")

    def pid(self) -> int:
        """The process that serves requests (gunicorn's worker, uvicorn itself)."""
        if not self.child:
            return self.proc.pid
        try:
            children = [int(p) for p in Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()]
        except OSError:
            children = []
        return children[0] if children else self.proc.pid

    def get(self, path: str, timeout: float = 900) -> tuple[int, int, float]:
        """GET ``path``; returns (status, body bytes, seconds). The body is read to the
        end in chunks and dropped (a streamed export is consumed like a browser would)."""
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        start = time.perf_counter()
        try:
            self.conn.request("GET", path, headers=self.headers)
            resp = self.conn.getresponse()
            size = 0
            while True:
                chunk = resp.read(1 << 20)
                if not chunk:
                    break
                size += len(chunk)
        except (OSError, http.client.HTTPException):
            self.conn.close()
            self.conn = None
            raise
        elapsed = time.perf_counter() - start
        if resp.getheader("connection", "").lower() == "close" or resp.will_close:
            self.conn.close()
            self.conn = None
        return resp.status, size, elapsed

    def measure(self, path: str, repeat: int, warmup: int = 1) -> dict:
        for _ in range(warmup):
            self.get(path)
        pid = self.pid()
        base = rss_mb(pid)
        reset_peak(pid)
        times, sizes, statuses = [], [], set()
        for _ in range(repeat):
            status, size, elapsed = self.get(path)
            times.append(elapsed)
            sizes.append(size)
            statuses.add(status)
        return {"times": times, "median": median(times), "peak_rss_mb": peak_mb(pid), "base_rss_mb": base,
                "bytes": max(sizes), "status": sorted(statuses), "path": path}

    def stop(self) -> None:
        if self.conn is not None:
            self.conn.close()
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.log.close()


def start_app(home: Path, data: Path, cookie: str) -> Server:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    env.update(HERMES_ROOTS=str(home), HERMES_ADMIN_DATA=str(data), DJANGO_SETTINGS_MODULE="hermes_admin.settings")
    gunicorn = PY.parent / "gunicorn"
    argv = [str(gunicorn), "--bind", f"127.0.0.1:{port}", "--workers", "1", "--timeout", "900",
            "--keep-alive", "30", "hermes_admin.wsgi"]
    server = Server("hermes-admin", argv, env, port, "/login/", {"Cookie": f"sessionid={cookie}"}, REPO,
                    BENCH_VAR / "app-server.log", child=True)
    server.wait()
    return server


def hermes_home_copy(home: Path) -> Path:
    """A Hermes home holding a backup-API copy of the benchmark store, for Hermes
    alone: its ``SessionDB`` opens stores for writing (schema checks, heals), so it
    never gets the store the app is measured on. Reused while the source is unchanged."""
    target = BENCH_VAR / f"hermes-home-{home.name}"
    stamp = json.loads((home / "manifest.json").read_text())["created_at"]
    marker = target / ".bench-source"
    if marker.is_file() and marker.read_text() == str(stamp):
        return target
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    src = sqlite3.connect(f"file:{home / 'state.db'}?mode=ro", uri=True)
    dst = sqlite3.connect(target / "state.db")
    src.backup(dst, pages=-1)
    src.close()
    dst.close()
    (target / "config.yaml").write_text("model:\n  default: anthropic/claude-sonnet-4\n")
    marker.write_text(str(stamp))
    return target


def start_hermes(home: Path) -> Server:
    """``hermes dashboard`` of the real release, bound to 127.0.0.1 (no auth gate on
    loopback; the API wants the session token, set through its own variable)."""
    python = HERMES_VENV / "bin" / "python"
    if not python.exists():
        raise RuntimeError(f"no Hermes {HERMES_VERSION} venv at {HERMES_VENV}; create it with "
                           f"`python3 -m venv {HERMES_VENV} && {HERMES_VENV}/bin/pip install hermes-agent=={HERMES_VERSION}`")
    port = free_port()
    token = "bench-" + os.urandom(8).hex()
    run_home = Path(tempfile.mkdtemp(prefix="hermes-user-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HERMES_", "PYTHON"))}
    env.update(HERMES_HOME=str(home), HERMES_DASHBOARD_SESSION_TOKEN=token, HOME=str(run_home),
               NO_COLOR="1")
    argv = [str(python), "-m", "hermes_cli.main", "dashboard", "--host", "127.0.0.1", "--port", str(port),
            "--no-open", "--skip-build"]
    server = Server("hermes dashboard", argv, env, port, "/api/sessions?limit=1",
                    {"X-Hermes-Session-Token": token}, run_home, BENCH_VAR / "hermes-server.log")
    server.wait(timeout=300)
    return server


# --------------------------------------------------------------------------- the run

def manifest_of(home: Path) -> dict:
    return json.loads((home / "manifest.json").read_text())


def app_specs(home: Path, manifest: dict, profile: str, setup: dict) -> dict[str, dict]:
    """Operation name -> (page path, function spec) for the app on one profile."""
    info = manifest["profiles"][profile]
    big, small = info.get("big_session"), info.get("small_session")
    marks = info.get("big_session_marks") or {}
    terms = manifest["search_terms"]
    ops: dict[str, dict] = {}
    # The app's default order (start time) against Hermes' default list, and its order by
    # last activity against Hermes' `order=recent`.
    for order, suffix in (("started", ""), ("activity", "_recent")):
        cursor = setup["cursors"][profile][order]
        ops[f"list_first{suffix}"] = {"page": f"/sessions/?profile={profile}&size={PAGE}&order={order}",
                                      "kind": "list", "order": order}
        ops[f"list_deep{suffix}"] = {"page": f"/sessions/?profile={profile}&size={PAGE}&order={order}"
                                             f"&after={_q(cursor['token'])}",
                                     "kind": "list", "order": order, "cursor": cursor["cursor"]}
    if small:
        ops["transcript_small"] = {"page": f"/p/{profile}/s/{small}/?size={TRANSCRIPT_PAGE}", "kind": "transcript",
                                   "session": small}
    if big:
        ops["transcript_big_first"] = {"page": f"/p/{profile}/s/{big}/?size={TRANSCRIPT_PAGE}",
                                       "kind": "transcript", "session": big}
        ops["transcript_big_middle"] = {"page": f"/p/{profile}/s/{big}/?size={TRANSCRIPT_PAGE}&at={marks['middle']}",
                                        "kind": "transcript", "session": big, "at": marks["middle"]}
        ops["transcript_big_last"] = {"page": f"/p/{profile}/s/{big}/?size={TRANSCRIPT_PAGE}&before=-1",
                                      "kind": "transcript", "session": big, "before": -1}
        ops["transcript_big_500"] = {"page": f"/p/{profile}/s/{big}/?size=500&at={marks['middle']}",
                                     "kind": "transcript", "session": big, "at": marks["middle"], "size": 500}
        ops["transcript_big_recheck"] = {"page": f"/p/{profile}/s/{big}/?size={TRANSCRIPT_PAGE}&recheck=1",
                                         "kind": "page_only", "slow": True}
    for label, term in terms.items():
        ops[f"search_{label}"] = {"page": f"/p/{profile}/search/?q={_q(term)}&size={PAGE}", "kind": "search", "q": term}
    ops["search_two_words"] = {"page": f"/p/{profile}/search/?q={_q(terms['medium'] + ' ' + terms['common'])}&size={PAGE}",
                               "kind": "search", "q": f"{terms['medium']} {terms['common']}"}
    if big:
        ops["export_big"] = {"page": f"/p/{profile}/s/{big}/export.jsonl", "kind": "export", "session": big,
                             "slow": True}
        ops["session_checks_big"] = {"kind": "session_checks", "session": big, "slow": True}
    ops["check_pass"] = {"kind": "check", "slow": True}
    for spec in ops.values():
        spec["profile"] = profile
    return ops


def hermes_paths(manifest: dict, hermes_total: int) -> dict[str, str]:
    info = manifest["profiles"][PROFILE]
    big, small = info.get("big_session"), info.get("small_session")
    rows = info.get("big_session_rows") or 0
    terms = manifest["search_terms"]
    deep = max(0, hermes_total - PAGE)
    paths = {
        "list_first": f"/api/sessions?limit={PAGE}",
        "list_first_recent": f"/api/sessions?limit={PAGE}&order=recent",
        "list_deep": f"/api/sessions?limit={PAGE}&offset={deep}",
        "list_deep_recent": f"/api/sessions?limit={PAGE}&offset={deep}&order=recent",
    }
    if small:
        paths["transcript_small"] = f"/api/sessions/{small}/messages?limit={TRANSCRIPT_PAGE}"
    if big:
        paths["transcript_big_first"] = f"/api/sessions/{big}/messages?limit={TRANSCRIPT_PAGE}"
        paths["transcript_big_middle"] = f"/api/sessions/{big}/messages?limit={TRANSCRIPT_PAGE}&offset={rows // 2}"
        paths["transcript_big_last"] = f"/api/sessions/{big}/messages?limit={TRANSCRIPT_PAGE}&offset={max(0, rows - TRANSCRIPT_PAGE)}"
        paths["transcript_big_500"] = f"/api/sessions/{big}/messages?limit=500&offset={rows // 2}"
    for label, term in terms.items():
        paths[f"search_{label}"] = f"/api/sessions/search?q={_q(term)}&limit={PAGE}"
    paths["search_two_words"] = f"/api/sessions/search?q={_q(terms['medium'] + ' ' + terms['common'])}&limit={PAGE}"
    if big:
        paths["export_big"] = f"/api/sessions/{big}/messages"  # the whole session: its only way to get it all
    return paths


def _q(text: str | None) -> str:
    from urllib.parse import quote

    return quote(text or "", safe="")


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def scan_messages(db: Path, repeat: int) -> dict:
    """Time ``sqlite3`` alone reading every message row once in id order (a few
    columns, content by length): the simplest operation linear in the store, so the
    growth budget can tell the dashboard's growth from the machine's (page cache,
    memory) on stores of 0.5 to 5 GB."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        def scan():
            return sum(1 for _ in conn.execute(
                "SELECT id, session_id, role, tool_call_id, length(content) FROM messages ORDER BY id"))
        times, rows = timed(scan, repeat)
    finally:
        conn.close()
    return {"median": median(times), "times": times, "rows": rows}


def measure_home(home: Path, repeat: int, slow_repeat: int, hermes: bool, profiles: list[str],
                 floors: bool = True, only: set | None = None) -> dict:
    manifest = manifest_of(home)
    data = BENCH_VAR / "data"
    data.mkdir(parents=True, exist_ok=True)
    profiles = [p for p in profiles if p in manifest["profiles"]]
    say(f"== {home.name}: setup")
    setup = _subprocess("setup", {"home": str(home), "data": str(data), "profiles": profiles})
    results: dict = {"home": str(home), "manifest": manifest, "app_page": {}, "app_function": {}, "floor": {},
                     "hermes": {}, "setup": {k: v for k, v in setup.items() if k != "cookie"}}
    specs = {p: {name: spec for name, spec in app_specs(home, manifest, p, setup).items()
                 if not only or name.removesuffix("_recent") in only} for p in profiles}
    # In-process functions and their SQL floor.
    captures = BENCH_VAR / "captures" / home.name
    captures.mkdir(parents=True, exist_ok=True)
    for profile, ops in specs.items():
        db = home / manifest["profiles"][profile]["store"]
        for name, spec in ops.items():
            key = f"{profile}:{name}"
            n = slow_repeat if spec.get("slow") else repeat
            full = dict(spec, home=str(home), data=str(data), repeat=n)
            if spec["kind"] == "page_only":
                continue
            say(f"  function {key} ×{n}")
            results["app_function"][key] = _subprocess("worker", full)
            if floors and spec["kind"] != "export":
                out = captures / f"{profile}-{name}.json"
                _subprocess("capture", dict(full, out=str(out)))
                say(f"  floor {key} ×{n}")
                results["floor"][key] = _subprocess("floor", {"statements": str(out), "db": str(db), "repeat": n})
    # The linear reference for the growth budget: every message row read once.
    say(f"  reference: every message row in id order ×{slow_repeat}")
    results["reference"] = {f"{PROFILE}:scan_messages": scan_messages(home / manifest["profiles"][PROFILE]["store"],
                                                                        slow_repeat)}
    # Pages through HTTP.
    server = start_app(home, data, setup["cookie"])
    try:
        for profile, ops in specs.items():
            for name, spec in ops.items():
                if "page" not in spec:
                    continue
                n = slow_repeat if spec.get("slow") else repeat
                say(f"  page {profile}:{name} ×{n}")
                results["app_page"][f"{profile}:{name}"] = server.measure(spec["page"], n)
        if not only or "list_first" in only:
            results["app_page"]["all:list_first"] = server.measure(f"/sessions/?size={PAGE}", repeat)
            results["app_page"]["all:list_first_recent"] = server.measure(f"/sessions/?size={PAGE}&order=activity",
                                                                          repeat)
    finally:
        server.stop()
    if hermes:
        results["hermes"] = measure_hermes(home, manifest, repeat, slow_repeat, only)
    return results


def measure_hermes(home: Path, manifest: dict, repeat: int, slow_repeat: int, only: set | None = None) -> dict:
    say("  hermes: copying the store for Hermes (backup API)")
    copy = hermes_home_copy(home)
    out: dict = {}
    say("  hermes: starting `hermes dashboard`")
    server = start_hermes(copy)
    try:
        conn_total = _json(server, "/api/sessions?limit=1").get("total", 0)
        out["_total"] = conn_total
        for name, path in hermes_paths(manifest, conn_total).items():
            if only and name.removesuffix("_recent") not in only:
                continue
            slow = name.startswith(("search", "export")) or "recent" in name
            n = 1 if name == "export_big" else (slow_repeat if slow else repeat)
            say(f"  hermes {name} ×{n}")
            out[name] = server.measure(path, n, warmup=0 if name == "export_big" else 1)
    finally:
        server.stop()
    return out


def _json(server: Server, path: str) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)
    conn.request("GET", path, headers=server.headers)
    body = conn.getresponse().read()
    conn.close()
    return json.loads(body)


# --------------------------------------------------------------------------- report

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


def fmt_ratio(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:,.1f}×" if value >= 10 else f"{value:,.2f}×"


LABELS = {
    "list_first": "sessions list, first page (50)",
    "list_first_recent": "… by last activity (app `order=activity`, Hermes `order=recent`)",
    "list_deep": "sessions list, deep page (last 50)",
    "list_deep_recent": "… by last activity (app `order=activity`, Hermes `order=recent`)",
    "transcript_small": "session page, transcript page (100) of the 100-message session",
    "transcript_big_first": "session page of the 300k session (30 % of the store): first 100",
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
    "check_pass": "full check pass (`heal_sessions` without `--apply`)",
    "scan_messages": "reference: raw sqlite3 reads every message row once, in id order",
}


def main_table(res: dict) -> list[str]:
    page, func, floor, herm = res["app_page"], res["app_function"], res["floor"], res.get("hermes", {})
    lines = ["| operation | hermes-admin page (HTTP) | page peak RSS | store layer (function) | function peak RSS "
             "| raw sqlite3 floor | Hermes 0.19.0 API | Hermes peak RSS | Hermes ÷ app page |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, label in LABELS.items():
        key = f"{PROFILE}:{name}"
        p, f, fl, h = page.get(key), func.get(key), floor.get(key), herm.get(name)
        if not any((p, f, fl, h)):
            continue
        lines.append(
            f"| {label} | {ms(p and p['median'])} | {mb(p and p['peak_rss_mb'])} | {ms(f and f['median'])} "
            f"| {mb(f and f['peak_rss_mb'])} | {ms(fl and fl['median'])} | {ms(h and h['median'])} "
            f"| {mb(h and h['peak_rss_mb'])} | {fmt_ratio(ratio(h and h['median'], p and p['median']))} |")
    for name, label in (("list_first", "sessions list across all 10 profiles, first page"),
                        ("list_first_recent", "… by last activity")):
        allp = page.get(f"all:{name}")
        if allp:
            lines.append(f"| {label} | {ms(allp['median'])} | {mb(allp['peak_rss_mb'])} | | | | | | |")
    return lines


def edge_table(res: dict, profile: str = "edge") -> list[str]:
    page, func, floor = res["app_page"], res["app_function"], res["floor"]
    rows = [(name, label) for name, label in LABELS.items() if f"{profile}:{name}" in func]
    if not rows:
        return []
    lines = ["| operation (newest-shape store) | page (HTTP) | page peak RSS | function | function peak RSS | floor |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, label in rows:
        key = f"{profile}:{name}"
        p, f, fl = page.get(key), func.get(key), floor.get(key)
        lines.append(f"| {label} | {ms(p and p['median'])} | {mb(p and p['peak_rss_mb'])} | {ms(f and f['median'])} "
                     f"| {mb(f and f['peak_rss_mb'])} | {ms(fl and fl['median'])} |")
    return lines


def budgets(res: dict, scale: list[dict]) -> list[dict]:
    """The issue's budgets, each ``{"budget", "measured", "target", "met"}``."""
    page, func, floor, herm = res["app_page"], res["app_function"], res["floor"], res.get("hermes", {})

    def m(table, name, profile=PROFILE):
        item = table.get(f"{profile}:{name}") if table is not herm else table.get(name)
        return item and item["median"]

    out = []
    for name in ("list_first", "list_deep"):
        r = ratio(m(page, name), m(herm, name))
        out.append({"budget": f"{LABELS[name]}: app page ÷ Hermes `/api/sessions` (both by start time)",
                    "measured": r, "target": "≤ 0.5", "met": r is not None and r <= 0.5})
        rr = ratio(m(page, f"{name}_recent"), m(herm, f"{name}_recent"))
        if rr is not None:
            out.append({"budget": "… by last activity: app `order=activity` ÷ Hermes `order=recent`",
                        "measured": rr, "target": "≤ 0.5", "met": rr <= 0.5})
    for name in ("search_rare", "search_medium", "search_common", "search_two_words"):
        r = ratio(m(herm, name), m(page, name))
        out.append({"budget": f"{LABELS[name]}: Hermes search ÷ app search page", "measured": r, "target": "≥ 50",
                    "met": r is not None and r >= 50})
    small = m(page, "transcript_small")
    bigs = [m(page, n) for n in ("transcript_big_first", "transcript_big_middle", "transcript_big_last")]
    if small and all(bigs):
        r = max(bigs) / small
        out.append({"budget": "slowest 300k-session page ÷ 100-message session page (pages of 100)",
                    "measured": r, "target": "≤ 2", "met": r <= 2})
    exp_page = page.get(f"{PROFILE}:export_big")
    if exp_page:
        grow = exp_page["peak_rss_mb"] - exp_page["base_rss_mb"] if exp_page["peak_rss_mb"] else None
        out.append({"budget": f"streamed export of the 300k session ({exp_page['bytes'] / 2**20:,.0f} MiB): "
                              "worker memory growth", "measured": grow, "unit": "MB", "target": "≤ 64 MB",
                    "met": grow is not None and grow <= 64})
    chk, chk_floor = func.get(f"{PROFILE}:check_pass"), floor.get(f"{PROFILE}:check_pass")
    if chk and chk_floor:
        r = ratio(chk["median"], chk_floor["median"])
        out.append({"budget": "full check pass ÷ raw-SQL floor", "measured": r, "target": "≤ 2",
                    "met": r is not None and r <= 2})
        qc = chk_floor.get("quick_check")
        if qc and chk_floor["median"] > qc:
            r2 = ratio(chk["median"] - qc, chk_floor["median"] - qc)
            out.append({"budget": f"… the same without `PRAGMA quick_check` ({ms(qc)} in the floor, subtracted "
                                  "from both)", "measured": r2, "target": "≤ 2", "met": r2 is not None and r2 <= 2})
        out.append({"budget": "full check pass peak RSS", "measured": chk["peak_rss_mb"], "unit": "MB",
                    "target": "< 256 MB", "met": chk["peak_rss_mb"] is not None and chk["peak_rss_mb"] < 256})
    items = scaling(res, scale)
    ref = next((i["exponent"] for i in items if i["name"] == "scan_messages"), None)
    # "Linear or better": at most 1.1, or at most 0.1 above what reading every row once
    # grows by on the same stores (the machine's own linear, see scan_messages).
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


SCALED = ("list_first", "list_deep", "transcript_small", "transcript_big_middle", "search_common", "check_pass",
          "export_big", "scan_messages")
TABLE_OF = {"check_pass": "app_function", "scan_messages": "reference"}  # default: app_page


def scaling(res: dict, scale: list[dict]) -> list[dict]:
    """Least-squares slope of log(time) on log(messages) per operation (app pages,
    the check pass as a function)."""
    runs = sorted(scale + [res], key=lambda r: r["manifest"]["messages"])
    if len(runs) < 2:
        return []
    out = []
    for name in SCALED:
        table = TABLE_OF.get(name, "app_page")
        pts = []
        for r in runs:
            item = r.get(table, {}).get(f"{PROFILE}:{name}")
            if item and item["median"]:
                pts.append((r["manifest"]["messages"], item["median"]))
        if len(pts) < 2:
            continue
        xs = [math.log(x) for x, _ in pts]
        ys = [math.log(y) for _, y in pts]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        den = sum((x - mx) ** 2 for x in xs)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else None
        out.append({"name": name, "label": LABELS[name], "points": pts, "exponent": slope})
    return out


def scale_table(res: dict, scale: list[dict]) -> list[str]:
    items = scaling(res, scale)
    if not items:
        return []
    sizes = [m for m, _ in items[0]["points"]]
    head = "| operation | " + " | ".join(f"{n:,} msgs" for n in sizes) + " | growth exponent |"
    lines = [head, "|---|" + "---:|" * (len(sizes) + 1)]
    for item in items:
        cells = {m: t for m, t in item["points"]}
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


def report(res: dict, scale: list[dict], analysis: str | None) -> str:
    man = res["manifest"]
    info = res.get("machine") or machine()
    dflt = man["profiles"][PROFILE]
    lines = [
        "# Benchmarks",
        "",
        "Generated by `bench/run.py` (do not edit the tables by hand; the analysis section comes from "
        "`bench/analysis.md`). Issue 7.",
        "",
        "## Setup",
        "",
        f"- Machine: {info.get('cpu', '?')}, {info['cpus']} cores, {info.get('memory_gb', '?')} GB RAM, "
        f"{info['os']}; Python {info['python']}, SQLite {info['sqlite']}, Django {info.get('django', '?')}; "
        f"hermes-agent {HERMES_VERSION} from PyPI (its own venv, `hermes dashboard` on 127.0.0.1).",
        f"- Run: {res.get('measured_at', '?')}; warm page cache; medians of "
        f"{res.get('repeat', '?')} runs ({res.get('slow_repeat', '?')} for the check pass, exports and Hermes' "
        "search / `order=recent`; Hermes' whole-session read once)."
        + "".join(f" Measured again on {r['measured_at']}: {', '.join(r['ops'])} (`--ops`)."
                  for r in res.get("partial_runs", [])),
        f"- Store (`default` profile, written by hermes-agent 0.19.0 then bulk-loaded in its schema): "
        f"{dflt['messages']:,} messages, {dflt['sessions']:,} sessions, {dflt['bytes'] / 2**30:,.2f} GiB; "
        f"one session of {dflt.get('big_session_rows', 0):,} messages, one of 100. The home has "
        f"{len(man['profiles'])} profiles ({sum(p['messages'] for p in man['profiles'].values()):,} messages in all).",
        "- hermes-admin: gunicorn, 1 sync worker, a logged-in superuser, `DEBUG` off. Hermes: the release's "
        "`hermes dashboard --skip-build` (uvicorn), its session token header, on a backup-API copy of the same store.",
        "- Peak RSS: `VmHWM` of the serving process (or of the worker subprocess for store-layer functions), reset "
        "before each operation, so it is the peak while that operation ran (process baseline included).",
        "- Floor: every statement the store-layer function ran, captured with the `sqlite3` trace callback, "
        "replayed by the `sqlite3` module alone on one read-only connection (rows fetched, nothing else).",
        "",
        "## Results (1 M-message store)",
        "",
        *main_table(res),
        "",
    ]
    edge = edge_table(res)
    if edge:
        e = man["profiles"].get("edge", {})
        lines += ["### Same operations on the newest-shape store (`edge` profile: "
                  f"{e.get('messages', 0):,} messages, `(session_id, id)` index, `last_activity_at`)", "",
                  "Hermes 0.19.0 is not run on it: the schema (31) is newer than the release writes (22), and its "
                  "`SessionDB` opens a store read-write.", "", *edge, ""]
    lines += ["## Budgets (issue 7)", "", "| budget | measured | target | met |", "|---|---:|---|---|"]
    for b in budgets(res, scale):
        value = b["measured"]
        shown = "—" if value is None else (f"{value:.2f}" if b.get("exponent") else
                                           (f"{value:,.0f} MB" if b.get("unit") == "MB" else fmt_ratio(value)))
        lines.append(f"| {b['budget']} | {shown} | {b['target']} | {'yes' if b['met'] else '**no**'} |")
    st = scale_table(res, scale)
    if st:
        lines += ["", "## Growth with store size", "",
                  "Homes built with `--messages` 100k / 300k / 1M (sessions = messages / 50, the long session = 30 %); "
                  "app pages over HTTP, the check pass as a function. Exponent: slope of log(time) over log(messages).",
                  "", *st]
    lines += ["", "## How to rerun", "", "```sh",
              "python3 -m venv var/bench/hermes-0.19.0-full && var/bench/hermes-0.19.0-full/bin/pip install hermes-agent==0.19.0",
              ".venv/bin/python bench/generate.py --messages 1000000 --out var/bench/home-1m          # ~20 min",
              ".venv/bin/python bench/generate.py --messages 100000 --edge-messages 0 --out var/bench/home-100k",
              ".venv/bin/python bench/generate.py --messages 300000 --edge-messages 0 --out var/bench/home-300k",
              ".venv/bin/python bench/run.py --home var/bench/home-1m --scale var/bench/home-100k var/bench/home-300k \\",
              "    --write docs/benchmarks.md",
              "```", "",
              "Raw numbers (every run's times, sizes, statuses): `var/bench/results-<home>.json`. "
              "`--no-hermes` skips Hermes' server; `--repeat N` sets the runs per operation.", ""]
    if analysis:
        lines += [analysis.rstrip(), ""]
    return "\n".join(lines)


TABLES = ("app_page", "app_function", "floor", "hermes", "reference")


def save_results(path: Path, res: dict, only: set) -> dict:
    """Write ``res`` to ``path``; with ``--ops`` (a partial run) merge it into the
    results already there, so the report keeps every other operation's numbers and
    says which ones were measured again, and when."""
    if only and path.exists():
        old = json.loads(path.read_text())
        for table in TABLES:
            old.setdefault(table, {}).update(res.get(table, {}))
        old.setdefault("partial_runs", []).append({"ops": sorted(only), "measured_at": res.get("measured_at")})
        res = old
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(res, indent=1, default=str))
    return res


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, default=DEFAULT_VAR / "home-1m")
    parser.add_argument("--scale", type=Path, nargs="*", default=[], help="smaller homes for the growth measurement")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--slow-repeat", type=int, default=3)
    parser.add_argument("--no-hermes", action="store_true")
    parser.add_argument("--no-edge", action="store_true", help="skip the newest-shape profile")
    parser.add_argument("--write", type=Path, default=None, help="write the Markdown report here")
    parser.add_argument("--analysis", type=Path, default=REPO / "bench" / "analysis.md")
    parser.add_argument("--reuse-scale", action="store_true", help="reuse results of --scale homes from var/bench")
    parser.add_argument("--ops", default="", help="comma-separated operation names to run (default: all)")
    parser.add_argument("--var", type=Path, default=DEFAULT_VAR, help="work folder (captures, logs, results)")
    parser.add_argument("--report-only", action="store_true",
                        help="write the report from the saved results (var/bench/results-<home>.json), measure nothing")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--capture", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--floor", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--setup", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for mode, fn in (("worker", worker_main), ("capture", capture_main), ("floor", floor_main), ("setup", setup_main)):
        path = getattr(args, mode)
        if path:
            print(json.dumps(fn(json.loads(Path(path).read_text()))))
            return 0
    global BENCH_VAR
    BENCH_VAR = args.var.resolve()
    home = args.home.resolve()
    profiles = [PROFILE] + ([] if args.no_edge else ["edge"])
    only = {o.strip() for o in args.ops.split(",") if o.strip()}
    if args.report_only:
        res = json.loads((BENCH_VAR / f"results-{home.name}.json").read_text())
    else:
        res = measure_home(home, args.repeat, args.slow_repeat, not args.no_hermes, profiles, only=only)
        res.update(repeat=args.repeat, slow_repeat=args.slow_repeat, machine=machine(),
                   measured_at=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
        res = save_results(BENCH_VAR / f"results-{home.name}.json", res, only)
    scale = []
    for other in args.scale:
        other = other.resolve()
        cached = BENCH_VAR / f"results-{other.name}.json"
        if (args.reuse_scale or args.report_only) and cached.exists():
            scale.append(json.loads(cached.read_text()))
            continue
        r = measure_home(other, args.repeat, args.slow_repeat, False, [PROFILE], floors=False, only=only)
        scale.append(save_results(cached, r, only))
    analysis = args.analysis.read_text() if args.analysis and args.analysis.exists() else None
    text = report(res, scale, analysis)
    print(text)
    if args.write:
        args.write.parent.mkdir(parents=True, exist_ok=True)
        args.write.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
