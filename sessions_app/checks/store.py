"""Store-level checks: access, structure, schema, full-text index, leases, dependents
(docs/store.md §3.1-§4.3, §7.1-§7.2, §11.3, §13 row 4, §13 row 6-§13 row 7, §13 row 19-§13 row 20, §13 row 26).

Store-level checks run in full passes only (never on a session page).

Longer than most modules on purpose: the store-level checks of the catalog, one small class each, sharing the structural pass.
"""

from __future__ import annotations

import re
import sqlite3
import time

from django.conf import settings

from ..stores.connection import restore_progress, stop_requested
from ..stores.discovery import DEFAULT_PROFILE
from ..stores.liveness import holder_is_dead, holder_pid
from ..timefmt import is_number
from .base import Check, ago, capped, plural

# Tables and columns of the newest known shape (docs/store.md §3.3 + 2.9, the edge
# fixture's schema 31). Lazily created tables (Telegram topics, delivery ledger)
# and session_deletion_receipts (columns unknown) are left out on purpose.
NEWEST_SCHEMA = {
    "schema_version": ("version",),
    "system_prompts": ("hash", "prompt"),
    "sessions": (
        "id", "source", "created_source", "user_id", "session_key", "chat_id", "chat_type", "thread_id",
        "display_name", "origin_json", "expiry_finalized", "model", "model_config", "system_prompt",
        "system_prompt_hash", "parent_session_id", "started_at", "ended_at", "end_reason", "message_count",
        "tool_call_count", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
        "reasoning_tokens", "cwd", "git_branch", "git_repo_root", "git_metadata_generation", "billing_provider",
        "billing_base_url", "billing_mode", "estimated_cost_usd", "actual_cost_usd", "cost_status", "cost_source",
        "pricing_version", "title", "title_source", "last_activity_at", "last_activity_description",
        "last_activity_provenance", "api_call_count", "handoff_state", "handoff_platform", "handoff_error",
        "compression_failure_cooldown_until", "compression_failure_error", "compression_fallback_streak",
        "compression_ineffective_count", "compression_recovery_deadline", "compression_overload_streak",
        "profile_name", "transport_profile", "rewind_count", "archived", "auto_archived", "pinned", "hidden",
        "last_read_at", "tool_names",
    ),
    "messages": (
        "id", "session_id", "role", "content", "tool_call_id", "tool_calls", "tool_name", "effect_disposition",
        "timestamp", "token_count", "finish_reason", "reasoning", "reasoning_content", "reasoning_details",
        "codex_reasoning_items", "codex_message_items", "platform_message_id", "observed", "_compressed_summary",
        "active", "compacted", "api_content", "display_kind", "display_metadata", "display_identity",
        "display_order", "message_uid", "absorbed_message_uids", "tool_call_uids", "tool_call_uid",
    ),
    "session_model_usage": (
        "session_id", "model", "billing_provider", "billing_base_url", "billing_mode", "task", "api_call_count",
        "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens",
        "estimated_cost_usd", "actual_cost_usd", "cost_status", "cost_source", "first_seen", "last_seen",
    ),
    "state_meta": ("key", "value"),
    "gateway_routing": ("scope", "session_key", "entry_json", "updated_at"),
    "gateway_hygiene_state": ("session_key", "failure_streak"),
    "conversation_generations": ("source", "session_key", "generation"),
    "gateway_heartbeats": ("backend_id", "pid", "started_at", "last_heartbeat", "profile", "host"),
    "compression_locks": ("session_id", "holder", "acquired_at", "expires_at"),
    "session_turn_leases": ("conversation_id", "holder", "acquired_at", "expires_at"),
    "async_delegations": (
        "delegation_id", "origin_session", "origin_ui_session_id", "parent_session_id", "state", "dispatched_at",
        "completed_at", "updated_at", "event_json", "result_json", "delivery_state", "delivery_attempts",
        "delivered_at", "owner_pid", "owner_started_at", "task_json", "delivery_claim", "delivery_claimed_at",
        "origin_session_id",
    ),
}
LONG_EXPIRED_SECONDS = 86400  # upstream sweeps lease rows expired this long (docs/store.md §7.1)
QUICK_CHECK_MAX_ERRORS = 100
FTS_PREFIX = "messages_fts"
# quick_check lines naming a b-tree: "Tree N page M cell K: ..." (N is the root
# page) or "Page N: btreeInitPage() returns error code 11" (N may be a root page).
_TREE_RE = re.compile(r"^(?:Tree (\d+) page\b|Page (\d+): )")
# Pages cut off by damage elsewhere; they say nothing about where the damage is.
_NEVER_USED_RE = re.compile(r"^Page \d+ is never used$")


