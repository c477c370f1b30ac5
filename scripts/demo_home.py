"""Build the demo Hermes home: real releases' stores, weeks of history, field damage.

    .venv/bin/python manage.py make_demo_home [--dest DIR] [--force]   # the usual way
    .venv/bin/python scripts/demo_home.py DEST                          # same, without Django

Why: a newcomer should see what the dashboard is for (health, repairs, recovery,
the delete guard, ordering by activity) without damaging a store by hand. Every
store is written by a real hermes-agent release through its own ``SessionDB``
(``scripts/demo_driver.py`` under the cached release venvs of
``scripts/make_fixtures.py``), with a clock that spreads sessions over the last
weeks; then the damage is done the way it happens in the field (plain sqlite3 with
foreign keys off, files left in ``sessions/``, a lease of a process that died,
pages overwritten on disk). :data:`PLANNED` lists what each profile should show;
the test suite checks it through the check engine.

Layout (built in a temporary folder beside ``DEST``, then renamed into place)::

    DEST/.hermes-admin-demo          marker + manifest (JSON, see build())
    DEST/state.db, sessions/, config.yaml       default   0.19.0
    DEST/profiles/<name>/...                    ops 0.18.2, research 0.17.0, legacy 0.15.0,
                                                archive 0.13.0, edge newest shape, laptop 0.19.0

The live side (a compression lock held by a running 0.19.0 process) is not part
of the build: ``scripts/demo_agent.py`` holds it while the dashboard runs.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib.util
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent
MARKER = ".hermes-admin-demo"
# Bump when the demo's content changes: an older demo home is then rebuilt.
DEMO_VERSION = 4
LIVE_RELEASE = "0.19.0"


def _load(name: str):
    sys.dont_write_bytecode = True  # keep scripts/ free of __pycache__
    spec = importlib.util.spec_from_file_location(f"demo_{name}", SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


mf = _load("make_fixtures")
fd = mf.fd
dd = _load("demo_driver")

PROFILES = {
    "default": "0.19.0",
    "ops": "0.18.2",
    "research": "0.17.0",
    "legacy": "0.15.0",
    "archive": "0.13.0",
    "edge": "edge",
    "laptop": "0.19.0",
}
# plan() derives its ids (replaced by demo ids below) from a per-profile date; this
# module's own copy of fixture_driver learns the demo-only profile's.
fd.PROFILE_DATES.setdefault("laptop", "20260307")
# Days each profile's history is shifted back, so profiles do not mirror each other.
SHIFT_DAYS = {"default": 0, "ops": 1, "research": 2, "legacy": 3, "archive": 5, "edge": 0.1, "laptop": 6}
# (days ago, "HH:MM") of each base session's start, in the default profile.
SCHEDULE = {
    "cli_main": (12, "09:10"), "telegram_open": (1, "19:40"), "compress_root": (9, "10:02"),
    "branch_parent": (16, "14:05"), "long": (33, "08:31"), "cron": (2, "06:00"),
    "slack_ended": (40, "11:15"), "discord_open": (5, "21:05"), "undo": (7, "16:20"),
    "compacted": (4, "13:45"),
}
# Children start from their parent: (parent kind, "start" = parent start + s | "end" = parent end + s).
FOLLOWS = {"delegate_child": ("cli_main", "start", 300.0), "compress_mid": ("compress_root", "end", 1.5),
           "compress_tip": ("compress_mid", "end", 1.5), "branch_child": ("branch_parent", "end", 45.0)}
LAPTOP_KINDS = ("cli_main", "delegate_child", "long", "cron", "slack_ended")
GATEWAY_SOURCES = ("telegram", "discord", "slack")
# An API-key-like secret (not a real key) to watch HERMES_ADMIN_MASK_SECRETS mask.
DEMO_SECRET = "sk-proj-DEMOonlyNotARealKey0000aaaaBBBBccccDDDD1234"

# What each profile should show: (profile, check code, session kind or None for the store).
PLANNED = (
    ("default", "placeholder_session", "deleted_live"),
    ("default", "history_lost", "deleted_live"),
    ("default", "unanswered_turn", "unanswered"),
    ("default", "owner_mismatch", "misfiled"),
    ("default", "compression_without_continuation", "interrupted"),
    ("ops", "orphan_messages", "cli_main"),
    ("ops", "dangling_parent", "delegate_child"),
    ("ops", "counter_drift", "long"),
    ("ops", "leftover_files", "dumped"),
    ("ops", "history_lost", "dumped"),
    ("research", "duplicate_live_rows", "retried"),
    ("research", "stale_open", "stale"),
    ("legacy", "transcript_on_disk_only", "legacy_jsonl"),
    ("edge", "stale_lease", None),
    ("laptop", "store_corrupt", None),
)

U, A, TC, T, tool_call = fd.U, fd.A, fd.TC, fd.T, fd.tool_call


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- the plan

def start_at(now: float, days: float, hhmm: str, salt: str) -> float:
    """Epoch seconds of local ``hhmm`` ``days`` ago, plus a few seconds from ``salt``."""
    hour, minute = (int(p) for p in hhmm.split(":"))
    day = dt.datetime.fromtimestamp(now - days * 86400)
    second = int(hashlib.sha256(salt.encode()).hexdigest()[:4], 16) % 60
    return day.replace(hour=hour, minute=minute, second=second, microsecond=0).timestamp()


def demo_id(profile: str, kind: str, source: str, start: float) -> str:
    """An id in Hermes' format from the session's start (local time, like Hermes):
    ``YYYYmmdd_HHMMSS_<hex>`` (6 hex CLI-side, 8 gateway), ``cron_<12 hex>_<stamp>``."""
    stamp = time.strftime("%Y%m%d_%H%M%S", time.localtime(start))
    digest = hashlib.sha256(f"hermes-admin-demo:{profile}:{kind}".encode()).hexdigest()
    if source == "cron":
        return f"cron_{digest[:12]}_{stamp}"
    return f"{stamp}_{digest[:8 if source in GATEWAY_SOURCES else 6]}"


def predicted_last(spec: dict) -> float:
    """When the driver will have written the spec's last message: the same seeded
    gaps ``demo_driver`` draws, in the same order (children start after it)."""
    rng = dd.seeded(spec["id"])
    t = spec["start"]
    messages = list(spec["messages"]) + list((spec.get("rewind") or {}).get("then", []))
    messages += list((spec.get("compact") or {}).get("then", []))
    for m in messages:
        t += dd.gap(m["role"], rng)
        if m.get("retried"):
            t += 2.0
    return t


def _remap(value, ids: dict[str, str]):
    """Replace fixture ids by demo ids inside model_config values."""
    if isinstance(value, str):
        return ids.get(value, value)
    if isinstance(value, dict):
        return {k: _remap(v, ids) for k, v in value.items()}
    if isinstance(value, list):
        return [_remap(v, ids) for v in value]
    return value


def stories(profile: str) -> list[dict]:
    """The demo's own sessions of ``profile`` (spec shape of fixture_driver.plan(),
    ``days``/``at`` for the start); their damage is noted on each."""
    base = {"model": fd.MODEL, "end": None, "end_now": False, "messages": []}
    out: list[dict] = []

    def add(kind, source, days, at, **kw):
        out.append(dict(base, kind=kind, source=source, days=days, at=at, **kw))

    if profile == "default":
        # Deleted from another terminal while the agent ran; its snapshot holds every turn.
        add("deleted_live", "cli", 3, "10:30", system_prompt=fd.SYSTEM_PROMPT, cwd=fd.CWD, delete_after_turn=3,
            turns=[
                [U("Our billing cron still writes to SQLite. Help me move it to Postgres."),
                 A("Sure. First I'll list what the cron touches: three tables, invoices, payments and customers.")],
                [U("Show me the invoices schema."),
                 TC([tool_call("call_d1", "terminal", {"command": "sqlite3 billing.db .schema invoices"})]),
                 T("call_d1", "terminal", "CREATE TABLE invoices (id INTEGER PRIMARY KEY, customer_id INTEGER, "
                                          "amount_cents INTEGER, issued_at TEXT);"),
                 A("Four columns; issued_at is TEXT, which becomes timestamptz in Postgres.")],
                [U("Write the migration."),
                 A("Here is migrate_billing.sql: CREATE TABLE with timestamptz, then COPY from the CSV export.")],
                [U("Now the rollback script."),
                 A("rollback_billing.sql drops the three tables in reverse dependency order.")],
                [U("Run it against staging."),
                 A("Done on staging: 3 tables, 12,408 rows copied, 0 errors.")],
            ])
        add("unanswered", "cli", 6, "17:50", title="Incident notes", cwd=fd.CWD, messages=[
            U("Summarise the incident notes in docs/incidents/."),
            A("Three incidents this quarter: a DNS outage, a full disk on the build host, and a bad deploy."),
            U("Which one cost the most downtime?"),  # the agent was killed before it replied
        ])
        add("secret", "cli", 8, "11:00", title="Eval harness setup", cwd=fd.CWD, end="cli_close", end_now=True,
            messages=[
                U(f"Set up the OpenAI client for the eval harness. My key is {DEMO_SECRET}"),
                A("Done: the key is in .env as OPENAI_API_KEY and .env is in .gitignore. Rotate it if it was shared."),
            ])
        add("misfiled", "telegram", 10, "20:00", messages=[
            U("status of the nightly backup?", platform_message_id="8101"),
            A("The nightly backup finished at 02:14: 41 GB, verified."),
        ], gateway=fd.gateway("ops", "telegram", "dm", "555001", "555001", "dana", "Dana Ops"))
        add("interrupted", "cli", 11, "15:00", title="Profile the importer", cwd=fd.CWD,
            end="compression", end_now=True, messages=[
                U("The CSV importer got slow. Profile it."),
                TC([tool_call("call_p1", "terminal", {"command": "python -m cProfile -s cumtime import_csv.py"})]),
                T("call_p1", "terminal", "ncalls tottime cumtime\n  51200  8.112  9.870 parse_row"),
                A("parse_row dominates: it re-compiles its regex for every row."),
                U("Fix it and re-run."),
                A("Compiled once at import time; the run now takes 1.4 s instead of 9.9 s."),
            ])
    elif profile == "ops":
        add("dumped", "cli", 20, "09:40", cwd=fd.CWD, request_dump=True, delete_keep_files=True, messages=[
            U("Paste the whole access log of last night and find the 500s."),
        ])
    elif profile == "research":
        add("retried", "cli", 5, "12:00", title="WAL checkpoint warning", end="cli_close", end_now=True, messages=[
            U("Explain the WAL checkpoint starvation warning."),
            A("A reader keeps an old snapshot open, so the checkpoint cannot reset the log and it keeps growing.",
              retried=True),  # the flush was retried after a timeout: written twice
            U("How do I find the reader?"),
            A("Look for processes holding state.db-wal: `lsof state.db-wal`, then check which one never commits."),
        ])
        add("stale", "cli", 45, "09:00", title="Q3 planning notes", cwd=fd.CWD, messages=[
            U("Start a notes file for the Q3 planning."),
            A("Created notes/q3.md with headings for goals, risks and staffing."),
        ])
    elif profile == "legacy":
        add("legacy_jsonl", "telegram", 25, "18:20", messages=list(LEGACY_STORED),
            gateway=fd.gateway("legacy", "telegram", "dm", "424242", "424242", "erin", "Erin Legacy"))
    return out


# The telegram conversation an old gateway kept in sessions/<id>.jsonl. That gateway
# appended every message to the JSONL first and to state.db second; once its store
# writes started failing (a "database is locked" it gave up on after the profile's
# move to SQLite), the JSONL kept growing alone. So the store holds the first four
# messages and the JSONL the whole conversation: what it has more comes after the
# store's last row, which the import appends even on this pre-0.17 schema
# (actions/transcript_order).
LEGACY_STORED = (
    U("can you remind me what we decided about the garden shed?"),
    A("You chose the 2.4 m cedar kit and planned to pour the base in May."),
    U("and the budget?"),
    A("1,850 EUR including the base, gutters and a lock."),
)
LEGACY_JSONL_ONLY = (
    U("ok. what did the council say about permits?"),
    A("Below 2.5 m and 10 m² no permit is needed; you are at 2.4 m and 8.6 m²."),
    U("great, order the kit then"),
    A("Ordered: delivery window 14-18 April, confirmation sent to your mail."),
    U("thanks!"),
    A("Any time. I'll remind you a day before delivery."),
)


def plan(profile: str, release: str, now: float) -> list[dict]:
    """Every session of ``profile``'s store, in write order, with demo ids and starts."""
    shift = SHIFT_DAYS[profile]
    specs = [s for s in fd.plan(profile, "edge" if release == "edge" else release) if s["kind"] != "hostile"]
    if profile == "laptop":
        specs = [s for s in specs if s["kind"] in LAPTOP_KINDS]
    specs += stories(profile)
    by_kind = {s["kind"]: s for s in specs}
    ids: dict[str, str] = {}
    for spec in specs:
        kind = spec["kind"]
        if kind in FOLLOWS:
            parent, what, offset = FOLLOWS[kind]
            p = by_kind[parent]
            spec["start"] = (p["start"] if what == "start" else predicted_last(p) + p["end_gap"]) + offset
        else:
            days, hhmm = (spec.pop("days"), spec.pop("at")) if "days" in spec else SCHEDULE[kind]
            spec["start"] = start_at(now, days + shift, hhmm, f"{profile}:{kind}")
        if spec.get("end"):
            # A compression handoff rotates at once; anything else ends a while later.
            spec["end_gap"] = 2.0 if spec["end"] == "compression" else 90.0
        old = spec.get("id")
        spec["id"] = demo_id(profile, kind, spec["source"], spec["start"])
        if old:
            ids[old] = spec["id"]
    for spec in specs:
        if spec.get("model_config"):
            spec["model_config"] = _remap(spec["model_config"], ids)
    return specs


