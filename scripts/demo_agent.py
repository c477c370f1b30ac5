"""A live Hermes process for the demo home: holds one session's compression lock.

    .venv/bin/python scripts/demo_agent.py DEMO_HOME     # started by scripts/dashboard.sh

Why: the delete guard and the repairs' liveness refusal are only visible when an
agent holds a session. This process is that agent: it re-executes itself under the
hermes-agent release named in the demo's marker (``<home>/.hermes-admin-demo``,
written by ``scripts/demo_home.py``), takes the compression lock of the marker's
session through the release's own ``SessionDB.try_acquire_compression_lock``
(holder in 0.19.0's ``pid=…:tid=…:agent=…:nonce=…`` form) with a TTL of 12 hours,
refreshes it every 6 hours, and releases it when it stops.

Why so long (Hermes' own default is 300 s, refreshed every minute): each take or
refresh is a real write to the store, and the pages say "store changed N s after
this check" after any write, so a minute's refresh would bring that notice back
within a minute of every Re-check. One write at start, then one per 6 hours, keeps
the session live without making the notice permanent; ``scripts/dashboard.sh``
checks the demo after this process says READY, so the first pass already sees the
lock.

It stops on SIGTERM/SIGINT/SIGHUP (``dashboard.sh``'s trap) and when its parent
process is gone (``dashboard.sh`` ends by ``exec``-ing the server, so the server
is the parent; when it exits this process is re-parented and notices). A lock left
by an earlier run that was killed outright is released first when its holder pid
no longer runs. Prints one line starting ``READY`` once the lock is held.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

MARKER = ".hermes-admin-demo"
TTL_SECONDS = 12 * 3600.0  # see the docstring: a refresh is a write the pages notice
REFRESH_SECONDS = 6 * 3600.0


def _marker(home: Path) -> dict:
    try:
        return json.loads((home / MARKER).read_text(encoding="utf-8"))["live_agent"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SystemExit(f"demo_agent: {home} is not a demo home ({exc})") from None


def _reexec(agent: dict, home: Path) -> None:
    """Run this script again under the release's python (same pid)."""
    python = agent.get("python") or ""
    if not os.access(python, os.X_OK):
        raise SystemExit(f"demo_agent: no hermes-agent {agent.get('release')} python at {python!r}; "
                         "rebuild the demo home (manage.py make_demo_home --force)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HERMES_", "PYTHON"))}
    env["HERMES_HOME"] = tempfile.mkdtemp(prefix="hermes-demo-agent-")  # never ~/.hermes
    env["DEMO_AGENT_PARENT"] = str(os.getppid())
    os.execve(python, [python, os.path.abspath(__file__), str(home)], env)


def _holder_alive(holder: str) -> bool:
    import psutil  # installed beside every release venv

    for token in (holder or "").split(":"):
        key, _, value = token.partition("=")
        if key == "pid" and value.isdigit():
            return psutil.pid_exists(int(value))
    return True  # no pid to probe: assume it runs


def hold(home: Path) -> int:
    agent = _marker(home)
    import hermes_state  # the release's, after _reexec

    sid, store = agent["session_id"], Path(agent["store"])
    parent = int(os.environ.get("DEMO_AGENT_PARENT") or os.getppid())
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    db = hermes_state.SessionDB(db_path=store)
    # hermes-agent 0.19.0 agent/conversation_compression.py _compression_lock_holder
    holder = f"pid={os.getpid()}:tid={threading.get_ident()}:agent={id(db):x}:nonce={uuid.uuid4().hex[:8]}"
    try:
        if not db.try_acquire_compression_lock(sid, holder, ttl_seconds=TTL_SECONDS):
            old = db.get_compression_lock_holder(sid)
            if old and not _holder_alive(old):
                db.release_compression_lock(sid, old)  # our own earlier run, killed outright
            if not db.try_acquire_compression_lock(sid, holder, ttl_seconds=TTL_SECONDS):
                print(f"demo_agent: the compression lock on {sid} is held by {old!r}", file=sys.stderr)
                return 1
        print(f"READY demo agent (pid {os.getpid()}, hermes-agent {agent.get('release')}) holds the "
              f"compression lock of session {sid} in profile {agent.get('profile')}", flush=True)
        next_refresh = time.monotonic() + REFRESH_SECONDS
        while not stop.wait(1.0):
            if os.getppid() != parent:
                break  # the dashboard is gone
            if time.monotonic() >= next_refresh:
                db.refresh_compression_lock(sid, holder, ttl_seconds=TTL_SECONDS)
                next_refresh = time.monotonic() + REFRESH_SECONDS
    finally:
        db.release_compression_lock(sid, holder)
        db.close()
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: demo_agent.py DEMO_HOME", file=sys.stderr)
        return 2
    home = Path(argv[0]).resolve()
    try:
        import hermes_state  # noqa: F401
    except ImportError:
        _reexec(_marker(home), home)
    return hold(home)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
