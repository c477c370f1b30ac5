"""One session's own row, system prompt and usage rows, read over an open read-only
connection (the session page; docs/store.md, Sessions).

Plain SQL on the page's one connection rather than the ORM alias (which opens a
connection of its own per request): the columns are the model's
(:class:`~sessions_app.models.AgentSession`, :class:`~sessions_app.models.SessionModelUsage`)
that the store has (ground rule 8), values as SQLite returns them (rule 7).
"""

from __future__ import annotations

import sqlite3

from ..models import AgentSession, SessionModelUsage
from .schema import Capabilities


def _columns(model, caps: Capabilities, table: str) -> list[str]:
    return [f.column for f in model._meta.concrete_fields if caps.has(table, f.column)]


def session_row(conn: sqlite3.Connection, caps: Capabilities, session_id: str) -> dict | None:
    """The ``sessions`` row as ``{column: value}`` (the store's own column names, in
    the model's field order, then the columns the model does not know, in the
    table's order: a newer schema's columns still show, ground rule 8), or None
    when there is no such row."""
    cols = _columns(AgentSession, caps, "sessions")
    cols += [c for c in caps.columns("sessions") if c not in cols]
    quoted = ", ".join('"' + c.replace('"', '""') + '"' for c in cols)
    cur = conn.execute(f"SELECT {quoted} FROM sessions WHERE id = ?", (session_id,))
    row = cur.fetchone()
    return dict(zip(cols, row)) if row is not None else None


def system_prompt(conn: sqlite3.Connection, caps: Capabilities, session: dict | None) -> str | None:
    """The session's system prompt: inline in ``sessions.system_prompt`` (releases), or
    by ``system_prompt_hash`` in ``system_prompts`` (newest shape); None when neither."""
    if not session:
        return None
    prompt = session.get("system_prompt")
    if not prompt and session.get("system_prompt_hash") and caps.has_table("system_prompts"):
        found = conn.execute("SELECT prompt FROM system_prompts WHERE hash = ?",
                             (session["system_prompt_hash"],)).fetchone()
        prompt = found[0] if found else None
    return prompt


def usage_rows(conn: sqlite3.Connection, caps: Capabilities, session_id: str) -> list[dict]:
    """``session_model_usage`` rows of the session (schema 20+; ``[]`` before), keyed
    by the model's field names, in the table's own order."""
    if not caps.has_table("session_model_usage"):
        return []
    fields = [f for f in SessionModelUsage._meta.concrete_fields if caps.has("session_model_usage", f.column)]
    cur = conn.execute(f"SELECT {', '.join(f.column for f in fields)} FROM session_model_usage WHERE session_id = ?",
                       (session_id,))
    return [dict(zip((f.attname for f in fields), row)) for row in cur.fetchall()]


def exists(store, session_id: str) -> bool:
    """Whether ``store`` holds a ``sessions`` row for ``session_id`` (its own short
    read-only connection; exports check this before streaming)."""
    with store.read() as conn:
        return conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is not None
