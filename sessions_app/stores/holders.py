"""Who holds a lease or a lock, and whether that process still runs.

Holder strings of turn leases and compression locks (docs/store.md §7.1–§7.3:
``pid=12:pidns=4026531836:turn=7:platform=telegram``, 0.19.0 compression locks
``pid=…:tid=…:agent=…:nonce=…``) and the registry's pid plus start time (§7.5). The
policy is Hermes' STRICT one: on Linux a pid is probed only when the holder carries a
``pidns=`` equal to ours; any doubt counts as alive.
"""

from __future__ import annotations

import os
import re
import sys

import psutil

# Registry start times are compared within this many seconds (psutil's own rounding).
START_TIME_TOLERANCE = 0.001
_PID_RE = re.compile(r"(?:^|:)pid=(\d+)(?::|$)")
_PIDNS_RE = re.compile(r"(?:^|:)pidns=(\d+)(?::|$)")


def _local_pid_namespace() -> tuple[bool, str | None]:
    """``(supported, id)``: Linux has PID namespaces (id = inode of
    /proc/self/ns/pid, None if unreadable); other platforms do not."""
    if sys.platform != "linux":
        return False, None
    try:
        link = os.readlink("/proc/self/ns/pid")
    except OSError:
        return True, None
    match = re.search(r"\[(\d+)\]", link)
    return True, (match.group(1) if match else None)


def holder_pid(holder: str | None) -> int | None:
    """The ``pid=<n>`` of a holder string (``pid=12:tid=..:nonce=..``), or None."""
    match = _PID_RE.search(holder or "")
    return int(match.group(1)) if match else None


def parse_holder(holder: str | None) -> dict:
    """The ``key=value`` tokens of a holder string, e.g.
    ``pid=12:pidns=4026531836:turn=7:platform=telegram`` -> ``{"pid": "12", ...}``
    (turn leases: pid, optional pidns, turn, platform; compression locks: pid,
    tid, agent, nonce). ``pidns`` is the holder's PID namespace (host namespace);
    ``pidns_here`` says whether it is ours (None when unstamped or not Linux)."""
    fields: dict = {}
    for token in (holder or "").split(":"):
        key, sep, value = token.partition("=")
        if sep and key and key not in fields:
            fields[key] = value
    supported, local = _local_pid_namespace()
    fields["pidns_here"] = (fields["pidns"] == local) if supported and local and "pidns" in fields else None
    return fields


def holder_checkable(holder: str | None) -> bool:
    """May this holder's pid be probed here? STRICT policy of docs/store.md §7.1."""
    supported, local = _local_pid_namespace()
    if not supported:
        return True
    match = _PIDNS_RE.search(holder or "")
    if match is None or local is None:
        return False
    return match.group(1) == local


def holder_is_dead(holder: str | None) -> bool | None:
    """True when the holder's process is provably gone, False when it runs,
    None when it may not be probed (no pid, foreign or missing pidns stamp)."""
    pid = holder_pid(holder)
    if pid is None:
        return None
    if pid == os.getpid():
        return False
    if not holder_checkable(holder):
        return None
    return not psutil.pid_exists(pid)


def process_matches(pid, start_time) -> bool:
    """Registry liveness (docs/store.md §7.5): the pid runs and, when a start time was
    recorded, psutil's ``create_time`` equals it within 1 ms. Unreadable start
    time of a running pid counts as alive (any doubt = alive)."""
    try:
        pid = int(pid)
    except (TypeError, ValueError):
        return False
    if pid <= 0 or not psutil.pid_exists(pid):
        return False
    if start_time in (None, ""):
        return True
    try:
        expected = float(start_time)
    except (TypeError, ValueError):
        return True
    try:
        actual = psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True
    return abs(actual - expected) < START_TIME_TOLERANCE
