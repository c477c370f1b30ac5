"""Repairs of ``sessions`` rows: recreate, detach, reopen, close, stamp, inherit, recount.

Each mirrors what Hermes itself would write (docs/store.md sections named per class) and
never invents content: a value is either taken from evidence in the store or left
NULL.

Longer than most modules on purpose: seven small repairs of one family (the session row itself), kept together because they share the row readers and the recount rules.
"""

from __future__ import annotations

import sqlite3

from ..checks.base import active_predicate
from ..stores.lineage import classify_edge
from ..stores.schema import Capabilities
from .base import Action, ActionContext, Change, Plan, one, row_dict

# Routing identity of a gateway session (docs/store.md §4.1): first writer wins upstream.
ROUTING_COLUMNS = (
    "session_key", "chat_id", "chat_type", "thread_id", "display_name", "origin_json", "user_id",
    "transport_profile",
)
# What a dashboard close writes: the end reason upstream's own orphan sweep uses for
# open sessions no live process owns (docs/store.md §4.1, ``startup_orphan_reap``, a
# recoverable close). ended_at is the time of the close, not the last activity, so
# that Hermes' auto-prune (90 days after the end) does not take it at once.
CLOSE_END_REASON = "startup_orphan_reap"


def session_row(conn: sqlite3.Connection, caps: Capabilities, session_id: str, columns) -> dict | None:
    cols = [c for c in columns if caps.has("sessions", c)]
    return row_dict(conn, f"SELECT {', '.join(['id', *cols])} FROM sessions WHERE id = ?", (session_id,))


def message_facts(conn: sqlite3.Connection, caps: Capabilities, session_id: str) -> dict:
    """Facts about a session's message rows: ``rows``, ``active_rows``, ``first_id``,
    ``last_id``, ``first_at`` (epoch seconds), and the two upstream ways of counting
    tool calls over active rows (docs/store.md §4.1): ``tool_calls`` (entries of the
    ``tool_calls`` lists, what appends add to ``tool_call_count``) and ``alt_calls``
    (tool rows plus calling assistant rows, ``clear_session_messages``' recount)."""
    is_active = active_predicate(caps)
    row = row_dict(
        conn,
        f"SELECT COUNT(*) AS rows, SUM(CASE WHEN {is_active} THEN 1 ELSE 0 END) AS active_rows, "
        "MIN(id) AS first_id, MAX(id) AS last_id, MIN(timestamp) AS first_at, "
        # json_array_length only on valid JSON: malformed tool_calls would abort the query.
        f"SUM(CASE WHEN {is_active} AND json_valid(tool_calls) THEN json_array_length(tool_calls) ELSE 0 END) "
        "AS tool_calls, "
        f"SUM(CASE WHEN {is_active} AND (role = 'tool' OR (role = 'assistant' AND json_valid(tool_calls) "
        "AND json_array_length(tool_calls) > 0)) THEN 1 ELSE 0 END) AS alt_calls "
        "FROM messages WHERE session_id = ?",
        (session_id,),
    )
    for key in ("active_rows", "tool_calls", "alt_calls"):
        row[key] = row[key] or 0
    return row


def recount_changes(conn: sqlite3.Connection, caps: Capabilities, session_id: str, messages_after: int,
                    new_calls: int = 0) -> list[Change]:
    """The counter updates a plan's "recount" makes, as changes its preview lists:
    ``message_count`` to ``messages_after`` (the active rows once written) and
    ``tool_call_count`` grown by ``new_calls`` (docs/store.md §4.1). Only columns the
    store has, only values that change; before is None without a session row."""
    cols = [c for c in ("message_count", "tool_call_count") if caps.has("sessions", c)]
    row = (conn.execute(f"SELECT {', '.join(cols)} FROM sessions WHERE id = ?", (session_id,)).fetchone()
           if cols else None)
    now = dict(zip(cols, row)) if row else {}
    changes = []
    if "message_count" in cols and now.get("message_count") != messages_after:
        changes.append(Change("update", "sessions", {"id": session_id}, "message_count",
                              now.get("message_count"), messages_after))
    if "tool_call_count" in cols and new_calls:
        before = now.get("tool_call_count")
        changes.append(Change("update", "sessions", {"id": session_id}, "tool_call_count", before,
                              (before or 0) + new_calls))
    return changes


