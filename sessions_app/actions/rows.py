"""Repairs of message and lease rows: hide duplicates, clear long-expired leases."""

from __future__ import annotations

import hashlib

from ..stores.liveness import holder_is_dead
from .base import Action, Change, one, row_dict
from .session_rows import message_facts, recount_changes

# Upstream sweeps lease rows expired for more than a day on its next acquire
# (docs/store.md §7.1, ``_TURN_LEASE_SWEEP_GRACE_S``); the dashboard only clears those.
LEASE_GRACE_SECONDS = 86_400
LEASE_TABLES = {"session_turn_leases": "conversation_id", "compression_locks": "session_id"}


def _fingerprint(conn, message_id: int):
    row = conn.execute(
        "SELECT session_id, role, CAST(content AS BLOB), tool_call_id, tool_calls, active FROM messages WHERE id = ?",
        (message_id,),
    ).fetchone()
    if row is None:
        return None
    content = hashlib.sha256(row[2] or b"").hexdigest()
    return [row[0], row[1], content, row[3], row[4], row[5]]


class HideDuplicates(Action):
    """Hide duplicate live copies of a message the way Hermes does: ``active = 0``.

    Never deletes (ground rule 3): a hidden row stays in the store and can be
    restored by setting ``active = 1``. ``message_count`` is recounted to the
    active rows in the same transaction. Stores without an ``active`` column
    (before 0.17) cannot hide a row without deleting it, so the plan is blocked.
    The rows to hide come from the finding's evidence (``hide``).
    """

    name = "hide_duplicates"

    def plan(self, ctx, finding):
        ids = [int(i) for i in (finding.evidence or {}).get("hide", [])]
        changes = [Change("update", "messages", {"id": i}, "active", 1, 0) for i in ids]
        if ids and ctx.caps.has("messages", "active"):  # the recount, as write() makes it
            marks = ",".join("?" * len(ids))
            hidden = one(ctx.conn, f"SELECT COUNT(*) FROM messages WHERE session_id = ? AND active = 1 AND id IN ({marks})",
                         (finding.session_id, *ids))
            active = one(ctx.conn, "SELECT COUNT(*) FROM messages WHERE session_id = ? AND active = 1",
                         (finding.session_id,))
            # First: a preview shows the first changes of a long list only.
            changes[:0] = recount_changes(ctx.conn, ctx.caps, finding.session_id, active - hidden)
        plan = self.new_plan(
            ctx, finding,
            f"Hide {len(ids)} duplicate message row(s) (active = 0), keep the original, recount.",
            changes=changes,
            params={"hide_ids": ids},
        )
        if not ctx.caps.has("messages", "active"):
            plan.blocked = "this store's schema has no messages.active column (before hermes-agent 0.17): hiding would mean deleting"
        elif not ids:
            plan.blocked = "the finding names no row to hide"
        plan.guard = self.state(ctx.conn, ctx.caps, plan)
        return plan

    def validate(self, store, plan):
        if not all(isinstance(i, int) for i in plan.params.get("hide_ids", [])):
            raise ValueError("message ids must be integers")

    def state(self, conn, caps, plan):
        return {
            "rows": [_fingerprint(conn, i) for i in plan.params["hide_ids"]],
            "messages": message_facts(conn, caps, plan.session_id),
        }

    def write(self, conn, caps, plan):
        ids = plan.params["hide_ids"]
        marks = ",".join("?" * len(ids))
        changed = conn.execute(
            f"UPDATE messages SET active = 0 WHERE session_id = ? AND active = 1 AND id IN ({marks})",
            (plan.session_id, *ids),
        ).rowcount
        if caps.has("sessions", "message_count"):
            conn.execute(
                "UPDATE sessions SET message_count = (SELECT COUNT(*) FROM messages WHERE session_id = ? AND active = 1) "
                "WHERE id = ?",
                (plan.session_id, plan.session_id),
            )
        return changed

    def verify(self, conn, caps, plan):
        marks = ",".join("?" * len(plan.params["hide_ids"]))
        still = one(conn, f"SELECT COUNT(*) FROM messages WHERE active = 1 AND id IN ({marks})", tuple(plan.params["hide_ids"]))
        return f"{still} row(s) still active" if still else None


class ClearStaleLease(Action):
    """Delete a turn-lease or compression-lock row expired for more than a day.

    Hermes reclaims expired rows itself on the next acquire and sweeps rows older
    than a day (docs/store.md §7.1/§7.2); the dashboard only removes rows past that
    grace, matched on holder and expiry so a renewed lease is never touched.
    The finding's evidence names ``table``, ``key``, ``holder`` and ``expires_at``.
    """

    name = "clear_stale_lease"
    needs_idle_session = False  # the row itself is the liveness evidence, checked below

    def plan(self, ctx, finding):
        ev = finding.evidence or {}
        table, key = ev.get("table"), ev.get("key") or finding.session_id
        column = LEASE_TABLES.get(table)
        row = row_dict(ctx.conn, f"SELECT holder, expires_at FROM {table} WHERE {column} = ?", (key,)) if column and ctx.caps.has_table(table) else None
        plan = self.new_plan(
            ctx, finding,
            f"Delete the {table} row of {key} (holder {row and row['holder']}, expired).",
            changes=[Change("delete", table or "?", {column or "key": key}, before=row)],
            params={"table": table, "column": column, "key": key, "row": row},
        )
        expires = row["expires_at"] if row else None
        if column is None or row is None:
            plan.blocked = "no such lease row"
        elif not isinstance(expires, (int, float)):
            plan.blocked = f"the row's expires_at is not a time ({expires!r}); left for Hermes to reclaim"
        elif holder_is_dead(row["holder"]) is False:
            plan.blocked = "the holder process is still running (it may revive its own lease)"
        elif expires > ctx.now - LEASE_GRACE_SECONDS:
            hours = max(0.0, (ctx.now - expires) / 3600)
            plan.blocked = (
                "the lease is not expired" if expires > ctx.now
                else f"expired only {hours:.1f} h ago; Hermes reclaims it itself (the dashboard clears rows expired > 24 h)"
            )
        plan.guard = self.state(ctx.conn, ctx.caps, plan)
        return plan

    def validate(self, store, plan):
        p = plan.params
        if LEASE_TABLES.get(p.get("table")) != p.get("column"):
            raise ValueError(f"not a lease table: {p.get('table')!r}")

    def state(self, conn, caps, plan):
        p = plan.params
        if not p["column"] or not caps.has_table(p["table"]):
            return {"row": None}
        return {"row": row_dict(conn, f"SELECT holder, expires_at FROM {p['table']} WHERE {p['column']} = ?", (p["key"],))}

    def write(self, conn, caps, plan):
        p = plan.params
        return conn.execute(
            f"DELETE FROM {p['table']} WHERE {p['column']} = ? AND holder = ? AND expires_at = ?",
            (p["key"], p["row"]["holder"], p["row"]["expires_at"]),
        ).rowcount

    def verify(self, conn, caps, plan):
        p = plan.params
        still = one(conn, f"SELECT 1 FROM {p['table']} WHERE {p['column']} = ? AND holder = ?", (p["key"], p["row"]["holder"]))
        return "the lease row is still there" if still else None
