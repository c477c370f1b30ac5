"""Which sessions a retention prune selects: criteria, their SQL, and what it would free.

Read-only; the plan (lineages, pins, liveness) is ``actions/prune.py``'s. Criteria
AND together, as upstream's ``hermes sessions prune`` filters do (docs/store.md
§10.4), and only sessions their writer ended are ever selected
(``ended_at IS NOT NULL``, upstream's own guard: an open session may be written
any moment):

- ``older_than_days``: ended before ``now - N days`` (``ended_at`` a number);
- ``sources``: ``source`` is one of them (exact, as upstream's ``--source``);
- ``empty``: never held a message: ``message_count = 0`` and no row in
  ``messages`` at all. A session whose only rows are compacted (``active = 0,
  compacted = 1``) or rewound (``active = 0, compacted = 0``) is *not* empty: its
  history is there, only hidden. Nor is one whose counters record API calls or
  tokens with no row (history lost, ``usage_without_transcript``): both are
  reported, never selected (:func:`not_empty`);
- ``match``: a pattern on the id or the title, case-insensitive: ``*`` any run,
  ``?`` one character, ``[abc]`` one of a set (SQLite ``GLOB``); a pattern without
  those is a substring.

Times are epoch seconds; sizes are bytes of ``content`` as stored (``length`` of
its BLOB cast, so UTF-8 bytes, not characters).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from .schema import Capabilities

DAY = 86400
PARAM_CHUNK = 400
MAX_PATTERN = 200
MAX_SOURCES = 50
GLOB_CHARS = "*?["


class CriteriaError(ValueError):
    """Criteria that cannot be used (the message says which and why)."""


@dataclass(frozen=True)
class Criteria:
    """What a prune selects. ``older_than_days`` None: no age bound."""

    older_than_days: float | None = None
    sources: tuple[str, ...] = ()
    empty: bool = False
    match: str = ""
    # Not a criterion (it selects nothing by itself): archived sessions the criteria
    # select are spared unless this is set, as upstream's `hermes sessions prune
    # --include-archived` (docs/store.md §10.4).
    include_archived: bool = False

    def __post_init__(self):
        days = self.older_than_days
        if days is not None:
            if isinstance(days, bool) or not isinstance(days, (int, float)) or not math.isfinite(days) or days < 0:
                raise CriteriaError("older than: a number of days, 0 or more")
        if len(self.sources) > MAX_SOURCES or any(not isinstance(s, str) or not s or len(s) > 200
                                                 for s in self.sources):
            raise CriteriaError(f"source: at most {MAX_SOURCES} names of up to 200 characters")
        if not isinstance(self.match, str) or len(self.match) > MAX_PATTERN or "\x00" in self.match:
            raise CriteriaError(f"pattern: at most {MAX_PATTERN} characters, no NUL")

    @property
    def given(self) -> bool:
        """At least one criterion: a prune never selects every ended session by default."""
        return self.older_than_days is not None or bool(self.sources) or self.empty or bool(self.match)

    def as_dict(self) -> dict:
        data = asdict(self)
        data["sources"] = list(self.sources)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "Criteria":
        """Criteria from :meth:`as_dict` (a signed token, a run row); raises :class:`CriteriaError`."""
        if not isinstance(data, dict):
            raise CriteriaError("malformed criteria")
        days = data.get("older_than_days")
        sources = data.get("sources") or []
        if not isinstance(sources, list):
            raise CriteriaError("malformed criteria")
        return cls(days, tuple(sources), bool(data.get("empty")), data.get("match") or "",
                   bool(data.get("include_archived")))

    def describe(self) -> str:
        """In words, e.g. ``ended more than 90 days ago, source cron, empty``."""
        parts = ["ended"]
        if self.older_than_days is not None:
            parts[0] = f"ended more than {self.older_than_days:g} day{'' if self.older_than_days == 1 else 's'} ago"
        if self.sources:
            parts.append("source " + " or ".join(self.sources))
        if self.empty:
            parts.append("empty (never held a message)")
        if self.match:
            parts.append(f"id or title matching {self.match!r}")
        if self.include_archived:
            parts.append("archived sessions included")
        return ", ".join(parts)


def glob_pattern(match: str) -> str:
    """The lower-cased GLOB pattern of ``match`` (a bare word becomes ``*word*``)."""
    pattern = match.lower()
    return pattern if any(c in pattern for c in GLOB_CHARS) else f"*{pattern}*"


def _usage_sql(caps: Capabilities, alias: str) -> str | None:
    """True when the row's counters record API calls or tokens (None: no such columns)."""
    cols = [c for c in ("api_call_count", "input_tokens", "output_tokens") if caps.has("sessions", c)]
    if not cols:
        return None
    return "(" + " OR ".join(f"COALESCE({alias}.{c}, 0) > 0" for c in cols) + ")"


