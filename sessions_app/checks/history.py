"""``history_lost``: a conversation the store holds only part of (docs/store.md,
"Copies of a conversation outside state.db", "Deletion under a live agent").

Sessions looked at in a full pass (each costs a read of its copies, so only these):

- every session with a file in ``sessions/`` (snapshot, request dump, ``<id>.json``);
- every session whose counters show turns without rows (``api_call_count`` above
  the assistant rows it has, any row counted);
- every placeholder row (source ``unknown``) that starts mid-conversation: its
  first visible row is not a user message, or its counters exceed its rows.

For each, the copies on disk (``stores.copies``: ``sessions/`` files, the
dashboard's backups and trash) are compared with the rows (``stores.recovery``).
Critical when a copy holds messages the store lacks; warning when only the
counters or the placeholder shape tell. ``heal`` is ``recover_messages`` only
when a copy can restore something and the session row exists (a session absent
from the store may have been deleted on purpose: Hermes' own deletion leaves
``session_<id>.json`` behind, so it is reported, never restored automatically).

A session whose only fuller copy is its ``<id>.jsonl`` is left to
``transcript_on_disk_only``, which reports exactly that.
"""

from __future__ import annotations

from ..stores import recovery
from .base import Check, capped, chunks, placeholders, plural
from .files import scan_sessions_dir

PLACEHOLDER = "unknown"
COPY_WORDS = {"snapshot": "snapshot", "request_dump": "request dump", "jsonl": "JSONL transcript",
              "json": "JSON dump", "backup": "dashboard backup", "trash": "trash entry"}


def session_analysis(ctx, session_id: str, *, store_copies: bool = True, keep=None,
                     count: int | None = None) -> recovery.Analysis:
    """The recovery analysis of one session, once per pass (shared with
    ``unanswered_turn``). ``store_copies`` False: the ``sessions/`` files only
    (cheap: no backup or trash database is opened). ``keep``: in a whole pass, a
    ``(key, compute)`` memo the caller holds for one session only (see ``_one_session``).
    ``count``: the session's rows as just counted; without a copy they are then not
    read (``recovery.analyse``: ``rows`` None). The checks that share this analysis
    use its ``plan`` only, which counts the rows either way."""
    def compute():
        scanned = scan_sessions_dir(ctx).get(session_id)
        listed = scanned.files if scanned is not None else []
        # The rows once per pass, whichever copies are compared with them (the
        # sessions/ files first, then every copy: both on a session page); with
        # match keys only when a copy is there to compare them with.
        def rows(keyed):
            return memo(f"store_messages:{session_id}:{int(keyed)}",
                        lambda: recovery.store_messages(ctx.conn, ctx.caps, session_id, keyed=keyed))
        return recovery.analyse(ctx.store, ctx.conn, ctx.caps, session_id, others=ctx.other_stores,
                                files=listed, store_copies=store_copies, rows=rows,
                                count=count)

    # Kept for the pass only in a one-session run (its page, a repair preview): a
    # whole pass analyses thousands of sessions, and keeping each one's rows until
    # the pass ends held ~40 MB per 100,000 messages (505 MB peak on the 1 M-message
    # bench store, docs/benchmarks.md); there a session analysed twice is read twice.
    memo = ctx.memo if ctx.session_id is not None else (keep or _no_memo)
    # An analysis without its rows is kept apart: a caller not giving the count gets rows.
    return memo(f"recovery:{session_id}:{int(store_copies)}:{int(count is not None)}", compute)


def _no_memo(key, compute):
    return compute()


def _one_session():
    """A memo for one session's rows and analyses within a whole pass: ``history_lost``
    analyses a session from its ``sessions/`` files first and again with every copy
    when that shows a loss, and both compare the same rows (read once, not twice).
    Safe: the two analyses follow each other within the check, and a pass reads
    statement by statement anyway (no snapshot across statements), so rows read a
    moment earlier are as current as a second read; it never remembers a problem past
    this session, and is dropped with it (the pass's memory stays flat)."""
    seen: dict = {}

    def memo(key, compute):
        if key not in seen:
            seen[key] = compute()
        return seen[key]
    return memo


