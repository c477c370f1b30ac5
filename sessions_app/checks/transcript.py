"""Transcript checks: message rows versus their session (docs/store.md §4.1/§4.2, §13 row 1, §13 row 5, §13 row 12-§13 row 17, §13 row 21).

Set-based SQL where a question is about groups of rows (orphans, counters, usage,
rows sharing a timestamp); the streamed walk (``walk.py``) where rows must be
read in order (pairing, turns, duplicates inside a turn, timestamp order).
"""

from __future__ import annotations

from .base import EVIDENCE_CAP, Check, capped, chunks, id_span, placeholders, plural
from .history import session_analysis
from .walk import same_row_values, walk


def _walk(ctx):
    return ctx.memo("walk", lambda: walk(ctx))


def _timestamp_groups(ctx) -> dict[str, list[list[dict]]]:
    """Active rows that share ``(session_id, timestamp)`` with another row.

    Upstream gives every row of a batch its own timestamp (+1 µs, docs/store.md §4.2),
    so such groups are exact replays of one message or salvaged garbage. The
    grouping scans ``idx_messages_session (session_id, timestamp)`` as a covering
    index; only the (rare) groups found are read back.
    """

    def compute():
        where, params = ctx.session_filter("session_id")
        keys = ctx.conn.execute(
            f"SELECT session_id, timestamp FROM messages WHERE 1{where} "
            "GROUP BY session_id, timestamp HAVING COUNT(*) > 1", params).fetchall()
        pmid = ctx.col("messages", "platform_message_id")
        groups: dict[str, list[list[dict]]] = {}
        for sid, ts in keys:
            rows = ctx.conn.execute(
                f"SELECT id, role, {pmid} FROM messages WHERE session_id = ? AND timestamp IS ? AND {ctx.active()} "
                "ORDER BY id", (sid, ts)).fetchall()
            if len(rows) > 1:
                groups.setdefault(sid, []).append([{"id": r[0], "role": r[1], "pmid": r[2]} for r in rows])
        return groups

    return ctx.memo("timestamp_groups", compute)


class OrphanMessages(Check):
    code = "orphan_messages"
    severity = "critical"
    heal = "recreate_session_row"
    title = "Messages without a session"
    next_step = (
        "Use the repair; if it is refused because an agent holds the session, check again once it is "
        "idle."
    )
    explanation = (
        "These messages belong to a session row that no longer exists (it was deleted by a tool "
        "that bypassed Hermes' own rules). The messages are still in the file but no list, "
        "search or resume can reach them. Recreating a minimal session row (start time taken from "
        "the earliest message, source 'unknown' so a returning agent can claim it) makes them "
        "visible again without inventing anything."
    )

    def run(self, ctx):
        where, params = ctx.session_filter("m.session_id")
        rows = ctx.conn.execute(
            f"SELECT m.session_id, COUNT(*), MIN(m.id), MAX(m.id), MIN(m.timestamp), MAX(m.timestamp), "
            f"SUM(CASE WHEN {ctx.active('m')} THEN 1 ELSE 0 END) FROM messages m "
            f"WHERE NOT EXISTS (SELECT 1 FROM sessions s WHERE s.id = m.session_id){where} "
            "GROUP BY m.session_id", params).fetchall()
        for sid, n, first, last, earliest, latest, active in rows:
            if n == last - first + 1:
                ids = list(range(first, min(last, first + EVIDENCE_CAP - 1) + 1))
            else:
                ids = [r[0] for r in ctx.conn.execute(
                    "SELECT id FROM messages WHERE session_id = ? ORDER BY id LIMIT ?", (sid, EVIDENCE_CAP))]
            span = f"ids {first}-{last}" if n == last - first + 1 else id_span(ids)
            yield self.finding(sid, n, f"{plural(n, 'message has', 'messages have')} no session row; {span}", {
                "first_message_id": first, "last_message_id": last, "message_ids": ids,
                "earliest_timestamp": earliest, "latest_timestamp": latest, "active_rows": active,
            })


