"""The sessions list across every profile: filters, keyset pagination, capped counts.

Orders (``Filters.order``, a whitelist: :data:`ORDERS`), each newest / most / A-Z
first by default and reversible (``Filters.descending``):

- ``started`` (the default, as Hermes' own ``/api/sessions`` and ``hermes sessions
  list``): ``started_at``, which every store from 0.13.0 on indexes
  (``idx_sessions_started``), so a page is an index walk of ``limit + 1`` entries;
- ``activity``: last activity, ``COALESCE(last_activity_at, started_at)`` where the
  store has ``last_activity_at`` (upstream's own recency key, docs/store.md §4.1; indexed by
  ``idx_sessions_effective_activity`` on the newest shape); release stores up to 0.19.0
  lack that column, so their activity is the newest message's timestamp, one index
  seek per session (about 30 ms for 20,000 sessions, docs/benchmarks.md);
- ``messages``, ``title`` (case-folded as SQLite's ``lower()``), ``source``: no index
  serves them (``source`` has one, but not with the tie-break), so a page is a scan of
  the store's sessions with a top-N sort; non-number counts and non-text titles or
  sources sort as 0 and the empty string.

Ties are broken by profile key then session id, so the order is total and a cursor
``(sort value, profile key, session id)`` names an exact position. Each store is asked
for at most ``limit + 1`` rows past the cursor (never an OFFSET scan) and the pages are
merged in Python. Counts stop at ``COUNT_CAP`` per store, as Datasette does for big
tables. The date filters are on last activity in both orders.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import dataclasses
import sqlite3
import time
from contextlib import ExitStack
from dataclasses import dataclass, field

from django.core.exceptions import EmptyResultSet
from django.db import DatabaseError
from django.db.backends.sqlite3.base import FORMAT_QMARK_REGEX
from django.db.models import F, FloatField, OuterRef, Q, Subquery, TextField, Value
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce

from ..models import AgentMessage, AgentSession
from ..memo import Bounded, settled
from .connection import classify_error
from .liveness import page_index, verdict_of
from .store import Store, Unavailable, _log_once

COUNT_CAP = 10_000
MAX_ID_FILTER = 30_000  # below SQLite's host-parameter limit (32766 since 3.32)
ORDERS = {"started": "started", "activity": "last activity", "messages": "messages",
          "title": "title", "source": "source"}  # value -> label
# Orders whose first page shows the biggest value (newest, most messages); the
# others start at the smallest (titles and sources from A).
DESCENDING = {"started", "activity", "messages"}
TEXT_ORDERS = {"title", "source"}  # their sort values (and cursors) are strings
FLAG_COLUMNS = ("archived", "pinned", "hidden")
LIST_COLUMNS = (
    "id", "source", "title", "started_at", "ended_at", "end_reason", "message_count",
    "parent_session_id", "model", "profile_name", "session_key", "archived", "pinned", "hidden",
)


@dataclass
class Filters:
    """What the list is narrowed to. Dates are inclusive UTC days on last activity."""

    profiles: list[str] = field(default_factory=list)  # profile keys; empty = all
    source: str = ""
    state: str = ""  # "", "open", "ended"
    date_from: dt.date | None = None
    date_to: dt.date | None = None
    q: str = ""
    check: str = ""  # a check code: only sessions in ``with_findings`` (per profile key)
    with_findings: dict[str, set[str]] = field(default_factory=dict)
    order: str = "started"  # a key of ORDERS
    descending: bool | None = None  # None: the order's own direction (DESCENDING)
    # Hermes' flags: column -> "yes" (set) | "no" (not set); a store without the
    # column has no session with it set (docs/store.md, Flags and titles).
    flags: dict[str, str] = field(default_factory=dict)

    @property
    def walks_down(self) -> bool:
        """True when the list shows the biggest sort value first."""
        return self.order in DESCENDING if self.descending is None else self.descending


@dataclass
class Page:
    """One page of rows plus navigation cursors and per-store problems.

    ``rows`` are dicts of LIST_COLUMNS plus ``activity`` (epoch seconds), ``profile``
    (key) and ``sort`` (the value the page is ordered by, epoch seconds).
    ``next_cursor``/``prev_cursor`` are ``(sort, key, id)`` tuples or None.
    ``count`` is the total matching rows, ``count_capped`` True when some store hit
    COUNT_CAP (the total is then a lower bound). ``errors`` maps profile key to
    ``(status, reason)`` for stores that could not be read: their sessions are
    not in ``count`` (nothing of them was counted).
    """

    rows: list[dict]
    next_cursor: tuple | None
    prev_cursor: tuple | None
    count: int
    count_capped: bool
    errors: dict[str, tuple[str, str]]


def _epoch(day: dt.date, end: bool = False) -> float:
    moment = dt.datetime.combine(day, dt.time.max if end else dt.time.min, tzinfo=dt.timezone.utc)
    return moment.timestamp()


def _number(column: str) -> RawSQL:
    """The column when it holds a number, else NULL: salvaged rows may hold TEXT
    timestamps (docs/store.md §13 row 21), which must not break the list."""
    return RawSQL(f"CASE WHEN typeof(\"sessions\".\"{column}\") IN ('real', 'integer') "
                  f"THEN \"sessions\".\"{column}\" END", (), output_field=FloatField())


EFFECTIVE_ACTIVITY = "COALESCE(last_activity_at, started_at)"


def indexed_activity(conn: sqlite3.Connection, caps) -> bool:
    """Can the list order by the store's own ``idx_sessions_effective_activity``?

    Newest stores index ``COALESCE(last_activity_at, started_at)``; ordering by that
    very expression walks the index and stops after a page. It equals the guarded
    activity (numbers only, docs/store.md §13 row 21) unless some value is TEXT or BLOB, which
    sort above every number in SQLite, or NULL: two index seeks rule that out.
    """
    if not caps.has("sessions", "last_activity_at"):
        return False
    found = False
    for (sql,) in conn.execute("SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'sessions'"):
        found |= EFFECTIVE_ACTIVITY.lower() in " ".join((sql or "").lower().split())
    if not found:
        return False
    # NULL too (started_at NULL in a salvaged row): keyset comparisons would skip it.
    return conn.execute(f"SELECT 1 FROM sessions WHERE {EFFECTIVE_ACTIVITY} >= '' UNION ALL "
                        f"SELECT 1 FROM sessions WHERE {EFFECTIVE_ACTIVITY} IS NULL LIMIT 1").fetchone() is None


def indexed_started(conn: sqlite3.Connection) -> bool:
    """Can the list order by the raw ``started_at`` (walking ``idx_sessions_started``)?

    Only when it equals the guarded value: no TEXT/BLOB (which sort above numbers) and
    no NULL (which keyset comparisons would skip). Both are index seeks in
    ``idx_sessions_started`` (every release has it; without it, two scans).
    """
    return conn.execute(
        "SELECT 1 FROM sessions WHERE started_at >= '' UNION ALL SELECT 1 FROM sessions WHERE started_at IS NULL LIMIT 1"
    ).fetchone() is None


def _sort_expression(order: str, caps):
    """The guarded sort value of the orders without an index of their own: never NULL,
    one type per order (numbers or text), so stores merge and cursors compare."""
    if order == "messages":
        return Coalesce(RawSQL("CASE WHEN typeof(\"sessions\".\"message_count\") IN ('real', 'integer') "
                               "THEN \"sessions\".\"message_count\" END", (), output_field=FloatField()),
                        Value(0.0), output_field=FloatField())
    if not caps.has("sessions", order):
        return Value("", output_field=TextField())
    value = f'"sessions"."{order}"'
    if order == "title":
        value = f"lower({value})"
    return RawSQL(f"CASE WHEN typeof(\"sessions\".\"{order}\") = 'text' THEN {value} ELSE '' END", (),
                  output_field=TextField())


def _started(indexed: bool):
    if indexed:
        return F("started_at")
    return Coalesce(_number("started_at"), Value(0.0), output_field=FloatField())


def _activity(store: Store, caps, indexed: bool = False):
    if indexed:
        return RawSQL(EFFECTIVE_ACTIVITY.replace("last_activity_at", '"sessions"."last_activity_at"')
                      .replace("started_at)", '"sessions"."started_at")'), (), output_field=FloatField())
    if caps.has("sessions", "last_activity_at"):
        return Coalesce(_number("last_activity_at"), _number("started_at"), Value(0.0), output_field=FloatField())
    # ORDER BY timestamp DESC LIMIT 1 (the same value as MAX) is one seek in
    # idx_messages_session (session_id, timestamp); MAX(...) GROUP BY session_id made
    # SQLite read every index entry of every session (docs/benchmarks.md).
    newest = (
        AgentMessage.objects.using(store.alias)
        .filter(session_id=OuterRef("pk"))
        .order_by("-timestamp")
        .values("timestamp")[:1]
    )
    # started_at read by primary key (only for sessions without messages: COALESCE is
    # lazy), so that ordering by activity scans the covering id index, never the wide
    # rows of release stores (system prompts inline, tens of KB each).
    started = RawSQL("(SELECT CASE WHEN typeof(s2.started_at) IN ('real', 'integer') THEN s2.started_at END "
                     "FROM sessions s2 WHERE s2.id = \"sessions\".\"id\")", (), output_field=FloatField())
    return Coalesce(Subquery(newest, output_field=FloatField()), started, Value(0.0), output_field=FloatField())


def newest_activity_statement(store: Store, caps) -> tuple[str, tuple]:
    """``(sql, params)`` for a plain sqlite3 connection: one row, the newest last
    activity (epoch seconds) of the store's sessions exactly as the list computes
    each row's (:func:`_activity`: a TEXT value falls back as it does there), NULL
    when no session has a number (the list's 0.0 stand-in is not an activity)."""
    qs = AgentSession.objects.for_store(store, caps).annotate(activity=_activity(store, caps)).order_by()
    sql, params = _compile(qs.values("activity"))
    return (f"SELECT MAX(CASE WHEN typeof(activity) IN ('real', 'integer') AND activity > 0 THEN activity END) "
            f"FROM ({sql})", params)


def filtered(store: Store, caps, filters: Filters, indexed: bool = False):
    """The store's sessions queryset with filters applied and ``activity`` annotated
    (``indexed``: the store's activity index may be used, see :func:`indexed_activity`)."""
    qs = AgentSession.objects.for_store(store, caps).annotate(activity=_activity(store, caps, indexed))
    if filters.source:
        qs = qs.filter(source=filters.source)
    if filters.state == "open":
        qs = qs.filter(ended_at__isnull=True)
    elif filters.state == "ended":
        qs = qs.filter(ended_at__isnull=False)
    if filters.date_from:
        qs = qs.filter(activity__gte=_epoch(filters.date_from))
    if filters.date_to:
        qs = qs.filter(activity__lte=_epoch(filters.date_to, end=True))
    if filters.check:
        ids = sorted(filters.with_findings.get(store.key, ()))[:MAX_ID_FILTER]
        qs = qs.filter(id__in=ids)
    for column, wanted in filters.flags.items():
        if column not in FLAG_COLUMNS or wanted not in ("yes", "no"):
            continue
        if not caps.has("sessions", column):
            if wanted == "yes":
                qs = qs.none()
            continue
        set_ = ~Q(**{column: 0}) & Q(**{f"{column}__isnull": False})
        qs = qs.filter(set_) if wanted == "yes" else qs.exclude(set_)
    if filters.q:
        match = Q(id__contains=filters.q)
        if caps.has("sessions", "title"):
            match |= Q(title__icontains=filters.q)
        qs = qs.filter(match)
    return qs


def _after(qs, key: str, cursor: tuple):
    """Rows strictly after ``cursor`` in (sort DESC, key DESC, id DESC) order."""
    value, ckey, cid = cursor
    if key < ckey:
        return qs.filter(sort__lte=value)
    if key == ckey:
        return qs.filter(Q(sort__lt=value) | Q(sort=value, id__lt=cid))
    return qs.filter(sort__lt=value)


def _before(qs, key: str, cursor: tuple):
    """Rows strictly before ``cursor`` in that order (for the previous page)."""
    value, ckey, cid = cursor
    if key > ckey:
        return qs.filter(sort__gte=value)
    if key == ckey:
        return qs.filter(Q(sort__gt=value) | Q(sort=value, id__gt=cid))
    return qs.filter(sort__gt=value)


def list_sessions(
    stores: list[Store],
    filters: Filters,
    limit: int = 50,
    after: tuple | None = None,
    before: tuple | None = None,
    liveness: bool = False,
) -> Page:
    """One page of sessions across ``stores``; see the module docstring for order.

    ``after`` / ``before``: a ``(sort, key, id)`` cursor of a page shown before
    (``next_cursor`` / ``prev_cursor``); the page holds the rows that follow / precede
    it in the list's order (``Filters.walks_down``). ``sort`` is a float, or a str for
    :data:`TEXT_ORDERS`.

    ``liveness``: rows also carry ``liveness`` (``live`` | ``maybe_live`` |
    ``not_live`` | ``unknown``) and ``live_evidence`` (detail texts), read on the
    store's same connection for its candidate rows only (``liveness.page_index``)."""
    errors: dict[str, tuple[str, str]] = {}
    # Readiness, the order's index checks and the page's queries on one connection
    # per store: an open per store (and one more for the ORM's alias) was a visible
    # share of a page across ten profiles (docs/benchmarks.md). The connections stay
    # open (in autocommit: no read transaction is held between statements) until the
    # page is merged, so that the wide rows and liveness are read for the rows the
    # page shows only, not for limit + 1 rows of every store.
    with ExitStack() as stack:
        counted = []  # (store, conn, caps, capped count, [(pk, sort)], indexed)
        for store in stores:
            if filters.profiles and store.key not in filters.profiles:
                continue
            try:
                conn, caps = stack.enter_context(store.browse())
            except Unavailable as exc:
                if exc.status.status != "missing":
                    errors[store.key] = (exc.status.status, exc.status.reason)
                    _log_once(store.path, exc.status.status, exc.status.reason)
                continue
            try:
                counted.append((store, conn, caps, *_store_page(store, conn, caps, filters, limit, after, before)))
            except (DatabaseError, sqlite3.Error) as exc:
                errors[store.key] = classify_error(exc)
        wide: dict[str, dict] = {}  # profile key -> {pk: row}
        read: dict[str, set] = {}  # profile key -> pks whose wide rows were asked for
        while True:
            # A store whose wide read fails is left out like one whose count failed,
            # and the page is merged again without it.
            counted = [c for c in counted if c[0].key not in errors]
            entries = [((value, c[0].key, pk), c) for c in counted for pk, value in c[4]]
            entries.sort(key=_entry_key, reverse=_walk_down(filters, before))
            has_more = len(entries) > limit
            entries = entries[:limit]
            shown: dict[str, list] = {}
            for (value, key, pk), c in entries:
                shown.setdefault(key, []).append((pk, value))
            for store, conn, caps, _n, _found, indexed in counted:
                # Merged again without a failed store, a store read before has rows
                # moved up into the page: those are read now (the others are kept).
                missing = [(pk, value) for pk, value in shown.get(store.key, ())
                           if pk not in read.get(store.key, ())]
                if not missing:
                    continue
                try:
                    rows = _wide_rows(store, conn, caps, indexed, [pk for pk, _ in missing])
                except (DatabaseError, sqlite3.Error) as exc:
                    errors[store.key] = classify_error(exc)
                    continue
                for pk, value in missing:
                    row = rows.get(pk)
                    if row is not None:
                        row.update(profile=store.key, sort=value, parent_session_id=row.get("parent_session_id"))
                if liveness:
                    _add_liveness(store, conn, caps, rows)
                wide.setdefault(store.key, {}).update(rows)
                read.setdefault(store.key, set()).update(pk for pk, _ in missing)
            if not any(c[0].key in errors for c in counted):
                break
    count = sum(min(c[3], COUNT_CAP) for c in counted)
    capped = any(c[3] > COUNT_CAP for c in counted)
    entries = [(cursor, wide[cursor[1]].get(cursor[2])) for cursor, _c in entries]
    if before is not None:
        entries.reverse()
        prev_cursor = entries[0][0] if has_more and entries else None
        next_cursor = entries[-1][0] if entries else None
    else:
        next_cursor = entries[-1][0] if has_more and entries else None
        prev_cursor = entries[0][0] if after is not None and entries else None
    rows = [row for _, row in entries if row is not None]
    return Page(rows, next_cursor, prev_cursor, count, capped, errors)


def _filters_key(filters: Filters, key: str) -> tuple:
    """``filters`` as one store's part of a memo key: everything but the findings'
    id sets, plus the sha256 of the ids this store's statement filters on (up to
    30,000 of them: the key never holds a copy)."""
    ids = sorted(filters.with_findings.get(key, ())) if filters.check else []
    digest = hashlib.sha256("\x00".join(ids).encode("utf-8", "surrogatepass")).hexdigest()
    return repr(dataclasses.replace(filters, with_findings={})), digest


def _walk_down(filters: Filters, before) -> bool:
    """Does this page's query read the store from the biggest sort value down? The
    list's own direction, reversed for a previous page (read from its far end)."""
    return filters.walks_down == (before is None)


def _store_page(store: Store, conn: sqlite3.Connection, caps, filters: Filters, limit: int, after, before):
    """``(capped count, [(pk, sort)] of the page, indexed)`` of one store, the
    querysets built by the ORM (once per page shape, :func:`_memo`) and run on
    ``conn``; ``indexed``: the activity index may be used (for :func:`_wide_rows`)."""
    started_indexed = None
    state = store.file_state()  # before any read that is remembered under it (see _PROOFS)
    if filters.order == "activity":
        indexed = _proved(store, state, caps, "activity", lambda: indexed_activity(conn, caps))
    elif filters.order == "started" or filters.order not in ORDERS:
        indexed, started_indexed = False, _proved(store, state, caps, "started", lambda: indexed_started(conn))
    else:
        indexed = False
    # Everything the count and page statements are built from (cursor values too);
    # caps identifies the store's columns (a new object after a schema change).
    key = ("page", str(store.path), store.key, id(caps), _filters_key(filters, store.key), indexed, started_indexed,
           limit, after, before)
    count_stmt, page_stmt = _memo(key, caps, lambda: _page_statements(
        store, caps, filters, indexed, started_indexed, limit, after, before))
    n = _counted(store, state, conn, count_stmt)
    # Two steps: the page's ids and sort values in order (reads only what the order
    # needs), then their columns by primary key (wide rows read for this page only).
    # Position and "more" come from the first step alone: a row deleted or changed
    # before the second read drops out of this page without ending the pagination.
    found = [tuple(r) for r in _execute(conn, page_stmt)]
    return n, found, indexed


def _wide_rows(store: Store, conn: sqlite3.Connection, caps, indexed: bool, pks: list) -> dict:
    """``{pk: row}`` of the sessions ``pks`` (the ones a page shows), their list
    columns and ``activity`` read by primary key."""
    if not pks:
        return {}
    names, stmt = _memo(("wide", str(store.path), id(caps), indexed, len(pks)), caps,
                        lambda: _wide_statement(store, caps, indexed, len(pks)))
    sql, params, slots = stmt
    params = list(params)
    for slot, pk in zip(slots, pks):
        params[slot] = pk
    return {row["id"]: row for row in (dict(zip(names, r)) for r in conn.execute(sql, params).fetchall())}


# The order proofs (indexed_started, indexed_activity) of each store: (kind, path) ->
# (file state, caps, answer). A proof depends only on the store's rows and schema, and
# every write changes the store's file state (Store.file_state: inode, size, mtimes
# of state.db and -wal), so an answer holds while the state is the one read before it
# was proved (a write meanwhile leaves a state that no longer matches, and the next
# view proves again). Two index seeks on a store with idx_sessions_started, a scan of
# the sessions on one without: a visible share of the list across ten profiles.
# One entry per store and kind.
_PROOFS: dict = {}


def _proved(store: Store, state: tuple, caps, kind: str, prove) -> bool:
    """``prove()``, or its answer remembered under ``state`` (the store's file state,
    read before proving, never after: see above)."""
    key = (kind, str(store.path))
    hit = _PROOFS.get(key)
    if hit is not None and hit[0] == state and hit[1] is caps:
        return hit[2]
    answer = prove()
    if settled(_file_mtimes(state)):
        _PROOFS[key] = (state, caps, answer)
    return answer


def _file_mtimes(state: tuple) -> list[int]:
    """The mtimes (ns) in a ``Store.file_state()`` (its file parts are tuples)."""
    return [part[3] for part in state if isinstance(part, tuple) and part]


# Capped counts of list pages: (store path, sql, params) -> (file state, count). Like
# the proofs, a count depends only on the store's rows (the statement holds the
# filters), and the file state it is kept under was read before counting. The count
# walks up to COUNT_CAP + 1 index entries (10,001 on a big store) on every view and
# every later page of the same filters. Statements with many parameters (the health
# filter's id lists, up to 30,000) are not kept: the key would hold a copy of them.
COUNTS_KEPT = 256
_COUNTS = Bounded(COUNTS_KEPT)
COUNT_KEY_PARAMS = 64


def _counted(store: Store, state: tuple, conn: sqlite3.Connection, stmt) -> int:
    """The capped count of ``stmt`` (:func:`_compile`'s count statement) on ``conn``."""
    if stmt is None or len(stmt[1]) > COUNT_KEY_PARAMS:
        counted = _execute(conn, stmt, count=True)
        return counted[0][0] if counted else 0
    key = (str(store.path), *stmt)
    hit = _COUNTS.get(key)
    if hit is not None and hit[0] == state:
        return hit[1]
    counted = _execute(conn, stmt, count=True)  # activity only where filtered on
    n = counted[0][0] if counted else 0
    if settled(_file_mtimes(state)):
        _COUNTS.put(key, (state, n))
    return n


# Compiled statements of list pages (key -> (caps, statements)), newest last. The
# ORM's building and compiling of a page's three querysets cost ~3 ms per store
# (most of the list across ten profiles, docs/benchmarks.md); the same page shape
# gives the same SQL, so it is compiled once. The entry keeps its caps alive so
# that id(caps) in a key cannot be reused by another store's capabilities.
COMPILED_MAX = 256
_COMPILED = Bounded(COMPILED_MAX)
_PK = "\x00pk:"  # placeholder values for the wide query's ids (no store id starts with NUL)


def _memo(key, caps, build):
    hit = _COMPILED.get(key)
    if hit is not None and hit[0] is caps:
        return hit[1]
    value = build()
    _COMPILED.put(key, (caps, value))
    return value


def _page_statements(store: Store, caps, filters: Filters, indexed: bool, started_indexed, limit: int,
                     after, before):
    """``(count statement, page statement)`` (:func:`_compile`) of one store's page."""
    if filters.order == "activity":
        sort = None
    elif filters.order == "started" or filters.order not in ORDERS:
        sort = _started(started_indexed)
    else:
        sort = _sort_expression(filters.order, caps)
    qs = filtered(store, caps, filters, indexed)
    qs = qs.annotate(sort=F("activity") if sort is None else sort)
    count = _compile(qs.order_by().values("pk")[: COUNT_CAP + 1], count=True)
    # Cursors compare as in a list shown biggest first: a later row there is _after.
    cursor = after if before is None else before
    if _walk_down(filters, before):
        page = (qs if cursor is None else _after(qs, store.key, cursor)).order_by("-sort", "-id")
    else:
        page = (qs if cursor is None else _before(qs, store.key, cursor)).order_by("sort", "id")
    return count, _compile(page.values_list("pk", "sort")[: limit + 1])


def _wide_statement(store: Store, caps, indexed: bool, n: int):
    """``(column names, (sql, params, slots))`` of the wide read of ``n`` sessions by
    primary key: compiled with placeholder ids, ``slots`` the positions in ``params``
    where the page's ids go, in their order."""
    columns = [c for c in LIST_COLUMNS if caps.has("sessions", c)]
    marks = [f"{_PK}{i}" for i in range(n)]
    wide_qs = AgentSession.objects.for_store(store, caps).filter(pk__in=marks)
    wide_qs = wide_qs.annotate(activity=_activity(store, caps, indexed)).order_by().values(*columns, "activity")
    query = wide_qs.query
    names = [*query.extra_select, *query.values_select, *query.annotation_select]
    sql, params = _compile(wide_qs)
    where = {p: i for i, p in enumerate(params) if isinstance(p, str) and p.startswith(_PK)}
    return names, (sql, tuple(params), [where[m] for m in marks])


def _add_liveness(store: Store, conn: sqlite3.Connection, caps, wide: dict) -> None:
    """``liveness`` and ``live_evidence`` on each row of ``wide`` (see list_sessions);
    evidence that cannot be read leaves the rows ``unknown``, the page still shows."""
    try:
        index = page_index(store, conn, caps, list(wide), time.time())
    except sqlite3.Error:
        index = None
    for pk, row in wide.items():
        if index is None:
            row["liveness"], row["live_evidence"] = "unknown", []
            continue
        evidence = index.evidence(pk)
        row["liveness"], row["live_evidence"] = verdict_of(evidence), [e.detail for e in evidence]


def _compile(qs, count: bool = False):
    """``(sql, params)`` of ``qs`` (``count``: of its row count) for a plain sqlite3
    connection, as the ORM would run it on the store's alias: the SQL its compiler
    writes, placeholders converted as Django's SQLite backend does; no converter
    applies to these columns (text, integer, real). None when the ORM knows the
    result is empty (an empty ``IN ()``)."""
    try:
        sql, params = qs.query.get_compiler(using=qs.db).as_sql()
    except EmptyResultSet:
        return None
    sql = FORMAT_QMARK_REGEX.sub("?", sql).replace("%%", "%")
    if count:
        sql = f"SELECT COUNT(*) FROM ({sql})"
    return sql, tuple(params)


def _execute(conn: sqlite3.Connection, stmt, count: bool = False) -> list:
    """The rows of a :func:`_compile` statement on ``conn`` (an empty result as in Django)."""
    if stmt is None:
        return [(0,)] if count else []
    return conn.execute(*stmt).fetchall()


def _entry_key(entry) -> tuple:
    (value, key, pk), _ = entry
    return (value if value is not None else float("-inf"), key, pk)


# Store path -> (file signature, its distinct sources): one entry per store, in this
# process (what Django's local-memory cache held, without its pickling and key
# hashing: ten lookups a view).
_SOURCES: dict[str, tuple[tuple, list[str]]] = {}


def _sources(store: Store) -> list[str] | None:
    """The store's distinct sources, or None when it cannot be read now."""
    try:
        with store.browse() as (conn, _caps):
            # A skip-scan of idx_sessions_source: one seek per distinct value, where
            # DISTINCT read every entry (20,000 sessions: 0.03 ms instead of 1 ms).
            return [r[0] for r in conn.execute(
                "WITH RECURSIVE s(x) AS (SELECT MIN(source) FROM sessions UNION ALL "
                "SELECT (SELECT MIN(source) FROM sessions WHERE source > s.x) FROM s WHERE s.x IS NOT NULL) "
                "SELECT x FROM s WHERE x IS NOT NULL") if r[0]]
    except Unavailable:
        return None


def distinct_sources(stores: list[Store]) -> list[str]:
    """Every ``source`` value across stores, sorted; a store that cannot be read now
    (busy, damaged, missing) adds nothing.

    Cached per store under its file signature (:meth:`Store.signature`), so a store
    is read again only after it was written: opening ten stores per page view cost
    ~10 ms of the sessions list (docs/benchmarks.md). Failures are not cached: a
    busy store's sources come back on the next view.
    """
    found: set[str] = set()
    for store in stores:
        path, signature = str(store.path), store.signature()  # before the read (a write meanwhile: read again)
        hit = _SOURCES.get(path)
        if hit is not None and hit[0] == signature:
            sources = hit[1]
        else:
            sources = _sources(store)
            if sources is not None and store.settled(signature):
                _SOURCES[path] = (signature, sources)
        found.update(sources or ())
    return sorted(found)
