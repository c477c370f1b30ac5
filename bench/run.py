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
import os
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
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # ``bench.*`` modules, when run as ``bench/run.py``
from bench.report import machine, report  # noqa: E402

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

    from sessions_app.models import HealRun

    call_command("migrate", verbosity=0)
    user = User.objects.filter(username="bench").first() or User.objects.create_superuser("bench", password=None)
    if spec.get("count_passes"):
        # Only passes over every profile count: a run of one profile (a cron line with
        # --profile) leaves the others' pages without a stored pass.
        keys = {s.key for s in _stores()[0].values()}
        runs = HealRun.objects.filter(status="done", plans=[], only=[]).values_list("checked_profiles", flat=True)
        return {"passes": sum(1 for checked in runs if keys <= set(checked or ()))}
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
        end in chunks and dropped (a streamed export is consumed like a browser would).
        A kept-alive connection the server closed while idle (uvicorn after 5 s,
        gunicorn after ``--keep-alive``; interleaved rounds leave each server idle for
        a while) is opened again and the request timed afresh."""
        if self.conn is not None:
            try:
                return self._get(path, timeout)
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.conn = None
        return self._get(path, timeout)

    def _get(self, path: str, timeout: float) -> tuple[int, int, float]:
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


def start_app(home: Path, data: Path, cookie: str, masked: bool = False, wait: bool = True,
              name: str = "hermes-admin") -> Server:
    """The product under gunicorn (one sync worker) with ``bench/settings.py``: the
    product's settings and URLs plus the floor views (``bench/floor.py``).
    ``masked``: ``HERMES_ADMIN_MASK_SECRETS=1``. ``wait=False`` returns at once
    (for the cold-start measurement)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_") and k != "PYTHONDONTWRITEBYTECODE"}
    # Bytecode cached as on an installed server (under var/, not beside the sources):
    # otherwise every start compiles the project again (~0.3 s of a cold start here).
    env.update(HERMES_ROOTS=str(home), HERMES_ADMIN_DATA=str(data), DJANGO_SETTINGS_MODULE="bench.settings",
               BENCH_FLOOR_HOME=str(home), PYTHONPYCACHEPREFIX=str(BENCH_VAR / "pycache"))
    if masked:
        env["HERMES_ADMIN_MASK_SECRETS"] = "1"
    gunicorn = PY.parent / "gunicorn"
    argv = [str(gunicorn), "--bind", f"127.0.0.1:{port}", "--workers", "1", "--timeout", "900",
            "--keep-alive", "30", "hermes_admin.wsgi"]
    server = Server(name, argv, env, port, "/login/", {"Cookie": f"sessionid={cookie}"}, REPO,
                    BENCH_VAR / f"{name}-server.log", child=True)
    if wait:
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


# Operations of the old sequential table that the interleaved page table covers.
COVERED = {"list_first": "list_one", "list_first_recent": "list_one_recent", "transcript_small": "session_small",
           "transcript_big_first": "session_big_first", "transcript_big_middle": "session_big_middle",
           "transcript_big_last": "session_big_last", "search_rare": "search_rare",
           "search_medium": "search_medium", "search_common": "search_common"}


