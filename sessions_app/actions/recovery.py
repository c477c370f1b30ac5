"""``recover_messages``: bring back what the store lost from the copies Hermes left on disk.

Heals ``history_lost`` and ``unanswered_turn`` when a copy holds what the store
lacks (docs/store.md §12: snapshots ``session_<id>.json``, request dumps, JSONL
transcripts, the dashboard's verified backups, trash entries). The plan comes
from ``stores.recovery`` (the same analysis the check and the *Copies on disk*
panel show): each missing message goes in after the store row it follows, from
the best copy holding it; positions where copies disagree are reported side by
side and nothing is written there; copy messages that differ from rows the store
has are reported, never inserted.

Applying (on the guarded write): the rows the plan was made against must be
unchanged (ids, keys, visibility) and every source copy the same file (size,
modification time, inode); the copies are read once more *before* the write
transaction (their sha256 must be what the plan recorded) so the write lock is
held for the statements only; then, in one guarded write transaction, the
messages go in at their place and the later visible rows are written again after
them with the originals hidden (``transcript_order``, the mechanism the JSONL
import uses too, with its rule for schemas that cannot hide a row), and the
counters are recounted. A message's time is its own
when it fits between its neighbours, else estimated, and the plan says which.
The copies are never modified. A second run finds nothing to recover.
"""

from __future__ import annotations

import json
import os

from ..checks.registry import BY_CODE as CHECKS
from ..stores import recovery, registry
from ..stores.recovery.compare import rows_digest, store_messages
from ..stores.recovery.panel import copy_name
from .base import Action, Change, Changed, one
from .session_rows import message_facts
from .transcript_order import SCHEMA_NEXT_STEP, blocked_on_schema, order_ops, recount, write_in_order
from .transcripts import row_values

def _others(store) -> list:
    return [s for s in registry.stores() if s.path != store.path]


def _analyse(store, conn, caps, session_id: str) -> recovery.Analysis:
    return recovery.analyse(store, conn, caps, session_id, others=_others(store))


def _signature(plan: recovery.RecoveryPlan) -> list:
    """What must be the same at apply time: every insertion's place, source and message."""
    return [[i.after_id, i.order, i.source.path, i.source.sha256, i.message.index] for i in plan.insertions]


def _file_identity(path: str):
    try:
        st = os.stat(path)  # a copy is never a live store; stat opens nothing anyway
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def _calls(data: dict) -> int:
    calls = data.get("tool_calls")
    if isinstance(calls, str):
        try:
            calls = json.loads(calls)
        except ValueError:
            return 0
    return len(calls) if isinstance(calls, list) else 0