def criteria_sql(caps: Capabilities, criteria: Criteria, now: float, alias: str = "s",
                 with_empty: bool = True) -> tuple[str, list]:
    """``(where, params)`` selecting ``criteria`` on ``sessions {alias}``.

    ``with_empty`` False leaves the emptiness test out (to find the sessions it
    turns away, :func:`not_empty`)."""
    a = alias
    clauses = [f"{a}.ended_at IS NOT NULL"]
    params: list = []
    if criteria.older_than_days is not None:
        clauses.append(f"typeof({a}.ended_at) IN ('real', 'integer') AND {a}.ended_at < ?")
        params.append(now - criteria.older_than_days * DAY)
    if criteria.sources:
        clauses.append(f"{a}.source IN ({','.join('?' * len(criteria.sources))})")
        params.extend(criteria.sources)
    if criteria.match:
        pattern = glob_pattern(criteria.match)
        if caps.has("sessions", "title"):
            clauses.append(f"(LOWER({a}.id) GLOB ? OR LOWER(COALESCE({a}.title, '')) GLOB ?)")
            params.extend([pattern, pattern])
        else:
            clauses.append(f"LOWER({a}.id) GLOB ?")
            params.append(pattern)
    if criteria.empty and with_empty:
        clauses.append(f"COALESCE({a}.message_count, 0) = 0")
        clauses.append(f"NOT EXISTS (SELECT 1 FROM messages m WHERE m.session_id = {a}.id)")
        usage = _usage_sql(caps, a)
        if usage:
            clauses.append(f"NOT {usage}")
    return " AND ".join(clauses), params


CANDIDATE_COLUMNS = ("id", "source", "title", "started_at", "ended_at", "end_reason", "parent_session_id",
                     "message_count")


def candidates(conn, caps: Capabilities, criteria: Criteria, now: float) -> dict[str, dict]:
    """The ended sessions ``criteria`` select, ``id -> row`` (columns of
    :data:`CANDIDATE_COLUMNS`, NULL where the store lacks one), oldest end first."""
    where, params = criteria_sql(caps, criteria, now)
    cols = ", ".join(f"s.{c}" if caps.has("sessions", c) else f"NULL AS {c}" for c in CANDIDATE_COLUMNS)
    cur = conn.execute(f"SELECT {cols} FROM sessions s WHERE {where} ORDER BY s.ended_at, s.id", params)
    return {row[0]: dict(zip(CANDIDATE_COLUMNS, row)) for row in cur}


@dataclass
class NotEmpty:
    """A session ``empty`` turns away: ``why`` is ``compacted_or_rewound`` (only
    ``active = 0`` rows), ``rows_without_count`` (rows while ``message_count`` is 0)
    or ``usage_without_rows`` (API calls or tokens recorded, no row)."""

    session_id: str
    why: str
    rows: int = 0
    detail: str = ""