# --------------------------------------------------------------------------- access (runner-emitted)

class StoreUnreadable(Check):
    code = "store_unreadable"
    light = True
    severity = "critical"
    scope = "store"
    runner_emitted = True
    title = "Store cannot be read"
    next_step = (
        "If the profile simply has no store yet, nothing to do: Hermes creates it on first use. Otherwise "
        "give the dashboard's user read access to state.db and its folder, or, for a file that is not "
        "SQLite, stop the profile's Hermes processes and recover it from a backup or with 'hermes "
        "sessions recover'."
    )
    explanation = (
        "The profile's state.db is missing, empty, not an SQLite database, or the dashboard's "
        "user may not read it. Nothing in it can be shown or checked. A profile that simply has "
        "no store yet is reported as info."
    )


class StoreBusy(Check):
    code = "store_busy"
    light = True
    severity = "warning"
    scope = "store"
    runner_emitted = True
    title = "Store is busy"
    next_step = (
        "Check again in a minute. If it stays busy, a process holds a long write: 'hermes doctor' names "
        "the holders; let it finish or restart it."
    )
    explanation = (
        "Another process held the store locked longer than the dashboard waits for a read. "
        "Nothing is wrong with the data; retry later."
    )


class SchemaMalformed(Check):
    code = "schema_malformed"
    light = True
    severity = "critical"
    scope = "store"
    runner_emitted = True
    title = "SQLite refuses the schema"
    next_step = (
        "Keep a copy of state.db and its -wal, then let Hermes open the profile once for writing (any "
        "hermes command of that profile, e.g. 'hermes doctor'): its schema repair runs then. Check again "
        "afterwards."
    )
    explanation = (
        "SQLite cannot load the store's schema (for example an object defined twice). Hermes "
        "tries its own schema repair when it next opens the store for writing; until then the "
        "store cannot be read at all. Keep a copy before anything touches it."
    )


# --------------------------------------------------------------------------- structure

def _quick_check_lines(conn, table: str | None = None) -> list[str]:
    """quick_check output as lines (SQLite may join several errors in one row)."""
    target = '"' + table.replace('"', '""') + '"' if table else str(QUICK_CHECK_MAX_ERRORS)
    rows = [r[0] for r in conn.execute(f"PRAGMA quick_check({target})")]
    return [part for row in rows for part in str(row).split("\n") if part.strip()]


def _classify_lines(ctx, lines: list[str]) -> dict:
    roots = {row[1]: row[0] for row in ctx.conn.execute(
        "SELECT name, rootpage FROM sqlite_master WHERE rootpage > 0")}
    objects, unattributed = set(), []
    for line in lines:
        if line.startswith("*** in database") or _NEVER_USED_RE.match(line):
            continue
        match = _TREE_RE.match(line)
        name = roots.get(int(match.group(1) or match.group(2))) if match else None
        if name is None:
            unattributed.append(line)
        else:
            objects.add(name)
    # Only "never used" pages, or any line we cannot place: treat as structural.
    fts_only = bool(objects) and not unattributed and all(o.startswith(FTS_PREFIX) for o in objects)
    return {"state": "fts_only" if fts_only else "structural", "lines": lines[:QUICK_CHECK_MAX_ERRORS],
            "objects": sorted(objects), "reason": ""}


