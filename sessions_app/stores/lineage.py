"""Parent/child edges between sessions and the compression chain.

Edge kinds follow upstream ``hermes_state_common.py`` as summarised in docs/store.md §4.1:

- ``delegate``: the child's ``model_config`` carries ``_delegate_from`` equal to the
  parent id (or the child's source is ``subagent``);
- ``branch``: ``_branched_from`` equals the parent id, or (legacy) the parent ended
  ``branched`` before the child started;
- ``reset``: ``_reset_from`` equals the parent id, or (legacy) the parent ended with a
  reset reason and both share the same non-empty ``session_key``;
- ``compression``: the parent ended with ``compression``, the child carries no fork
  marker bound to that parent, and its source is not ``tool``;
- ``other``: any other parent link (upstream calls these ephemeral).

A marker only classifies a child when it equals the child's own parent id:
compression children copy ``model_config`` verbatim, markers included.
"""

from __future__ import annotations

import sqlite3
from typing import Iterable

from . import jsondecode

RESET_END_REASONS = frozenset(
    {"session_reset", "session_switch", "idle", "daily", "suspended", "resume_pending_expired"}
)
MARKERS = {"_delegate_from": "delegate", "_branched_from": "branch", "_reset_from": "reset"}
# Upstream caps: 100 hops for root-to-tip walks, 1000 for the forward chain.
UP_CAP = 100
DOWN_CAP = 1000


def model_config_dict(raw) -> dict:
    """``model_config`` parsed to a dict; anything unparseable reads as ``{}``."""
    if not raw or not isinstance(raw, str):
        return {}
    value = jsondecode.loads(raw, default={})
    return value if isinstance(value, dict) else {}


def classify_edge(parent: dict, child: dict) -> str:
    """Kind of the edge ``parent -> child``; rows are dicts of session columns."""
    pid = parent.get("id")
    config = model_config_dict(child.get("model_config"))
    for marker, kind in MARKERS.items():
        if config.get(marker) == pid:
            return kind
    if child.get("source") == "subagent":
        return "delegate"
    end_reason = parent.get("end_reason")
    if end_reason == "compression" and child.get("source") != "tool":
        return "compression"
    if end_reason == "branched":
        ended, started = parent.get("ended_at"), child.get("started_at")
        if isinstance(ended, (int, float)) and isinstance(started, (int, float)) and ended <= started:
            return "branch"
    key = parent.get("session_key")
    if end_reason in RESET_END_REASONS and key and key == child.get("session_key"):
        return "reset"
    return "other"


LINEAGE_COLUMNS = (
    "id", "source", "title", "parent_session_id", "started_at", "ended_at", "end_reason",
    "model_config", "session_key", "message_count",
)


def _select(columns: Iterable[str], present: set[str]) -> str:
    return ", ".join(c if c in present else f"NULL AS {c}" for c in columns)


class Lineage:
    """Lineage queries over one open read-only connection.

    ``present`` is the set of ``sessions`` columns the store has; absent ones read as
    NULL so old schemas work (ground rule 8).
    """

    def __init__(self, conn: sqlite3.Connection, present: Iterable[str], known: dict | None = None):
        """``known``: a ``sessions`` row (``{column: value}``, the store's columns) the
        caller read on ``conn`` moments ago (the session page's own row): :meth:`get`
        of its id answers from it instead of reading it again."""
        self.conn = conn
        self.present = set(present)
        self.cols = _select(LINEAGE_COLUMNS, self.present)
        self._known = {}
        if known is not None and known.get("id") is not None:
            self._known[known["id"]] = {c: known.get(c) if c in self.present else None for c in LINEAGE_COLUMNS}

    def _rows(self, where: str, params: tuple) -> list[dict]:
        cur = self.conn.execute(f"SELECT {self.cols} FROM sessions WHERE {where}", params)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row)) for row in cur.fetchall()]

    def get(self, session_id: str) -> dict | None:
        if session_id in self._known:
            return dict(self._known[session_id])  # a copy: callers add to and mask the rows they get
        rows = self._rows("id = ?", (session_id,))
        return rows[0] if rows else None

    def children(self, session_id: str) -> list[dict]:
        """Children with their edge kind, ordered by start time then id."""
        parent = self.get(session_id) or {"id": session_id}
        rows = self._rows("parent_session_id = ? ORDER BY started_at, id", (session_id,))
        for row in rows:
            row["edge"] = classify_edge(parent, row)
        return rows

    def parent(self, session: dict) -> dict | None:
        """The parent row with its edge kind, ``{"missing": True, ...}`` if dangling."""
        pid = session.get("parent_session_id")
        if not pid:
            return None
        row = self.get(pid)
        if row is None:
            return {"id": pid, "missing": True, "edge": "other"}
        row["edge"] = classify_edge(row, session)
        return row

    def continuation(self, session: dict) -> dict | None:
        """The compression continuation of ``session``, chosen as upstream's chain step
        does: prefer a child itself ended by compression, then an open one, then the
        most recently started."""
        if session.get("end_reason") != "compression":
            return None
        candidates = [c for c in self.children(session["id"]) if c["edge"] == "compression"]
        if not candidates:
            return None
        candidates.sort(
            key=lambda c: (
                c.get("end_reason") == "compression",
                c.get("ended_at") is None,
                c.get("started_at") or 0,
            ),
            reverse=True,
        )
        return candidates[0]

    def chain(self, session_id: str) -> list[dict]:
        """The whole compression chain containing ``session_id``, root first.

        Walks up while the edge is ``compression`` (at most UP_CAP hops), then down
        through continuations (at most DOWN_CAP); a cycle stops the walk.
        Returns ``[]`` for an unknown id.
        """
        start = self.get(session_id)
        if start is None:
            return []
        seen = {start["id"]}
        up: list[dict] = []
        node = start
        for _ in range(UP_CAP):
            parent = self.parent(node)
            if not parent or parent.get("missing") or parent["edge"] != "compression" or parent["id"] in seen:
                break
            seen.add(parent["id"])
            up.append(parent)
            node = parent
        chain = list(reversed(up)) + [start]
        for _ in range(DOWN_CAP):
            nxt = self.continuation(chain[-1])
            if nxt is None or nxt["id"] in seen:
                break
            seen.add(nxt["id"])
            chain.append(nxt)
        return chain