def not_empty(conn, caps: Capabilities, criteria: Criteria, now: float) -> list[NotEmpty]:
    """Sessions that match every criterion and have ``message_count = 0``, yet are
    not empty (module docstring); empty without ``criteria.empty``."""
    if not criteria.empty:
        return []
    where, params = criteria_sql(caps, criteria, now, with_empty=False)
    active = "SUM(CASE WHEN m.active = 1 THEN 1 ELSE 0 END)" if caps.has("messages", "active") else "COUNT(m.id)"
    usage = _usage_sql(caps, "s") or "0"
    found: list[NotEmpty] = []
    sql = (f"SELECT s.id, COUNT(m.id), {active}, {usage} FROM sessions s LEFT JOIN messages m ON m.session_id = s.id "
           f"WHERE {where} AND COALESCE(s.message_count, 0) = 0 GROUP BY s.id ORDER BY s.id")
    for sid, rows, live_rows, used in conn.execute(sql, params):
        if rows and not live_rows:
            found.append(NotEmpty(sid, "compacted_or_rewound", rows,
                                  f"{rows} compacted or rewound row(s), no active one: its history is kept, hidden"))
        elif rows:
            found.append(NotEmpty(sid, "rows_without_count", rows,
                                  f"message_count is 0 but {live_rows} active row(s) exist (counter drift)"))
        elif used:
            found.append(NotEmpty(sid, "usage_without_rows", 0,
                                  "API calls or tokens are recorded but no message row: history was lost, "
                                  "not never written"))
    return found


@dataclass
class Stats:
    """Message rows of one session: ``rows``, ``last_id`` (None without rows),
    ``content_bytes``."""

    rows: int = 0
    last_id: int | None = None
    content_bytes: int = 0


def message_stats(conn, ids: list[str]) -> dict[str, Stats]:
    """Rows, last message id and content bytes per session of ``ids`` (sessions
    without rows are absent). ``idx_messages_session`` serves each lookup."""
    found: dict[str, Stats] = {}
    for i in range(0, len(ids), PARAM_CHUNK):
        chunk = ids[i:i + PARAM_CHUNK]
        for sid, n, last, size in conn.execute(
                f"SELECT session_id, COUNT(*), MAX(id), COALESCE(SUM(length(CAST(content AS BLOB))), 0) "
                f"FROM messages WHERE session_id IN ({','.join('?' * len(chunk))}) GROUP BY session_id", chunk):
            found[sid] = Stats(n, last, size)
    return found


def column_values(conn, caps: Capabilities, column: str, ids: list[str]) -> dict[str, object]:
    """``id -> value`` of one ``sessions`` column for ``ids`` ({} when the store lacks it)."""
    if not caps.has("sessions", column) or not ids:
        return {}
    found = {}
    for i in range(0, len(ids), PARAM_CHUNK):
        chunk = ids[i:i + PARAM_CHUNK]
        found.update(conn.execute(f"SELECT id, {column} FROM sessions WHERE id IN ({','.join('?' * len(chunk))})",
                                  chunk).fetchall())
    return found


def matching(conn, caps: Capabilities, criteria: Criteria, now: float, ids: list[str]) -> set[str]:
    """Which of ``ids`` ``criteria`` select now (the re-check inside a prune's transaction)."""
    where, params = criteria_sql(caps, criteria, now)
    found: set[str] = set()
    for i in range(0, len(ids), PARAM_CHUNK):
        chunk = ids[i:i + PARAM_CHUNK]
        found.update(r[0] for r in conn.execute(
            f"SELECT s.id FROM sessions s WHERE s.id IN ({','.join('?' * len(chunk))}) AND {where}",
            chunk + params))
    return found


