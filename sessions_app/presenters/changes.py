"""A repair plan's changes (or a finished action's) as table rows: one row per change,
what it touches in words, the field's label, and typed before / after cells.

The changes come as ``actions.base.Change`` objects (a preview) or as their dicts
(``{"op", "table", "key", "column", "before", "after"}``: run reports and audit
events). Anything else given here (an older event's free-form changes) is reported
as not tabular, and the page shows it as JSON.
"""

from __future__ import annotations

from dataclasses import dataclass

from .labels import Cell, cell, label, text

SHOWN_CHANGES = 500  # rows of one plan's table; the rest are counted

OPS = {"update": "Change", "insert": "Add", "delete": "Remove", "move": "Move"}
TABLES = {"sessions": "Session", "messages": "Message", "session_turn_leases": "Turn lease",
          "compression_locks": "Compression lock", "file": "File", "state_meta": "Store setting",
          "gateway_routing": "Gateway routing entry"}
# Key names the actions use, as words before the value (actions/*: Change.key).
KEYS = {"jsonl_line": "from JSONL line", "copy_of": "copy of message", "after_id": "after message",
        "order": "position", "path": "", "name": "", "session_id": "of session", "conversation_id": "",
        "id": ""}
_MESSAGE_IDS = {"copy_of", "after_id"}  # values shown as "#12"


@dataclass(frozen=True)
class ChangeRow:
    """``op`` in words ("Change", "Add", "Hide", …) and ``op_code`` as planned;
    ``what`` the table's noun, ``ident`` the row's identity as ``(words, value)``
    pairs (``("", "#12")``, ``("from JSONL line", "3")``); ``field`` the column's label (``column``
    its raw name); ``before`` / ``after`` :class:`labels.Cell` s."""

    op: str
    op_code: str
    what: str
    ident: tuple
    field: str
    column: str
    before: Cell
    after: Cell


@dataclass(frozen=True)
class ChangeTable:
    """``rows`` (the first :data:`SHOWN_CHANGES`), ``total`` changes, and
    ``tabular`` False when the changes were not in the shape above."""

    rows: list
    total: int
    tabular: bool = True

    @property
    def more(self) -> int:
        return self.total - len(self.rows)


def _as_dict(change) -> dict | None:
    data = change if isinstance(change, dict) else getattr(change, "__dict__", None)
    if not isinstance(data, dict) or not isinstance(data.get("op"), str) or "table" not in data:
        return None
    return data


def _ident(table: str, key) -> tuple:
    if not isinstance(key, dict):
        return (("", text(key, 120)),)
    parts = []
    for name, value in key.items():
        if name == "after_id" and value is None:  # recovery/import before the first row
            parts.append(("at the start of the session", ""))
            continue
        shown = text(value, 120)
        if name in _MESSAGE_IDS or (name == "id" and table == "messages"):
            shown = f"#{shown}"
        parts.append((KEYS.get(name, label(name)), shown))
    return tuple(parts)


def _what(table: str) -> str:
    base, sep, inner = str(table).rpartition(":")  # "<target>:sessions": a row in another store
    if sep:
        return f"{TABLES.get(inner, inner)} in profile {base}"
    return TABLES.get(table, table)


def change_row(change: dict) -> ChangeRow:
    table, column = str(change.get("table") or ""), change.get("column") or ""
    op = OPS.get(change["op"], change["op"])
    if change["op"] == "update" and column == "active":
        op = "Hide" if change.get("after") in (0, False) else "Show"
    return ChangeRow(op=op, op_code=change["op"], what=_what(table), ident=_ident(table, change.get("key")),
                     field=label(column) if column else "", column=column,
                     before=cell(column or None, change.get("before")),
                     after=cell(column or None, change.get("after")))


def change_table(changes, limit: int = SHOWN_CHANGES) -> ChangeTable:
    """``changes`` (a list of ``Change`` or their dicts) as a :class:`ChangeTable`."""
    if not isinstance(changes, (list, tuple)):
        return ChangeTable([], 0, tabular=not changes)
    data = [_as_dict(c) for c in changes]
    if any(d is None for d in data):
        return ChangeTable([], len(data), tabular=False)
    return ChangeTable([change_row(d) for d in data[:limit]], len(data))