class CounterDrift(Check):
    code = "counter_drift"
    severity = "warning"
    heal = "recount_session"
    title = "Message counters disagree with the rows"
    next_step = (
        "Use the repair after hiding duplicates or recovering messages of the same session: those change "
        "what it counts and often fix the counters by themselves."
    )
    explanation = (
        "The session's stored message_count (or tool_call_count) is not what its active rows add "
        "up to. Lists and size guards use these counters, so the session shows the wrong size. "
        "Recounting sets them from the rows. Known upstream behaviour is reported as info: "
        "releases 0.17-0.19 do not lower message_count when /undo rewinds rows. Both upstream ways "
        "of counting tool calls are accepted."
    )

    def run(self, ctx):
        act = ctx.active()
        has_active = ctx.has("messages", "active")
        rewound = "0"
        if has_active:
            rewound = ("SUM(CASE WHEN active = 0 AND compacted = 0 THEN 1 ELSE 0 END)"
                       if ctx.has("messages", "compacted") else "SUM(CASE WHEN active = 0 THEN 1 ELSE 0 END)")
        rewind_count = ctx.col("sessions", "rewind_count", "s")
        where, params = ctx.session_filter("s.id")
        inner, inner_params = ctx.session_filter("session_id")
        # json_array_length only on valid JSON: malformed tool_calls would abort the query.
        sql = (
            f"SELECT s.id, s.message_count, s.tool_call_count, {rewind_count}, "
            "COALESCE(a.active_rows, 0), COALESCE(a.rewound, 0), COALESCE(a.calls, 0), COALESCE(a.alt_calls, 0) "
            "FROM sessions s LEFT JOIN ("
            f" SELECT session_id, SUM(CASE WHEN {act} THEN 1 ELSE 0 END) AS active_rows, {rewound} AS rewound,"
            f"  SUM(CASE WHEN {act} AND json_valid(tool_calls) THEN json_array_length(tool_calls) ELSE 0 END) AS calls,"
            f"  SUM(CASE WHEN {act} AND (role = 'tool' OR (role = 'assistant' AND json_valid(tool_calls)"
            "   AND json_array_length(tool_calls) > 0)) THEN 1 ELSE 0 END) AS alt_calls"
            f" FROM messages WHERE 1{inner} GROUP BY session_id"
            f") a ON a.session_id = s.id WHERE 1{where} AND ("
            " COALESCE(s.message_count, 0) != COALESCE(a.active_rows, 0)"
            " OR (COALESCE(s.tool_call_count, 0) != COALESCE(a.calls, 0)"
            "     AND COALESCE(s.tool_call_count, 0) != COALESCE(a.alt_calls, 0)))"
        )
        for sid, count, tools, rewinds, active, rewound_rows, calls, alt in ctx.conn.execute(sql, (*inner_params, *params)):
            count, tools = count or 0, tools or 0
            evidence = {"message_count": count, "active_rows": active, "tool_call_count": tools,
                        "tool_calls_in_rows": calls, "tool_rows_and_calling_assistants": alt,
                        "rewound_rows": rewound_rows, "rewind_count": rewinds}
            problems, severity = [], "info"
            if count != active:
                problems.append(f"message_count is {count} but {plural(active, 'active row')} exist")
                explained = (rewound_rows > 0 and count - active == rewound_rows
                             and (rewinds is None or rewinds > 0))
                if explained:
                    # Releases 0.17-0.19 rewind_to_message sets active=0 without lowering
                    # message_count (docs/store.md §9.3): upstream behaviour, not damage.
                    evidence["explained_by"] = "rewind_without_recount"
                    problems[-1] += f" ({plural(rewound_rows, 'rewound row')} still counted, as releases 0.17-0.19 do)"
                else:
                    severity = "warning"
            if tools != calls and tools != alt:
                problems.append(f"tool_call_count is {tools} but active rows hold {plural(calls, 'tool call')}")
                severity = "warning"
            yield self.finding(sid, abs(count - active) or abs(tools - calls), "; ".join(problems), evidence,
                               severity=severity)


