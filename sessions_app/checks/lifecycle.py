"""Session lifecycle checks: open sessions that will never end, placeholder rows
(docs/store.md §4.1 sources, 10.10, 10.24)."""

from __future__ import annotations

from .base import Check, ago

# Sources whose sessions are owned by state.db alone: nothing outside it (no chat
# platform) will ever close them (docs/store.md §13 row 10, upstream
# ``_AUTO_PRUNE_STALE_OPEN_SOURCES``).
STATE_OWNED_SOURCES = ("cli", "cron", "kanban", "acp", "api_server", "subagent", "tool", "recovered")
PLACEHOLDER_SOURCES = ("unknown", "recovered", "_health_probe")
FUTURE_SLACK = 86400


def freshest_sql(ctx, alias: str = "s") -> str:
    """SQL for a session's last activity, epoch seconds: the latest of
    ``last_activity_at`` (where the store has it), ``started_at`` and its newest
    message (``idx_messages_session`` answers the MAX per session). Values beyond
    now + 1 day are ignored, as upstream ignores out-of-window times (docs/store.md §4.1);
    the ``?`` placeholder takes that bound."""
    started = f"COALESCE({alias}.started_at, 0)"
    if ctx.has("sessions", "last_activity_at"):
        started = f"COALESCE({alias}.last_activity_at, {alias}.started_at, 0)"
    newest = (f"COALESCE((SELECT MAX(m.timestamp) FROM messages m WHERE m.session_id = {alias}.id "
              f"AND m.timestamp <= :future), 0)")
    return f"MAX({started}, {newest})"


class StaleOpen(Check):
    code = "stale_open"
    severity = "warning"
    heal = "close_stale_session"
    title = "Open session abandoned"
    next_step = (
        "Use the repair; pin a session you want to keep open on purpose."
    )
    explanation = (
        "This session was never ended and has been idle longer than the retention window. Its "
        "source (CLI, cron, subagent...) has no chat platform that could come back and close it, "
        "so it stays 'open' forever, which blocks pruning and confuses resume. Closing it uses an "
        "end reason upstream treats as a recoverable close, so it can still be resumed. Pinned "
        "sessions, messaging-platform sessions and sessions an agent may hold are left alone."
    )

    def run(self, ctx):
        where = " AND s.id = :sid" if ctx.session_id else ""
        pinned = " AND COALESCE(s.pinned, 0) = 0" if ctx.has("sessions", "pinned") else ""
        sources = ",".join(f"'{s}'" for s in STATE_OWNED_SOURCES)
        sql = (f"SELECT s.id, s.source, {freshest_sql(ctx)} AS fresh FROM sessions s "
               f"WHERE s.ended_at IS NULL AND s.source IN ({sources}){pinned}{where} "
               "AND fresh < :cutoff")
        args = {"future": ctx.now + FUTURE_SLACK, "cutoff": ctx.now - ctx.thresholds.stale_seconds,
                "sid": ctx.session_id}
        for sid, source, fresh in ctx.conn.execute(sql, args):
            if ctx.verdict(sid) != "not_live":
                continue
            idle = ctx.now - float(fresh or 0)
            yield self.finding(sid, 1, f"open {source} session, idle for {ago(idle)} (limit {ago(ctx.thresholds.stale_seconds)})",
                               {"source": source, "last_activity": fresh, "idle_seconds": round(idle)})


class PlaceholderSession(Check):
    code = "placeholder_session"
    severity = "info"
    title = "Placeholder session"
    next_step = (
        "Open it: a placeholder with messages was usually recreated for orphan messages and is claimed by "
        "the next agent writing to it; an empty health-probe row can be deleted."
    )
    explanation = (
        "The session row is a stand-in rather than a real conversation: source 'unknown' "
        "(written by a token-accounting guard or a recreated row, replaced by the next writer "
        "that knows the real source), 'recovered' (synthesized by 'hermes sessions recover'), a "
        "leftover health probe, or a subagent child marked as orphaned by an upstream migration. "
        "Worth a look; nothing is wrong with the messages themselves."
    )

    def run(self, ctx):
        where, params = ctx.session_filter("id")
        sources = ",".join(f"'{s}'" for s in PLACEHOLDER_SOURCES)
        orphaned = "0"
        if ctx.has("sessions", "model_config"):
            orphaned = ("COALESCE(CASE WHEN json_valid(model_config) THEN "
                        "json_extract(model_config, '$._delegate_from') = '__orphaned__' END, 0)")
        rows = ctx.conn.execute(
            f"SELECT id, source, {orphaned} FROM sessions WHERE (source IN ({sources}) OR {orphaned}){where}", params)
        for sid, source, is_orphaned in rows:
            if source in PLACEHOLDER_SOURCES:
                detail = f"source is '{source}'"
            else:
                detail = "subagent child whose parent was lost ('_delegate_from' = '__orphaned__')"
            yield self.finding(sid, 1, detail, {"source": source, "orphaned_delegate": bool(is_orphaned)})
