"""Human labels for store columns, and store values as typed display cells.

Pages show a column's label where one is known and its raw name otherwise: stores of
newer schemas add columns (docs/store.md §3.1, §3.3), and those still show,
under the name the store gives them. Values become a :class:`Cell` whose ``kind``
tells the template how to format it (a time through the ``reltime`` filter, a
flag as yes/no, a row as a field list), so no page ever prints a Python repr.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..timefmt import is_number

COLUMN_LABELS = {
    # sessions (docs/store.md, "sessions")
    "id": "Session id", "title": "Title", "title_source": "Title set by", "source": "Source",
    "created_source": "Created by", "profile_name": "Profile", "transport_profile": "Transport profile",
    "model": "Model", "model_config": "Model configuration", "system_prompt": "System prompt",
    "system_prompt_hash": "System prompt hash", "parent_session_id": "Parent session",
    "started_at": "Started", "ended_at": "Ended", "end_reason": "End reason",
    "last_activity_at": "Last activity", "last_activity_description": "Last activity (what)",
    "last_activity_provenance": "Last activity (from)", "last_read_at": "Last read",
    "message_count": "Messages", "tool_call_count": "Tool calls", "api_call_count": "API calls",
    "input_tokens": "Input tokens", "output_tokens": "Output tokens", "cache_read_tokens": "Cache read tokens",
    "cache_write_tokens": "Cache write tokens", "reasoning_tokens": "Reasoning tokens",
    "estimated_cost_usd": "Estimated cost (USD)", "actual_cost_usd": "Actual cost (USD)",
    "cost_status": "Cost status", "cost_source": "Cost source", "pricing_version": "Pricing version",
    "billing_provider": "Billing provider", "billing_base_url": "Billing base URL", "billing_mode": "Billing mode",
    "user_id": "User", "session_key": "Session key", "chat_id": "Chat", "chat_type": "Chat type",
    "thread_id": "Thread", "display_name": "Display name", "origin_json": "Origin",
    "expiry_finalized": "Expiry finalized", "cwd": "Working directory", "git_branch": "Git branch",
    "git_repo_root": "Git repository", "git_metadata_generation": "Git metadata generation",
    "handoff_state": "Handoff state", "handoff_platform": "Handoff platform", "handoff_error": "Handoff error",
    "compression_failure_cooldown_until": "Compression retry after",
    "compression_failure_error": "Compression failure", "compression_fallback_streak": "Compression fallbacks in a row",
    "compression_ineffective_count": "Ineffective compressions", "compression_recovery_deadline": "Compression recovery deadline",
    "compression_overload_streak": "Compression overloads in a row", "rewind_count": "Rewinds",
    "archived": "Archived", "auto_archived": "Archived automatically", "pinned": "Pinned", "hidden": "Hidden",
    "tool_names": "Tools",
    # messages (docs/store.md, "messages")
    "session_id": "Session", "role": "Role", "content": "Content", "timestamp": "Time",
    "tool_call_id": "Tool call id", "tool_calls": "Tool calls", "tool_name": "Tool", "token_count": "Tokens",
    "finish_reason": "Finish reason", "reasoning": "Reasoning", "active": "Shown", "compacted": "Compacted",
    "observed": "Observed", "platform_message_id": "Platform message id",
    # lease and lock rows
    "holder": "Holder", "acquired_at": "Acquired", "expires_at": "Expires", "conversation_id": "Conversation",
    # fields of the repairs' own change descriptions (actions/*: Change.after / before)
    "content_chars": "Content (characters)", "timestamp_estimated": "Time estimated",
    "rows": "Message rows", "last_message_at": "Last message", "from": "From file", "kind": "Copy kind", "messages": "Messages", "store": "Into profile",
}
# Columns holding 0/1 (or true/false): shown as yes / no.
FLAG_COLUMNS = {"archived", "auto_archived", "pinned", "hidden", "active", "compacted", "observed",
                "expiry_finalized", "timestamp_estimated"}
_TIME_SUFFIXES = ("_at", "_until", "_deadline")
TEXT_LIMIT = 300  # characters of one value shown in a table cell; the rest is cut with "…"

# sessions.end_reason values (docs/store.md §4.1, "end_reason values seen"): what a
# page says; an unknown value (a newer release's) shows as it is.
END_REASON_LABELS = {
    "compression": "compressed", "branched": "branched", "session_reset": "reset",
    "session_switch": "switched away", "idle": "idle reset", "daily": "daily reset",
    "suspended": "suspended", "resume_pending_expired": "resume expired", "new_session": "new session",
    "agent_close": "agent closed", "ws_orphan_reap": "orphan closed (web)",
    "superseded_by_resume": "superseded by a resume", "startup_orphan_reap": "orphan closed at startup",
    "tui_shutdown": "TUI shut down", "ws_disconnect": "web disconnected", "idle_timeout": "idle timeout",
    "lru_evict": "evicted (least recently used)", "tui_close": "closed in the TUI", "cli_close": "closed in the CLI",
    "webhook_complete": "webhook done", "cron_complete": "cron job done",
    "orphaned_compression": "compression orphaned", "superseded_by_repair": "superseded by a repair",
    "user_exit": "user exited", "done": "done",
}


def end_reason_label(value) -> str:
    """What a page says for an ``end_reason`` value (its raw value when unknown)."""
    return END_REASON_LABELS.get(value, "" if value is None else str(value))


def money(value) -> str:
    """A USD amount as a page shows it: two decimals, four below a cent ("0.0034"),
    thousands separated; a value that is not a number as it is."""
    if not is_number(value) or isinstance(value, bool):
        return "" if value is None else str(value)
    value = float(value)
    return f"{value:,.4f}" if 0 < abs(value) < 0.01 else f"{value:,.2f}"


def label(column: str) -> str:
    """The label of ``column``, or its raw name when none is known."""
    return COLUMN_LABELS.get(column, column)


def is_time_column(column: str | None) -> bool:
    """Columns the stores fill with epoch seconds (docs/store.md §4.1, §4.2)."""
    return bool(column) and (column == "timestamp" or column.endswith(_TIME_SUFFIXES))


@dataclass(frozen=True)
class Cell:
    """A value ready to show. ``kind``: ``empty`` (None or ""), ``time`` (``value``
    epoch seconds), ``flag`` (``value`` "yes" / "no"), ``text`` (``value`` a str),
    ``fields`` (``fields`` a tuple of :class:`Field`, one level deep)."""

    kind: str
    value: object = None
    fields: tuple = ()


@dataclass(frozen=True)
class Field:
    """One labelled value: ``column`` the raw name, ``label`` what the page says."""

    column: str
    label: str
    cell: Cell = field(default_factory=lambda: Cell("empty"))


def text(value, limit: int = TEXT_LIMIT) -> str:
    """A value as plain text, never a repr: lists of scalars joined with commas,
    other structures as compact JSON, bytes decoded, cut at ``limit`` characters."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, (list, tuple)) and all(not isinstance(v, (dict, list, tuple)) for v in value):
        shown = ", ".join("—" if v is None else str(v) for v in value[:10])
        value = shown + (f" and {len(value) - 10} more" if len(value) > 10 else "")
    elif isinstance(value, (dict, list, tuple)):
        value = json.dumps(value, ensure_ascii=False, default=str)
    value = str(value)
    return value if len(value) <= limit else value[:limit - 1] + "…"


