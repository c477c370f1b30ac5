"""Liveness evidence: may a Hermes process still be working on a session?

Ground rule 6 (docs/architecture.md §2) says: before writing to a session, look for live
evidence and refuse when there is some. The checks use the same evidence to stay
quiet about sessions an agent may still be writing (``unanswered_turn``,
``stale_open`` ...). Signals, following docs/store.md §7:

- ``turn_lease``: an unexpired ``session_turn_leases`` row on the session's
  compression-lineage ROOT (4.1; the key is the root, so one lease covers the
  whole chain);
- ``compression_lock``: an unexpired ``compression_locks`` row on the session (4.2);
- ``registry``: a ``runtime/active_sessions.json`` entry whose process is alive
  and whose ``process_start_time`` matches within 1 ms (4.4); an unreadable
  registry fails closed (every session "maybe live");
- ``gateway``: a live ``gateway_heartbeats`` backend together with a
  ``gateway_routing`` entry whose ``entry_json`` names the session (4.6);
- ``activity``: newest message, ``last_activity_at`` or ``started_at`` within
  ``idle_seconds`` (docs/store.md §4.1 "Activity").

Verdict: any blocking evidence -> ``live``; only non-blocking evidence (recent
activity, an unexpired lease whose holder is provably dead, an unreadable
registry) -> ``maybe_live``; nothing -> ``not_live``.

Holder probing mirrors upstream ``hermes_state_pidns.holder_pid_checkable``
(STRICT policy for TTL rows, docs/store.md §7.1): our own pid is never "dead"; on
Linux a holder is probed only when it carries a ``pidns=`` stamp equal to our PID
namespace, otherwise only its TTL counts. Any doubt = alive.

Nothing here writes or opens ``state.db`` as a file; the registry JSON is read
with plain file I/O (it is not a SQLite file).

Times are epoch seconds (float); ages and TTLs are seconds.
"""

from __future__ import annotations

import os
import socket
import sqlite3
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

import psutil
from django.conf import settings

from .discovery import within
from .holders import (  # noqa: F401  (part of this module's public names)
    holder_checkable, holder_is_dead, holder_pid, parse_holder, process_matches,
)
from .jsondecode import Undecodable, read_json_file
from .lineage import DOWN_CAP, UP_CAP, Lineage
from .schema import Capabilities
from ..timefmt import human_duration, is_number

# How fresh a gateway heartbeat must be to count (seconds). Upstream's window was
# not found in the files read (docs/store.md §7.6); five minutes matches the lease TTL.
HEARTBEAT_FRESH_SECONDS = 300
# Timestamps further in the future than this are garbage (docs/store.md §13 row 21) and
# must not make a session look active forever.
FUTURE_SLACK_SECONDS = 86400
# The registry is a small JSON document (a few entries per live surface); one
# larger than this is not a registry Hermes wrote and is reported unreadable.
REGISTRY_MAX_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class Evidence:
    """One reason to think a session may be live.

    ``source``: ``turn_lease`` | ``compression_lock`` | ``registry`` | ``gateway``
    | ``activity`` (| ``unknown`` when a caller could not read the evidence at all). ``age_seconds``: seconds since the evidence was produced
    (lease acquired, registry entry started, heartbeat, last activity) or None.
    ``holder_pid``: the process named by the evidence, if any. ``holder_dead``:
    True = provably dead, False = alive, None = not probed / not applicable.
    ``blocks``: True when this evidence alone makes the session ``live``.
    ``holder``: the raw holder string of a lease or lock (see :func:`parse_holder`).
    """

    source: str
    detail: str
    age_seconds: float | None = None
    holder_pid: int | None = None
    holder_dead: bool | None = None
    blocks: bool = False
    holder: str = ""

    @property
    def holder_fields(self) -> dict:
        return parse_holder(self.holder)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Liveness:
    """Verdict for one session: ``live`` | ``maybe_live`` | ``not_live``, plus why."""

    verdict: str
    evidence: list[Evidence] = field(default_factory=list)

    @property
    def live(self) -> bool:
        return self.verdict == "live"


