"""Schema capabilities of one store, detected from the store itself.

Ground rule 8: column sets are read with ``PRAGMA table_info``, never inferred from
``schema_version``; upstream adds columns on every writable open regardless of the
version (docs/store.md §3.1, ``hermes_state_schema.py`` ``_reconcile_columns``). A missing
column is a capability that is off.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

# Newest schema version this dashboard knows (docs/store.md §3.1/§3.3: 30 in the stored
# SCHEMA_SQL, 31 for the newest upstream shape). Newer stores still load; the
# overview flags them.
KNOWN_SCHEMA_MAX = 31

# Without these the store is not a Hermes session store we can browse.
REQUIRED = {
    "sessions": ("id", "source", "started_at"),
    "messages": ("id", "session_id", "role", "content", "timestamp"),
}


@dataclass(frozen=True)
class Capabilities:
    """Tables and their columns, as the store has them.

    ``tables`` maps table (or view) name to its column names in declared order.
    ``schema_version`` is the highest row of ``schema_version`` (None if absent).
    """

    tables: dict[str, tuple[str, ...]] = field(default_factory=dict)
    schema_version: int | None = None
    indexes: dict[str, tuple[tuple[str, ...], ...]] = field(default_factory=dict)  # table -> column lists

    def has_index(self, table: str, *columns: str) -> bool:
        """True when some index of ``table`` starts with exactly these columns."""
        return any(cols[: len(columns)] == columns for cols in self.indexes.get(table, ()))

    def has_table(self, table: str) -> bool:
        return table in self.tables

    def has(self, table: str, column: str) -> bool:
        return column in self.tables.get(table, ())

    def columns(self, table: str) -> tuple[str, ...]:
        return self.tables.get(table, ())

    def missing_required(self) -> list[str]:
        """``table.column`` names a browsable store must have; empty when fine."""
        return [f"{t}.{c}" for t, cols in REQUIRED.items() for c in cols if not self.has(t, c)]

    @property
    def newer_than_known(self) -> bool:
        return self.schema_version is not None and self.schema_version > KNOWN_SCHEMA_MAX


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def read_capabilities(conn: sqlite3.Connection) -> Capabilities:
    """Read tables, columns and the schema version over an open (read-only) connection.

    FTS shadow tables and SQLite internals are left out. Raises ``sqlite3.Error``
    when SQLite cannot read the schema (e.g. ``malformed database schema``).
    """
    rows = conn.execute(
        "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%' ORDER BY name"
    ).fetchall()
    tables: dict[str, tuple[str, ...]] = {}
    names = {r[0] for r in rows}
    for (name,) in rows:
        # FTS5 shadow tables (<fts>_data, _idx, _docsize, _config, _content).
        if any(name == f"{base}{suffix}" for base in names for suffix in ("_data", "_idx", "_docsize", "_config", "_content")):
            continue
        try:
            cols = conn.execute(f"PRAGMA table_info({_quote(name)})").fetchall()
        except sqlite3.DatabaseError:
            # A virtual table whose module this SQLite lacks (e.g. a CJK tokenizer),
            # or whose constructor fails on a damaged FTS index ("vtable constructor
            # failed"): the FTS checks report that; browsing must go on.
            continue
        tables[name] = tuple(c[1] for c in cols)
    indexes: dict[str, tuple[tuple[str, ...], ...]] = {}
    for table in ("sessions", "messages"):
        if table not in tables:
            continue
        found = []
        for row in conn.execute(f"PRAGMA index_list({_quote(table)})").fetchall():
            info = conn.execute(f"PRAGMA index_info({_quote(row[1])})").fetchall()
            found.append(tuple(c[2] for c in sorted(info) if c[2] is not None))
        indexes[table] = tuple(found)
    version = None
    if "schema_version" in tables:
        row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
        version = row[0] if row and isinstance(row[0], int) else None
    return Capabilities(tables=tables, schema_version=version, indexes=indexes)