def _counter_gaps(ctx) -> tuple[dict[str, dict], dict[str, int]]:
    """Sessions whose counters exceed their rows, or placeholder rows starting
    mid-conversation: ``(facts, counts)``, id -> facts (``source``, ``api_calls``,
    ``assistant_rows``, ``first_role``, ``started_at``) and id -> how many rows the
    session has (every row, inactive ones too, as ``recovery.store_messages`` reads
    them). One grouped pass over the messages, as ``counter_drift`` does; the first
    row is read only for the few found."""
    calls = "COALESCE(s.api_call_count, 0)" if ctx.has("sessions", "api_call_count") else "0"
    where, params = ctx.session_filter("s.id")
    inner, inner_params = ctx.session_filter("session_id")
    sql = (
        f"SELECT s.id, s.source, {calls}, s.started_at, COALESCE(a.assistants, 0), COALESCE(a.n, 0) "
        "FROM sessions s LEFT JOIN ("
        " SELECT session_id, SUM(CASE WHEN role = 'assistant' THEN 1 ELSE 0 END) AS assistants, COUNT(*) AS n"
        f" FROM messages WHERE 1{inner} GROUP BY session_id"
        f") a ON a.session_id = s.id WHERE ({calls} > COALESCE(a.assistants, 0) OR s.source = ?){where}"
    )
    found, counts = {}, {}
    for sid, source, api_calls, started, assistants, n in ctx.conn.execute(sql, (*inner_params, PLACEHOLDER, *params)):
        if not n:
            continue  # no rows at all: usage_without_transcript
        first = ctx.conn.execute(f"SELECT role FROM messages WHERE session_id = ? AND {ctx.active()} "
                                 "ORDER BY id LIMIT 1", (sid,)).fetchone()
        first_role = first[0] if first else None
        mid = source == PLACEHOLDER and first_role is not None and first_role != "user"
        if api_calls > assistants or mid:
            found[sid] = {"source": source, "api_calls": api_calls, "assistant_rows": assistants,
                          "first_role": first_role, "started_at": started}
            counts[sid] = n
    return found, counts


def _sources(ctx, ids: list[str]) -> dict[str, str | None]:
    """``{session id: source}`` of those of ``ids`` that have a session row."""
    out: dict[str, str | None] = {}
    for part in chunks(sorted(ids)):
        out.update(ctx.conn.execute(f"SELECT id, source FROM sessions WHERE id IN ({placeholders(len(part))})", part))
    return out


def copy_list(plan: recovery.RecoveryPlan) -> list[dict]:
    """Every copy holding messages the store lacks: ``{"path", "kind", "mtime",
    "message_count", "sha256", "missing"}``."""
    return [{**p.as_dict(), "missing": n} for p, n in plan.holding_missing()]


def copies_text(copies: list[dict]) -> str:
    parts = [f"{c['path'].rsplit('/', 1)[-1]} ({COPY_WORDS.get(c['kind'], c['kind'])}, "
             f"{plural(c['missing'], 'message')} the store lacks)" for c in copies[:5]]
    return "; ".join(parts) + (f"; … ({len(copies)} copies in all)" if len(copies) > 5 else "")


def likely_cause(facts: dict | None, plan: recovery.RecoveryPlan, exists: bool,
                 source: str | None = None) -> tuple[str, str]:
    """``(code, words)`` of the likely cause; ``words`` is empty when nothing points
    at one (code ``unknown``): the finding's detail then names the copies only.
    ``source`` is the session row's (``facts`` carry it too when the counters
    showed a gap): a placeholder row whose copies hold messages before its first
    row is the deletion under a live agent even when the counters add up."""
    if not exists:
        return "not_in_store", ("the session is not in the store at all: it was deleted (Hermes' own deletion "
                                "leaves session_<id>.json behind) or its row was never written")
    leading = any(i.after_id is None for i in plan.insertions) or any(
        m.after_id is None for c in plan.comparisons for m in c.missing)
    if source == PLACEHOLDER and (leading or (facts and (facts["api_calls"] > facts["assistant_rows"]
                                               or facts.get("first_role") not in (None, "user")))):
        return "deleted_under_live_agent", (
            "the session row was deleted while an agent was still using it: its earlier messages went with it, "
            "the agent's next writes failed, and a token update brought the row back as a placeholder "
            "(source 'unknown') holding only what came after")
    kinds = {c.copy.kind for c in plan.comparisons if c.missing_count}
    middle = [i for i in plan.insertions if i.after_id is not None]
    if kinds == {"jsonl"}:
        return "legacy_transcript_longer", ("an old gateway kept the conversation in the JSONL transcript (a "
                                            "partly migrated session), or the agent wrote there the rows the store "
                                            "refused when it was replaced or corrupt")  # docs/store.md §12.2
    if middle or (facts and facts["api_calls"] > facts["assistant_rows"]):
        return "reply_dropped", ("replies were dropped on interrupted turns: they reached the user but never "
                                 "the store")
    # Nothing points at a cause: saying "the store holds fewer messages than a
    # copy" again after the detail has listed the copies would add nothing.
    return "unknown", ""