def _per_table(ctx, error: str) -> dict:
    """quick_check table by table, after the whole-file check itself failed (SQLite
    3.40 fails outright on a broken FTS shadow table, or on a table it scans for
    NOT NULL columns). Which tables fail decides FTS-only versus structural."""
    tables = [name for (name,) in ctx.conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND rootpage > 0 ORDER BY name")]
    failing: dict[str, list[str]] = {}
    for name in tables:
        try:
            lines = _quick_check_lines(ctx.conn, name)
        except sqlite3.OperationalError:
            raise  # busy or interrupted: the caller decides
        except sqlite3.DatabaseError as exc:
            lines = [str(exc)]
        if lines != ["ok"]:
            failing[name] = lines[:5]
    if not failing:
        return {"state": "structural", "lines": [error], "objects": [], "reason": error}
    lines = [f"{name}: {line}" for name, found in failing.items() for line in found]
    fts_only = all(name.startswith(FTS_PREFIX) for name in failing)
    return {"state": "fts_only" if fts_only else "structural", "lines": lines, "objects": sorted(failing),
            "reason": error}


def quick_check(ctx) -> dict:
    """``PRAGMA quick_check`` once per pass, classified as upstream's
    ``state_db_has_structural_damage`` does (docs/store.md §11.3): each ``Tree N`` /
    ``Page N:`` line is mapped to the object whose rootpage is N; damage confined
    to FTS objects (``messages_fts*``) is FTS-only, anything else (or a line that
    cannot be placed) is structural. When the whole-file check fails outright,
    tables are checked one by one to find where the damage is.

    Returns ``{"state": "ok" | "fts_only" | "structural" | "skipped", "lines",
    "objects", "reason"}``. Bounded by ``HERMES_QUICK_CHECK_BUDGET`` seconds
    (default 60) and QUICK_CHECK_MAX_ERRORS lines.
    """

    def compute():
        budget = float(getattr(settings, "HERMES_QUICK_CHECK_BUDGET", 60))
        deadline = time.monotonic() + budget
        ctx.conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline or stop_requested() else 0, 10_000)
        try:
            try:
                lines = _quick_check_lines(ctx.conn)
            except sqlite3.OperationalError:
                raise
            except sqlite3.DatabaseError as exc:
                return _per_table(ctx, str(exc))
            if lines == ["ok"]:
                return {"state": "ok", "lines": [], "objects": [], "reason": ""}
            return _classify_lines(ctx, lines)
        except sqlite3.OperationalError as exc:
            if str(exc) != "interrupted":
                raise
            ctx.notes.append(f"quick_check skipped: ran past its {budget:.0f} s budget")
            return {"state": "skipped", "lines": [], "objects": [], "reason": "time budget"}
        finally:
            restore_progress(ctx.conn)  # the connection's own budget and stop request

    return ctx.memo("quick_check", compute)


class StoreCorrupt(Check):
    code = "store_corrupt"
    severity = "critical"
    scope = "store"
    title = "Store is structurally damaged"
    next_step = (
        "Stop every Hermes process of this profile and keep a copy of state.db with its -wal, then "
        "salvage it with 'hermes sessions recover --source state.db --output <new.db>' and install the "
        "result."
    )
    explanation = (
        "SQLite's own consistency check found damage outside the full-text index: pages or "
        "b-trees of real tables or indexes are broken. Reads may fail or return incomplete "
        "data, and writing can make it worse."
    )

    def run(self, ctx):
        result = quick_check(ctx)
        if result["state"] == "structural":
            # SQLite's own lines ("*** in database main ***", "Page 23: btreeInitPage()
            # returns error code 11") stay in the evidence; the pages fold them away.
            problems = [ln for line in result["lines"] for ln in str(line).splitlines()
                        if ln.strip() and not ln.startswith("*** in database")]
            where = f" in {', '.join(result['objects'])}" if result["objects"] else ""
            count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}" if problems else "damage"
            yield self.finding(None, len(problems) or 1,
                               f"SQLite's consistency check (quick_check) found {count}{where}; "
                               "pages of the file cannot be read as SQLite wrote them",
                               {"quick_check": result["lines"] or [result["reason"]], "objects": result["objects"]})


