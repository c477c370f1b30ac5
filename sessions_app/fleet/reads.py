"""The worker's read API: plain JSON answers about its own profiles.

Each function runs on the host that holds the stores (task ``hermes.read``,
:mod:`.tasks`), reads through the same code as one host's pages do
(``stores.listing``, ``stores.transcript``, ``stores.lineage``, ``checks``) and
returns only JSON values (store BLOBs become ``"<N bytes>"``, non-finite floats
``None``). Masking of secrets is the dashboard's business (it knows the user).
Errors: a store that cannot be read is ``{"unavailable": {"status", "reason"}}``
in the answer, never an exception; a key or argument that is not this worker's is
refused by :mod:`.worker`.
"""

from __future__ import annotations

import datetime as dt
import math
import sqlite3

from ..checks import run_store_checks
from ..runs import finding_json
from ..stores.lineage import Lineage
from ..stores.listing import Filters, list_sessions
from ..stores.connection import classify_error
from ..stores.transcript import for_store as transcript_for
from . import worker

MAX_LIMIT = 200
MAX_PAGE = 500


def plain(value):
    """``value`` as JSON: bytes by size, non-finite floats as None, containers walked."""
    if isinstance(value, bytes | bytearray | memoryview):
        return f"<{len(bytes(value))} bytes>"
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if value is None or isinstance(value, str | int | bool):
        return value
    return str(value)


def _int(value, lo=None, hi=None):
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not -(2**63) <= value < 2**63:
        raise worker.refuse("read", f"{value!r} is not an integer")
    if lo is not None and value < lo or hi is not None and value > hi:
        raise worker.refuse("read", f"{value} is out of range")
    return value


def _cursor(value):
    """A ``(sort, key, id)`` keyset cursor from JSON, or None."""
    if value is None:
        return None
    if (not isinstance(value, list) or len(value) != 3 or not isinstance(value[1], str)
            or not isinstance(value[2], str) or not isinstance(value[0], int | float | type(None))):
        raise worker.refuse("read", "the page cursor is malformed")
    return (float(value[0]) if value[0] is not None else None, value[1], value[2])


def _day(value):
    if not value:
        return None
    try:
        return dt.date.fromisoformat(str(value))
    except ValueError:
        raise worker.refuse("read", f"{value!r} is not a date") from None


def sessions(filters: dict | None = None, limit: int = 50, after=None) -> dict:
    """One page of this host's sessions, newest first, after the ``after`` cursor.

    ``filters``: ``{"profiles": [keys], "source", "state", "date_from", "date_to"
    (ISO days), "q", "order"}`` as ``stores.listing.Filters``; profile keys must be
    this host's. Returns ``{"rows": [list row dicts], "next": cursor | None,
    "count", "capped", "errors": {key: [status, reason]}}``; rows as
    ``listing.Page.rows``. The dashboard merges hosts' pages by ``(sort, key, id)``.
    """
    from ..stores import registry

    filters = dict(filters or {})
    keys = filters.get("profiles") or []
    if not isinstance(keys, list):
        raise worker.refuse("read", "profiles is not a list")
    for key in keys:
        worker.store_for("read", key)
    order = filters.get("order") or "started"
    if order not in ("started", "activity"):
        raise worker.refuse("read", f"unknown order {order!r}")
    wanted = Filters(profiles=list(keys), source=str(filters.get("source") or ""),
                     state=str(filters.get("state") or ""), date_from=_day(filters.get("date_from")),
                     date_to=_day(filters.get("date_to")), q=str(filters.get("q") or "")[:500], order=order)
    page = list_sessions(registry.glances(), wanted, limit=_int(limit, 1, MAX_LIMIT), after=_cursor(after))
    return {"rows": plain(page.rows), "next": plain(page.next_cursor), "count": page.count,
            "capped": page.count_capped, "errors": {k: list(v) for k, v in page.errors.items()}}


def profile(key: str) -> dict:
    """The overview facts of one profile: ``{"status": StoreStatus fields}``."""
    store = worker.store_for("read", key)
    status = store.probe()
    return {"status": plain({k: getattr(status, k) for k in status.__dataclass_fields__})}


def _message(msg) -> dict:
    row = msg.row
    return {
        "id": row.get("id"), "role": row.get("role"), "timestamp": row.get("timestamp"),
        "text": msg.text, "content_length": msg.content_length, "truncated": msg.truncated,
        "state": msg.state, "tool_name": row.get("tool_name"), "tool_call_id": row.get("tool_call_id"),
        "tool_calls": [{"name": c.get("name"), "id": c.get("id"), "arguments": c.get("arguments")}
                       for c in msg.tool_calls],
        "undecodable": [list(u) for u in msg.undecodable],
    }


def session(key: str, session_id: str, size: int = 100, after=None, before=None,
            include_inactive: bool = False, content: bool = True) -> dict:
    """A session page's data: ``{"session": row | None, "messages": [...], "page":
    {"first_id", "last_id", "has_prev", "has_next", "total", "total_capped"},
    "parent", "children", "findings": [finding_json], "unavailable"?}``.

    ``content`` False (the user lacks the transcript permission): no messages.
    ``{"missing": True}`` when neither a session row nor any message exists.
    """
    store = worker.store_for("read", key, session_ids=[session_id])
    session_id = worker.session_id_arg("read", session_id, key)
    size = _int(size, 1, MAX_PAGE)
    status = store.readiness()
    if status is not None:
        return {"unavailable": {"status": status.status, "reason": status.reason}}
    try:
        with store.read(lenient=True) as conn:
            caps = store.capabilities(conn)
            columns = [c for c in caps.columns("sessions")]
            names = ", ".join(f'"{c}"' for c in columns)
            cur = conn.execute(f"SELECT {names} FROM sessions WHERE id = ?", (session_id,))
            found = cur.fetchone()
            row = dict(zip(columns, found)) if found else None
            transcript = transcript_for(conn, caps, session_id, bool(include_inactive))
            page = transcript.page(size=size, after=_int(after), before=_int(before))
            if row is None and not page.messages:
                return {"missing": True}
            lineage = Lineage(conn, caps.columns("sessions"))
            parent = lineage.parent(row) if row else None
            children = lineage.children(session_id)
    except sqlite3.Error as exc:
        code, reason = classify_error(exc)
        return {"unavailable": {"status": code, "reason": reason}}
    findings = run_store_checks(store, session_id=session_id).findings
    return plain({
        "session": row,
        "messages": [_message(m) for m in page.messages] if content else [],
        "page": {"first_id": page.first_id, "last_id": page.last_id, "has_prev": page.has_prev,
                 "has_next": page.has_next, "total": page.total, "total_capped": page.total_capped},
        "parent": parent, "children": children,
        "findings": [finding_json(f) for f in findings],
    })


def ping() -> dict:
    """``{"profiles": n}``: the round trip alone (benchmarks, health probes)."""
    from ..stores import registry

    return {"profiles": len(registry.stores())}


READS = {"sessions": sessions, "profile": profile, "session": session, "ping": ping}