def verdict_of(evidence: list[Evidence]) -> str:
    """The verdict rule of the module docstring."""
    if any(e.blocks for e in evidence):
        return "live"
    return "maybe_live" if evidence else "not_live"


class LiveIndex(dict):
    """``session_id -> list[Evidence]`` for sessions with any evidence.

    ``store_wide`` holds evidence that applies to every session of the store
    (an unreadable registry). Use :meth:`evidence` / :meth:`verdict` rather than
    plain indexing so that store-wide evidence is included.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.store_wide: list[Evidence] = []

    def add(self, session_id: str, item: Evidence) -> None:
        if session_id:
            self.setdefault(session_id, []).append(item)

    def evidence(self, session_id: str) -> list[Evidence]:
        return list(self.get(session_id, ())) + self.store_wide

    def verdict(self, session_id: str) -> str:
        return verdict_of(self.evidence(session_id))


# --------------------------------------------------------------------------- signals

def _lease_evidence(source: str, key: str, holder: str, acquired_at, expires_at, now: float) -> Evidence:
    """Evidence for an UNEXPIRED lease/lock row; blocks unless its holder is provably dead."""
    dead = holder_is_dead(holder)
    pid = holder_pid(holder)
    label = "turn lease" if source == "turn_lease" else "compression lock"
    remaining = float(expires_at) - now
    if dead:
        detail = f"{label} on {key} held by pid {pid}, which is no longer running (expires in {human_duration(remaining)})"
    elif dead is None and pid is not None:
        # Without a PID-namespace stamp equal to ours, pid N here may be another
        # process (a container, another host sharing the folder): say so plainly.
        detail = (f"{label} on {key} held by pid {pid}, which cannot be checked from here (the holder does not "
                  f"show it runs on this machine, where pid {pid} may be another process); "
                  f"expires in {human_duration(remaining)}")
    else:
        detail = f"{label} on {key} held by {holder!r}, expires in {human_duration(remaining)}"
    age = now - float(acquired_at) if is_number(acquired_at) else None
    return Evidence(source, detail, age, pid, dead, blocks=not dead, holder=holder or "")


def _lease_rows(conn: sqlite3.Connection, caps: Capabilities, table: str, key_col: str, now: float,
                keys: list[str] | None = None):
    """Unexpired rows of a lease table as ``(key, holder, acquired_at, expires_at)``."""
    if not all(caps.has(table, c) for c in (key_col, "holder", "acquired_at", "expires_at")):
        return []
    sql = f"SELECT {key_col}, holder, acquired_at, expires_at FROM {table} WHERE expires_at > ?"
    params: list = [now]
    if keys is not None:
        if not keys:
            return []
        sql += f" AND {key_col} IN ({','.join('?' * len(keys))})"
        params += keys
    # +Inf (or 1e300) stays: Hermes' own ``expires_at > now`` holds for it, so it is a
    # lease that never expires, live evidence like any other (docs/store.md §7.1).
    return [r for r in conn.execute(sql, params) if is_number(r[3], finite=False)]


def registry_path(store) -> Path:
    """``<profile home>/runtime/active_sessions.json`` (docs/store.md §1.3/§7.5)."""
    return store.profile.home / "runtime" / "active_sessions.json"


def read_registry(store) -> tuple[list[dict], str | None]:
    """Registry entries and an error text (None when readable or absent).

    The file is replaced atomically upstream (``os.replace``), so reading it
    without its flock sees a whole document.
    """
    path = registry_path(store)
    if os.path.lexists(path) and not within(path, store.profile.root):
        # A link out of the root (docs/store.md §1.2, §5.2: symlinks): never read.
        return [], f"it resolves to {os.path.realpath(path)}, outside the root {store.profile.root}; not read"
    try:
        data = read_json_file(path, max_bytes=REGISTRY_MAX_BYTES)
    except FileNotFoundError:
        return [], None
    except OSError as exc:
        return [], f"{type(exc).__name__}: {exc}"
    if isinstance(data, Undecodable):
        return [], str(data)
    entries = data.get("entries") if isinstance(data, dict) else data
    if not isinstance(entries, list):
        return [], "no 'entries' list"
    return [e for e in entries if isinstance(e, dict)], None


def _wanted(only) -> set[str] | None:
    """``only`` (one session id, a collection of them, or None for all) as a set."""
    return None if only is None else {only} if isinstance(only, str) else set(only)


def _registry_items(store, now: float, wanted: set[str] | None) -> tuple[list[Evidence], list[tuple[str, Evidence]]]:
    """The registry's evidence as ``(store-wide items, [(session id, item)])``: an
    unreadable registry is store-wide, a live entry names its sessions."""
    entries, error = read_registry(store)
    if error is not None:
        return [Evidence(
            "registry",
            f"runtime/active_sessions.json is unreadable ({error}); every session may be open somewhere",
        )], []
    found = []
    for entry in entries:
        ids = {entry.get("session_id")}
        metadata = entry.get("metadata")
        if isinstance(metadata, dict):
            ids.add(metadata.get("live_session_id"))
        ids = {str(i) for i in ids if i}
        if wanted is not None and not ids & wanted:
            continue
        if not process_matches(entry.get("pid"), entry.get("process_start_time")):
            continue
        started = entry.get("started_at")
        age = now - float(started) if is_number(started) else None
        pid = entry.get("pid") if isinstance(entry.get("pid"), int) else None
        surface = entry.get("surface") or "?"
        for sid in ids:
            found.append((sid, Evidence("registry", f"open in a live {surface} surface (pid {pid})", age, pid,
                                        False, True)))
    return [], found


def _registry_evidence(store, now: float, index: LiveIndex, only=None) -> None:
    wanted = _wanted(only)
    store_wide, found = _registry_items(store, now, wanted)
    index.store_wide.extend(store_wide)
    for sid, item in found:
        index.add(sid, item)
    watch = _registry_watch.get()
    if watch is not None:
        watch.saw(store, wanted, store_wide, found)


class RegistryWatch:
    """What a write's check read from the registry, to be read again right before its
    writer opens (:func:`watching_registry`).

    The registry is read before the write lock (docs/architecture.md §5.1, step 6),
    but a write's backup can take minutes between that read and the lock: an agent
    that opens the session meanwhile must still refuse the write (ground rule 6).
    """

    def __init__(self):
        self.stores: dict[str, tuple[object, set[str] | None, set[tuple]]] = {}

    def saw(self, store, wanted, store_wide, found) -> None:
        key = str(store.path)
        _, ids, seen = self.stores.get(key, (store, set(), set()))
        ids = None if ids is None or wanted is None else ids | wanted
        seen |= {(None, e.detail) for e in store_wide} | {(sid, e.detail) for sid, e in found}
        self.stores[key] = (store, ids, seen)

    def appeared(self, now: float) -> list[tuple[str | None, Evidence]]:
        """Registry evidence for the watched sessions that was not there when they were
        checked, read again now: ``[(session id or None for store-wide, item)]``."""
        new = []
        for store, ids, seen in self.stores.values():
            store_wide, found = _registry_items(store, now, ids)
            new += [(None, e) for e in store_wide if (None, e.detail) not in seen]
            new += [(sid, e) for sid, e in found if (sid, e.detail) not in seen]
        return new


# The watch of the check running in this thread (or task), if any: set by
# watching_registry around a write's read-only check, so every liveness read it
# makes — through whichever action's plan — is seen without each passing it along.
_registry_watch: ContextVar[RegistryWatch | None] = ContextVar("registry_watch", default=None)


@contextmanager
def watching_registry() -> Iterator[RegistryWatch]:
    """Record the registry reads made inside the block into a :class:`RegistryWatch`."""
    watch = RegistryWatch()
    token = _registry_watch.set(watch)
    try:
        yield watch
    finally:
        _registry_watch.reset(token)


def _live_backends(conn: sqlite3.Connection, caps: Capabilities, now: float) -> list[tuple]:
    """``(backend_id, pid, last_heartbeat)`` of backends that heartbeat recently and
    whose process runs (or cannot be probed from this host)."""
    if not all(caps.has("gateway_heartbeats", c) for c in ("backend_id", "pid", "last_heartbeat")):
        return []
    host_col = "host" if caps.has("gateway_heartbeats", "host") else "''"
    rows = conn.execute(
        f"SELECT backend_id, pid, last_heartbeat, {host_col} FROM gateway_heartbeats WHERE last_heartbeat > ?",
        (now - HEARTBEAT_FRESH_SECONDS,),
    ).fetchall()
    here = socket.gethostname()
    alive = []
    for backend, pid, beat, host in rows:
        if host and host != here:
            alive.append((backend, pid, beat))  # another host: its pid means nothing here
        elif isinstance(pid, int) and (pid == os.getpid() or psutil.pid_exists(pid)):
            alive.append((backend, pid, beat))
    return alive


def _routing_sql(caps: Capabilities) -> str | None:
    if not caps.has("gateway_routing", "entry_json"):
        return None
    return ("SELECT session_key, json_extract(entry_json, '$.session_id') FROM gateway_routing "
            "WHERE json_valid(entry_json)")


# Store path -> (file signature, {session id: [(session_key, session id)]}): the
# routing entries of a store as of one file state, for session pages (see
# _routing_rows).
_routing_cache: dict[str, tuple[tuple, dict]] = {}


def _routing_rows(conn, caps, only, store=None):
    """``(session_key, session id)`` of the routing entries naming ``only`` (or all;
    with ``store``, ``only`` may be a collection of session ids: a list page).

    With ``store`` (pages that show a session's liveness: ``cached_routing``), the
    entries are read once per file state of the store (``Store.signature``, taken
    before the read, so a write during it makes the next look read again; not kept
    while the files are less than a second old, ``Store.settled``) and
    looked up by session id: finding one session's entries means parsing every
    ``entry_json`` (no index can hold it), ~10 ms on a store with 5,000 routes,
    twice per session page. The same rows, in the same order, as the filtered query.
    A guarded write's re-check never passes ``store``: it reads inside its transaction."""
    sql = _routing_sql(caps)
    if only is None:
        return conn.execute(sql)
    if store is None:
        return conn.execute(sql + " AND json_extract(entry_json, '$.session_id') = ?", (only,))
    key, signature = str(store.path), store.signature()
    found = _routing_cache.get(key)
    if found is None or found[0] != signature:
        by_sid: dict = {}
        for row in conn.execute(sql):
            by_sid.setdefault(row[1], []).append(tuple(row))
        found = (signature, by_sid)
        if store.settled(signature):
            _routing_cache[key] = found
    if isinstance(only, str):
        return found[1].get(only, [])
    return [row for sid in sorted(set(only)) for row in found[1].get(sid, [])]  # a list page's ids


def _gateway_evidence(conn, caps, now: float, index: LiveIndex, only=None, store=None) -> None:
    if _routing_sql(caps) is None:
        return
    if not caps.has_table("gateway_heartbeats"):
        # Releases up to 0.19.0 record no heartbeats (docs/store.md §3.2): a routing entry
        # is then the only trace of a gateway that may still route to the session.
        for key, sid in _routing_rows(conn, caps, only, store):
            if isinstance(sid, str) and sid:
                index.add(sid, Evidence(
                    "gateway", f"routed by gateway key {key}; this store keeps no heartbeats to tell "
                    "whether that gateway still runs", None, None, None, False))
        return
    backends = _live_backends(conn, caps, now)
    if not backends:
        return
    backend, pid, beat = backends[0]
    for key, sid in _routing_rows(conn, caps, only, store):
        if isinstance(sid, str) and sid:
            index.add(sid, Evidence(
                "gateway", f"routed by gateway key {key} while backend {backend} (pid {pid}) heartbeats",
                now - float(beat) if is_number(beat) else None, pid, False, True))


def _activity_sql(caps: Capabilities) -> str:
    return "COALESCE(last_activity_at, started_at)" if caps.has("sessions", "last_activity_at") else "started_at"


def _activity_evidence(conn, caps, now: float, idle: float, index: LiveIndex, only=None,
                       closed_counts: bool = True) -> None:
    """Sessions with a message, ``last_activity_at`` or start within ``idle`` seconds.

    Bounded above by now + FUTURE_SLACK_SECONDS so garbage future timestamps (and
    TEXT timestamps, which sort after every number) do not count.
    ``closed_counts=False`` (deletion): a session its writer ended at or after
    its newest activity (``ended_at`` >= newest message / activity stamp) is
    not evidence; the writer declared it finished, and a surface that still has
    it open shows up in the registry instead.
    """
    newest = _newest_activity(conn, caps, now, idle, only)
    _add_activity(index, newest if closed_counts else _drop_closed(conn, newest), now, idle)


def _newest_activity(conn, caps, now: float, idle: float, only=None) -> dict[str, float]:
    """Session id -> its newest activity stamp within ``idle`` seconds (and at most
    FUTURE_SLACK_SECONDS ahead), for :func:`_activity_evidence`."""
    low, high = now - idle, now + FUTURE_SLACK_SECONDS
    where_m, where_s, params = "", "", ()
    wanted = _wanted(only)
    if wanted is not None:
        if not wanted:
            return {}
        marks = ",".join("?" * len(wanted))  # a session or a list page's: index seeks only
        where_m, where_s, params = f" AND session_id IN ({marks})", f" AND id IN ({marks})", tuple(sorted(wanted))
    newest: dict[str, float] = {}
    # idx_messages_session (session_id, timestamp) covers this scan.
    for sid, ts in conn.execute(
        f"SELECT session_id, MAX(timestamp) FROM messages WHERE timestamp > ? AND timestamp <= ?{where_m} "
        "GROUP BY session_id", (low, high, *params)):
        newest[sid] = float(ts)
    expr = _activity_sql(caps)
    # idx_sessions_effective_activity / idx_sessions_started serve this range.
    for sid, ts in conn.execute(
        f"SELECT id, {expr} FROM sessions WHERE {expr} > ? AND {expr} <= ?{where_s}", (low, high, *params)):
        newest[sid] = max(newest.get(sid, 0.0), float(ts))
    return newest


def _drop_closed(conn, newest: dict[str, float]) -> dict[str, float]:
    """``newest`` without the sessions whose ``ended_at`` is at or after their newest
    activity (deletion's view, ``closed_counts=False``); a new dict."""
    newest = dict(newest)
    ids = list(newest)
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        for sid, ended in conn.execute(
                f"SELECT id, ended_at FROM sessions WHERE id IN ({','.join('?' * len(chunk))})", chunk):
            if is_number(ended) and float(ended) >= newest.get(sid, float("inf")):
                newest.pop(sid, None)
    return newest


def _add_activity(index: LiveIndex, newest: dict[str, float], now: float, idle: float) -> None:
    for sid, ts in newest.items():
        age = max(0.0, now - ts)
        index.add(sid, Evidence("activity", f"active {human_duration(age)} ago (idle after {human_duration(idle)})", age))


def idle_seconds_setting() -> float:
    """``settings.HERMES_IDLE_SECONDS`` (default 3600 s)."""
    return float(getattr(settings, "HERMES_IDLE_SECONDS", 3600))


# --------------------------------------------------------------------------- public API

def _turn_lease_evidence(conn, caps: Capabilities, now: float, index: LiveIndex,
                         wanted: set[str] | None = None) -> None:
    """Every unexpired turn lease (a few rows, read whole) as evidence for each session of
    the compression chain below its key (docs/store.md §7.1: the key is the lineage
    root), or for those of them in ``wanted``. The walk is per lease row, never per session."""
    leases = _lease_rows(conn, caps, "session_turn_leases", "conversation_id", now)
    if not leases:
        return
    lineage = Lineage(conn, caps.columns("sessions"))
    for key, holder, acquired, expires in leases:
        item = _lease_evidence("turn_lease", key, holder, acquired, expires, now)
        for sid in compression_descendants(lineage, key):
            if wanted is None or sid in wanted:
                index.add(sid, item)


def live_sessions(store, conn: sqlite3.Connection, caps: Capabilities, now: float,
                  idle_seconds: float | None = None) -> LiveIndex:
    """Evidence for every session that has some, one query per signal.

    Returns a :class:`LiveIndex` (a dict ``session_id -> list[Evidence]`` plus
    store-wide evidence). A turn lease is expanded to the whole compression
    chain of its key (docs/store.md §7.1: the key is the lineage root); the walk is
    per lease row, never per session.
    """
    idle = idle_seconds_setting() if idle_seconds is None else float(idle_seconds)
    index = LiveIndex()
    _turn_lease_evidence(conn, caps, now, index)
    for key, holder, acquired, expires in _lease_rows(conn, caps, "compression_locks", "session_id", now):
        index.add(key, _lease_evidence("compression_lock", key, holder, acquired, expires, now))
    _registry_evidence(store, now, index)
    _gateway_evidence(conn, caps, now, index)
    _activity_evidence(conn, caps, now, idle, index)
    return index


def page_index(store, conn: sqlite3.Connection, caps: Capabilities, session_ids, now: float,
               idle_seconds: float | None = None) -> LiveIndex:
    """Evidence for a page of sessions (the sessions list's liveness column), the same
    signals as :func:`live_sessions` for these ``session_ids`` only: leases and locks
    read whole (a few unexpired rows), the registry read once, gateway routes from the
    per-file-state cache (``_routing_rows``), activity by index seeks of these ids.
    Activity of a session its writer has since ended is no evidence (deletion's view,
    ``closed_counts=False``): the list says such a session *ended*. A cost per page
    and store, never per row: no process is probed twice for one page."""
    wanted = set(session_ids)
    idle = idle_seconds_setting() if idle_seconds is None else float(idle_seconds)
    index = LiveIndex()
    if not wanted:
        return index
    _turn_lease_evidence(conn, caps, now, index, wanted)
    for key, holder, acquired, expires in _lease_rows(conn, caps, "compression_locks", "session_id", now,
                                                       sorted(wanted)):
        index.add(key, _lease_evidence("compression_lock", key, holder, acquired, expires, now))
    _registry_evidence(store, now, index, only=wanted)
    _gateway_evidence(conn, caps, now, index, only=wanted, store=store)
    _activity_evidence(conn, caps, now, idle, index, only=wanted, closed_counts=False)
    return index


def compression_descendants(lineage: Lineage, key: str) -> list[str]:
    """``key`` and every session below it through compression edges (all of them,
    not only upstream's preferred continuation), so that a session is covered
    exactly when a lease sits on itself or on a compression ancestor — the same
    rule :func:`lineage_keys` applies from below. Bounded by the lineage caps."""
    found, queue = [key], [key]
    seen = {key}
    while queue and len(found) < DOWN_CAP:
        current = queue.pop(0)
        for child in lineage.children(current):
            if child["edge"] == "compression" and child["id"] not in seen:
                seen.add(child["id"])
                found.append(child["id"])
                queue.append(child["id"])
    return found


def lineage_keys(conn: sqlite3.Connection, caps: Capabilities, session_id: str) -> list[str]:
    """The session and its compression ancestors up to the root (docs/store.md §7.1
    ``_session_turn_lease_key_on_conn``); a lease on any of them covers it."""
    lineage = Lineage(conn, caps.columns("sessions"))
    keys, node = [session_id], lineage.get(session_id)
    for _ in range(UP_CAP):
        parent = lineage.parent(node) if node else None
        if not parent or parent.get("missing") or parent["edge"] != "compression" or parent["id"] in keys:
            break
        keys.append(parent["id"])
        node = parent
    return keys


def evidence_for(store, conn: sqlite3.Connection, caps: Capabilities, session_id: str, now: float,
                 idle_seconds: float | None = None, closed_counts: bool = True,
                 cached_routing: bool = False, registry: bool = True) -> Liveness:
    """Liveness of one session (same signals as :func:`live_sessions`).

    ``closed_counts=False`` is deletion's view: recent activity of a session
    that its writer has since ended is not evidence (see ``_activity_evidence``).
    ``cached_routing``: gateway routes as of the store's current file state
    (``_routing_rows``), for pages; never for a write's own re-check.
    ``registry=False``: only what the store holds (a write's re-check inside its
    transaction, after the registry file was read before the lock).
    """
    index = index_for(store, conn, caps, session_id, now, idle_seconds, closed_counts, cached_routing, registry)
    evidence = index.evidence(session_id)
    return Liveness(verdict_of(evidence), evidence)


def index_for(store, conn: sqlite3.Connection, caps: Capabilities, session_id: str, now: float,
              idle_seconds: float | None = None, closed_counts: bool = True,
              cached_routing: bool = False, registry: bool = True) -> LiveIndex:
    """A :class:`LiveIndex` holding only ``session_id``'s evidence (session page;
    ``cached_routing`` and ``registry`` as in :func:`evidence_for`)."""
    return _indexes_for(store, conn, caps, session_id, now, idle_seconds, (closed_counts,), cached_routing,
                        registry)[0]


def page_indexes(store, conn: sqlite3.Connection, caps: Capabilities, session_id: str, now: float,
                 idle_seconds: float | None = None, cached_routing: bool = False) -> tuple[LiveIndex, LiveIndex]:
    """``(index_for(closed_counts=True), index_for(closed_counts=False))`` of one
    session from one read of its leases, registry, routes and activity: the session
    page shows deletion's view and runs the session's checks on the other
    (issue 16: the two reads were the same statements twice). Raises what
    :func:`index_for` raises."""
    return tuple(_indexes_for(store, conn, caps, session_id, now, idle_seconds, (True, False), cached_routing, True))


def _indexes_for(store, conn, caps, session_id: str, now: float, idle_seconds, views, cached_routing: bool,
                 registry: bool) -> list[LiveIndex]:
    """One :class:`LiveIndex` per ``closed_counts`` value in ``views``, the signals
    read once (Evidence is frozen, so the indexes may share it)."""
    idle = idle_seconds_setting() if idle_seconds is None else float(idle_seconds)
    index = LiveIndex()
    if caps.has_table("session_turn_leases"):
        keys = lineage_keys(conn, caps, session_id)
        for key, holder, acquired, expires in _lease_rows(conn, caps, "session_turn_leases", "conversation_id", now, keys):
            index.add(session_id, _lease_evidence("turn_lease", key, holder, acquired, expires, now))
    for key, holder, acquired, expires in _lease_rows(conn, caps, "compression_locks", "session_id", now, [session_id]):
        index.add(session_id, _lease_evidence("compression_lock", key, holder, acquired, expires, now))
    if registry:
        _registry_evidence(store, now, index, only=session_id)
    _gateway_evidence(conn, caps, now, index, only=session_id, store=store if cached_routing else None)
    newest = _newest_activity(conn, caps, now, idle, only=session_id)
    out = []
    for closed_counts in views:
        view = LiveIndex({sid: list(items) for sid, items in index.items()})
        view.store_wide = list(index.store_wide)
        _add_activity(view, newest if closed_counts or not newest else _drop_closed(conn, newest), now, idle)
        out.append(view)
    return out
