"""Real processes holding a store's lock until killed (the two ways a reader is shut out).

- ``rollback``: the store is first switched to a rollback journal (``journal_mode=DELETE``,
  on the test's own copy, by the holder), then held in ``BEGIN EXCLUSIVE``;
- ``wal_exclusive``: a WAL store whose holder sets ``PRAGMA locking_mode=EXCLUSIVE``
  and writes once: from that write on it keeps the exclusive lock on the file, and no
  other connection can read it (SQLite's "locking_mode" documentation).

Each holder prints ``ready`` once it holds the lock and then sleeps until SIGKILLed,
so nothing it does on exit (a rollback, a checkpoint) releases the lock earlier.
Used by the tests and by ``bench/busy.py``.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

HOLDERS = {
    "rollback": (
        "import sqlite3, sys, time\n"
        "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "assert c.execute('PRAGMA journal_mode=DELETE').fetchone()[0] == 'delete'\n"
        "c.execute('BEGIN EXCLUSIVE')\n"
        "print('ready', flush=True)\n"
        "while True: time.sleep(60)\n"
    ),
    "wal_exclusive": (
        "import sqlite3, sys, time\n"
        "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "assert c.execute('PRAGMA journal_mode').fetchone()[0] == 'wal'\n"
        "c.execute('PRAGMA locking_mode=EXCLUSIVE')\n"
        "c.execute('UPDATE sessions SET title = title WHERE rowid = (SELECT MIN(rowid) FROM sessions)')\n"
        "print('ready', flush=True)\n"
        "while True: time.sleep(60)\n"
    ),
}


def start_holder(db: Path, kind: str) -> subprocess.Popen:
    """Start a holder of ``kind`` (a key of HOLDERS) on ``db``; returns once it holds
    the lock. Raises RuntimeError when it could not take it."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDERS[kind], str(db)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    if line != "ready":
        proc.kill()
        proc.wait(timeout=10)
        raise RuntimeError(f"lock holder {kind} on {db} failed: {proc.stderr.read()[-2000:]}")
    return proc


def stop_holder(proc: subprocess.Popen) -> None:
    """SIGKILL a holder started by :func:`start_holder` and reap it."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    for stream in (proc.stdout, proc.stderr):
        stream.close()


@contextmanager
def holding(*locks: tuple[Path, str]) -> Iterator[list[subprocess.Popen]]:
    """Hold each ``(db, kind)`` lock for the duration of the block."""
    procs: list[subprocess.Popen] = []
    try:
        for db, kind in locks:
            procs.append(start_holder(db, kind))
        yield procs
    finally:
        for proc in procs:
            stop_holder(proc)