@dataclass
class Graph:
    """The store's parent links, read once for a whole plan.

    ``compression_parent``: child -> parent over compression edges only (the edge
    rule of ``stores.lineage``); ``delegates``: parent -> delegate children, as
    deletion finds them (``_delegate_from`` marker naming the parent, or a child
    of it carrying any marker or ``source = 'subagent'``); ``children``: parent ->
    every child id.
    """

    compression_parent: dict[str, str] = field(default_factory=dict)
    delegates: dict[str, list[str]] = field(default_factory=dict)
    children: dict[str, list[str]] = field(default_factory=dict)

    def lineage(self, session_id: str) -> list[str]:
        """The compression lineage of ``session_id``: its root first, then every
        compression descendant breadth first (as ``liveness.compression_descendants``)."""
        root, seen = session_id, {session_id}
        while root in self.compression_parent and self.compression_parent[root] not in seen:
            root = self.compression_parent[root]
            seen.add(root)
        below = self.compression_children
        found, queue, done = [root], [root], {root}
        while queue:
            for child in sorted(below.get(queue.pop(0), ())):
                if child not in done:
                    done.add(child)
                    found.append(child)
                    queue.append(child)
        return found

    @property
    def children_of_someone(self) -> set[str]:
        """Every session that has a parent link (built once)."""
        if not hasattr(self, "_has_parent"):
            self._has_parent = {c for kids in self.children.values() for c in kids}
        return self._has_parent

    @property
    def compression_children(self) -> dict[str, list[str]]:
        """parent -> its compression children (built once)."""
        if not hasattr(self, "_below"):
            below: dict[str, list[str]] = {}
            for child, parent in self.compression_parent.items():
                below.setdefault(parent, []).append(child)
            self._below = below
        return self._below

    def delegate_descendants(self, roots: list[str]) -> list[str]:
        """Delegate children of ``roots``, recursively, never a root itself."""
        found, frontier, result = set(roots), list(roots), []
        while frontier:
            step = []
            for parent in frontier:
                for child in self.delegates.get(parent, ()):
                    if child not in found:
                        found.add(child)
                        step.append(child)
            result.extend(step)
            frontier = step
        return result


def read_graph(conn, caps: Capabilities) -> Graph:
    """One pass over the sessions that have a parent or a delegate marker."""
    from .lineage import classify_edge, model_config_dict

    graph = Graph()
    if not caps.has("sessions", "parent_session_id"):
        return graph
    has = caps.columns("sessions")
    pick = lambda alias, c: f"{alias}.{c}" if c in has else "NULL"  # noqa: E731
    child_cols = ("id", "source", "model_config", "started_at", "session_key", "parent_session_id")
    parent_cols = ("id", "end_reason", "ended_at", "session_key")
    sql = (f"SELECT {', '.join(pick('c', c) for c in child_cols)}, {', '.join(pick('p', c) for c in parent_cols)} "
           "FROM sessions c LEFT JOIN sessions p ON p.id = c.parent_session_id "
           "WHERE c.parent_session_id IS NOT NULL"
           + (" OR c.model_config LIKE '%_delegate_from%'" if "model_config" in has else ""))
    by_marker: dict[str, list[str]] = {}
    for row in conn.execute(sql):
        child = dict(zip(child_cols, row[:len(child_cols)]))
        parent = dict(zip(parent_cols, row[len(child_cols):]))
        marker = model_config_dict(child["model_config"]).get("_delegate_from")
        if isinstance(marker, str) and marker:
            by_marker.setdefault(marker, []).append(child["id"])
        pid = child["parent_session_id"]
        if not pid:
            continue
        graph.children.setdefault(pid, []).append(child["id"])
        if parent["id"] is not None and classify_edge(parent, child) == "compression":
            graph.compression_parent[child["id"]] = pid
        if marker or child["source"] == "subagent":
            graph.delegates.setdefault(pid, []).append(child["id"])
    for parent, kids in by_marker.items():
        listed = graph.delegates.setdefault(parent, [])
        listed.extend(k for k in kids if k not in listed)
    for kids in graph.delegates.values():
        kids.sort()
    return graph
