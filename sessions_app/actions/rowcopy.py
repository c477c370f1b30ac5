"""Exact row copies and fingerprints, within one store or between two.

Values travel exactly as SQLite stores them: text as its bytes (``CAST(x AS BLOB)``,
written back with ``CAST(? AS TEXT)``, so even text that is not valid UTF-8 survives
untouched), numbers and blobs as themselves; a REAL is never turned into text (SQLite
would keep only 15 digits). Used by the transcript import (superseded rows) and by
moves between profile stores (docs/store.md §11.1).
"""

from __future__ import annotations

import hashlib
import sqlite3
from typing import Iterable


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def exact_select(columns: Iterable[str]) -> str:
    """Select list giving ``value, typeof`` per column, text as bytes."""
    return ", ".join(
        f"CASE WHEN typeof({quote(c)}) = 'text' THEN CAST({quote(c)} AS BLOB) ELSE {quote(c)} END, typeof({quote(c)})"
        for c in columns
    )


def copy_rows(src: sqlite3.Connection, dst: sqlite3.Connection, table: str, columns: list[str], where: str,
              params: tuple, order: str = "rowid", overrides: dict | None = None) -> int:
    """INSERT into ``dst.table`` every ``src.table`` row matching ``where``, in ``order``,
    with the given ``columns`` copied exactly and ``overrides`` (column -> value)
    replacing a copied value. Returns the number of rows written."""
    overrides = overrides or {}
    names = ", ".join(quote(c) for c in columns)
    statements: dict[tuple, str] = {}
    count = 0
    cur = src.execute(f"SELECT {exact_select(columns)} FROM {quote(table)} WHERE {where} ORDER BY {order}", params)
    for row in cur:
        values, kinds = [], []
        for n, column in enumerate(columns):
            if column in overrides:
                values.append(overrides[column])
                kinds.append("?")
            else:
                values.append(row[2 * n])
                kinds.append("CAST(? AS TEXT)" if row[2 * n + 1] == "text" else "?")
        signature = tuple(kinds)
        if signature not in statements:
            statements[signature] = f"INSERT INTO {quote(table)} ({names}) VALUES ({', '.join(kinds)})"
        dst.execute(statements[signature], values)
        count += 1
    return count


def fingerprint(conn: sqlite3.Connection, table: str, columns: list[str], where: str, params: tuple,
                order: str = "rowid") -> list:
    """``[rows, sha256]`` over the exact values of ``columns`` of the matching rows in ``order``."""
    digest = hashlib.sha256()
    rows = 0
    for row in conn.execute(f"SELECT {exact_select(columns)} FROM {quote(table)} WHERE {where} ORDER BY {order}", params):
        digest.update(repr(row).encode())
        rows += 1
    return [rows, digest.hexdigest()]
