"""Token, API-call and cost figures of one store, by UTC day, source, model and task.

Where the figures live (docs/store.md, Usage and cost):

- ``sessions`` counters (every release from 0.13.0): ``input_tokens``,
  ``output_tokens``, ``cache_read_tokens``, ``cache_write_tokens``,
  ``reasoning_tokens``, ``api_call_count``, ``estimated_cost_usd``,
  ``actual_cost_usd``. Incremented per API call on the CLI path, overwritten with
  cumulative totals on the gateway path;
- ``session_model_usage`` (0.19.0 on): one row per (session, model, billing route,
  ``task``), written for incremental calls only: the main loop (``task = ''``),
  auxiliary calls (``vision``, ``compression``, ``title_generation``…, which never
  touch the counters) and, in newest upstream, per-turn routes such as
  ``voice_chat`` (which do).

So a row may or may not be in its session's counters, and a counter may hold
calls no row has (absolute updates). Per session and figure the total is therefore
the greater of the counter and the sum of all its rows: each row under its own model
and task, the positive remainder (counter minus rows) under ``sessions.model`` and
the main loop. This is Hermes' own reconciliation (0.19.0 and upstream
``agent/insights.py``), so the figures match ``hermes insights``; it never counts a
call twice, and like Hermes it hides an auxiliary call of a gateway session while
its counter is at least as large.

A session's figures count on the UTC day it started (the window Hermes' insights
uses); sessions whose ``started_at`` is not a number are in no period and counted
apart. A figure whose ``sessions`` column the store lacks is *missing* for that
store (``None``), never 0 (ground rule 8).

One set-based query per store (plus a count), read-only; results are cached under
the store's file signature (:meth:`Store.signature`), so a store is read again only
after it was written.
"""

from __future__ import annotations

import hashlib
import sqlite3
from dataclasses import dataclass, field

from django.core.cache import cache

from .store import Store

DAY = 86400
# (column, label); the column name is the same in sessions and session_model_usage.
FIGURES = (
    ("input_tokens", "input tokens"),
    ("output_tokens", "output tokens"),
    ("cache_read_tokens", "cache read tokens"),
    ("cache_write_tokens", "cache write tokens"),
    ("reasoning_tokens", "reasoning tokens"),
    ("api_call_count", "API calls"),
    ("estimated_cost_usd", "estimated cost (USD)"),
    ("actual_cost_usd", "actual cost (USD)"),
)
NAMES = tuple(name for name, _ in FIGURES)
# Hermes' "total tokens" (agent/insights.py): reasoning is part of output where reported.
TOTAL_PARTS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
CACHE_TTL = 3600  # seconds; the key changes with every write to the store anyway
END_OF_TIME = 253402300800.0  # 10000-01-01: "no upper bound"


@dataclass
class Row:
    """Figures of one (UTC day, source, model, task) of a store.

    ``day`` is days since the epoch (UTC); ``task`` is ``''`` for the main loop.
    ``sessions`` counts distinct sessions contributing to this row; ``actual_known``
    how many of its parts recorded an actual cost. ``values`` maps each name of
    :data:`NAMES` to a number, or None when the store lacks the figure.
    """

    day: int
    source: str
    model: str
    task: str
    sessions: int
    actual_known: int
    values: dict[str, float | int | None]

    @property
    def total_tokens(self) -> int | None:
        """Input + output + cache read + cache write (None when none is recorded)."""
        parts = [self.values[n] for n in TOTAL_PARTS if self.values.get(n) is not None]
        return sum(parts) if parts else None