class SchemaOutdated(Check):
    code = "schema_outdated"
    light = True
    severity = "info"
    scope = "store"
    title = "Store predates the newest schema"
    next_step = (
        "Nothing to do unless you need the missing features: a Hermes that has them adds the tables and "
        "columns itself the next time it runs on this profile."
    )
    explanation = (
        "The store lacks tables or columns of the newest store shape the dashboard knows, which may be "
        "newer than any Hermes release (the upstream development branch): its release wrote an older "
        "shape. That is normal: a Hermes that has them adds them itself on its next writable open. "
        "Features that rely on them (turn leases, heartbeats, owner stamps...) are simply off for "
        "this store."
    )

    def run(self, ctx):
        missing_tables = sorted(t for t in NEWEST_SCHEMA if not ctx.caps.has_table(t))
        missing_columns = {
            t: [c for c in cols if not ctx.caps.has(t, c)]
            for t, cols in NEWEST_SCHEMA.items() if ctx.caps.has_table(t)
        }
        missing_columns = {t: cols for t, cols in missing_columns.items() if cols}
        n = len(missing_tables) + sum(len(c) for c in missing_columns.values())
        if n:
            version = ctx.caps.schema_version
            yield self.finding(None, n, f"schema {version}: {plural(len(missing_tables), 'table')} and "
                                        f"{plural(n - len(missing_tables), 'column')} of the newest shape are absent",
                               {"schema_version": version, "missing_tables": missing_tables,
                                "missing_columns": missing_columns})


# --------------------------------------------------------------------------- full-text index

def fts_tables(ctx) -> dict[str, str]:
    """FTS5 virtual tables of the messages index family: name -> CREATE sql."""
    return {name: sql for name, sql in ctx.conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name LIKE 'messages\\_fts%' ESCAPE '\\' "
        "AND sql LIKE 'CREATE VIRTUAL TABLE%'") if "fts5" in (sql or "").lower()}


def state_meta(ctx) -> dict[str, str]:
    if not ctx.caps.has("state_meta", "key"):
        return {}
    return ctx.memo("state_meta", lambda: {k: v for k, v in ctx.conn.execute("SELECT key, value FROM state_meta")})


def _window_keys(table: str) -> tuple[str, str]:
    if table.startswith("messages_fts_cjk"):
        return "fts_cjk_rebuild_high_water", "fts_cjk_rebuild_progress"
    return "fts_rebuild_high_water", "fts_rebuild_progress"


def _environment_error(exc: sqlite3.Error) -> bool:
    """Errors that say this SQLite lacks a tokenizer/module, not that the index is bad."""
    text = str(exc).lower()
    return "no such tokenizer" in text or "no such module" in text or "parse error" in text


class FtsDamaged(Check):
    code = "fts_damaged"
    severity = "warning"
    scope = "store"
    title = "Search index damaged"
    next_step = (
        "Messages are safe. Stop the profile's Hermes processes and run 'hermes sessions optimize' (or "
        "open the profile once with no other process on it) so Hermes rebuilds the index; meanwhile the "
        "search page can scan the rows the index misses."
    )
    explanation = (
        "The full-text search index is broken or detached: a real search fails, SQLite's check "
        "finds damage confined to the index, Hermes marked it stale after meeting corruption, or "
        "its sync triggers are gone. Messages are safe; search misses them or falls back to slow "
        "scans until Hermes rebuilds the index (it does on a later open when no other process holds "
        "the store, or via 'hermes sessions optimize')."
    )

    def run(self, ctx):
        problems: list[dict] = []
        if ctx.full_pass:
            result = quick_check(ctx)
            if result["state"] == "fts_only":
                problems.append({"kind": "quick_check", "objects": result["objects"], "lines": result["lines"][:5]})
        meta = state_meta(ctx)
        for key in ("fts_stale", "fts_cjk_stale"):
            if meta.get(key) not in (None, "", "0"):
                problems.append({"kind": "marker", "key": key, "value": meta[key]})
        stale = bool(meta.get("fts_stale") not in (None, "", "0"))
        for table in fts_tables(ctx):
            try:
                ctx.conn.execute(f'SELECT rowid FROM "{table}" WHERE "{table}" MATCH ? ORDER BY rank LIMIT 1',
                                 ('"hermes"',)).fetchall()
            except sqlite3.OperationalError as exc:
                if _environment_error(exc) or str(exc) == "interrupted":
                    continue
                problems.append({"kind": "probe", "table": table, "error": str(exc)})
            except sqlite3.DatabaseError as exc:
                problems.append({"kind": "probe", "table": table, "error": str(exc)})
            # A detached (stale) index has its triggers dropped on purpose; CJK triggers
            # depend on a loadable tokenizer (docs/store.md §3.4/§11.4).
            if not stale and not table.startswith("messages_fts_cjk") and not ctx.conn.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'trigger' AND name = ?", (f"{table}_insert",)).fetchone():
                problems.append({"kind": "missing_trigger", "table": table, "trigger": f"{table}_insert"})
        if problems:
            texts = {"quick_check": "integrity check finds damage in the index",
                     "marker": "Hermes marked the index stale", "probe": "a search query fails",
                     "missing_trigger": "sync triggers are missing"}
            kinds = sorted({texts[p["kind"]] for p in problems})
            yield self.finding(None, len(problems), "; ".join(kinds), {"problems": problems})