class UsageWithoutTranscript(Check):
    code = "usage_without_transcript"
    severity = "warning"
    title = "Usage recorded but no messages"
    next_step = (
        "Look for a copy of the conversation on disk (the session page's copies panel) or in a backup. If "
        "there is none the transcript is gone; never delete the session as empty, its usage is the only "
        "record."
    )
    explanation = (
        "API calls or tokens were billed to this session, yet it has no message rows at all "
        "(not even hidden ones). The conversation happened but its transcript never reached the "
        "store, or was deleted. This is never an 'empty' session: nothing may delete it as one."
    )

    USAGE = ("api_call_count", "input_tokens", "output_tokens", "cache_read_tokens",
             "cache_write_tokens", "reasoning_tokens")

    def run(self, ctx):
        cols = [c for c in self.USAGE if ctx.has("sessions", c)]
        if not cols:
            return
        where, params = ctx.session_filter("s.id")
        any_usage = " OR ".join(f"COALESCE(s.{c}, 0) > 0" for c in cols)
        rows = ctx.conn.execute(
            f"SELECT s.id, {', '.join('s.' + c for c in cols)} FROM sessions s WHERE ({any_usage}){where} "
            "AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.session_id = s.id)", params)
        for row in rows:
            sid, usage = row[0], dict(zip(cols, row[1:]))
            if ctx.verdict(sid) != "not_live":
                continue  # a live turn records usage before its flush writes rows
            calls = usage.get("api_call_count") or 0
            tokens = sum(v or 0 for k, v in usage.items() if k != "api_call_count")
            yield self.finding(sid, calls or 1,
                               f"{plural(calls, 'API call')} and {tokens} tokens recorded, but no message rows at all",
                               {"usage": usage})


class UnansweredTurn(Check):
    code = "unanswered_turn"
    severity = "warning"
    title = "A turn got no reply"
    next_step = (
        "When no copy on disk holds the reply, it is gone: resume the session in Hermes and ask again, or "
        "leave it as it is. If an agent may still be answering, wait and check again."
    )
    explanation = (
        "The conversation stops on a user message with no assistant reply, or two user messages "
        "follow each other with no reply in between: the agent's answer never reached the store "
        "(a crash, a kill, a write that failed). Only sessions that are idle and not held by any "
        "live agent are flagged. A conversation that stops on a tool result (a tool loop that was "
        "interrupted, often on purpose) is reported as info. When a copy Hermes left on disk (a session "
        "snapshot, a later request dump, a transcript, a backup) holds the reply, the finding says so "
        "and it can be recovered into its place."
    )

    def run(self, ctx):
        walked = {sid: r for sid, r in _walk(ctx).items()
                  if (r.last or r.user_pairs) and ctx.verdict(sid) == "not_live"}
        # A compression parent hands its last (often unanswered) prompt over to its
        # continuation: the logical conversation goes on there (docs/store.md §8.3).
        handed_over = self._compression_parents(ctx, [sid for sid, r in walked.items() if r.last])
        for sid, result in walked.items():
            last = result.last if sid not in handed_over else None
            if not (last or result.user_pairs):
                continue
            parts, ids, severity = [], [], "info"
            if last:
                what = "a user message" if last["role"] == "user" else "a tool result"
                parts.append(f"ends with {what} (id {last['id']}) and no assistant reply")
                ids.append(last["id"])
                severity = "warning" if last["role"] == "user" else "info"
            if result.user_pairs:
                parts.append(f"{plural(len(result.user_pairs), 'user message')} followed directly by another user message")
                ids.extend(first for first, _ in result.user_pairs)
                severity = "warning"
            evidence = {
                "last": last, "unanswered_message_ids": capped(sorted(set(ids))),
                "back_to_back_user_rows": [list(p) for p in result.user_pairs],
            }
            heal = None
            replies = self._replies_on_disk(ctx, sid, set(ids))
            if replies:
                evidence["reply_copies"] = replies
                parts.append("a copy on disk holds the missing reply: " + ", ".join(
                    f"{r['path'].rsplit('/', 1)[-1]} ({r['kind'].replace('_', ' ')})" for r in replies[:3]))
                heal = "recover_messages"
            yield self.finding(sid, len(ids), "; ".join(parts), evidence, severity=severity, heal=heal)

    @staticmethod
    def _replies_on_disk(ctx, sid: str, unanswered: set[int]) -> list[dict]:
        """Copies whose planned insertions put an assistant reply right after one of
        the unanswered user rows (``stores.recovery``; the same plan
        ``history_lost`` reports and ``recover_messages`` applies)."""
        plan = session_analysis(ctx, sid).plan
        found: dict[str, dict] = {}
        for ins in plan.insertions:
            if ins.order == 0 and ins.after_id in unanswered and ins.message.role == "assistant":
                found.setdefault(ins.source.path, {"path": ins.source.path, "kind": ins.source.kind,
                                                   "after_id": ins.after_id})
        return list(found.values())

    @staticmethod
    def _compression_parents(ctx, ids: list[str]) -> set[str]:
        found: set[str] = set()
        for part in chunks(ids):
            found.update(r[0] for r in ctx.conn.execute(
                f"SELECT id FROM sessions WHERE end_reason = 'compression' AND id IN ({placeholders(len(part))})", part))
        return found