class RecreateSessionRow(Action):
    """Give orphan messages their session row back (``orphan_messages``).

    Only what the evidence supports (issue 3, docs/store.md §10.3): ``id``, ``started_at``
    = the earliest message time, ``source = 'unknown'`` (upstream ``ensure_session``'s
    placeholder, replaced by the next writer that knows the real source),
    ``profile_name`` = the store's profile, and counters from the rows themselves.
    Everything else stays NULL or its column default.
    """

    name = "recreate_session_row"

    def plan(self, ctx: ActionContext, finding) -> Plan:
        sid = finding.session_id
        facts = message_facts(ctx.conn, ctx.caps, sid)
        values = {"id": sid, "source": "unknown", "started_at": facts["first_at"]}
        if ctx.caps.has("sessions", "message_count"):
            values["message_count"] = facts["active_rows"]
        if ctx.caps.has("sessions", "tool_call_count"):
            values["tool_call_count"] = facts["tool_calls"]
        if ctx.caps.has("sessions", "profile_name"):
            values["profile_name"] = ctx.store.profile.name
        plan = self.new_plan(
            ctx, finding,
            f"Create the missing session row for {facts['rows']} orphan messages "
            f"(ids {facts['first_id']}–{facts['last_id']}), source 'unknown'.",
            changes=[Change("insert", "sessions", {"id": sid}, after=values)],
            params={"values": values},
        )
        if one(ctx.conn, "SELECT 1 FROM sessions WHERE id = ?", (sid,)):
            plan.blocked = "the session row exists"
        elif not facts["rows"]:
            plan.blocked = "no messages carry this session id"
        plan.guard = self.state(ctx.conn, ctx.caps, plan)
        return plan

    def validate(self, store, plan):
        values = plan.params.get("values", {})
        unexpected = set(values) - {"id", "source", "started_at", "message_count", "tool_call_count", "profile_name"}
        if unexpected:
            raise ValueError(f"unexpected columns {sorted(unexpected)}")
        if values.get("id") != plan.session_id or values.get("source") != "unknown":
            raise ValueError("a recreated row carries its own id and source 'unknown' only")
        if values.get("profile_name") not in (None, store.profile.name):
            raise ValueError("the owner must be this store's profile")

    def state(self, conn, caps, plan):
        return {
            "row_exists": bool(one(conn, "SELECT 1 FROM sessions WHERE id = ?", (plan.session_id,))),
            "messages": message_facts(conn, caps, plan.session_id),
        }

    def write(self, conn, caps, plan):
        values = plan.params["values"]
        cols = ", ".join(values)
        marks = ", ".join("?" * len(values))
        return conn.execute(f"INSERT INTO sessions ({cols}) VALUES ({marks})", tuple(values.values())).rowcount

    def verify(self, conn, caps, plan):
        if not one(conn, "SELECT 1 FROM sessions WHERE id = ?", (plan.session_id,)):
            return "the session row is still missing"
        return None


class DetachFromMissingParent(Action):
    """NULL a ``parent_session_id`` naming a session that no longer exists.

    What upstream deletion does to children of a deleted parent (docs/store.md §10.1,
    step 3); the old value is kept in the audit record.
    """

    name = "detach_from_missing_parent"

    def plan(self, ctx, finding):
        row = session_row(ctx.conn, ctx.caps, finding.session_id, ["parent_session_id"]) or {}
        parent = row.get("parent_session_id")
        plan = self.new_plan(
            ctx, finding,
            f"Detach from the missing parent {parent}: parent_session_id becomes NULL.",
            changes=[Change("update", "sessions", {"id": finding.session_id}, "parent_session_id", parent, None)],
            params={"parent": parent},
        )
        if not parent:
            plan.blocked = "the session has no parent link"
        elif one(ctx.conn, "SELECT 1 FROM sessions WHERE id = ?", (parent,)):
            plan.blocked = "the parent exists"
        plan.guard = self.state(ctx.conn, ctx.caps, plan)
        return plan

    def liveness_ids(self, plan):
        # A live agent whose row was deleted recreates it on its next flush
        # (docs/store.md §10.3): then the link is not dangling for long, keep it.
        return [plan.session_id, plan.params["parent"]] if plan.params.get("parent") else [plan.session_id]

    def state(self, conn, caps, plan):
        parent = plan.params["parent"]
        return {
            "parent": (session_row(conn, caps, plan.session_id, ["parent_session_id"]) or {}).get("parent_session_id"),
            "parent_exists": bool(parent and one(conn, "SELECT 1 FROM sessions WHERE id = ?", (parent,))),
        }

    def write(self, conn, caps, plan):
        return conn.execute(
            "UPDATE sessions SET parent_session_id = NULL WHERE id = ? AND parent_session_id = ?",
            (plan.session_id, plan.params["parent"]),
        ).rowcount

    def verify(self, conn, caps, plan):
        row = session_row(conn, caps, plan.session_id, ["parent_session_id"])
        return None if row and row["parent_session_id"] is None else "the parent link is still set"


