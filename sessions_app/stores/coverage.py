"""Which message rows a store's full-text index does not cover, read from the store.

The index ``messages_fts`` misses rows in known ways (docs/store.md, Full-text
index), each detected here from the store's own schema and ``state_meta``, never
from its version number:

- ``cut``: the newest layout indexes the view ``messages_fts_src``, which keeps only
  the first ``FTS_TOOL_CONTENT_PREFIX_CHARS`` (8,192) characters of a tool row; the
  number is read from the view's own SQL. Words further into a longer tool output are
  not found, nor anything after a NUL (``substr`` stops there, so a structured
  ``\x00json:`` tool result is not indexed at all). Release stores (0.13.0-0.19.0)
  index inline copies of whole rows: no cut;
- ``window``: ``fts_rebuild_high_water`` / ``fts_rebuild_progress`` in ``state_meta``:
  while Hermes rebuilds the index, rows with ``progress < id <= high_water`` are not
  in it yet;
- ``stale``: ``fts_stale`` is set: Hermes detached the index after damage (its
  triggers dropped), so nothing written since is in it;
- ``no_trigger``: the index exists but its insert trigger does not: new rows are not
  indexed;
- ``missing`` / ``damaged``: no usable index at all.

Each gap carries the SQL predicate (over ``messages``) naming its rows, which is
what the bounded scan (:mod:`.scan`) looks at.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass, field

from .search import index_state

_CUT_RE = re.compile(r"role\s*=\s*'tool'\s+THEN\s+substr\s*\(\s*COALESCE\s*\(\s*content\s*,\s*''\s*\)\s*,\s*1\s*,\s*(\d+)\s*\)",
                     re.I)


@dataclass(frozen=True)
class Gap:
    """Rows the index misses: ``kind`` (see the module docstring), ``text`` (for the
    page), ``where`` (an SQL condition on ``messages`` columns) and its ``params``."""

    kind: str
    text: str
    where: str
    params: tuple = ()


@dataclass
class Coverage:
    """``index``: ``ok``, ``missing`` or ``damaged``; ``gaps``: what it misses;
    ``whole``: True when no index can be trusted and a scan must read every row."""

    index: str
    gaps: list[Gap] = field(default_factory=list)

    @property
    def whole(self) -> bool:
        return any(g.kind in ("missing", "damaged", "stale", "no_trigger") for g in self.gaps)

    @property
    def complete(self) -> bool:
        return not self.gaps

    def scan_where(self) -> tuple[str, tuple]:
        """The condition selecting every row some gap names (``1`` for all rows)."""
        if self.whole or not self.gaps:
            return "1", ()
        where = " OR ".join(f"({g.where})" for g in self.gaps)
        return where, tuple(p for g in self.gaps for p in g.params)


def _meta(conn: sqlite3.Connection, caps) -> dict[str, str]:
    if not caps.has_table("state_meta"):
        return {}
    keys = ("fts_stale", "fts_rebuild_high_water", "fts_rebuild_progress")
    rows = conn.execute(f"SELECT key, value FROM state_meta WHERE key IN ({','.join('?' * len(keys))})", keys)
    return {k: v for k, v in rows}


def _int(value) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def tool_prefix(conn: sqlite3.Connection) -> int | None:
    """Characters of a tool row the index keeps, from ``messages_fts_src``'s SQL, or
    None when the index reads whole rows (inline layout, or no such view)."""
    table = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'messages_fts'").fetchone()
    if not table or "messages_fts_src" not in (table[0] or ""):
        return None
    view = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'view' AND name = 'messages_fts_src'").fetchone()
    found = _CUT_RE.search(" ".join((view[0] if view else "").split()))
    return int(found.group(1)) if found else None


def coverage(conn: sqlite3.Connection, caps) -> Coverage:
    """What the store's ``messages_fts`` misses (read-only). Raises ``sqlite3.Error``
    for a busy store; a damaged index is reported, not raised."""
    state = index_state(conn)
    if state == "missing":
        return Coverage("missing", [Gap("missing", "This store has no full-text index.", "1")])
    if state == "damaged":
        return Coverage("damaged", [Gap("damaged", "This store's full-text index is damaged (SQLite cannot load "
                                                   "it).", "1")])
    out = Coverage("ok")
    meta = _meta(conn, caps)
    if meta.get("fts_stale") not in (None, "", "0"):
        out.gaps.append(Gap("stale", "Hermes marked this store's index stale (fts_stale) after damage and "
                                     "detached it: messages written since are not in it until Hermes rebuilds it.",
                            "1"))
    elif not conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'trigger' AND name = 'messages_fts_insert'"
                          ).fetchone():
        out.gaps.append(Gap("no_trigger", "This store's index has no insert trigger (messages_fts_insert): "
                                          "messages written since it went are not in it.", "1"))
    high, progress = _int(meta.get("fts_rebuild_high_water")), _int(meta.get("fts_rebuild_progress"))
    if high is not None:
        low = progress if progress is not None else -1
        if high > low:
            out.gaps.append(Gap("window", f"Hermes is rebuilding this store's index: messages #{low + 1:,} to "
                                          f"#{high:,} are not in it yet.", "id > ? AND id <= ?", (low, high)))
    cut = tool_prefix(conn)
    if cut is not None and caps.has("messages", "role"):
        # substr() also stops at a NUL: a structured tool result (stored "\x00json:...")
        # is not indexed at all (observed on the newest shape, docs/store.md §6).
        out.gaps.append(Gap("cut", f"This store's index holds only the first {cut:,} characters of each tool "
                                   "output (as Hermes indexes them), and nothing after a NUL character (so no "
                                   "structured tool result): words further into such a tool output are not found "
                                   "by the index.",
                            "role = 'tool' AND (length(CAST(content AS BLOB)) > ? OR instr(content, char(0)) > 0)",
                            (cut,)))
    return out
