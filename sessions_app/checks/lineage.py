"""Lineage checks: parent links and compression chains (docs/store.md §4.1, §13 row 2, §13 row 11).

Only compression edges make one logical conversation (docs/architecture.md §4 (borderline cases));
the SQL edge test below mirrors ``stores.lineage.classify_edge``: the parent ended
with ``compression``, the child's ``model_config`` carries no fork marker equal
to the parent id, and its source is neither ``subagent`` nor ``tool``.
All queries use ``idx_sessions_parent (parent_session_id)`` and the sessions PK.
"""

from __future__ import annotations

from ..stores.lineage import MARKERS, UP_CAP
from .base import Check, CheckContext, ago, capped, plural


def compression_edge_sql(ctx: CheckContext, parent: str = "p", child: str = "c") -> str:
    """SQL predicate: ``parent -> child`` is a compression continuation edge."""
    parts = [
        f"{parent}.end_reason = 'compression'",
        f"COALESCE({child}.source, '') NOT IN ('tool', 'subagent')",
    ]
    if ctx.has("sessions", "model_config"):
        mc = f"{child}.model_config"
        # json_extract raises on malformed JSON, hence the json_valid guard.
        marker = " OR ".join(f"json_extract({mc}, '$.{m}') = {parent}.id" for m in MARKERS)
        parts.append(f"NOT COALESCE(CASE WHEN json_valid({mc}) THEN ({marker}) END, 0)")
    return " AND ".join(parts)


class DanglingParent(Check):
    code = "dangling_parent"
    severity = "warning"
    heal = "detach_from_missing_parent"
    title = "Parent session is missing"
    next_step = (
        "If the parent should still exist, restore it from the trash first (its deletion is listed "
        "there); otherwise use the repair."
    )
    explanation = (
        "This session says it continues or branches from another session that no longer "
        "exists in this store. Hermes itself clears the link when it deletes a parent, so "
        "the parent was removed by something else. Lineage views and resume can trip over "
        "the broken link; detaching makes the session a root of its own."
    )

    def run(self, ctx):
        where, params = ctx.session_filter("c.id")
        rows = ctx.conn.execute(
            "SELECT c.id, c.parent_session_id FROM sessions c "
            "WHERE c.parent_session_id IS NOT NULL AND c.parent_session_id != '' "
            f"AND NOT EXISTS (SELECT 1 FROM sessions p WHERE p.id = c.parent_session_id){where}", params)
        for sid, parent in rows:
            yield self.finding(sid, 1, f"parent session {parent} does not exist in this store",
                               {"parent_session_id": parent})


class LineageCycle(Check):
    code = "lineage_cycle"
    severity = "critical"
    title = "Parent links loop"
    next_step = (
        "Open the sessions of the loop and decide which parent link is wrong (usually the one written "
        "last). With the profile's Hermes processes stopped and a backup taken, clear that session's "
        "parent_session_id; check again afterwards."
    )
    explanation = (
        "Following this session's parent links leads back to itself. Upstream readers "
        "that walk a conversation's lineage (resume, message clock) fail on such a loop, "
        "so the conversation may not open. It needs a manual decision about which link is wrong."
    )

    def run(self, ctx):
        where, params = ctx.session_filter("id")
        # UNION (not UNION ALL) on (start, cur) makes the recursion stop on a loop.
        rows = ctx.conn.execute(
            "WITH RECURSIVE up(start, cur) AS ("
            " SELECT id, parent_session_id FROM sessions WHERE parent_session_id IS NOT NULL" + where +
            " UNION SELECT up.start, s.parent_session_id FROM up JOIN sessions s ON s.id = up.cur"
            "  WHERE s.parent_session_id IS NOT NULL"
            ") SELECT DISTINCT start FROM up WHERE cur = start", params).fetchall()
        for (sid,) in rows:
            loop = self._loop(ctx, sid)
            yield self.finding(sid, len(loop), "parent links loop back to this session: " + " → ".join(loop + [sid]),
                               {"cycle": loop})

    @staticmethod
    def _loop(ctx, sid: str) -> list[str]:
        loop, cur = [sid], sid
        for _ in range(UP_CAP):
            row = ctx.conn.execute("SELECT parent_session_id FROM sessions WHERE id = ?", (cur,)).fetchone()
            if not row or row[0] is None or row[0] == sid:
                break
            cur = row[0]
            loop.append(cur)
        return loop


class CompressionWithoutContinuation(Check):
    code = "compression_without_continuation"
    severity = "warning"
    heal = "reopen_compression_parent"
    title = "Compressed conversation has no continuation"
    next_step = (
        "Use the repair; while a compression lock is held an agent may still be creating the "
        "continuation, so wait and check again."
    )
    explanation = (
        "The session was closed because its context was compressed, but the new session that "
        "should carry the conversation on was never created (an interrupted handoff). The "
        "conversation looks finished and cannot be resumed. Reopening the session lets the "
        "user continue where it stopped. Sessions still held by a compression lock are left alone."
    )

    def run(self, ctx):
        where, params = ctx.session_filter("p.id")
        edge = compression_edge_sql(ctx)
        rows = ctx.conn.execute(
            f"SELECT p.id, p.ended_at FROM sessions p WHERE p.end_reason = 'compression'{where} "
            f"AND NOT EXISTS (SELECT 1 FROM sessions c WHERE c.parent_session_id = p.id AND {edge})", params)
        for sid, ended_at in rows:
            if ctx.verdict(sid) != "not_live":
                continue  # a compression may be mid-handoff (docs/store.md §7.2)
            when = f" {ago(ctx.now - ended_at)} ago" if isinstance(ended_at, (int, float)) else ""
            yield self.finding(sid, 1, f"ended by compression{when} but no continuation session exists",
                               {"ended_at": ended_at})


class MultipleContinuations(Check):
    code = "multiple_continuations"
    severity = "warning"
    title = "Compressed conversation forked into several open sessions"
    next_step = (
        "Open each continuation and keep the one that carries the conversation on (usually the one with "
        "the most messages); end or delete the others after exporting them, then check again."
    )
    explanation = (
        "After a compression, one new session should carry the conversation on. Here several "
        "open sessions claim to be that continuation (two compressions raced). Upstream refuses "
        "to pick one and fails closed, so the conversation's messages are split. An admin has to "
        "decide which continuation is the real one."
    )

    def run(self, ctx):
        where, params = ctx.session_filter("p.id")
        edge = compression_edge_sql(ctx)
        rows = ctx.conn.execute(
            "SELECT p.id, group_concat(c.id, ' '), COUNT(*) FROM sessions p "
            f"JOIN sessions c ON c.parent_session_id = p.id WHERE {edge} AND c.ended_at IS NULL{where} "
            "GROUP BY p.id HAVING COUNT(*) > 1", params)
        for sid, children, n in rows:
            ids = sorted(children.split(" "))
            yield self.finding(sid, n, f"{plural(n, 'open continuation')} of one compression: {', '.join(ids)}",
                               {"continuations": capped(ids)})
