"""Regenerate the committed Hermes-home test fixture (tests/fixtures/hermes_home).

    .venv/bin/python scripts/make_fixtures.py [--out tests/fixtures/hermes_home] [--cache DIR]

Why: tests must run against stores written by the real hermes-agent releases, not
hand-made look-alikes. For each release below a throwaway venv is created once
(cached under ``var/cache/hermes-venvs/<version>``) with
``pip install --no-deps hermes-agent==X psutil pyyaml python-dotenv``, and
``scripts/fixture_driver.py`` runs under that venv's python to write one profile's
``state.db`` through the release's own ``hermes_state.SessionDB``. The ``edge``
profile has the newest upstream shape (schema 31), which no release writes yet;
it is built here with plain sqlite3 from ``scripts/newest_schema.sql`` and the
same logical content (``fixture_driver.plan``).

Output layout (wiped and rebuilt on every run)::

    <out>/config.yaml, state.db, sessions/sessions.json      profile default  (0.19.0)
    <out>/profiles/<name>/{config.yaml,state.db,sessions/sessions.json}
        ops 0.18.2, research 0.17.0, legacy 0.15.0, archive 0.13.0, edge newest
    <out>/manifest.json                                       see describe_store()
        top-level "session_ids" (kind -> id) are the default profile's; each
        profiles[<name>]["session_ids"] holds that profile's own ids (the kinds
        its store holds, the profile's date in the id: fixture_driver.session_ids),
        so no session id is shared between two profiles.

Every store is closed with its WAL checkpointed: no ``state.db-wal`` / ``-shm``
files are left, so the fixture is just the main database files.
"""

from __future__ import annotations

import argparse
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

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "scripts"
DEFAULT_OUT = REPO / "tests" / "fixtures" / "hermes_home"
DEFAULT_CACHE = REPO / "var" / "cache" / "hermes-venvs"

# profile -> hermes-agent release that writes its store ("edge" = newest upstream shape).
PROFILES = {
    "default": "0.19.0",
    "ops": "0.18.2",
    "research": "0.17.0",
    "legacy": "0.15.0",
    "archive": "0.13.0",
    "edge": "edge",
}
BASE_DEPS = ["psutil", "pyyaml", "python-dotenv"]
EXTRA_DEPS: dict[str, list[str]] = {}  # per release, if an import of hermes_state ever needs more
EDGE_SCHEMA_VERSION = 31