class ReopenCompressionParent(Action):
    """Reopen a session ended by compression whose continuation never appeared.

    Upstream ``reopen_session()`` clears ``ended_at`` and ``end_reason`` (reference
    3.1); the interrupted handoff (3.3) then continues in the parent itself.
    """

    name = "reopen_compression_parent"
    # Ended by compression: a live agent may be creating the continuation right now.
    closed_activity_counts = True

    def plan(self, ctx, finding):
        row = session_row(ctx.conn, ctx.caps, finding.session_id, ["ended_at", "end_reason"]) or {}
        plan = self.new_plan(
            ctx, finding,
            "Reopen the session: the compression that ended it left no continuation.",
            changes=[
                Change("update", "sessions", {"id": finding.session_id}, "ended_at", row.get("ended_at"), None),
                Change("update", "sessions", {"id": finding.session_id}, "end_reason", row.get("end_reason"), None),
            ],
        )
        plan.guard = self.state(ctx.conn, ctx.caps, plan)
        if row.get("end_reason") != "compression":
            plan.blocked = "the session did not end by compression"
        elif plan.guard["continuation"]:
            plan.blocked = "a continuation exists now"
        elif plan.guard["lock"] is not None:
            plan.blocked = "a compression lock row exists for it; let Hermes finish or reclaim it"
        return plan

    def state(self, conn, caps, plan):
        row = session_row(conn, caps, plan.session_id, ["ended_at", "end_reason", "model_config", "source"]) or {}
        children = [
            child for child in conn.execute(
                "SELECT id, model_config, source FROM sessions WHERE parent_session_id = ?", (plan.session_id,)
            ).fetchall()
        ]
        continuation = any(
            classify_edge(row, {"id": c[0], "model_config": c[1], "source": c[2]}) == "compression" for c in children
        )
        lock = None
        if caps.has_table("compression_locks"):
            lock = row_dict(conn, "SELECT holder, expires_at FROM compression_locks WHERE session_id = ?", (plan.session_id,))
        return {"ended_at": row.get("ended_at"), "end_reason": row.get("end_reason"),
                "continuation": continuation, "lock": lock}

    def write(self, conn, caps, plan):
        return conn.execute(
            "UPDATE sessions SET ended_at = NULL, end_reason = NULL WHERE id = ? AND end_reason = 'compression'",
            (plan.session_id,),
        ).rowcount

    def verify(self, conn, caps, plan):
        row = session_row(conn, caps, plan.session_id, ["ended_at"])
        return None if row and row["ended_at"] is None else "the session is still ended"


class CloseStaleSession(Action):
    """End a session left open long past any activity (``stale_open``).

    Writes ``ended_at`` = now and ``end_reason`` = CLOSE_END_REASON, first-stamp-wins
    like upstream ``end_session()`` (``WHERE ended_at IS NULL``).
    """

    name = "close_stale_session"

    def plan(self, ctx, finding):
        row = session_row(ctx.conn, ctx.caps, finding.session_id, ["ended_at", "pinned"]) or {}
        plan = self.new_plan(
            ctx, finding,
            f"Close the session: ended_at = now, end_reason = '{CLOSE_END_REASON}' (a recoverable close).",
            changes=[
                Change("update", "sessions", {"id": finding.session_id}, "ended_at", None, ctx.now),
                Change("update", "sessions", {"id": finding.session_id}, "end_reason", None, CLOSE_END_REASON),
            ],
            params={"ended_at": ctx.now},
        )
        if row.get("ended_at") is not None:
            plan.blocked = "the session is already ended"
        elif row.get("pinned"):
            plan.blocked = "the session is pinned"
        plan.guard = self.state(ctx.conn, ctx.caps, plan)
        return plan

    def state(self, conn, caps, plan):
        row = session_row(conn, caps, plan.session_id, ["ended_at", "pinned", "last_activity_at"]) or {}
        return {"row": row, "messages": message_facts(conn, caps, plan.session_id)}

    def write(self, conn, caps, plan):
        return conn.execute(
            "UPDATE sessions SET ended_at = ?, end_reason = ? WHERE id = ? AND ended_at IS NULL",
            (plan.params["ended_at"], CLOSE_END_REASON, plan.session_id),
        ).rowcount

    def verify(self, conn, caps, plan):
        row = session_row(conn, caps, plan.session_id, ["ended_at"])
        return None if row and row["ended_at"] is not None else "the session is still open"