class FtsIncomplete(Check):
    code = "fts_incomplete"
    severity = "warning"
    scope = "store"
    title = "Search index incomplete"
    next_step = (
        "Messages are safe; only search misses some. Let Hermes finish a backfill it is working through, "
        "or rebuild the index with 'hermes sessions optimize' while no other Hermes process holds the "
        "profile; meanwhile the search page can scan the rows the index misses."
    )
    explanation = (
        "The search index holds a different number of documents than the rows it should cover "
        "(every message for the main index; the trigram index skips tool rows and cron/subagent "
        "sessions in the newest layout). Searches miss messages or return ghosts. A deferred "
        "backfill window Hermes is still working through is taken into account."
    )

    def run(self, ctx):
        meta = state_meta(ctx)
        if meta.get("fts_stale") not in (None, "", "0"):
            return  # detached index: fts_damaged says so, counting it says nothing
        for table, sql in fts_tables(ctx).items():
            # Shadow tables are not in caps (schema.read_capabilities leaves them out).
            if not ctx.conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                                    (f"{table}_docsize",)).fetchone():
                continue
            source = self._source(sql)
            if source == "":
                continue  # contentless: nothing to compare against
            high, progress = (meta.get(k) for k in _window_keys(table))
            expected = self._expected(ctx, source or "messages", high, progress)
            if expected is None:
                continue
            indexed = ctx.conn.execute(f'SELECT COUNT(*) FROM "{table}_docsize"').fetchone()[0]
            if indexed != expected:
                yield self.finding(None, abs(expected - indexed),
                                   f"{table} indexes {indexed} documents; {expected} rows should be covered",
                                   {"table": table, "indexed": indexed, "expected": expected,
                                    "source": source or "messages (inline copy)"})

    @staticmethod
    def _source(sql: str) -> str | None:
        """The ``content=`` table of an external-content FTS5 table; None when inline."""
        match = re.search(r"content\s*=\s*'([^']*)'", sql or "")
        return match.group(1) if match else None

    @staticmethod
    def _expected(ctx, source: str, high, progress) -> int | None:
        where, params = "", ()
        if high not in (None, ""):
            # Rows inside (progress, high water] await the deferred backfill (docs/store.md §3.4).
            where, params = " WHERE id > ? OR id <= ?", (int(high), int(progress or -1))
        try:
            return ctx.conn.execute(f'SELECT COUNT(*) FROM "{source}"{where}', params).fetchone()[0]
        except sqlite3.OperationalError:
            return None


# --------------------------------------------------------------------------- leases and dependents

LEASE_TABLES = (("session_turn_leases", "conversation_id", "turn lease"),
                ("compression_locks", "session_id", "compression lock"))