def load_driver():
    """Import scripts/fixture_driver.py (stdlib-only at import time) for plan() & co."""
    sys.dont_write_bytecode = True  # keep scripts/ free of __pycache__
    spec = importlib.util.spec_from_file_location("fixture_driver", SCRIPTS / "fixture_driver.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fd = load_driver()


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- venvs

def ensure_venv(version: str, cache: Path) -> Path:
    """Return the python of a venv with hermes-agent==version, creating it if needed.

    A ``.fixture-ok`` marker holding the version is written last, so a half-built
    venv (interrupted pip) is rebuilt rather than reused.
    """
    venv = cache / version
    python = venv / "bin" / "python"
    marker = venv / ".fixture-ok"
    if marker.is_file() and marker.read_text().strip() == version and python.exists():
        return python
    if venv.exists():
        shutil.rmtree(venv)
    log(f"[venv] creating {venv}")
    packages = [f"hermes-agent=={version}", *BASE_DEPS, *EXTRA_DEPS.get(version, [])]
    outer = _outer_pip()
    # With a recent enough pip here, the release venv gets no pip of its own (ensurepip
    # costs ~6 s of CPU per venv, most of a cold demo build's venv step): this
    # interpreter's pip installs into it (pip --python, pip >= 22.3).
    subprocess.run([sys.executable, "-m", "venv", *(["--without-pip"] if outer else []), str(venv)], check=True)
    installer = [sys.executable, "-m", "pip", "--python", str(python)] if outer else [str(python), "-m", "pip"]
    pip = subprocess.run([*installer, "install", "--quiet", "--disable-pip-version-check",
                          "--no-deps", *packages], capture_output=True, text=True)
    if pip.returncode != 0:
        raise RuntimeError(f"pip install {packages} failed:\n{pip.stdout}{pip.stderr}")
    with tempfile.TemporaryDirectory(prefix="hermes-home-") as tmp_home:
        probe = subprocess.run(
            [str(python), "-c", "import importlib.metadata as m, hermes_state; "
                                "print(m.version('hermes-agent'))"],
            check=True, capture_output=True, text=True, env=_isolated_env(Path(tmp_home)))
    installed = probe.stdout.strip().splitlines()[-1]
    if installed != version:
        raise RuntimeError(f"venv {venv} has hermes-agent {installed}, wanted {version}")
    marker.write_text(version + "\n")
    return python


def _outer_pip() -> bool:
    """Whether this interpreter's pip can install into another environment (``--python``)."""
    try:
        from importlib.metadata import version as installed
        major, minor = (int(x) for x in installed("pip").split(".")[:2])
    except Exception:  # no pip here, or an unparsable version: the venv gets its own pip
        return False
    return (major, minor) >= (22, 3)


def _isolated_env(hermes_home: Path) -> dict:
    """Environment for release code: HERMES_HOME points at a temp dir, never ~/.hermes."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HERMES_", "PYTHON"))}
    env["HERMES_HOME"] = str(hermes_home)
    return env


def run_driver(python: Path, db: Path, profile: str, release: str) -> dict:
    """Run fixture_driver.py under the release venv; returns its JSON report."""
    with tempfile.TemporaryDirectory(prefix="hermes-home-") as tmp_home:
        proc = subprocess.run(
            [str(python), str(SCRIPTS / "fixture_driver.py"),
             "--db", str(db), "--profile", profile, "--release", release],
            capture_output=True, text=True, env=_isolated_env(Path(tmp_home)), cwd=tmp_home)
    if proc.returncode != 0:
        raise RuntimeError(f"driver failed for {profile} ({release}):\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- edge store

class Clock:
    """Strictly increasing epoch seconds, 1 ms apart (like rows written in quick succession)."""

    def __init__(self):
        self.t = time.time()

    def __call__(self) -> float:
        self.t += 0.001
        return round(self.t, 6)


def encode_content(content):
    """Hermes' content encoding: lists/dicts become "\\x00json:" + JSON."""
    if content is None or isinstance(content, str):
        return content
    return "\x00json:" + json.dumps(content)


class EdgeWriter:
    """Writes ``fixture_driver.plan()`` into a newest-shape store with plain sqlite3,
    keeping what newest Hermes keeps true: message_count / tool_call_count count
    ACTIVE rows, rewound rows are active=0 compacted=0, compaction archives rows
    as active=0 compacted=1, profile_name is stamped, system prompts are hashed."""

    def __init__(self, conn: sqlite3.Connection, profile: str):
        self.conn = conn
        self.profile = profile
        self.now = Clock()

    def session(self, spec: dict, ids: dict) -> None:
        gw = spec.get("gateway") or {}
        prompt_hash = None
        if spec.get("system_prompt"):
            prompt_hash = hashlib.sha256(spec["system_prompt"].encode()).hexdigest()
            self.conn.execute("INSERT OR IGNORE INTO system_prompts(hash, prompt) VALUES (?, ?)",
                              (prompt_hash, spec["system_prompt"]))
        title = spec.get("title")
        self.conn.execute(
            """INSERT INTO sessions (id, source, created_source, user_id, session_key, chat_id,
                   chat_type, thread_id, display_name, origin_json, model, model_config,
                   system_prompt_hash, parent_session_id, started_at, cwd, title, title_source,
                   profile_name)
               VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)""",
            (spec["id"], spec["source"], spec["source"], gw.get("user_id"), gw.get("session_key"),
             gw.get("chat_id"), gw.get("chat_type"), gw.get("thread_id"), gw.get("display_name"),
             json.dumps(gw["origin"]) if gw else None, spec.get("model"),
             json.dumps(spec["model_config"]) if spec.get("model_config") else None,
             prompt_hash, ids.get(spec.get("parent")), self.now(), spec.get("cwd"), title,
             ("user" if spec["kind"] == "hostile" else "llm") if title else None, self.profile))
        row_ids = [self.message(spec["id"], m) for m in spec["messages"]]
        if spec.get("rewind"):
            self.rewind(spec["id"], row_ids[spec["rewind"]["at"]])
            for m in spec["rewind"]["then"]:
                self.message(spec["id"], m)
        if spec.get("compact"):
            self.compact(spec["id"], spec["compact"])
        if spec.get("tokens"):
            self.tokens(spec["id"], spec["tokens"])

    def message(self, sid: str, m: dict, timestamp: float | None = None) -> int:
        calls = m.get("tool_calls")
        ts = timestamp if timestamp is not None else self.now()
        cur = self.conn.execute(
            """INSERT INTO messages (session_id, role, content, tool_call_id, tool_calls, tool_name,
                   timestamp, finish_reason, reasoning, platform_message_id, _compressed_summary)
               VALUES (?,?,?,?,?,?,?,?,?,?,?)""",
            (sid, m["role"], encode_content(m.get("content")), m.get("tool_call_id"),
             json.dumps(calls) if calls else None, m.get("tool_name"), ts,
             m.get("finish_reason"), m.get("reasoning") if m["role"] == "assistant" else None,
             m.get("platform_message_id"), 1 if m.get("compressed_summary") else 0))
        self.conn.execute(
            "UPDATE sessions SET message_count = message_count + 1, "
            "tool_call_count = tool_call_count + ?, last_activity_at = ? WHERE id = ?",
            (len(calls or []), ts, sid))
        return cur.lastrowid

    def _recount(self, sid: str) -> None:
        """Counters over ACTIVE rows (newest Hermes semantics)."""
        rows = self.conn.execute(
            "SELECT tool_calls FROM messages WHERE session_id = ? AND active = 1", (sid,)).fetchall()
        calls = sum(len(json.loads(r[0])) for r in rows if r[0])
        self.conn.execute("UPDATE sessions SET message_count = ?, tool_call_count = ? WHERE id = ?",
                          (len(rows), calls, sid))

    def rewind(self, sid: str, target_id: int) -> None:
        self.conn.execute("UPDATE messages SET active = 0 WHERE session_id = ? AND id >= ? AND active = 1",
                          (sid, target_id))
        self.conn.execute("UPDATE sessions SET rewind_count = rewind_count + 1 WHERE id = ?", (sid,))
        self._recount(sid)

    def compact(self, sid: str, compact: dict) -> None:
        """In-place compaction: live rows -> active=0 compacted=1; summary + carried
        tail (same timestamps) inserted as fresh active rows; then the next turn."""
        tail = self.conn.execute(
            """SELECT role, content, tool_call_id, tool_calls, tool_name, timestamp, finish_reason
               FROM messages WHERE session_id = ? AND active = 1 ORDER BY id DESC LIMIT ?""",
            (sid, compact["keep_last"])).fetchall()[::-1]
        self.conn.execute("UPDATE messages SET active = 0, compacted = 1 WHERE session_id = ? AND active = 1",
                          (sid,))
        self.message(sid, fd.summary(compact["summary"]))
        for role, content, call_id, calls, tool_name, ts, finish in tail:
            self.message(sid, {"role": role, "content": content, "tool_call_id": call_id,
                               "tool_calls": json.loads(calls) if calls else None,
                               "tool_name": tool_name, "finish_reason": finish}, timestamp=ts)
        self._recount(sid)
        for m in compact["then"]:
            self.message(sid, m)

    def tokens(self, sid: str, tok: dict) -> None:
        """Session aggregates, plus a per-model usage row for per-call (CLI path) deltas."""
        self.conn.execute(
            """UPDATE sessions SET input_tokens = ?, output_tokens = ?, cache_read_tokens = ?,
                   cache_write_tokens = ?, reasoning_tokens = ?, api_call_count = ?,
                   estimated_cost_usd = ?, cost_status = ?, cost_source = ?,
                   billing_provider = ?, billing_base_url = ? WHERE id = ?""",
            (tok.get("input_tokens", 0), tok.get("output_tokens", 0), tok.get("cache_read_tokens", 0),
             tok.get("cache_write_tokens", 0), tok.get("reasoning_tokens", 0),
             tok.get("api_call_count", 0), tok.get("estimated_cost_usd"), tok.get("cost_status"),
             tok.get("cost_source"), tok.get("billing_provider"), tok.get("billing_base_url"), sid))
        if tok.get("absolute"):
            return
        now = self.now()
        self.conn.execute(
            """INSERT INTO session_model_usage (session_id, model, billing_provider, billing_base_url,
                   billing_mode, task, api_call_count, input_tokens, output_tokens, cache_read_tokens,
                   cache_write_tokens, reasoning_tokens, estimated_cost_usd, actual_cost_usd,
                   cost_status, cost_source, first_seen, last_seen)
               VALUES (?,?,?,?,'','',?,?,?,?,?,?,?,0,?,?,?,?)""",
            (sid, tok["model"], tok.get("billing_provider") or "", tok.get("billing_base_url") or "",
             tok.get("api_call_count", 0), tok.get("input_tokens", 0), tok.get("output_tokens", 0),
             tok.get("cache_read_tokens", 0), tok.get("cache_write_tokens", 0),
             tok.get("reasoning_tokens", 0), tok.get("estimated_cost_usd") or 0,
             tok.get("cost_status"), tok.get("cost_source"), now, now))

    def end(self, spec: dict) -> None:
        self.conn.execute("UPDATE sessions SET ended_at = ?, end_reason = ? WHERE id = ? AND ended_at IS NULL",
                          (self.now(), spec["end"], spec["id"]))
        if spec["end"] in ("session_reset", "session_switch", "idle", "daily", "suspended",
                           "resume_pending_expired") and spec.get("gateway"):
            # Newest Hermes bumps the peer's generation with every reset-class end.
            self.conn.execute(
                """INSERT INTO conversation_generations (source, session_key, generation) VALUES (?, ?, 1)
                   ON CONFLICT(source, session_key) DO UPDATE SET generation = generation + 1""",
                (spec["source"], spec["gateway"]["session_key"]))


def build_edge(db: Path, profile: str) -> dict:
    """Create the newest-shape store at *db*; returns a driver-like report."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA journal_size_limit=67108864")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.executescript((SCRIPTS / "newest_schema.sql").read_text())
    # Stable per-profile generation so regenerated fixtures differ as little as possible.
    generation = uuid.uuid5(uuid.NAMESPACE_URL, f"hermes-admin-fixture:{profile}").hex
    writer = EdgeWriter(conn, profile)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO schema_version(version) VALUES (?)", (EDGE_SCHEMA_VERSION,))
    conn.executemany("INSERT INTO state_meta(key, value) VALUES (?, ?)",
                     [("db_file_generation", generation), ("fts_storage_version", "3")])
    ids: dict[str, str] = {}
    deferred = []
    specs = fd.plan(profile, "edge")
    for spec in specs:
        ids[spec["kind"]] = spec["id"]
        writer.session(spec, ids)
        if spec["end"] and spec["end_now"]:
            writer.end(spec)
        elif spec["end"]:
            deferred.append(spec)
    for key, entry in fd.routing_index(profile, specs).items():
        conn.execute("INSERT INTO gateway_routing(scope, session_key, entry_json, updated_at) VALUES (?,?,?,?)",
                     (fd.routing_scope(profile), key, json.dumps(entry), writer.now()))
    for spec in deferred:
        writer.end(spec)
    conn.execute("COMMIT")
    # application_id is derived from db_file_generation, as Hermes does on first write.
    conn.execute(f"PRAGMA application_id = {(int(generation[:8], 16) & 0x7FFFFFFF) or 1}")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return {"release": "edge", "schema_version": EDGE_SCHEMA_VERSION,
            "sessions_written": list(ids), "skipped": [], "dropped_kwargs": {}}


# --------------------------------------------------------------------------- checks & manifest

def settle_wal(db: Path) -> None:
    """Make sure only the main db file is left; checkpoint a leftover WAL ourselves."""
    sidecars = [Path(f"{db}-wal"), Path(f"{db}-shm")]
    if any(p.exists() for p in sidecars):
        log(f"[wal] {db} left sidecars; checkpointing")
        conn = sqlite3.connect(db)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
    left = [p.name for p in sidecars if p.exists()]
    assert not left, f"{db}: WAL sidecars remain: {left}"


def describe_store(db: Path, profile: str) -> dict:
    """Manifest entry computed from the written file with plain sqlite3.

    Shape: {schema_version, sessions, messages, active_messages, tables,
    sessions_by_id: {id: {kind, source, message_count (rows), active_messages,
    stored_message_count (sessions.message_count), title, parent_session_id,
    ended, end_reason}}}. ``active_messages`` equals ``message_count`` on stores
    without an ``active`` column (releases before 0.17.0).
    """
    kinds = {v: k for k, v in fd.session_ids(profile).items()}
    conn = sqlite3.connect(db)
    try:
        has_active = any(r[1] == "active" for r in conn.execute("PRAGMA table_info(messages)"))
        active_expr = "SUM(m.active = 1)" if has_active else "COUNT(m.id)"
        rows = conn.execute(
            f"""SELECT s.id, s.source, s.title, s.parent_session_id, s.ended_at, s.end_reason,
                       s.message_count, COUNT(m.id), COALESCE({active_expr}, 0)
                FROM sessions s LEFT JOIN messages m ON m.session_id = s.id
                GROUP BY s.id ORDER BY s.started_at, s.id""").fetchall()
        tables = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        out = {
            "schema_version": conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0],
            "sessions": len(rows),
            "messages": conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0],
            "active_messages": sum(r[8] for r in rows),
            "tables": tables,
            "sessions_by_id": {},
        }
        for sid, source, title, parent, ended_at, end_reason, stored, count, active in rows:
            out["sessions_by_id"][sid] = {
                "kind": kinds.get(sid), "source": source, "message_count": count,
                "active_messages": active, "stored_message_count": stored, "title": title,
                "parent_session_id": parent, "ended": ended_at is not None, "end_reason": end_reason,
            }
        return out
    finally:
        conn.close()


def write_home_files(home: Path, profile: str, release: str) -> None:
    """config.yaml (a real Hermes home has one) and the gateway's sessions/sessions.json
    mirror of the routing index (the only routing index before 0.18)."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(
        f"# hermes-admin test fixture: profile '{profile}', store written by hermes-agent {release}\n"
        f"model:\n  default: {fd.MODEL}\n"
    )
    entries = fd.routing_index(profile, fd.plan(profile, release))
    if fd.release_tuple(release) >= (0, 18, 0):
        entries = {"_README": "Legacy mirror of the gateway_routing table in state.db.", **entries}
    (home / "sessions").mkdir(exist_ok=True)
    (home / "sessions" / "sessions.json").write_text(json.dumps(entries, indent=2) + "\n")


