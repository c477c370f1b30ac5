"""A run lock in the dashboard's data folder, shared by commands and browser jobs.

``fcntl.flock`` on ``<data>/locks/<name>.lock`` (our own file, never a store's):
the kernel drops it when the holder dies, so a killed run never leaves a stale
lock. The holder writes who it is into the file so a second run can say so.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings


class RunLocked(Exception):
    """Another run holds the lock; ``holder`` is what it wrote (dict, maybe empty)."""

    def __init__(self, holder: dict):
        self.holder = holder
        who = ", ".join(f"{k} {v}" for k, v in holder.items()) or "unknown holder"
        super().__init__(f"another heal run is in progress ({who})")


def lock_path(name: str) -> Path:
    return Path(settings.DATA_DIR) / "locks" / f"{name}.lock"


@contextmanager
def run_lock(name: str = "heal", label: str = ""):
    """Hold the named lock for the block. Raises :class:`RunLocked` when taken,
    ``OSError`` when the data folder cannot be written."""
    path = lock_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        try:
            holder = json.loads(handle.read() or "{}")
        except ValueError:
            holder = {}
        handle.close()
        raise RunLocked(holder) from None
    try:
        handle.seek(0)
        handle.truncate()
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%d %H:%M:%S"),
                  "by": label or " ".join(sys.argv[:3])}
        handle.write(json.dumps(holder))
        handle.flush()
        yield holder
    finally:
        handle.seek(0)
        handle.truncate()
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()