def _command_env(home: Path, data: Path) -> dict:
    """The environment of a ``manage.py`` child on ``home`` with the data folder ``data``:
    bytecode cached as on an installed host (``start_app`` says why), else each timed
    command compiled the project again (~0.15 s of every run here)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_") and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(HERMES_ROOTS=str(home), HERMES_ADMIN_DATA=str(data), DJANGO_SETTINGS_MODULE="hermes_admin.settings",
               PYTHONPYCACHEPREFIX=str(BENCH_VAR / "pycache"))
    return env


def ensure_passes(home: Path, data: Path, wanted: int = 2) -> int:
    """At least ``wanted`` finished whole check passes in the dashboard's database, as
    a dashboard whose cron runs nightly has: ``heal_sessions --all-profiles`` without
    ``--apply`` (writes nothing to any store). Returns how many there are."""
    have = _subprocess("setup", {"home": str(home), "data": str(data), "profiles": [], "count_passes": True})["passes"]
    env = _command_env(home, data)
    while have < wanted:
        say(f"  stored check pass {have + 1}/{wanted}: heal_sessions --all-profiles --json")
        proc = subprocess.run([str(PY), "manage.py", "heal_sessions", "--all-profiles", "--json"], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=7200)
        if proc.returncode not in (0, 1, 2) or not proc.stdout.strip():
            raise RuntimeError(f"heal_sessions failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        have += 1
    return have


def command_runner(home: Path, data: Path):
    """A callable running ``manage.py heal_sessions --profile default --json`` once:
    ``(seconds, exit code, peak RSS MB)``. Its runs go to ``<data>-command`` (see
    :func:`time_command`)."""
    own = data.parent / f"{data.name}-command"
    own.mkdir(parents=True, exist_ok=True)
    env = _command_env(home, own)
    subprocess.run([str(PY), "manage.py", "migrate", "-v0"], cwd=REPO, env=env, capture_output=True, check=True)

    def run_once() -> tuple[float, int, float]:
        start = time.perf_counter()
        proc = subprocess.Popen([str(PY), "manage.py", "heal_sessions", "--profile", PROFILE, "--json"], cwd=REPO,
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)  # reaps it: its own rusage, not every child's
        return time.perf_counter() - start, os.waitstatus_to_exitcode(status), usage.ru_maxrss / 1024
    return run_once


def interleaved_check_pass(home: Path, data: Path, spec: dict, db: Path, statements: Path, rounds: int,
                           command: bool) -> dict:
    """The full check pass, its raw-SQL floor and (``command``) the ``heal_sessions``
    command, one run of each per round (A, B, C, A, B, C…) after one untimed round.

    This machine's page cache holds less than the bench home, and the floor of one
    run measured 11 s and of another 15 s: run all of one system, then all of the
    other, and the ratio measures what the cache held at each time. Each run is a
    fresh process (the function's and the floor's ``warmup`` 0: the untimed round
    warms the page cache, as the separate runs' warm-up did). Returns the three
    results in the shape of the others, each with ``ratios`` (run ÷ the same
    round's floor)."""
    run_command = command_runner(home, data) if command else None
    out = {"function": {"times": [], "peak_rss_mb": 0}, "floor": {"times": [], "peak_rss_mb": 0, "quick": []},
           "command": {"times": [], "peak_rss_mb": 0, "status": set()}}
    for n in range(rounds + 1):
        fn = _subprocess("worker", dict(spec, repeat=1, warmup=0))
        fl = _subprocess("floor", {"statements": str(statements), "db": str(db), "repeat": 1, "warmup": 0})
        cmd = run_command() if run_command else None
        if n == 0:
            continue  # the untimed round
        say(f"    round {n}/{rounds}: function {fn['times'][0]:.1f} s, floor {fl['times'][0]:.1f} s"
            + (f", command {cmd[0]:.1f} s" if cmd else ""))
        out["function"]["times"] += fn["times"]
        out["function"]["peak_rss_mb"] = max(out["function"]["peak_rss_mb"], fn["peak_rss_mb"])
        out["function"]["result"] = fn["result"]
        out["floor"]["times"] += fl["times"]
        out["floor"]["quick"].append(fl["quick_check"])
        out["floor"]["peak_rss_mb"] = max(out["floor"]["peak_rss_mb"], fl["peak_rss_mb"])
        out["floor"].update(result=fl["result"], statements=fl["statements"])
        if cmd:
            out["command"]["times"].append(cmd[0])
            out["command"]["status"].add(cmd[1])
            out["command"]["peak_rss_mb"] = max(out["command"]["peak_rss_mb"], cmd[2])
    floors = out["floor"]["times"]
    for key in ("function", "command"):
        res = out[key]
        if res["times"]:
            res.update(median=median(res["times"]), interleaved=True,
                       ratios=[t / f for t, f in zip(res["times"], floors)])
    out["floor"].update(median=median(floors), quick_check=median(out["floor"].pop("quick")), interleaved=True)
    out["command"]["status"] = sorted(out["command"]["status"])
    return out


def time_command(home: Path, data: Path, repeat: int) -> dict:
    """Wall time of ``manage.py heal_sessions --profile default --json`` (check mode:
    a process start, Django, the pass over the store with the others for
    ``id_collision``, the run recorded) and the command's own peak RSS (``wait4``'s
    ``ru_maxrss``, not the largest of every child the bench waited for), after one
    untimed warm-up run. The runs are recorded in a dashboard database of their own
    (``<data>-command``), so the pages' database keeps only the passes over every
    profile that ``ensure_passes`` stores, as a nightly ``--all-profiles`` cron leaves."""
    run_once = command_runner(home, data)
    # One untimed run first, as the function and its floor get (``timed``): this
    # machine's page cache keeps ~4-5 GB, less than the home, so the store may have
    # been pushed out by the operations before; a cold read of it measures the disk
    # (quick_check alone took 40 s instead of 4 s in such a run).
    _, code, peak = run_once()
    times, peaks, codes = [], [peak], {code}
    for _ in range(repeat):
        took, code, peak = run_once()
        times.append(took)
        codes.add(code)
        peaks.append(peak)
    return {"times": times, "median": median(times), "peak_rss_mb": max(peaks), "status": sorted(codes),
            "warmup": 1}


# --ops names that need no server (store-layer operations).
STORE_ONLY = {"check_pass", "session_checks_big"}


def measure_home(home: Path, repeat: int, slow_repeat: int, hermes: bool, profiles: list[str],
                 floors: bool = True, only: set | None = None, rounds: int = 15, functions: bool = True) -> dict:
    from bench import pages as pages_mod

    manifest = manifest_of(home)
    data = BENCH_VAR / f"data-{home.name}"
    stamp = data / ".bench-source"
    if stamp.is_file() and stamp.read_text() != str(manifest["created_at"]):
        shutil.rmtree(data)  # the home was built again: its stored passes describe stores that are gone
    data.mkdir(parents=True, exist_ok=True)
    stamp.write_text(str(manifest["created_at"]))
    profiles = [p for p in profiles if p in manifest["profiles"]]
    say(f"== {home.name}: setup")
    setup = _subprocess("setup", {"home": str(home), "data": str(data), "profiles": profiles})
    results: dict = {"home": str(home), "manifest": manifest, "app_page": {}, "app_function": {}, "floor": {},
                     "hermes": {}, "pages": {}, "setup": {k: v for k, v in setup.items() if k != "cookie"}}
    specs = {p: {name: spec for name, spec in app_specs(home, manifest, p, setup).items()
                 if not only or name.removesuffix("_recent") in only} for p in profiles}
    # In-process functions and their SQL floor.
    captures = BENCH_VAR / "captures" / home.name
    captures.mkdir(parents=True, exist_ok=True)
    for profile, ops in specs.items() if functions else ():
        db = home / manifest["profiles"][profile]["store"]
        for name, spec in ops.items():
            key = f"{profile}:{name}"
            n = slow_repeat if spec.get("slow") else repeat
            full = dict(spec, home=str(home), data=str(data), repeat=n)
            if spec["kind"] == "page_only":
                continue
            if spec["kind"] == "check" and floors:
                # Function, floor and command interleaved round by round (interleaved_check_pass).
                out = captures / f"{profile}-{name}.json"
                _subprocess("capture", dict(full, out=str(out)))
                with_command = profile == PROFILE
                say(f"  function {key}, its floor" + (f" and heal_sessions --profile {PROFILE} --json" if with_command
                                                     else "") + f", interleaved ×{n}")
                got = interleaved_check_pass(home, data, full, db, out, n, with_command)
                results["app_function"][key], results["floor"][key] = got["function"], got["floor"]
                if with_command:
                    results["app_function"][f"{PROFILE}:check_command"] = dict(got["command"], warmup=1)
                continue
            say(f"  function {key} ×{n}")
            results["app_function"][key] = _subprocess("worker", full)
            if floors and spec["kind"] != "export":
                out = captures / f"{profile}-{name}.json"
                _subprocess("capture", dict(full, out=str(out)))
                say(f"  floor {key} ×{n}")
                results["floor"][key] = _subprocess("floor", {"statements": str(out), "db": str(db), "repeat": n})
    if functions and not floors and (not only or "check_pass" in only):
        say(f"  command: heal_sessions --profile {PROFILE} --json ×{slow_repeat}")
        results["app_function"][f"{PROFILE}:check_command"] = time_command(home, data, slow_repeat)
    if functions:
        # The linear reference for the growth budget: every message row read once.
        say(f"  reference: every message row in id order ×{slow_repeat}")
        results["reference"] = {f"{PROFILE}:scan_messages": scan_messages(
            home / manifest["profiles"][PROFILE]["store"], slow_repeat)}
    # Stored check passes, then the pages through HTTP, interleaved.
    results["setup"]["passes"] = ensure_passes(home, data, 2)
    servers: dict = {}
    # Store-layer operations alone (--ops check_pass) start no server.
    serve = not only or bool(only - STORE_ONLY - {"cold_start"})  # a cold start spawns its own servers
    try:
        if serve:
            servers["app"] = servers["floor"] = start_app(home, data, setup["cookie"])
            servers["masked"] = start_app(home, data, setup["cookie"], masked=True, name="hermes-admin-masked")
            hermes_total = None
            if hermes:
                say("  hermes: copying the store for Hermes (backup API), starting `hermes dashboard`")
                servers["hermes"] = start_hermes(hermes_home_copy(home))
                hermes_total = _json(servers["hermes"], "/api/sessions?limit=1").get("total", 0)
                results["hermes"]["_total"] = hermes_total
            wanted = {name: spec for name, spec in pages_mod.page_specs(manifest, PROFILE, hermes_total).items()
                      if not only or name in only or name in {COVERED.get(o) for o in only}}
            results["pages"] = pages_mod.measure(wanted, servers, rounds, slow_repeat, say=say)
            for system in ("app", "masked", "hermes"):
                if system in servers:
                    results["pages"].setdefault("_peak_rss_mb", {})[system] = peak_mb(servers[system].pid())
            # What the interleaved table does not cover, one operation after the other.
            for profile, ops in specs.items():
                for name, spec in ops.items():
                    if "page" not in spec or (profile == PROFILE and name in COVERED):
                        continue
                    n = slow_repeat if spec.get("slow") else repeat
                    say(f"  page {profile}:{name} ×{n}")
                    results["app_page"][f"{profile}:{name}"] = servers["app"].measure(spec["page"], n)
            if hermes:
                for name, path in hermes_paths(manifest, hermes_total).items():
                    if name in COVERED or (only and name.removesuffix("_recent") not in only):
                        continue
                    n = 1 if name == "export_big" else (slow_repeat if "recent" in name or "search" in name else repeat)
                    say(f"  hermes {name} ×{n}")
                    results["hermes"][name] = servers["hermes"].measure(path, n, warmup=0 if name == "export_big" else 1)
    finally:
        for server in {id(s): s for s in servers.values()}.values():
            server.stop()
    if not only or "cold_start" in only:
        starts = max(5, slow_repeat)  # a second each: five, so one slow start does not make the median
        say(f"  cold start ×{starts} after one untimed start")
        first = f"/sessions/?profile={PROFILE}&size={PAGE}"
        results["cold_start"] = pages_mod.cold_start(
            lambda: start_app(home, data, setup["cookie"], wait=False, name="hermes-admin-cold"), first, starts)
    return results


def _json(server: Server, path: str) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)
    conn.request("GET", path, headers=server.headers)
    body = conn.getresponse().read()
    conn.close()
    return json.loads(body)


# --------------------------------------------------------------------------- report

TABLES = ("app_page", "app_function", "floor", "hermes", "reference", "pages")


def save_results(path: Path, res: dict, only: set) -> dict:
    """Write ``res`` to ``path``; with ``--ops`` (a partial run) merge it into the
    results already there, so the report keeps every other operation's numbers and
    says which ones were measured again, and when."""
    if only and path.exists():
        old = json.loads(path.read_text())
        for table in TABLES:
            old.setdefault(table, {}).update(res.get(table, {}))
        if "cold_start" in res:
            old["cold_start"] = res["cold_start"]
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
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds of the page table")
    parser.add_argument("--pages-only", action="store_true", help="measure the pages only (no store-layer functions)")
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
        res = measure_home(home, args.repeat, args.slow_repeat, not args.no_hermes, profiles, only=only,
                           rounds=args.rounds, functions=not args.pages_only)
        res.update(repeat=args.repeat, slow_repeat=args.slow_repeat, rounds=args.rounds, machine=machine(),
                   measured_at=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
        # A pages-only run is a partial run too: the store-layer results already saved stay.
        res = save_results(BENCH_VAR / f"results-{home.name}.json", res,
                           only or ({"pages (`--pages-only`)"} if args.pages_only else set()))
    scale = []
    for other in args.scale:
        other = other.resolve()
        cached = BENCH_VAR / f"results-{other.name}.json"
        if (args.reuse_scale or args.report_only) and cached.exists():
            scale.append(json.loads(cached.read_text()))
            continue
        r = measure_home(other, args.repeat, args.slow_repeat, False, [PROFILE], floors=False, only=only,
                         rounds=args.rounds, functions=not args.pages_only)
        r.update(rounds=args.rounds)
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