def prepare_out(out: Path, force: bool) -> None:
    """Wipe *out*, refusing a non-empty dir that does not look like our fixture."""
    if out.exists():
        if any(out.iterdir()) and not (out / "manifest.json").exists() and not force:
            raise SystemExit(f"refusing to wipe {out}: no manifest.json there (use --force)")
        shutil.rmtree(out)
    out.mkdir(parents=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="fixture home to (re)write")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="venv cache dir")
    parser.add_argument("--force", action="store_true", help="wipe --out even if it is not a fixture dir")
    args = parser.parse_args(argv)
    started = time.monotonic()
    out, cache = args.out.resolve(), args.cache.resolve()
    cache.mkdir(parents=True, exist_ok=True)

    if set(PROFILES) != set(fd.PROFILE_DATES):
        raise SystemExit("PROFILES and fixture_driver.PROFILE_DATES must name the same profiles")
    releases = sorted({r for r in PROFILES.values() if r != "edge"})
    with ThreadPoolExecutor(max_workers=len(releases)) as pool:
        pythons = dict(zip(releases, pool.map(lambda r: ensure_venv(r, cache), releases)))

    prepare_out(out, args.force)
    manifest = {
        "generated_by": "scripts/make_fixtures.py",
        "layout": "Hermes home: default profile at the root, named profiles under profiles/<name>/",
        # The default profile's ids (kept for older readers); every profile's own
        # ids are in profiles[<name>]["session_ids"].
        "session_ids": fd.session_ids("default"),
        "profiles": {},
    }
    for profile, release in PROFILES.items():
        home = out if profile == "default" else out / "profiles" / profile
        write_home_files(home, profile, release)
        db = home / "state.db"
        if release == "edge":
            report = build_edge(db, profile)
        else:
            report = run_driver(pythons[release], db, profile, release)
        settle_wal(db)
        entry = {
            "release": release,
            "home": str(home.relative_to(out)) if home != out else ".",
            "db": str(db.relative_to(out)),
            "routing_scope": fd.routing_scope(profile),
            "session_ids": {},  # filled below: kind -> id, the kinds this store holds
            "skipped": report["skipped"],
            "dropped_kwargs": report["dropped_kwargs"],
        }
        entry.update(describe_store(db, profile))
        entry["session_ids"] = {kind: sid for kind, sid in fd.session_ids(profile).items()
                                if sid in entry["sessions_by_id"]}
        settle_wal(db)
        manifest["profiles"][profile] = entry
        log(f"[store] {profile:9s} {release:7s} schema {entry['schema_version']:>2} "
            f"{entry['sessions']:>2} sessions {entry['messages']:>3} messages "
            f"{db.stat().st_size // 1024} KiB; dropped {report['dropped_kwargs'] or '-'}")

    # Ids are per profile (fixture_driver.PROFILE_DATES): none may sit in two stores.
    seen: dict[str, str] = {}
    for profile, entry in manifest["profiles"].items():
        for sid in entry["sessions_by_id"]:
            assert sid not in seen, f"session id {sid} is in both {seen[sid]} and {profile}"
            seen[sid] = profile
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    log(f"[done] {out} {total / 1024:.0f} KiB in {time.monotonic() - started:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