@dataclass
class StoreUsage:
    """One store's usage in a period.

    ``rows``: :class:`Row` list; ``session_days``: ``(day, source) -> sessions``
    started then (each session once, whatever models it used); ``missing``: names
    of figures this store does not record (its ``sessions`` lacks the column);
    ``has_model_usage``: whether ``session_model_usage`` exists (the model and task
    breakdown is otherwise the session's own model); ``undated``: sessions whose
    ``started_at`` is not a number (in no period).
    """

    rows: list[Row] = field(default_factory=list)
    session_days: dict[tuple[int, str], int] = field(default_factory=dict)
    missing: tuple[str, ...] = ()
    has_model_usage: bool = False
    undated: int = 0

    def to_cache(self) -> tuple:
        """Plain tuples for the cache: Django's cache pickles, and unpickling one
        object per row cost 160 ms for the 6,842 rows of a 20,000-session store
        (tuples and rebuilding: 40 ms; docs/benchmarks.md, Usage page)."""
        rows = [(r.day, r.source, r.model, r.task, r.sessions, r.actual_known, *(r.values[n] for n in NAMES))
                for r in self.rows]
        return rows, self.session_days, self.missing, self.has_model_usage, self.undated

    @classmethod
    def from_cache(cls, data: tuple) -> "StoreUsage":
        rows, session_days, missing, has_model_usage, undated = data
        return cls([Row(day, source, model, task, sessions, actual, dict(zip(NAMES, values)))
                    for day, source, model, task, sessions, actual, *values in rows],
                   session_days, missing, has_model_usage, undated)


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def usage_sql(caps, source: str | None) -> str:
    """The store's usage query (parameters ``lo``, ``hi`` epoch seconds, ``source``).

    Columns: day, source, model, task, sessions, actual_known, then one per
    :data:`NAMES` (NULL for a figure the store lacks).
    """
    scols = set(caps.columns("sessions"))
    present = [n for n in NAMES if n in scols]
    model = "COALESCE(s.model, 'unknown')" if "model" in scols else "'unknown'"
    where = "s.started_at >= :lo AND s.started_at < :hi" + (" AND s.source = :source" if source is not None else "")
    # Counters as numbers (NULL = 0): Hermes' own readers do the same (COALESCE).
    counters = ", ".join(f"COALESCE(s.{_q(n)}, 0) AS {n}" for n in present)
    base = (f"SELECT s.id, COALESCE(s.source, '') AS source, {model} AS model, "
            f"CAST(s.started_at / {DAY} AS INTEGER) AS day"
            + (", s.actual_cost_usd IS NOT NULL AS actual_set" if "actual_cost_usd" in scols else ", 0 AS actual_set")
            + (f", {counters}" if counters else "") + f" FROM sessions s WHERE {where}")
    if not caps.has_table("session_model_usage"):
        figures = ", ".join(f"SUM({n})" if n in present else "NULL" for n in NAMES)
        return (f"WITH s AS ({base}) SELECT day, source, model, '' AS task, COUNT(*), SUM(actual_set), {figures} "
                f"FROM s GROUP BY day, source, model")
    ucols = set(caps.columns("session_model_usage"))
    task = "COALESCE(u.task, '')" if "task" in ucols else "''"  # before v22 every row is the main loop
    usum = ", ".join(f"SUM(COALESCE(u.{_q(n)}, 0)) AS {n}" if n in ucols else f"0 AS {n}" for n in present)
    actual_rows = "SUM(COALESCE(u.actual_cost_usd, 0) <> 0)" if "actual_cost_usd" in ucols else "0"
    rows = (f"SELECT u.session_id, u.model AS model, {task} AS task, {actual_rows} AS actual_set"
            + (f", {usum}" if usum else "")
            + f" FROM session_model_usage u JOIN s ON s.id = u.session_id GROUP BY u.session_id, u.model, {task}")
    # Every row of a session, whatever its task: the counters' remainder is what no row holds.
    held = ("SELECT session_id" + "".join(f", SUM({n}) AS {n}" for n in present)
            + " FROM u GROUP BY session_id")
    rest = {n: f"MAX(0, s.{n} - COALESCE(m.{n}, 0))" for n in present}
    keep = " OR ".join([f"{e} > 0" for e in rest.values()] + ["m.session_id IS NULL"])
    parts = (
        "SELECT s.day, s.source, u.model, u.task, u.session_id, u.actual_set"
        + "".join(f", u.{n}" for n in present) + " FROM u JOIN s ON s.id = u.session_id "
        "UNION ALL "
        "SELECT s.day, s.source, s.model, '', s.id, s.actual_set"
        + "".join(f", {e}" for e in rest.values())
        + f" FROM s LEFT JOIN m ON m.session_id = s.id WHERE {keep}"
    )
    figures = ", ".join(f"SUM({n})" if n in present else "NULL" for n in NAMES)
    return (f"WITH s AS ({base}), u AS ({rows}), m AS ({held}), p AS ({parts}) "
            f"SELECT day, source, model, task, COUNT(DISTINCT session_id), SUM(actual_set > 0), {figures} "
            f"FROM p GROUP BY day, source, model, task")