class HistoryLost(Check):
    code = "history_lost"
    severity = "warning"
    heal = "recover_messages"
    title = "Part of the conversation is missing"
    next_step = (
        "When no copy holds the missing messages, they cannot be brought back: keep the copies that "
        "remain (snapshots, request dumps, backups) and look in the audit events for the deletion that "
        "caused it."
    )
    explanation = (
        "The store holds fewer messages of this conversation than happened: a copy Hermes left on disk "
        "(a session snapshot, a request dump, a transcript, a backup or the trash) holds messages the store "
        "lacks, or the usage counters record more replies than there are rows, or the session row was "
        "recreated as a placeholder in the middle of the conversation. Usual causes: the session was deleted "
        "while an agent was still using it, or a reply was dropped on an interrupted turn. When a copy holds "
        "the missing messages they can be recovered into the store at their place; the copies are never changed."
    )
    case_next_steps = {"session_gone": (
        "The session is gone from the store (no row, no messages), so nothing is recovered into it: recovery adds "
        "messages to a session that is still there. The copies named in the finding hold what the store lacks and "
        "are never changed: keep them (the session's Copies on disk page lists them), and look in the audit events "
        "for the deletion."
    )}

    def next_step_case(self, evidence: dict) -> str:
        gone = evidence.get("session_exists") is False and not evidence.get("store_rows")
        return "session_gone" if gone and evidence.get("copies") else ""

    def run(self, ctx):
        scanned = scan_sessions_dir(ctx)
        with_files = {sid for sid, f in scanned.items() if any(x.kind != "jsonl" for x in f.files)}
        facts, counts = _counter_gaps(ctx)
        candidates = sorted(with_files | set(facts))
        if not candidates:
            return
        sources = _sources(ctx, candidates)
        for sid in candidates:
            if ctx.verdict(sid) == "live":
                continue  # a running turn writes its rows after the API call
            # Backups and trash are opened only for a session that shows a loss
            # (counters that do: straight away, the sessions/ files alone would
            # be read for nothing).
            keep = _one_session()
            analysis = None if sid in facts else session_analysis(ctx, sid, store_copies=False, keep=keep)
            if analysis is None or analysis.plan.holding_missing():
                # The count stands for the rows of a session still there: one deleted
                # since it was counted reads as no rows, as before (no finding).
                analysis = session_analysis(ctx, sid, keep=keep, count=counts.get(sid) if sid in sources else None)
            finding = self._judge(sid, analysis, facts.get(sid), sid in sources, sources.get(sid))
            if finding is not None:
                yield finding

    def _judge(self, sid, analysis: recovery.Analysis, facts: dict | None, exists: bool, source: str | None):
        plan = analysis.plan
        copies = copy_list(plan)
        if plan.repaired_by(exists) == "transcript_on_disk_only" and not facts:
            return None  # transcript_on_disk_only reports and repairs it (the session page links there too)
        if not copies and not facts:
            return None
        if not exists and not plan.store_rows and not copies:
            return None
        cause, words = likely_cause(facts, plan, exists, source)
        missing = sum(c["missing"] for c in copies)
        evidence = {
            "cause": cause, "store_rows": plan.store_rows, "copies": capped(copies),
            "recoverable": len(plan.insertions), "conflicts": len(plan.conflicts),
            "differences": len(plan.differences), "session_exists": exists, "counters": facts,
            "unreadable_copies": capped(analysis.copyset.failed),
            "unread_store_copies": [{"path": u.path, "kind": u.kind, "reason": u.reason}
                                    for u in analysis.copyset.unread][:20],
        }
        parts = [f"likely cause: {words}"] if words else []
        if copies:
            parts.insert(0, f"copies on disk hold {plural(missing, 'message')} the store lacks: {copies_text(copies)}")
            if plan.conflicts:
                parts.append(f"{plural(len(plan.conflicts), 'position')} where copies disagree (reported, not recovered)")
            severity = "critical" if exists else "warning"
        else:
            shown = (f"{plural(facts['api_calls'], 'API call')} recorded but only "
                     f"{plural(facts['assistant_rows'], 'assistant reply', 'assistant replies')} stored")
            if facts.get("first_role") not in (None, "user"):
                # Any value a hand-made row holds ('', a number): quoted, never indexed.
                shown += f"; the first message's role is {str(facts['first_role'])[:40]!r}, not 'user'"
            parts.insert(0, shown)
            parts.append("nothing on disk can restore it (no snapshot, request dump, transcript, backup or trash "
                         "entry holds the missing messages)")
            severity = "warning"
        heal = "recover_messages" if plan.repaired_by(exists) else None
        count = missing or max(1, (facts or {}).get("api_calls", 0) - (facts or {}).get("assistant_rows", 0))
        return self.finding(sid, count, "; ".join(parts), evidence, severity=severity, heal=heal)