class OrphanToolResult(Check):
    code = "orphan_tool_result"
    severity = "warning"
    title = "Tool result answering no call"
    next_step = (
        "No change is needed: Hermes drops such rows when it replays the conversation. Leave them in "
        "place as the record."
    )
    explanation = (
        "A tool result row does not answer any tool call of the assistant message before it "
        "(or answers one that was already answered, or names no call at all). Providers reject "
        "such transcripts; upstream drops these rows when it replays the conversation, so the "
        "model never sees them."
    )

    def run(self, ctx):
        for sid, result in _walk(ctx).items():
            if not result.orphan_results:
                continue
            reasons = {}
            for o in result.orphan_results:
                reasons[o["reason"]] = reasons.get(o["reason"], 0) + 1
            text = {"no_matching_call": "answer no preceding tool call", "second_result": "answer an already answered call",
                    "no_call_id": "name no tool call"}
            detail = "; ".join(f"{plural(n, 'tool row')} {text[r]}" for r, n in reasons.items())
            ids = [o["id"] for o in result.orphan_results]
            yield self.finding(sid, len(ids), f"{detail} ({id_span(ids)})", {"rows": result.orphan_results})


class UnansweredToolCall(Check):
    code = "unanswered_tool_call"
    severity = "warning"
    title = "Tool call without a result"
    next_step = (
        "If resuming the session fails, continue in a new session or branch; the rows need no change. A "
        "call at the very end may still be running: wait and check again."
    )
    explanation = (
        "An assistant message asked for a tool call and no tool result follows before the next "
        "turn. Providers reject a transcript with a dangling call, so resuming may fail. A call at "
        "the very end is only flagged when no agent may still be running it."
    )

    def run(self, ctx):
        for sid, result in _walk(ctx).items():
            calls = [c for c in result.unanswered_calls if not c["trailing"] or ctx.verdict(sid) == "not_live"]
            if not calls:
                continue
            ids = sorted({c["assistant_id"] for c in calls})
            yield self.finding(sid, len(calls), f"{plural(len(calls), 'tool call')} never got a result ({id_span(ids)})",
                               {"calls": calls})