def cell(column: str | None, value, limit: int = TEXT_LIMIT) -> Cell:
    """``value`` of ``column`` as a :class:`Cell`; a dict becomes ``fields`` (its own
    keys labelled and typed the same way), nested structures inside it text."""
    if value is None or value == "":
        return Cell("empty")
    if isinstance(value, dict):
        return Cell("fields", fields=tuple(
            Field(str(k), label(str(k)), _scalar(str(k), v, limit)) for k, v in value.items()))
    return _scalar(column, value, limit)


def _scalar(column: str | None, value, limit: int) -> Cell:
    if value is None or value == "":
        return Cell("empty")
    if column and column.endswith("_cost_usd") and is_number(value) and not isinstance(value, bool):
        return Cell("text", money(value))
    if column == "end_reason" and value in END_REASON_LABELS:
        return Cell("text", f"{END_REASON_LABELS[value]} ({value})")
    if column in FLAG_COLUMNS and value in (0, 1):  # True/False compare equal to 1/0
        return Cell("flag", "yes" if value else "no")
    if is_number(value) and is_time_column(column):
        return Cell("time", value)
    if isinstance(value, bool):
        return Cell("flag", "yes" if value else "no")
    return Cell("text", text(value, limit))


def facts(pairs, limit: int = 10_000) -> list[Field]:
    """``(column, value)`` pairs (a session row's) as labelled :class:`Field` s."""
    return [Field(column, label(column), cell(column, value, limit)) for column, value in pairs]