class StampOwner(Action):
    """Fill a NULL or blank ``profile_name`` with the store's own profile.

    Upstream stamps the store's profile when the creator passes none (docs/store.md §4.1).
    An existing value is never overwritten (issue 4): a label that disagrees with
    the session key (``owner_mismatch`` of kind ``mislabelled``) is reported only.
    """

    name = "stamp_owner"

    def plan(self, ctx, finding):
        row = session_row(ctx.conn, ctx.caps, finding.session_id, ["profile_name"]) or {}
        owner = ctx.store.profile.name
        plan = self.new_plan(
            ctx, finding,
            f"Set profile_name to '{owner}', this store's profile.",
            changes=[Change("update", "sessions", {"id": finding.session_id}, "profile_name", row.get("profile_name"), owner)],
            params={"owner": owner},
        )
        if not ctx.caps.has("sessions", "profile_name"):
            plan.blocked = "this store's schema has no profile_name column"
        elif (row.get("profile_name") or "").strip():
            plan.blocked = "the session already has an owner"
        plan.guard = self.state(ctx.conn, ctx.caps, plan)
        return plan

    def validate(self, store, plan):
        if plan.params.get("owner") != store.profile.name:
            raise ValueError("the owner must be this store's profile")

    def state(self, conn, caps, plan):
        return {"row": session_row(conn, caps, plan.session_id, ["profile_name"])}

    def write(self, conn, caps, plan):
        return conn.execute(
            "UPDATE sessions SET profile_name = ? WHERE id = ? AND (profile_name IS NULL OR trim(profile_name) = '')",
            (plan.params["owner"], plan.session_id),
        ).rowcount

    def verify(self, conn, caps, plan):
        row = session_row(conn, caps, plan.session_id, ["profile_name"])
        return None if row and row.get("profile_name") == plan.params["owner"] else "profile_name is still unset"


class InheritRoutingIdentity(Action):
    """Copy routing identity from a compression parent into a continuation lacking it.

    Compression children inherit routing columns from the parent at creation
    (docs/store.md §4.1/§10.3, ``_insert_session_row``); only columns NULL or blank in the child and
    set in the parent are copied, and only across a compression edge.
    """

    name = "inherit_routing_identity"

    def plan(self, ctx, finding):
        child = session_row(ctx.conn, ctx.caps, finding.session_id,
                            ["parent_session_id", "source", "model_config", *ROUTING_COLUMNS]) or {}
        parent_id = child.get("parent_session_id")
        parent = session_row(ctx.conn, ctx.caps, parent_id, ["end_reason", "ended_at", *ROUTING_COLUMNS]) if parent_id else None
        copies = {
            col: parent[col] for col in ROUTING_COLUMNS
            if parent and col in child and child.get(col) in (None, "") and parent.get(col) not in (None, "")
        }
        plan = self.new_plan(
            ctx, finding,
            f"Copy {', '.join(copies) or 'nothing'} from the compression parent {parent_id}.",
            changes=[Change("update", "sessions", {"id": finding.session_id}, col, None, value) for col, value in copies.items()],
            params={"parent": parent_id, "copies": copies},
        )
        if parent is None:
            plan.blocked = "the session has no parent to inherit from"
        elif classify_edge(parent, child) != "compression":
            plan.blocked = "the parent link is not a compression edge"
        elif not copies:
            plan.blocked = "the parent has no routing identity to copy"
        plan.guard = self.state(ctx.conn, ctx.caps, plan)
        return plan

    def state(self, conn, caps, plan):
        return {
            "child": session_row(conn, caps, plan.session_id, ["parent_session_id", *ROUTING_COLUMNS]),
            "parent": session_row(conn, caps, plan.params["parent"], ["end_reason", *ROUTING_COLUMNS]) if plan.params["parent"] else None,
        }

    def validate(self, store, plan):
        unknown = set(plan.params.get("copies", {})) - set(ROUTING_COLUMNS)
        if unknown:
            raise ValueError(f"not routing columns: {sorted(unknown)}")

    def write(self, conn, caps, plan):
        changed = 0
        for col, value in plan.params["copies"].items():
            changed += conn.execute(
                f"UPDATE sessions SET {col} = ? WHERE id = ? AND ({col} IS NULL OR {col} = '')", (value, plan.session_id)
            ).rowcount
        return changed

    def verify(self, conn, caps, plan):
        row = session_row(conn, caps, plan.session_id, list(plan.params["copies"])) or {}
        missing = [c for c in plan.params["copies"] if row.get(c) in (None, "")]
        return f"still NULL: {', '.join(missing)}" if missing else None