class DuplicateLiveRows(Check):
    code = "duplicate_live_rows"
    severity = "warning"
    heal = "hide_duplicates"
    title = "Message written twice"
    next_step = (
        "Use the repair. On a store older than hermes-agent 0.17 (no active column) it is blocked: leave "
        "the copy, or let a newer Hermes open the profile first."
    )
    explanation = (
        "The same message is stored twice among the live rows (a retry or two writers saved it "
        "again). The model sees it twice on resume. Hiding the extra copy (active = 0, as Hermes' "
        "own undo does) keeps it restorable. A copy archived by compaction next to its live copy is "
        "normal and not reported."
    )

    def run(self, ctx):
        pairs_by_session: dict[str, list[tuple[int, int]]] = {}
        for sid, result in _walk(ctx).items():
            if result.duplicate_pairs:
                pairs_by_session.setdefault(sid, []).extend(result.duplicate_pairs)
        # Exact replays: identical rows that even share their timestamp, anywhere in the session.
        for sid, groups in _timestamp_groups(ctx).items():
            for group in groups:
                for i, a in enumerate(group):
                    for b in group[i + 1:]:
                        if a["role"] == b["role"] and _pmids_compatible(a["pmid"], b["pmid"]) \
                                and same_row_values(ctx, a["id"], b["id"]):
                            pairs_by_session.setdefault(sid, []).append((a["id"], b["id"]))
        for sid, pairs in pairs_by_session.items():
            groups = _merge(pairs)
            pmids = self._pmids(ctx, [i for g in groups for i in g])
            plan = []
            for group in groups:
                # Keep the copy that carries the platform's message id (restart dedupe
                # relies on it), else the first written; hide the others.
                with_id = [i for i in group if pmids.get(i)]
                keep = min(with_id) if with_id else min(group)
                plan.append({"keep": keep, "hide": sorted(i for i in group if i != keep)})
            hide = sorted(i for p in plan for i in p["hide"])
            yield self.finding(sid, len(hide), f"{plural(len(hide), 'duplicate row')} among live messages; hide {id_span(hide)}",
                               {"groups": plan, "hide": hide})

    @staticmethod
    def _pmids(ctx, ids: list[int]) -> dict[int, str]:
        if not ctx.has("messages", "platform_message_id"):
            return {}
        out = {}
        for part in chunks(ids):
            for mid, pmid in ctx.conn.execute(
                    f"SELECT id, platform_message_id FROM messages WHERE id IN ({placeholders(len(part))})", part):
                out[mid] = pmid
        return out


def _pmids_compatible(a, b) -> bool:
    return a in (None, "") or b in (None, "") or a == b


def _merge(pairs: list[tuple[int, int]]) -> list[list[int]]:
    """Connected groups of row ids from duplicate pairs (small union-find)."""
    parent: dict[int, int] = {}

    def find(x):
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in pairs:
        parent[find(a)] = find(b)
    groups: dict[int, list[int]] = {}
    for x in list(parent):
        groups.setdefault(find(x), []).append(x)
    return sorted((sorted(g) for g in groups.values()), key=lambda g: g[0])


class TimestampDisorder(Check):
    code = "timestamp_disorder"
    severity = "info"
    title = "Timestamps out of order"
    next_step = (
        "Nothing needs fixing: Hermes orders messages by id. Read this session's times with care."
    )
    explanation = (
        "Along the message order, timestamps run backwards, are not valid times, or several turns "
        "share one exact timestamp. Hermes orders by row id, so nothing breaks, but time-based views "
        "and recency may mislead. Typical causes: salvaged pages, clock jumps, rows copied by hand. "
        "Rows carried over after a compaction summary keep their old times and are not reported."
    )

    SHARED_TURNS = 3

    def run(self, ctx):
        walked = _walk(ctx)
        shared = {}
        for sid, groups in _timestamp_groups(ctx).items():
            many = [[r["id"] for r in g] for g in groups if sum(r["role"] == "user" for r in g) >= self.SHARED_TURNS]
            if many:
                shared[sid] = many
        for sid in sorted(set(shared) | {s for s, r in walked.items() if r.backwards or r.bad_timestamps}):
            result = walked.get(sid)
            parts, count = [], 0
            if result and result.n_backwards:
                parts.append(f"timestamps step back {plural(result.n_backwards, 'time')} along the message order")
                count += result.n_backwards
            if result and result.n_bad_timestamps:
                parts.append(f"{plural(result.n_bad_timestamps, 'row')} with an invalid timestamp")
                count += result.n_bad_timestamps
            if sid in shared:
                parts.append(f"{plural(len(shared[sid]), 'group')} of {self.SHARED_TURNS}+ turns share one timestamp")
                count += sum(len(g) for g in shared[sid])
            yield self.finding(sid, count, "; ".join(parts), {
                "backwards": result.backwards if result else [],
                "invalid_timestamp_ids": result.bad_timestamps if result else [],
                "shared_timestamp_groups": shared.get(sid, []),
            })
