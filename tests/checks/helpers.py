"""Helpers for check and liveness tests: stores of a copied fixture home, field-style
damage with plain sqlite3, and real hermes-agent releases as writers.

Damage is applied to the per-test copy only, the way it happens in the field: a
tool writing with foreign keys off, a row inserted by another process, a file left
in ``sessions/``, a lock taken through a release's own ``SessionDB`` by a process
that then dies.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
from contextlib import contextmanager
from pathlib import Path

from sessions_app.stores.discovery import discover
from sessions_app.stores.store import Store

REPO = Path(__file__).resolve().parents[2]
FIXTURE_HOME = REPO / "tests" / "fixtures" / "hermes_home"
RELEASES = {"default": "0.19.0", "ops": "0.18.2", "research": "0.17.0", "legacy": "0.15.0", "archive": "0.13.0"}


def store_of(home: Path, profile: str = "default") -> Store:
    """The Store of ``profile`` in the copied home ``home``."""
    return Store(discover([Path(home).resolve()]).by_key()[profile])


def all_stores(home: Path) -> list[Store]:
    return [Store(p) for p in discover([Path(home).resolve()]).profiles]


def newest_timestamp(store: Store) -> float:
    """Newest message timestamp of a store (epoch seconds), read-only."""
    with store.read() as conn:
        return float(conn.execute("SELECT MAX(timestamp) FROM messages").fetchone()[0])


@contextmanager
def damage(store: Store):
    """A plain sqlite3 writer on the test's copy with foreign keys OFF, one
    transaction, closed afterwards (what an external tool does in the field)."""
    conn = sqlite3.connect(store.path, isolation_level=None)
    try:
        conn.execute("PRAGMA foreign_keys=OFF")
        conn.execute("BEGIN IMMEDIATE")
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    finally:
        conn.close()


def findings(report, code: str | None = None, session_id: str | None = None) -> list:
    """Findings of ``report``, optionally one code / one session. Every report
    looked at must be JSON-ready (``heal_sessions --json`` prints it)."""
    json.dumps(report.to_dict())
    return [f for f in report.findings
            if (code is None or f.check == code) and (session_id is None or f.session_id == session_id)]


def serious(report) -> list:
    """Warning and critical findings."""
    return [f for f in report.findings if f.severity in ("warning", "critical")]


# --------------------------------------------------------------------------- real releases

_make_fixtures = None


def _fixture_module():
    """scripts/make_fixtures.py, imported once (it owns venv building)."""
    global _make_fixtures
    if _make_fixtures is None:
        spec = importlib.util.spec_from_file_location("make_fixtures", REPO / "scripts" / "make_fixtures.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _make_fixtures = module
    return _make_fixtures


def release_python(version: str = "0.19.0") -> Path:
    """Python of a venv with hermes-agent==version, built (and cached) if missing."""
    mf = _fixture_module()
    mf.DEFAULT_CACHE.mkdir(parents=True, exist_ok=True)
    return mf.ensure_venv(version, mf.DEFAULT_CACHE)


PRELUDE = """
import json, os, sys, threading, time, uuid
from pathlib import Path
import hermes_state
db = hermes_state.SessionDB(db_path=Path(sys.argv[1]))
"""


def _script(code: str) -> str:
    body = textwrap.indent(textwrap.dedent(code), "    ")
    return PRELUDE + "try:\n" + body + "\nfinally:\n    db.close()\n"


def _env() -> dict:
    home = tempfile.mkdtemp(prefix="hermes-env-")
    return _fixture_module()._isolated_env(Path(home))


def hermes(store: Store, code: str, version: str = "0.19.0") -> str:
    """Run ``code`` under the real release with ``db`` = its ``SessionDB`` on the
    store; returns stdout. Raises with stderr on failure."""
    proc = subprocess.run([str(release_python(version)), "-c", _script(code), str(store.path)],
                          capture_output=True, text=True, env=_env(), timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"hermes {version} snippet failed:\n{proc.stderr}")
    return proc.stdout


def hermes_background(store: Store, code: str, version: str = "0.19.0") -> subprocess.Popen:
    """Start ``code`` under the real release and wait for it to print READY.
    The caller kills it (``proc.kill(); proc.wait()``)."""
    proc = subprocess.Popen([str(release_python(version)), "-c", _script(code), str(store.path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    line = proc.stdout.readline().strip()
    if line != "READY":
        proc.kill()
        raise RuntimeError(f"background hermes did not get ready ({line!r}):\n{proc.stderr.read()}")
    return proc


def own_pidns() -> str | None:
    """Our PID namespace id, as upstream stamps it (``pidns=<inode>``)."""
    try:
        link = os.readlink("/proc/self/ns/pid")
    except OSError:
        return None
    return link.split("[")[-1].rstrip("]")


def dead_pid() -> int:
    """A pid that certainly ran and is gone now (a reaped child)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def files_aged(store, seconds=10):
    """Set the store's file times back (``os.utime``: metadata only, no descriptor), so
    what a page reads under them may be kept (``memo.settled``: nothing read under file
    times of the last second is)."""
    for path in (store.path, Path(f"{store.path}-wal")):
        if path.exists():
            st = path.stat()
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - int(seconds * 1e9)))