def read_usage(conn: sqlite3.Connection, caps, lo: float, hi: float, source: str | None = None) -> StoreUsage:
    """The store's usage for sessions started in ``[lo, hi)`` (epoch seconds), of one
    ``source`` or all. Raises ``sqlite3.Error`` (busy, damaged…) unchanged."""
    scols = set(caps.columns("sessions"))
    params = {"lo": lo, "hi": hi, "source": source}
    out = StoreUsage(missing=tuple(n for n in NAMES if n not in scols),
                     has_model_usage=caps.has_table("session_model_usage"))
    for day, src, model, task, sessions, actual, *values in conn.execute(usage_sql(caps, source), params):
        out.rows.append(Row(day=int(day), source=src, model=model, task=task, sessions=int(sessions or 0),
                            actual_known=int(actual or 0),
                            values={n: (None if n in out.missing else (v or 0)) for n, v in zip(NAMES, values)}))
    where = "started_at >= :lo AND started_at < :hi" + (" AND source = :source" if source is not None else "")
    for day, src, n in conn.execute(
            f"SELECT CAST(started_at / {DAY} AS INTEGER), COALESCE(source, ''), COUNT(*) FROM sessions "
            f"WHERE {where} GROUP BY 1, 2", params):
        out.session_days[(int(day), src)] = n
    # Both are seeks in idx_sessions_started (TEXT sorts above every number).
    out.undated = conn.execute(
        "SELECT (SELECT COUNT(*) FROM sessions WHERE started_at IS NULL) + "
        "(SELECT COUNT(*) FROM sessions WHERE started_at >= '')").fetchone()[0]
    return out


def cache_key(store: Store, lo: float, hi: float, source: str | None, signature: tuple | None = None) -> str:
    """Key of a store's cached usage: its path, file signature (now, unless given)
    and the query."""
    raw = repr((str(store.path), store.signature() if signature is None else signature, lo, hi, source))
    return "usage:" + hashlib.sha256(raw.encode()).hexdigest()


def store_usage(store: Store, lo: float, hi: float, source: str | None = None) -> StoreUsage:
    """:func:`read_usage` of ``store`` through the cache (see the module docstring).

    The result is cached only when the store's file signature is the same before
    and after the read: a write meanwhile (or SQLite creating the ``-wal`` and
    ``-shm`` of a store nobody had open, which a first read does) leaves it
    uncached, so a cached figure is always of the state its key names.
    Raises :class:`.store.Unavailable` when the store cannot be read now (busy,
    damaged, missing); failures are not cached.
    """
    before = store.signature()
    found = cache.get(cache_key(store, lo, hi, source, before))
    if found is not None:
        return StoreUsage.from_cache(found)
    with store.browse() as (conn, caps):  # an SQLite error inside becomes Unavailable too
        result = read_usage(conn, caps, lo, hi, source)
    after = store.signature()
    if after == before and store.settled(after):
        cache.set(cache_key(store, lo, hi, source, after), result.to_cache(), CACHE_TTL)
    return result
