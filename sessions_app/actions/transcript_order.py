"""Writing messages at their place in a transcript — the one mechanism the JSONL
import and ``recover_messages`` share.

Readers order a session by ``messages.id`` (docs/architecture.md §2, rule 10), so
a message that belongs *before* rows the store already has cannot simply be
appended. From the first inserted message on, the session is written again in
transcript order: each inserted message as a new row, each later visible row
copied after it byte for byte (``INSERT … SELECT``; ``id`` and display order are
the store's own: docs/store.md §3.4), the original hidden with ``active = 0``
(and ``compacted = 0``: the rewound state, shown nowhere) so nothing is lost and
the step can be undone. Hidden rows stay where they are.

On schemas without ``messages.active`` (before hermes-agent 0.17) an original
cannot be hidden: writing it again would mean removing it, which only an admin's
confirmed deletion may do (docs/architecture.md §2, rule 3). So there
:func:`blocked_on_schema` blocks every plan that would write later rows again, and
only messages after the session's last row can go in.
"""

from __future__ import annotations

import sqlite3

from .rowcopy import quote

# Never copied into a superseding row: the store computes them (docs/store.md §3.4).
NOT_COPIED = ("id", "display_order", "display_identity")


def order_ops(rows, inserts: dict) -> list[tuple[str, object]]:
    """The operations that put ``inserts`` at their place among ``rows``.

    ``rows``: the session's rows in ``messages.id`` order, each with ``id`` and
    ``visible``; ``inserts``: ``{after_id: [item, …]}`` (``after_id`` a row id,
    or None for "before the first row"; items in order). Returns ``("insert",
    item)`` and ``("copy", row id)`` from the first insertion point on; empty
    when there is nothing to insert.
    """
    if not any(inserts.values()):
        return []
    ids = [r.id for r in rows]
    points = [a for a, items in inserts.items() if items]
    first = -1 if None in points else min(ids.index(a) for a in points)
    ops: list[tuple[str, object]] = [("insert", item) for item in inserts.get(None, [])] if first == -1 else []
    if first >= 0:
        ops += [("insert", item) for item in inserts.get(ids[first], [])]
    for row in rows[first + 1:]:
        if row.visible:
            ops.append(("copy", row.id))
        ops += [("insert", item) for item in inserts.get(row.id, [])]
    return ops


# What an admin can do about a plan :func:`blocked_on_schema` stopped (shown on its preview).
SCHEMA_NEXT_STEP = (
    "Upgrade this profile's Hermes to 0.17 or later: its first start migrates state.db (adding "
    "messages.active, so originals can be hidden instead of removed); then check again and preview this "
    "repair. Until then nothing is lost: the copy stays on disk and the store's rows are untouched."
)


def blocked_on_schema(caps, superseded: list, doing: str, done: str) -> str:
    """Why a plan that writes ``superseded`` rows again cannot run on this store, or ''.

    The one rule the JSONL import and ``recover_messages`` share (module docstring):
    without ``messages.active`` nothing can be hidden, so writing later rows again
    would remove them. ``doing``/``done``: the action's words ("importing",
    "imported"), e.g. "… importing here would remove and re-insert 3 later row(s);
    only messages after the last row can be imported into it"."""
    if not superseded or caps.has("messages", "active"):
        return ""
    return (f"this store's schema (before hermes-agent 0.17) cannot hide rows: {doing} here would remove and "
            f"re-insert {len(superseded)} later row(s); only messages after the last row can be {done} into it")


def write_in_order(conn: sqlite3.Connection, caps, session_id: str, ops: list[tuple[str, object]],
                   values_of) -> int:
    """Apply ``ops`` (from :func:`order_ops`) inside the caller's write transaction.

    ``values_of(item)`` gives the column values of an inserted message (without
    ``session_id``). Returns the rows written. Raises ``sqlite3.IntegrityError``
    (rolling back) when a row is to be written again on a schema that cannot hide
    its original (a plan :func:`blocked_on_schema` should have stopped)."""
    if not caps.has("messages", "active") and any(op == "copy" for op, _ in ops):
        raise sqlite3.IntegrityError("this schema cannot hide a row written again; nothing written")
    columns = caps.columns("messages")
    copied = [c for c in columns if c not in NOT_COPIED]
    names = ", ".join(quote(c) for c in copied)
    hide = "active = 0" + (", compacted = 0" if caps.has("messages", "compacted") else "")
    written = 0
    for op, item in ops:
        if op == "insert":
            values = dict(values_of(item), session_id=session_id)
            conn.execute(f"INSERT INTO messages ({', '.join(quote(c) for c in values)}) "
                         f"VALUES ({', '.join('?' * len(values))})", tuple(values.values()))
        else:
            conn.execute(f"INSERT INTO messages ({names}) SELECT {names} FROM messages WHERE id = ?", (item,))
            conn.execute(f"UPDATE messages SET {hide} WHERE id = ?", (item,))
        written += 1
    return written


def recount(conn, caps, session_id: str, new_calls: int) -> None:
    """``message_count`` to the active rows (the ``counter_drift`` check's own
    predicate, so nothing is left to recount) and ``tool_call_count`` grown by
    the inserted tool calls (what upstream appends do, docs/store.md §4.1)."""
    from ..checks.base import active_predicate

    if caps.has("sessions", "message_count"):
        conn.execute(f"UPDATE sessions SET message_count = (SELECT COUNT(*) FROM messages WHERE session_id = ? "
                     f"AND {active_predicate(caps)}) WHERE id = ?", (session_id, session_id))
    if new_calls and caps.has("sessions", "tool_call_count"):
        conn.execute("UPDATE sessions SET tool_call_count = COALESCE(tool_call_count, 0) + ? WHERE id = ?",
                     (new_calls, session_id))