# --------------------------------------------------------------------------- stores

class DemoEdgeWriter(mf.EdgeWriter):
    """The newest-shape writer of make_fixtures, on the demo clock."""

    def __init__(self, conn, profile):
        super().__init__(conn, profile)
        self.clock = dd.DemoClock()
        self.now = self.clock
        self.rng = dd.seeded(profile)
        self.last: dict[str, float] = {}

    def session(self, spec, ids):
        self.clock.set(spec["start"])
        self.rng = dd.seeded(spec["id"])
        super().session(spec, ids)

    def message(self, sid, m, timestamp=None):
        if timestamp is None:
            self.clock.advance(dd.gap(m["role"], self.rng))
            timestamp = self.clock.t
        self.last[sid] = max(self.last.get(sid, 0.0), timestamp)
        return super().message(sid, m, timestamp=timestamp)

    def end_at(self, spec, after: float) -> None:
        self.clock.set(after + spec.get("end_gap", 90.0))
        self.end(spec)


def build_edge(db: Path, profile: str, specs: list[dict]) -> dict:
    """The newest-shape store (no release writes it yet), like make_fixtures.build_edge."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.executescript((SCRIPTS / "newest_schema.sql").read_text())
    generation = uuid.uuid5(uuid.NAMESPACE_URL, f"hermes-admin-demo:{profile}").hex
    writer = DemoEdgeWriter(conn, profile)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO schema_version(version) VALUES (?)", (mf.EDGE_SCHEMA_VERSION,))
    conn.executemany("INSERT INTO state_meta(key, value) VALUES (?, ?)",
                     [("db_file_generation", generation), ("fts_storage_version", "3")])
    ids, deferred = {}, []
    for spec in specs:
        ids[spec["kind"]] = spec["id"]
        writer.session(spec, ids)
        if spec["end"] and spec["end_now"]:
            writer.end_at(spec, writer.last.get(spec["id"], spec["start"]))
        elif spec["end"]:
            deferred.append(spec)
    writer.clock.set(max(writer.last.values()))
    for key, entry in fd.routing_index(profile, specs).items():
        conn.execute("INSERT INTO gateway_routing(scope, session_key, entry_json, updated_at) VALUES (?,?,?,?)",
                     (fd.routing_scope(profile), key, json.dumps(entry), writer.now()))
    for spec in deferred:
        children = [writer.last.get(s["id"], 0.0) for s in specs if s.get("parent") == spec["kind"]]
        writer.end_at(spec, max([writer.last.get(spec["id"], spec["start"]), *children]))
    conn.execute("COMMIT")
    conn.execute(f"PRAGMA application_id = {(int(generation[:8], 16) & 0x7FFFFFFF) or 1}")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return {"release": "edge", "written": list(ids), "skipped": [], "dropped_kwargs": {}, "last": writer.last}


def run_driver(python: Path, db: Path, profile: str, release: str, specs: list[dict]) -> dict:
    """``demo_driver.py`` under the release's python, HERMES_HOME in a temp dir."""
    with tempfile.TemporaryDirectory(prefix="hermes-demo-") as tmp:
        plan_file = Path(tmp) / "plan.json"
        plan_file.write_text(json.dumps({"db": str(db), "profile": profile, "release": release,
                                         "sessions": specs}), encoding="utf-8")
        home = Path(tmp) / "home"
        home.mkdir()
        proc = subprocess.run([str(python), str(SCRIPTS / "demo_driver.py"), "--plan", str(plan_file)],
                              capture_output=True, text=True, env=mf._isolated_env(home), cwd=tmp, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"demo driver failed for {profile} ({release}):\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def write_home_files(home: Path, profile: str, release: str, specs: list[dict]) -> None:
    """config.yaml and the gateway's sessions/sessions.json mirror, as make_fixtures does."""
    (home / "sessions").mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(
        f"# hermes-admin demo home: profile '{profile}', store written by hermes-agent {release}\n"
        f"model:\n  default: {fd.MODEL}\n"
        + ("sessions:\n  write_json_snapshots: true\n" if profile == "default" else ""))
    entries = fd.routing_index(profile, specs)
    if fd.release_tuple(release) >= (0, 18, 0):
        entries = {"_README": "Legacy mirror of the gateway_routing table in state.db.", **entries}
    (home / "sessions" / "sessions.json").write_text(json.dumps(entries, indent=2) + "\n")


# --------------------------------------------------------------------------- field damage

def _writer(db: Path) -> sqlite3.Connection:
    """A plain sqlite3 writer with foreign keys OFF (what an external tool uses)."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA foreign_keys=OFF")
    return conn


def damage_ops(db: Path, ids: dict[str, str]) -> None:
    conn = _writer(db)
    try:
        # A cleanup script deleted a session row by hand: its messages stay, and
        # its delegate child now names a parent that is gone.
        conn.execute("DELETE FROM sessions WHERE id = ?", (ids["cli_main"],))
        # Someone removed a question and its answer with the sqlite3 shell (a pasted
        # password, say); the session's message_count still counts them.
        conn.execute("DELETE FROM messages WHERE session_id = ? AND content IN (?, ?)",
                     (ids["long"], "Question 7: what is 7 squared?", "Answer 7: 49."))
    finally:
        conn.close()


def damage_edge(db: Path, ids: dict[str, str], now: float) -> None:
    """A turn lease left by an agent that crashed yesterday: its pid is gone."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # a pid that certainly ran and is gone now
    try:
        pidns = os.readlink("/proc/self/ns/pid").split("[")[-1].rstrip("]")
        stamp = f":pidns={pidns}"
    except OSError:
        stamp = ""
    expired = now - 26 * 3600
    conn = _writer(db)
    try:
        conn.execute("INSERT INTO session_turn_leases (conversation_id, holder, acquired_at, expires_at) "
                     "VALUES (?, ?, ?, ?)",
                     (ids["compress_root"], f"pid={proc.pid}{stamp}:turn=14:platform=cli", expired - 900, expired))
    finally:
        conn.close()


def damage_laptop(db: Path) -> None:
    """The profile was copied from a failing disk: one b-tree page of the messages
    index is garbage. The file is patched only after every connection is closed."""
    conn = sqlite3.connect(db)
    try:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'idx_messages_session'").fetchone()[0]
    finally:
        conn.close()
    mf.settle_wal(db)
    with open(db, "r+b") as handle:
        handle.seek((root - 1) * page_size)
        handle.write(bytes((i * 37 + 11) % 256 for i in range(page_size)))


def write_legacy_jsonl(home: Path, spec: dict) -> None:
    """The old gateway's transcript: the messages the store holds (at the times the
    driver gave them), then those only the JSONL got, later the same evening."""
    lines = [{"role": "session_meta", "platform": "telegram", "session_id": spec["id"],
              "timestamp": dd.local_iso(spec["start"])}]
    t = spec["start"]
    rng = dd.seeded(spec["id"])  # the driver's own gaps, so the stored part lines up
    for m in LEGACY_STORED:
        t += dd.gap(m["role"], rng)
        lines.append({"role": m["role"], "content": m["content"], "timestamp": dd.local_iso(t)})
    rng = dd.seeded(spec["id"] + ":jsonl-only")
    for m in LEGACY_JSONL_ONLY:
        t += dd.gap(m["role"], rng)
        lines.append({"role": m["role"], "content": m["content"], "timestamp": dd.local_iso(t)})
    path = home / "sessions" / f"{spec['id']}.jsonl"
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
    os.utime(path, (t, t))


# --------------------------------------------------------------------------- build

def read_marker(home: Path) -> dict | None:
    """The marker of a demo home, or None when ``home`` is not one (or unreadable)."""
    try:
        data = json.loads((Path(home) / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def build(dest: Path, *, cache: Path | None = None, now: float | None = None) -> dict:
    """Build the demo home at ``dest`` (replacing one that is there) and return its
    manifest, also written to ``dest/.hermes-admin-demo``::

        {"version", "built_at" (epoch s), "built_by", "home",
         "profiles": {name: {"release", "home", "session_ids": {kind: id},
                             "skipped": [kinds the release could not write], "append_failures"}},
         "planned": [{"profile", "check", "kind", "session_id"}],
         "live_agent": {"release", "python", "profile", "store", "session_id"}}

    Raises RuntimeError when a release venv cannot be built or a driver fails.
    """
    started = time.monotonic()
    now = time.time() if now is None else float(now)
    dest = Path(dest).resolve()
    cache = Path(cache or mf.DEFAULT_CACHE).resolve()
    cache.mkdir(parents=True, exist_ok=True)
    releases = sorted({r for r in PROFILES.values() if r != "edge"})
    with ThreadPoolExecutor(max_workers=len(releases)) as pool:
        pythons = dict(zip(releases, pool.map(lambda r: mf.ensure_venv(r, cache), releases)))

    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.building-", dir=dest.parent))
    try:
        specs = {p: plan(p, r, now) for p, r in PROFILES.items()}
        homes = {p: work if p == "default" else work / "profiles" / p for p in PROFILES}
        for profile, release in PROFILES.items():
            write_home_files(homes[profile], profile, release, specs[profile])

        def write(profile: str) -> dict:
            db = homes[profile] / "state.db"
            if PROFILES[profile] == "edge":
                return build_edge(db, profile, specs[profile])
            return run_driver(pythons[PROFILES[profile]], db, profile, PROFILES[profile], specs[profile])

        with ThreadPoolExecutor(max_workers=len(PROFILES)) as pool:
            reports = dict(zip(PROFILES, pool.map(write, PROFILES)))
        ids = {p: {s["kind"]: s["id"] for s in specs[p] if s["kind"] in reports[p]["written"]} for p in PROFILES}
        for profile in PROFILES:
            mf.settle_wal(homes[profile] / "state.db")

        damage_ops(homes["ops"] / "state.db", ids["ops"])
        damage_edge(homes["edge"] / "state.db", ids["edge"], now)
        write_legacy_jsonl(homes["legacy"], next(s for s in specs["legacy"] if s["kind"] == "legacy_jsonl"))
        damage_laptop(homes["laptop"] / "state.db")

        live_store = homes["default"] / "state.db"
        manifest = {
            "version": DEMO_VERSION,
            "built_at": now,
            "built_by": "manage.py make_demo_home (scripts/demo_home.py)",
            "home": str(dest),
            "profiles": {p: {"release": PROFILES[p], "home": "." if p == "default" else f"profiles/{p}",
                             "session_ids": ids[p], "skipped": reports[p]["skipped"],
                             "append_failures": reports[p].get("append_failures", 0)} for p in PROFILES},
            "planned": [{"profile": p, "check": code, "kind": kind,
                         "session_id": ids[p][kind] if kind else None} for p, code, kind in PLANNED],
            "live_agent": {"release": LIVE_RELEASE, "python": str(pythons[LIVE_RELEASE]), "profile": "default",
                           "store": str(dest / live_store.relative_to(work)),
                           "session_id": ids["default"]["compress_tip"]},
        }
        (work / MARKER).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        _swap(work, dest)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    log(f"[demo] {dest}: {len(PROFILES)} profiles in {time.monotonic() - started:.1f}s")
    return manifest


def _swap(work: Path, dest: Path) -> None:
    """Put the finished home in place; an old one is removed only afterwards."""
    old = None
    if dest.exists():
        old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
        dest.rename(old)
    work.rename(dest)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: demo_home.py DEST")
    print(build(Path(sys.argv[1]))["home"])