class RecountSession(Action):
    """Set ``message_count`` to the number of active message rows, and
    ``tool_call_count`` to the tool calls they hold.

    ``message_count`` counts active rows only (docs/store.md §4.1); ``NOT EXISTS
    messages``, not the counter, decides emptiness, so the recount never makes a
    session with rows look empty. ``tool_call_count`` is left alone when it matches
    either upstream way of counting (:func:`message_facts`), as the check accepts
    both; otherwise it becomes the entries of the active rows' ``tool_calls`` lists.
    """

    name = "recount_session"
    COLUMNS = ("message_count", "tool_call_count")

    def _targets(self, caps, row: dict, facts: dict) -> dict:
        """Counter column -> the value it should hold, for the counters that drifted."""
        out = {}
        if caps.has("sessions", "message_count") and (row.get("message_count") or 0) != facts["active_rows"]:
            out["message_count"] = facts["active_rows"]
        if caps.has("sessions", "tool_call_count") and \
                (row.get("tool_call_count") or 0) not in (facts["tool_calls"], facts["alt_calls"]):
            out["tool_call_count"] = facts["tool_calls"]
        return out

    def _columns(self, caps):
        return [c for c in self.COLUMNS if caps.has("sessions", c)]

    def plan(self, ctx, finding):
        row = session_row(ctx.conn, ctx.caps, finding.session_id, self._columns(ctx.caps)) or {}
        facts = message_facts(ctx.conn, ctx.caps, finding.session_id)
        targets = self._targets(ctx.caps, row, facts) if row else {}
        words = {"message_count": "active rows", "tool_call_count": "tool calls in active rows"}
        summary = "; ".join(f"set {col} from {row.get(col)} to {value} ({words[col]})"
                            for col, value in targets.items())
        plan = self.new_plan(
            ctx, finding,
            (summary[:1].upper() + summary[1:] + ".") if summary else "Recount the session's counters.",
            changes=[Change("update", "sessions", {"id": finding.session_id}, col, row.get(col), value)
                     for col, value in targets.items()],
            params={"values": targets},
        )
        if not row:
            plan.blocked = "the session row is missing"
        elif not targets:
            plan.blocked = "the counters already match"
        plan.guard = self.state(ctx.conn, ctx.caps, plan)
        return plan

    def state(self, conn, caps, plan):
        return {"row": session_row(conn, caps, plan.session_id, self._columns(caps)),
                "messages": message_facts(conn, caps, plan.session_id)}

    def validate(self, store, plan):
        values = plan.params.get("values") or {}
        if not isinstance(values, dict) or set(values) - set(self.COLUMNS):
            raise ValueError("a recount sets message_count and tool_call_count only")
        if not all(type(v) is int and v >= 0 for v in values.values()):
            raise ValueError("counters are whole numbers, 0 or more")

    def write(self, conn, caps, plan):
        values = plan.params["values"]
        # Column names were checked against COLUMNS by validate().
        assignments = ", ".join(f'"{col}" = ?' for col in values)
        return conn.execute(
            f"UPDATE sessions SET {assignments} WHERE id = ?", (*values.values(), plan.session_id)
        ).rowcount

    def verify(self, conn, caps, plan):
        row = session_row(conn, caps, plan.session_id, self._columns(caps)) or {}
        left = self._targets(caps, row, message_facts(conn, caps, plan.session_id))
        return None if not left else "still differs: " + ", ".join(left)