class StaleLease(Check):
    code = "stale_lease"
    light = True
    severity = "warning"
    heal = "clear_stale_lease"
    scope = "store"
    title = "Stale turn lease or compression lock"
    next_step = (
        "A lease that expired less than a day ago, or whose holder process still runs, is Hermes' to "
        "reclaim on the session's next turn: if that process is hung, stop it. The repair is offered once "
        "the row has been expired for a day."
    )
    explanation = (
        "A turn lease or compression lock has expired, or the process holding it is provably gone. "
        "Hermes reclaims such rows when it next needs them, but until then they can make a session "
        "look busy (deletes and repairs refuse). Rows expired for more than a day should already "
        "have been swept; only those are cleared by the repair."
    )

    def run(self, ctx):
        for table, key_col, label in LEASE_TABLES:
            if not all(ctx.caps.has(table, c) for c in (key_col, "holder", "acquired_at", "expires_at")):
                continue
            for key, holder, acquired, expires in ctx.conn.execute(
                    f"SELECT {key_col}, holder, acquired_at, expires_at FROM {table} ORDER BY expires_at"):
                numeric = is_number(expires, finite=False)  # +Inf: never expires, as for Hermes
                expired = not numeric or expires <= ctx.now
                dead = holder_is_dead(holder)
                if not expired and not dead:
                    continue
                overdue = ctx.now - expires if is_number(expires) else None
                long_expired = expired and (overdue is None or overdue > LONG_EXPIRED_SECONDS)
                pid = holder_pid(holder)
                parts = [f"{label} on {key}"]
                parts.append(f"expired {ago(overdue)} ago" if expired and overdue is not None else
                             ("has no valid expiry" if expired else "is unexpired"))
                if dead:
                    parts.append(f"its holder pid {pid} is no longer running")
                yield self.finding(None, 1, ", ".join(parts[:1]) + " " + "; ".join(parts[1:]), {
                    "table": table, "key": key, "holder": holder, "holder_pid": pid, "holder_dead": dead,
                    "acquired_at": acquired, "expires_at": expires, "expired_seconds": overdue,
                    "long_expired": long_expired,
                }, heal=self.heal if long_expired else None)


def _scope_profile(scope: str | None) -> str:
    """Profile whose sessions dir a ``gateway_routing.scope`` path names."""
    parts = (scope or "").rstrip("/").split("/")
    if len(parts) >= 3 and parts[-1] == "sessions" and parts[-3] == "profiles":
        return parts[-2]
    return DEFAULT_PROFILE


class OrphanDependents(Check):
    code = "orphan_dependents"
    light = True
    severity = "warning"
    scope = "store"
    title = "Rows pointing at deleted sessions"
    next_step = (
        "They hold no messages. Check in the audit events and the trash whether the session was deleted "
        "on purpose: if so, they can stay until Hermes sweeps them; if not, restore the session from the "
        "trash so they point at it again."
    )
    explanation = (
        "Usage, Telegram topic, gateway routing, turn lease or compression lock rows name a "
        "session that no longer exists. Hermes removes most of these with the session; leftovers "
        "mean a delete bypassed it. Usage totals may count a ghost, and a routing entry sends the "
        "chat to a session that is gone (the gateway then starts a new one)."
    )

    SOURCES = (
        ("session_model_usage", "session_id"),
        ("telegram_dm_topic_bindings", "session_id"),
        ("session_turn_leases", "conversation_id"),
        ("compression_locks", "session_id"),
    )

    def run(self, ctx):
        for table, column in self.SOURCES:
            if ctx.caps.has(table, column):
                yield from self._orphans(ctx, table, f"SELECT {column} AS k FROM {table}")
        if ctx.caps.has("gateway_routing", "entry_json"):
            yield from self._routing(ctx)

    def _orphans(self, ctx, table: str, select: str, params: tuple = ()):
        found = ctx.conn.execute(
            f"SELECT x.k, COUNT(*) FROM ({select}) x WHERE x.k IS NOT NULL "
            "AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.id = x.k) GROUP BY x.k ORDER BY x.k", params).fetchall()
        if found:
            rows = sum(n for _, n in found)
            ids = [k for k, _ in found]
            yield self.finding(None, rows, f"{plural(rows, 'row')} in {table} name {plural(len(ids), 'missing session')}",
                               {"table": table, "session_ids": capped(ids), "rows": rows})

    def _routing(self, ctx):
        # Routing rows scoped to another profile's sessions dir route to that
        # profile's store (multiplexed gateways), so they are not orphans here.
        own = ctx.store.profile.name
        scopes = [s for (s,) in ctx.conn.execute("SELECT DISTINCT scope FROM gateway_routing")
                  if _scope_profile(s) == own] if ctx.caps.has("gateway_routing", "scope") else [None]
        if not scopes:
            return
        scope_filter, params = "", ()
        if scopes != [None]:
            scope_filter, params = f" AND scope IN ({','.join('?' * len(scopes))})", tuple(scopes)
        yield from self._orphans(ctx, "gateway_routing",
                                 "SELECT json_extract(entry_json, '$.session_id') AS k FROM gateway_routing "
                                 f"WHERE json_valid(entry_json){scope_filter}", params)