class RecoverMessages(Action):
    """Insert the messages only copies on disk hold (module docstring).

    ``params``: ``insertions`` (``[{"after_id", "order", "source", "kind",
    "sha256", "index", "role", "timestamp", "estimated"}]``; no message text: the
    plan goes into the audit trail),
    ``signature``, ``superseded`` (row ids written again later), ``sources`` (provenance dicts),
    ``conflicts``, ``differences``, ``rows_before``, ``notes``.
    """

    name = "recover_messages"
    permission = "run_heal"

    def plan(self, ctx, finding):
        sid = finding.session_id
        analysis = _analyse(ctx.store, ctx.conn, ctx.caps, sid)
        rp = analysis.plan
        inserts = {}
        for ins in rp.insertions:
            inserts.setdefault(ins.after_id, []).append(ins)
        ops = order_ops(analysis.rows, inserts)
        superseded = [item for op, item in ops if op == "copy"]
        changes, notes = [], []
        for ins in rp.insertions:
            changes.append(Change("insert", "messages", {"after_id": ins.after_id, "order": ins.order}, after={
                "role": ins.message.role, "timestamp": ins.timestamp, "timestamp_estimated": ins.timestamp_estimated,
                "from": copy_name(ins.source.path, ins.source.kind), "kind": ins.source.kind}))
        for row_id in superseded:
            changes.append(Change("insert", "messages", {"copy_of": row_id}, after="after the recovered messages"))
            changes.append(Change("update", "messages", {"id": row_id}, "active", 1, 0))
        if superseded:
            notes.append(f"{len(superseded)} later row(s) are written again after the recovered messages so the "
                         "session reads in transcript order; the originals stay in the store, hidden with active = 0")
        estimated = sum(1 for i in rp.insertions if i.timestamp_estimated)
        if estimated:
            notes.append(f"{estimated} recovered message(s) carry no time of their own in the copy: their time is "
                         "estimated from the neighbouring rows")
        for c in rp.conflicts:
            sides = "; ".join(f"{copy_name(p.source.path, p.source.kind)} ({p.source.kind}): "
                              + ", ".join(s["role"] for s in p.summaries) for p in c.proposals)
            where = f"row {c.after_id}" if c.after_id is not None else "the start of the session"
            notes.append(f"copies disagree about what follows {where}: {sides}; nothing is written there")
        for d in rp.differences:
            notes.append(f"{copy_name(d['source'].path, d['source'].kind)} differs from store row(s) "
                         f"{', '.join(map(str, d['row_ids'][:5]))}: reported, never inserted")
        notes += [f"could not read a copy again: {e}" for e in rp.errors]
        sources = [s.as_dict() for s in rp.sources]
        summary = (f"Recover {len(rp.insertions)} message(s) from "
                   + ", ".join(f"{copy_name(s['path'], s['kind'])} ({s['kind']})" for s in sources)
                   + (f", writing {len(superseded)} later row(s) again after them" if superseded else "")
                   + (f"; {len(rp.conflicts)} disputed position(s) left alone" if rp.conflicts else "")
                   + "; recount.") if rp.insertions else "Nothing on disk holds a message the store lacks."
        plan = self.new_plan(ctx, finding, summary, changes=changes, params={
            "insertions": [{"after_id": i.after_id, "order": i.order, "source": i.source.path,
                            "kind": i.source.kind, "sha256": i.source.sha256, "index": i.message.index,
                            "role": i.message.role, "timestamp": i.timestamp,
                            "estimated": i.timestamp_estimated} for i in rp.insertions],
            "signature": _signature(rp), "superseded": superseded, "sources": sources,
            "conflicts": [{"after_id": c.after_id, "copies": [p.source.path for p in c.proposals]}
                          for c in rp.conflicts],
            "differences": [{"source": d["source"].path, "row_ids": d["row_ids"]} for d in rp.differences],
            "rows_before": len(analysis.rows), "notes": notes,
        })
        schema_block = blocked_on_schema(ctx.caps, superseded, "recovering", "recovered")
        if not rp.insertions:
            plan.blocked = ("copies disagree about every missing position; compare them on the session page"
                            if rp.conflicts else "no copy on disk holds a message the store lacks")
        elif schema_block:  # removing originals would be a deletion (transcript_order)
            plan.blocked, plan.next_step = schema_block, SCHEMA_NEXT_STEP
        elif not one(ctx.conn, "SELECT 1 FROM sessions WHERE id = ?", (sid,)):
            plan.blocked = "the session has no row in the store; recovery writes into an existing session only"
            if not analysis.rows:  # gone since the check: the check's words for that case
                plan.next_step = CHECKS["history_lost"].next_step_for("session_gone")
        plan.guard = self.state(ctx.conn, ctx.caps, plan)
        plan.inserted = tuple(rp.insertions)  # the preview's texts, never stored (Plan.inserted)
        return plan

    def validate(self, store, plan):
        p = plan.params
        for ins in p.get("insertions", []):
            if ins.get("kind") not in ("snapshot", "request_dump", "jsonl", "json", "backup", "trash"):
                raise ValueError("a recovered message comes from a copy on disk")
        if p.get("signature") != [[i["after_id"], i["order"], i["source"], i["sha256"], i["index"]]
                                  for i in p.get("insertions", [])]:
            raise ValueError("the plan's insertions do not match its signature")

    def state(self, conn, caps, plan):
        """The rows the plan was made against, the counters, and each source file's identity."""
        return {"rows": rows_digest(store_messages(conn, caps, plan.session_id)),
                "messages": message_facts(conn, caps, plan.session_id),
                "sources": {s["path"]: _file_identity(s["path"]) for s in plan.params.get("sources", [])}}

    def load(self, store, conn, caps, plan):
        """Before the write transaction: read the copies again and take the messages
        to insert; raises ``Changed`` when they are not what the plan showed."""
        analysis = _analyse(store, conn, caps, plan.session_id)
        if _signature(analysis.plan) != plan.params["signature"]:
            raise Changed("the copies on disk or the session changed since the recovery was planned")
        return analysis

    def write(self, conn, caps, plan, loaded=None):
        if loaded is None:  # applied without a load step: read here (tests, a direct call)
            raise Changed("the copies were not read before the write")
        rows = store_messages(conn, caps, plan.session_id)
        if rows_digest(rows) != loaded.plan.rows_digest:
            raise Changed("the session's rows changed")
        inserts = {}
        for ins in loaded.plan.insertions:
            inserts.setdefault(ins.after_id, []).append(ins)
        ops = order_ops(rows, inserts)
        if [item for op, item in ops if op == "copy"] != plan.params["superseded"]:
            raise Changed("the rows to write again are not the planned ones")
        columns = caps.columns("messages")

        def values_of(ins):
            values, _ = row_values(ins.message.row_dict(), columns)
            return dict(values, timestamp=ins.timestamp)

        written = write_in_order(conn, caps, plan.session_id, ops, values_of)
        recount(conn, caps, plan.session_id, sum(_calls(i.message.row_dict()) for i in loaded.plan.insertions))
        return written

    def verify_store(self, store, conn, caps, plan):
        left = _analyse(store, conn, caps, plan.session_id).plan
        done = {(i.source.path, i.message.index) for i in left.insertions}
        still = [i for i in plan.params["insertions"] if (i["source"], i["index"]) in done]
        if still:
            return f"{len(still)} recovered message(s) are still missing"
        expected = plan.params["rows_before"] + len(plan.params["insertions"]) + len(plan.params["superseded"])
        facts = message_facts(conn, caps, plan.session_id)
        if facts["rows"] != expected:
            return f"the session has {facts['rows']} rows, expected {expected}"
        return None

    def after_verify(self, plan) -> str:
        p = plan.params
        return (f"recovered {len(p['insertions'])} message(s) from "
                + ", ".join(f"{s['path']} (sha256 {s['sha256'][:12]}…)" for s in p["sources"])
                + (f"; {len(p['conflicts'])} disputed position(s) left alone" if p["conflicts"] else ""))
