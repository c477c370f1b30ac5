"""``move_to_owner_store``: a session filed in another profile's store goes home.

Issue 4 section 2, mirroring upstream ``hermes sessions repair-profiles``
(reference 6.1): export, import into the owner's store, verify, delete from the
source, so that at no moment the session exists in neither store.

What moves (the *unit*): the session and its descendants in the source store
(compression continuations, delegates, branches) unless a descendant's own session
key or ``profile_name`` names yet another profile (that one stays and is detached
from the moved parent, as upstream deletion detaches children, reference 5). A
session whose ancestor is itself moving to the same profile is carried by that
ancestor's move (its own plan is blocked saying so).

How (:meth:`MoveToOwnerStore.run`, the multi-store orchestrator the engine calls):

1. refuse while an agent holds any moved session (turn lease, compression lock,
   registry entry, gateway route, recent activity; either store) or a gateway
   backend of either profile heartbeats (reference 4, 6.1 "refuses while a gateway
   owning any touched store is live"); re-read both stores against the plan;
2. back up both stores (once per store per run, ground rule 4);
3. the source is read inside one read transaction (``BEGIN`` on its read-only
   connection), so the copy and its check see one snapshot, which must still match
   the plan; in one ``BEGIN IMMEDIATE`` transaction on the target: prompt rows
   referenced by the sessions (``system_prompts``), the session rows (parents
   first), every message row (inactive and compacted ones too; ``id`` and
   ``display_order`` are the target's own), the usage rows. A parent the target
   lacks is dropped; a clashing title gets `` (<last 12 chars of id>)``; columns the
   target lacks are skipped and named in the plan;
4. still inside that transaction, before ``COMMIT``, the copy is verified against
   the snapshot (:func:`copy_difference`); a difference rolls the copy back;
5. one ``BEGIN IMMEDIATE`` transaction on the source re-checks liveness and the
   plan's state, detaches the children that stay, deletes the usage rows, messages
   and session rows, and removes prompt rows nothing references any more
   (upstream ``delete_moved_session``);
6. only once that delete is committed, the sessions' files in ``sessions/`` move
   to the target profile's ``sessions/`` (before it, a refused or failed delete
   would leave the session in the source with its files gone).

Audit: one event per store touched. The target's event is created before the copy
and completed, whatever happens (``finally``), with the real outcome and the rows
copied there; the engine's event for the source records the rows deleted there.

An id already present in the target is an ``id_collision``: reported, never
overwritten or merged. The one exception is a copy this action itself left by an
interrupted move (killed between steps 4 and 5): when the target's copy is what
step 3 writes (:func:`copy_difference`: every message value in order, the whole
session row but the columns a move rewrites, the usage rows), the next run skips
the copy, checks it again, and finishes.
"""

from __future__ import annotations

import dataclasses
import re
import sqlite3
import time
from pathlib import Path

from ..checks.files import session_id_of
from ..checks.ownership import key_profile, owner_decision
from ..stores import jsonl, liveness
from ..stores.connection import classify_error
from ..stores.discovery import discover
from ..stores.lineage import UP_CAP
from ..stores.store import Store
from .base import Action, Change, one
from .guarded import Changed, Mismatch, Refused, Skip, Write, jsonable, refuse_live, store_hazard
from .files import move_without_loss, session_files_by_id as session_files
from .rowcopy import copy_rows, exact_select, fingerprint, quote

UNIT_CAP = 500  # sessions moved together at most
# Messages columns the target computes itself (upstream import_moved_session, reference
# 6.1): the insert trigger derives display_order from the copied display_identity.
NOT_COPIED = ("id", "display_order")
OWNER_COLUMNS = ("id", "parent_session_id", "session_key", "profile_name", "title")
# Session columns a move may rewrite (detached parent, suffixed title, new owner):
# the only ones in which a copy may differ from its source.
SESSION_FREE = ("title", "profile_name", "parent_session_id")
PROMPT_REFS = ("system_prompt_hash", "tool_names")
HASH_RE = re.compile(r"^[0-9a-f]{64}$")


def sibling_store(store: Store, name: str) -> Store | None:
    """The store of profile ``name`` in ``store``'s root (same key style), or None."""
    for profile in discover([store.profile.root]).profiles:
        if profile.name == name:
            key = f"{name}@{store.profile.root_label}" if "@" in store.profile.key else name
            return Store(dataclasses.replace(profile, key=key, root_label=store.profile.root_label))
    return None


def _owner_rows(conn, caps, where: str, params: tuple) -> list[dict]:
    cols = ", ".join(c if caps.has("sessions", c) else f"NULL AS {c}" for c in OWNER_COLUMNS)
    cur = conn.execute(f"SELECT {cols} FROM sessions WHERE {where}", params)
    return [dict(zip(OWNER_COLUMNS, row)) for row in cur.fetchall()]


def travels(row: dict, source: str, target: str) -> bool:
    """Whether a descendant goes with its moving parent: unless its own key or label
    names a profile other than the target (a label naming the source is the store's
    own stamp, not evidence)."""
    label = (row.get("profile_name") or "").strip()
    return key_profile(row.get("session_key")) in (None, target) and label in ("", source, target)


def move_unit(conn, caps, store: Store, session_id: str, target: str) -> tuple[list[dict], list[list[str]]]:
    """``(members parents first, [[child, parent], ...] children that stay)``."""
    source = store.profile.name
    root = _owner_rows(conn, caps, "id = ?", (session_id,))
    if not root:
        return [], []
    members, detached, seen, queue = [root[0]], [], {session_id}, [session_id]
    while queue and len(members) <= UNIT_CAP:
        parent = queue.pop(0)
        for child in _owner_rows(conn, caps, "parent_session_id = ? ORDER BY id", (parent,)):
            if child["id"] in seen:
                continue
            seen.add(child["id"])
            if travels(child, source, target):
                members.append(child)
                queue.append(child["id"])
            else:
                detached.append([child["id"], parent])
    return members, detached


def carried_by(conn, caps, store: Store, session_id: str, target: str) -> str | None:
    """The ancestor whose own move to ``target`` carries ``session_id``, or None."""
    seen = {session_id}
    node = _owner_rows(conn, caps, "id = ?", (session_id,))
    node = node[0] if node else None
    for _ in range(UP_CAP):
        pid = node and node.get("parent_session_id")
        if not pid or pid in seen:
            return None
        seen.add(pid)
        found = _owner_rows(conn, caps, "id = ?", (pid,))
        if not found:
            return None
        node = found[0]
        decision = owner_decision(store, node.get("profile_name"), node.get("session_key"))
        if decision["heal"] == "move_to_owner_store" and decision["target"] == target:
            return pid
        if not travels(node, store.profile.name, target):
            return None
    return None


def message_columns(caps, tcaps) -> list[str]:
    return [c for c in caps.columns("messages") if tcaps.has("messages", c) and c not in NOT_COPIED]


def messages_print(conn, columns, session_id) -> list:
    return fingerprint(conn, "messages", columns, "session_id = ?", (session_id,), order="id")


def target_prompts(plan, tcaps) -> list[str]:
    """The prompt rows the copy carries (none when the target has no prompt table)."""
    return plan.params["prompts"] if tcaps.has_table("system_prompts") else []


def unresolved_refs(src, columns, prompts, session_id) -> dict:
    """Prompt references of the session the target could not resolve: written NULL."""
    out = {}
    for col in PROMPT_REFS:
        value = one(src, f"SELECT {quote(col)} FROM sessions WHERE id = ?", (session_id,)) if col in columns else None
        if isinstance(value, str) and HASH_RE.match(value) and value not in prompts:
            out[col] = None
    return out


def _exact_row(conn, columns, session_id) -> list | None:
    row = conn.execute(f"SELECT {exact_select(columns)} FROM sessions WHERE id = ?", (session_id,)).fetchone()
    return None if row is None else [tuple(row[n:n + 2]) for n in range(0, len(row), 2)]


def copy_difference(src, caps, dst, tcaps, plan, session_id) -> str | None:
    """Why ``dst``'s ``session_id`` is not the copy step 3 writes from ``src``, or None.

    Compared exactly, over the columns both stores have: every message row in
    ``messages.id`` order, the session row except :data:`SESSION_FREE` (prompt
    references the target cannot resolve are expected NULL), and the usage rows
    (when both stores keep them). Used for the check before ``COMMIT`` and to tell
    an interrupted move's copy from another session with the same id.
    """
    if not one(dst, "SELECT 1 FROM sessions WHERE id = ?", (session_id,)):
        return f"{session_id} is missing from the target"
    cols = message_columns(caps, tcaps)
    if messages_print(src, cols, session_id) != messages_print(dst, cols, session_id):
        return f"the messages of {session_id} differ"
    scols = [c for c in caps.columns("sessions") if tcaps.has("sessions", c) and c not in SESSION_FREE]
    expected = _exact_row(src, scols, session_id)
    if expected is None:
        return f"{session_id} is missing from the source"
    for col in unresolved_refs(src, scols, target_prompts(plan, tcaps), session_id):
        expected[scols.index(col)] = (None, "null")
    if expected != _exact_row(dst, scols, session_id):
        return f"the session row of {session_id} differs"
    if caps.has_table("session_model_usage") and tcaps.has_table("session_model_usage"):
        ucols = [c for c in caps.columns("session_model_usage") if tcaps.has("session_model_usage", c)]
        order = ", ".join(quote(c) for c in ucols)
        prints = [fingerprint(conn, "session_model_usage", ucols, "session_id = ?", (session_id,), order=order)
                  for conn in (src, dst)]
        if prints[0] != prints[1]:
            return f"the usage rows of {session_id} differ"
    return None


def _prompt_hashes(conn, caps, ids: list[str]) -> list[str]:
    if not caps.has_table("system_prompts"):
        return []
    cols = [c for c in ("system_prompt_hash", "tool_names") if caps.has("sessions", c)]
    found = set()
    for sid in ids:
        for col in cols:
            value = one(conn, f"SELECT {col} FROM sessions WHERE id = ?", (sid,))
            if isinstance(value, str) and HASH_RE.match(value) and one(
                    conn, "SELECT 1 FROM system_prompts WHERE hash = ?", (value,)):
                found.add(value)
    return sorted(found)


def live_gateways(store: Store, conn, caps, now: float) -> list:
    """Backends of this profile that heartbeat and run (reference 4.6)."""
    return liveness._live_backends(conn, caps, now)  # noqa: SLF001 (the same rule the session evidence uses)


class MoveToOwnerStore(Action):
    """Move a session (and the descendants going with it) into the store of the
    profile that owns it; see the module docstring for the steps and rules.

    ``params``: ``target_profile`` (key), ``target_path``, ``members`` (ids, parents
    first), ``finish`` (ids whose identical copy the target already holds),
    ``parent`` (the root's parent kept in the target, or None), ``titles`` (id ->
    new title), ``owners`` (id -> profile_name written), ``detached`` ([[child,
    parent]]), ``files`` (id -> names in ``sessions/``), ``prompts`` (hashes),
    ``usage`` (rows), ``notes`` (plain-language remarks for the preview).
    """

    name = "move_to_owner_store"
    permission = "delete_sessions"
    multi_store = True

    # ------------------------------------------------------------------ plan

    def plan(self, ctx, finding):
        sid = finding.session_id
        target_name = (finding.evidence or {}).get("target_profile") or ""
        target = sibling_store(ctx.store, target_name) if target_name else None
        members, detached = move_unit(ctx.conn, ctx.caps, ctx.store, sid, target_name)
        ids = [m["id"] for m in members]
        params = {"target_profile": target.key if target else target_name,
                  "target_path": str(target.path) if target else "", "members": ids, "finish": [],
                  "parent": None, "titles": {}, "owners": {}, "detached": detached,
                  "files": session_files(ctx.store, set(ids)), "prompts": _prompt_hashes(ctx.conn, ctx.caps, ids),
                  "usage": 0, "notes": []}
        plan = self.new_plan(ctx, finding, "", params=params)
        plan.blocked = self._source_blockers(ctx, plan, target, members)
        if not plan.blocked:
            plan.blocked = self._with_target(ctx, plan, target, members)
        plan.summary = self._summary(plan, members)
        plan.changes = self._changes(ctx, plan, members)
        plan.guard = {"source": self.state(ctx.conn, ctx.caps, plan), "target": None}
        if target is not None and not plan.blocked:
            with target.read() as tconn:
                plan.guard["target"] = self.target_state(tconn, target.capabilities(tconn), plan)
        return plan

    def _source_blockers(self, ctx, plan, target, members) -> str:
        sid, name = plan.session_id, plan.params["target_profile"]
        if not members:
            return "the session no longer exists in this store"
        decision = owner_decision(ctx.store, members[0].get("profile_name"), members[0].get("session_key"))
        if decision["heal"] != "move_to_owner_store" or target is None:
            return f"the session does not name another existing profile (kind: {decision['kind']})"
        if decision["target"] != target.profile.name:
            return f"the session now names profile '{decision['target']}', not '{name}'"
        if Path(target.path).resolve() == Path(ctx.store.path).resolve():
            return "the target is this very store"
        carrier = carried_by(ctx.conn, ctx.caps, ctx.store, sid, target.profile.name)
        if carrier:
            return f"it moves together with its ancestor {carrier}, whose own move carries it"
        if len(members) > UNIT_CAP:
            return f"more than {UNIT_CAP} sessions would move together; move the lineage by hand"
        if ctx.caps.has_table("telegram_dm_topic_bindings"):
            bound = [m["id"] for m in members if one(
                ctx.conn, "SELECT 1 FROM telegram_dm_topic_bindings WHERE session_id = ?", (m["id"],))]
            if bound:
                return f"Telegram topic bindings point at {', '.join(bound)}; they are not moved automatically"
        return ""

    def _with_target(self, ctx, plan, target, members) -> str:
        """Target-side facts of the plan (read-only); returns a blocking reason or ''."""
        status = target.readiness()
        if status is not None:
            return f"the target store ({target.key}) is {status.status}: {status.reason}"
        try:
            with target.read() as tconn:
                tcaps = target.capabilities(tconn)
                return self._target_facts(ctx, plan, target, members, tconn, tcaps)
        except sqlite3.Error as exc:
            return f"the target store ({target.key}) cannot be read: {classify_error(exc)[1]}"

    def _target_facts(self, ctx, plan, target, members, tconn, tcaps) -> str:
        p, notes, caps, conn = plan.params, plan.params["notes"], ctx.caps, ctx.conn
        for m in members:
            if one(tconn, "SELECT 1 FROM sessions WHERE id = ?", (m["id"],)):
                # Only a copy identical to what this move writes is an interrupted move.
                differs = copy_difference(conn, caps, tconn, tcaps, plan, m["id"])
                if differs:
                    return (f"id_collision: {m['id']} already exists in {target.key} with different content "
                            f"({differs}); it is never overwritten or merged (compare the two copies)")
                p["finish"].append(m["id"])
        if p["finish"]:
            notes.append(f"{target.key} already holds an identical copy of {', '.join(p['finish'])} "
                         "(an interrupted move): it is kept and only the source copy is removed.")
        to_copy = [m for m in members if m["id"] not in p["finish"]]
        if caps.has("messages", "active") and not tcaps.has("messages", "active") and to_copy:
            hidden = sum(one(conn, "SELECT COUNT(*) FROM messages WHERE session_id = ? AND active = 0", (m["id"],))
                         for m in to_copy)
            if hidden:
                return (f"{target.key}'s schema has no messages.active column: {hidden} hidden (rewound or "
                        "compacted) row(s) would become visible there")
        root = members[0]
        parent = root.get("parent_session_id")
        if parent and root["id"] not in p["finish"]:
            if one(tconn, "SELECT 1 FROM sessions WHERE id = ?", (parent,)):
                p["parent"] = parent
            else:
                notes.append(f"The parent {parent} does not exist in {target.key}: the copy is detached from it.")
        for m in to_copy:
            title = m.get("title")
            if title and tcaps.has("sessions", "title") and one(
                    tconn, "SELECT 1 FROM sessions WHERE title = ? AND id != ?", (title, m["id"])):
                new = f"{title} ({m['id'][-12:]})"
                if one(tconn, "SELECT 1 FROM sessions WHERE title = ?", (new,)):
                    return f"the title {title!r} of {m['id']} clashes in {target.key}, and so does {new!r}"
                p["titles"][m["id"]] = new
                notes.append(f"The title {title!r} is taken in {target.key}: {m['id']} becomes {new!r}.")
            if tcaps.has("sessions", "profile_name"):
                label = (m.get("profile_name") or "").strip()
                if label != target.profile.name and (label or target.profile.name != "default"):
                    p["owners"][m["id"]] = target.profile.name
        lost_s = self._lost_columns(conn, caps, tcaps, "sessions", [m["id"] for m in to_copy], "id")
        lost_m = self._lost_columns(conn, caps, tcaps, "messages", [m["id"] for m in to_copy], "session_id")
        if lost_s:
            notes.append(f"{target.key} has no column for sessions.{', sessions.'.join(lost_s)}: these values are not kept.")
        if lost_m:
            notes.append(f"{target.key} has no column for messages.{', messages.'.join(lost_m)}: these values are not kept.")
        if caps.has_table("session_model_usage"):
            p["usage"] = sum(one(conn, "SELECT COUNT(*) FROM session_model_usage WHERE session_id = ?", (m["id"],))
                             for m in to_copy)
            if p["usage"] and not tcaps.has_table("session_model_usage"):
                notes.append(f"{target.key} has no session_model_usage table: {p['usage']} usage row(s) are not "
                             "kept (the session's own token and cost totals are).")
        if p["prompts"] and not tcaps.has_table("system_prompts"):
            notes.append(f"{target.key} has no system_prompts table: the prompt reference is dropped "
                         "(Hermes rebuilds the prompt on the next turn).")
        for sid, names in p["files"].items():
            clash = [n for n in names if (Path(target.profile.sessions_dir) / n).exists()]
            if clash:
                return f"{target.key}'s sessions/ folder already holds {', '.join(clash)}"
        if p["detached"]:
            notes.append("Child session(s) staying in this store are detached from the moved parent: "
                         + ", ".join(c for c, _ in p["detached"]) + ".")
        if len(members) > 1:
            notes.append(f"{len(members) - 1} descendant session(s) move with it: "
                         + ", ".join(m["id"] for m in members[1:]) + ".")
        return ""

    @staticmethod
    def _lost_columns(conn, caps, tcaps, table, ids, key) -> list[str]:
        lost = []
        for col in caps.columns(table):
            if tcaps.has(table, col) or col in NOT_COPIED or not ids:
                continue
            marks, q = ",".join("?" * len(ids)), quote(col)
            if one(conn, f"SELECT 1 FROM {table} WHERE {key} IN ({marks}) AND {q} IS NOT NULL "
                         f"AND {q} NOT IN (0, '') LIMIT 1", tuple(ids)):
                lost.append(col)
        return lost

    def _summary(self, plan, members) -> str:
        p = plan.params
        if not members:
            return "Nothing to move."
        rest = f" with {len(members) - 1} descendant(s)" if len(members) > 1 else ""
        if p["finish"] and len(p["finish"]) == len(members):
            return (f"Finish an interrupted move to {p['target_profile']}: the target already holds an identical "
                    f"copy; remove the source copy.")
        return (f"Move the session{rest} into the store of profile {p['target_profile']}: back up both stores, copy "
                "every message (inactive and compacted too), usage rows and prompt references, verify the copy, "
                "then remove it from this store.")

    def _changes(self, ctx, plan, members) -> list[Change]:
        p, target = plan.params, plan.params["target_profile"]
        changes = []
        for m in members:
            rows = one(ctx.conn, "SELECT COUNT(*) FROM messages WHERE session_id = ?", (m["id"],))
            if m["id"] not in p["finish"]:
                after = {"messages": rows, "store": target}
                if m["id"] in p["titles"]:
                    after["title"] = p["titles"][m["id"]]
                if m["id"] == members[0]["id"]:
                    after["parent_session_id"] = p["parent"]
                changes.append(Change("insert", f"{target}:sessions", {"id": m["id"]}, after=after))
            changes.append(Change("delete", "sessions", {"id": m["id"]}, before={"messages": rows}))
        for child, parent in p["detached"]:
            changes.append(Change("update", "sessions", {"id": child}, "parent_session_id", parent, None))
        for sid, names in p["files"].items():
            for name in names:
                changes.append(Change("move", "file", {"path": f"sessions/{name}"}, before=ctx.store.key, after=target))
        return changes

    def validate(self, store, plan):
        """A plan may only move this session (and its planned unit) into a sibling profile."""
        p = plan.params
        target = sibling_store(store, str(p.get("target_profile", "")).split("@")[0])
        if target is None or str(target.path) != p.get("target_path"):
            raise ValueError("the target must be another profile of this store's root")
        if Path(target.path).resolve() == Path(store.path).resolve():
            raise ValueError("the target is this very store")
        members = p.get("members") or []
        if not members or members[0] != plan.session_id:
            raise ValueError("the moved unit must start with the plan's session")
        named = set(p.get("finish", [])) | set(p.get("titles", {})) | set(p.get("owners", {})) | set(p.get("files", {}))
        if not named <= set(members):
            raise ValueError("the plan names sessions outside the moved unit")
        if any(v != target.profile.name for v in p.get("owners", {}).values()):
            raise ValueError("the owner written must be the target profile")
        for sid, names in p.get("files", {}).items():
            if any(session_id_of(n)[0] != sid or "/" in n for n in names):
                raise ValueError("the plan names files of another session")

    def liveness_ids(self, plan):
        return list(plan.params.get("members") or [plan.session_id])

    # ------------------------------------------------------------------ guards

    def state(self, conn, caps, plan):
        """Source facts: each member's row, messages and usage, and the children that stay."""
        p = plan.params
        facts = {}
        for sid in p["members"]:
            row = conn.execute("SELECT * FROM sessions WHERE id = ?", (sid,)).fetchone()
            facts[sid] = {
                "row": list(row) if row else None,
                "messages": messages_print(conn, list(caps.columns("messages")), sid),
                "usage": (one(conn, "SELECT COUNT(*) FROM session_model_usage WHERE session_id = ?", (sid,))
                          if caps.has_table("session_model_usage") else 0),
            }
        staying = sorted([r[0], r[1]] for sid in p["members"] for r in conn.execute(
            "SELECT id, parent_session_id FROM sessions WHERE parent_session_id = ?", (sid,)) if r[0] not in p["members"])
        return {"members": facts, "staying": staying}

    def target_state(self, conn, caps, plan) -> dict:
        """Target facts: which member ids exist there, and the titles the plan writes."""
        p = plan.params
        present = [sid for sid in p["members"] if one(conn, "SELECT 1 FROM sessions WHERE id = ?", (sid,))]
        taken = [t for t in p["titles"].values() if caps.has("sessions", "title") and one(
            conn, "SELECT 1 FROM sessions WHERE title = ?", (t,))]
        return {"present": present, "titles_taken": taken,
                "parent": bool(p["parent"] and one(conn, "SELECT 1 FROM sessions WHERE id = ?", (p["parent"],)))}

    # ------------------------------------------------------------------ apply

    def run(self, writer, store: Store, plan, outcome) -> None:
        """Apply a move plan (steps in the module docstring) through ``writer``
        (the run's :class:`~.guarded.GuardedWriter`), filling ``outcome``, the
        source store's outcome: ``rows_changed`` counts the rows deleted there.

        Raises what the guarded write maps (``Changed``, ``Refused``, ``StoreBusy``,
        ``BackupError``, ``sqlite3.Error``) before anything is written; once the
        copy committed, problems become the outcome (the copy stays, the source is
        untouched, the next run finishes the move).
        """
        p = plan.params
        members, finish = p["members"], set(p["finish"])
        target = sibling_store(store, p["target_profile"].split("@")[0])
        if target is None or str(target.path) != p["target_path"]:
            raise Changed(f"profile {p['target_profile']} is gone")
        for each in (store, target):
            hazard = store_hazard(each)
            if hazard:
                raise Refused(f"{each.key}: {hazard}")
        now = time.time()
        with store.read() as conn:
            caps = store.capabilities(conn)
            self._refuse(store, conn, caps, members, now)
            if jsonable(self.state(conn, caps, plan)) != plan.guard["source"]:
                raise Changed("re-read before writing")
        with target.read() as tconn:
            tcaps = target.capabilities(tconn)
            self._refuse(target, tconn, tcaps, members, now)
            if jsonable(self.target_state(tconn, tcaps, plan)) != plan.guard["target"]:
                raise Changed(f"{target.key} re-read before writing")
        outcome.backup = writer.backup_for(store)
        target_backup = writer.backup_for(target)
        to_copy = [sid for sid in members if sid not in finish]
        copied = 0
        if to_copy:
            copy = CopyIntoTarget(self, plan, store, caps, to_copy)
            done = writer.perform(target, copy)  # the target's own audit event
            if done.status != "applied":
                outcome.status = "failed" if copy.differs else done.status
                outcome.reason = (f"verify: {copy.differs}; nothing written to {target.key}, nothing removed "
                                  f"from {store.key}" if copy.differs else copy.failure or done.reason)
                return
            copied = done.rows_changed
        if finish:  # an interrupted move's copy: still exactly what this move would write?
            with store.read() as src, target.read() as dst:
                src.execute("BEGIN")  # one snapshot of each store; closing the connections ends them
                dst.execute("BEGIN")
                problem = self._verify_copy(src, caps, dst, target.capabilities(dst), plan,
                                            [sid for sid in members if sid in finish])
            if problem:
                outcome.status = "failed"
                outcome.reason = (f"verify: {problem} in {target.key} since the move was planned; nothing removed "
                                  f"from {store.key} (compare the two copies: an id_collision)")
                return
        source = RemoveFromSource(self, plan, target)
        try:
            writer.steps(store, source, outcome)
        except Changed as exc:
            raise Skip(f"the session changed in {store.key} after it was copied ({exc}): nothing removed; "
                       f"the copy in {target.key} is now an id_collision to compare by hand") from exc
        except Refused as exc:
            raise Refused(f"{exc}; the copy in {target.key} stays, the next run finishes the move",
                          exc.evidence) from exc
        if outcome.status != "applied":
            return
        moved, unmoved = source.moved, source.unmoved
        # Files left behind are a failure to act on: a JSONL left in the source's
        # sessions/ would be imported back there by the next run.
        outcome.status = "failed" if unmoved else "applied"
        outcome.reason = (f"moved {len(members)} session(s) to {target.key}"
                          + (" (finishing an interrupted move)" if finish else "")
                          + f"; {copied} row(s) copied there, {outcome.rows_changed} row(s) removed here"
                          + (f"; files moved: {', '.join(moved)}" if moved else "")
                          + (f"; files NOT moved, still in {store.key}'s sessions/ (move them to "
                             f"{target.profile.sessions_dir} by hand): {'; '.join(unmoved)}" if unmoved else "")
                          + f"; backup of {target.key}: {target_backup.path}")

    @staticmethod
    def _refuse(store, conn, caps, ids, now) -> None:
        """Ground rule 6 in one store: raise ``Refused`` when a moved session looks
        live or a gateway of the profile heartbeats."""
        refuse_live(store, conn, caps, ids, now, closed_counts=True, where=store.key)
        gateways = live_gateways(store, conn, caps, now)
        if gateways:
            backend, pid, _ = gateways[0]
            raise Refused(f"a gateway of profile {store.key} is live (backend {backend}, pid {pid}); nothing written")

    def _copy(self, src, caps, dst, tcaps, plan, to_copy) -> int:
        p, n = plan.params, 0
        prompts = target_prompts(plan, tcaps)
        for digest in prompts:
            if not one(dst, "SELECT 1 FROM system_prompts WHERE hash = ?", (digest,)):
                n += copy_rows(src, dst, "system_prompts", ["hash", "prompt"], "hash = ?", (digest,))
        scols = [c for c in caps.columns("sessions") if tcaps.has("sessions", c)]
        mcols = message_columns(caps, tcaps)
        ucols = [c for c in caps.columns("session_model_usage") if tcaps.has("session_model_usage", c)]
        for sid in to_copy:
            overrides = {}
            if sid == p["members"][0]:
                overrides["parent_session_id"] = p["parent"]
            if sid in p["titles"]:
                overrides["title"] = p["titles"][sid]
            if sid in p["owners"]:
                overrides["profile_name"] = p["owners"][sid]
            overrides.update(unresolved_refs(src, scols, prompts, sid))  # references the target cannot resolve
            overrides = {k: v for k, v in overrides.items() if k in scols}
            n += copy_rows(src, dst, "sessions", scols, "id = ?", (sid,), overrides=overrides)
            n += copy_rows(src, dst, "messages", mcols, "session_id = ?", (sid,), order="id")
            if ucols:
                n += copy_rows(src, dst, "session_model_usage", ucols, "session_id = ?", (sid,))
        return n

    @staticmethod
    def _verify_copy(src, caps, dst, tcaps, plan, ids) -> str | None:
        """The first :func:`copy_difference` among ``ids``, or None."""
        for sid in ids:
            problem = copy_difference(src, caps, dst, tcaps, plan, sid)
            if problem:
                return problem
        return None

    @staticmethod
    def _move_files(store, target, plan) -> tuple[list[str], list[str]]:
        """Move the planned files (regular files only, never over an existing name,
        never losing bytes: ``move_without_loss``); returns (moved, not moved with why).
        Runs after the source delete committed: a refused or failed delete leaves the
        session and its files together in the source; a file that cannot move is
        left in place and reported."""
        moved, unmoved = [], []
        folder, dest = Path(store.profile.sessions_dir), Path(target.profile.sessions_dir)
        for names in plan.params["files"].values():
            for name in names:
                if not jsonl.is_regular(folder / name):
                    continue  # gone since it was planned
                if (dest / name).exists() or (dest / name).is_symlink():
                    unmoved.append(f"{name} (the target's sessions/ already has one)")
                    continue
                try:
                    dest.mkdir(parents=True, exist_ok=True)
                    move_without_loss(folder / name, dest / name)
                    moved.append(name)
                except OSError as exc:
                    unmoved.append(f"{name} ({exc})")
        return moved, unmoved

    @staticmethod
    def _delete(conn, caps, plan) -> int:
        p, n = plan.params, 0
        for child, parent in p["detached"]:
            n += conn.execute("UPDATE sessions SET parent_session_id = NULL WHERE id = ? AND parent_session_id = ?",
                              (child, parent)).rowcount
        for sid in reversed(p["members"]):
            if caps.has_table("session_model_usage"):
                n += conn.execute("DELETE FROM session_model_usage WHERE session_id = ?", (sid,)).rowcount
            n += conn.execute("DELETE FROM messages WHERE session_id = ?", (sid,)).rowcount
            n += conn.execute("DELETE FROM sessions WHERE id = ?", (sid,)).rowcount
        refs = [c for c in ("system_prompt_hash", "tool_names") if caps.has("sessions", c)]
        if refs and caps.has_table("system_prompts"):
            unused = " AND ".join(f"NOT EXISTS (SELECT 1 FROM sessions WHERE {c} = ?)" for c in refs)
            for digest in p["prompts"]:
                n += conn.execute(f"DELETE FROM system_prompts WHERE hash = ? AND {unused}",
                                  (digest, *[digest] * len(refs))).rowcount
        return n


class CopyIntoTarget(Write):
    """Steps 3 and 4 on the target store: copy from one read snapshot of the
    source, verified inside the target's transaction before ``COMMIT`` (a
    difference rolls the copy back). ``differs`` / ``failure`` say why it did not
    commit, for the source's outcome."""

    action = "move_to_owner_store"

    def __init__(self, move, plan, source: Store, caps, to_copy: list[str]):
        self.move, self.plan, self.source, self.caps, self.to_copy = move, plan, source, caps, to_copy
        self.differs = ""
        self.failure = ""

    def check(self, ctx):
        if not ctx.inside:
            self.move._refuse(ctx.store, ctx.conn, ctx.caps, self.plan.params["members"], ctx.now)
        if jsonable(self.move.target_state(ctx.conn, ctx.caps, self.plan)) != self.plan.guard["target"]:
            raise Changed(f"{ctx.store.key} re-read " + ("inside the write transaction" if ctx.inside
                                                         else "before writing"))

    def execute(self, ctx):
        with self.source.read() as src:
            src.execute("BEGIN")  # one snapshot: the copy and its check read the same source
            try:
                if jsonable(self.move.state(src, self.caps, self.plan)) != self.plan.guard["source"]:
                    raise Changed(f"{self.source.key} re-read before copying")
                copied = self.move._copy(src, self.caps, ctx.conn, ctx.caps, self.plan, self.to_copy)
                problem = self.move._verify_copy(src, self.caps, ctx.conn, ctx.caps, self.plan, self.to_copy)
                if problem:
                    self.differs = problem
                    raise Mismatch(problem)  # rolls the copy back
            finally:
                if src.in_transaction:
                    src.execute("ROLLBACK")
        ctx.outcome.rows_changed = copied
        ctx.outcome.done = (f"copied {len(self.to_copy)} session(s) from {self.source.key} ({copied} rows), "
                            "verified before COMMIT; the source copy is removed next")

    def describe(self, outcome):
        if outcome.status == "applied":
            return
        self.failure = outcome.reason
        outcome.reason = (f"verify before COMMIT: {self.differs}; rolled back, nothing written" if self.differs
                          else f"nothing written: {outcome.reason}")

    def audit_fields(self, store, outcome):
        return _move_audit(self.plan, outcome)


class RemoveFromSource(Write):
    """Step 5 on the source store: liveness and the plan's state again, then the
    moved rows go; step 6 (the files follow) only once that committed."""

    action = "move_to_owner_store"

    def __init__(self, move, plan, target: Store):
        self.move, self.plan, self.target = move, plan, target
        self.moved: list[str] = []
        self.unmoved: list[str] = []

    def check(self, ctx):
        self.move._refuse(ctx.store, ctx.conn, ctx.caps, self.plan.params["members"], time.time())
        if jsonable(self.move.state(ctx.conn, ctx.caps, self.plan)) != self.plan.guard["source"]:
            raise Changed("re-read inside the write transaction" if ctx.inside else "re-read before writing")

    def execute(self, ctx):
        ctx.outcome.rows_changed = self.move._delete(ctx.conn, ctx.caps, self.plan)

    def after_commit(self, writer, store, outcome):
        self.moved, self.unmoved = self.move._move_files(store, self.target, self.plan)

    def verify(self, store, outcome):
        with store.read() as conn:
            left = [sid for sid in self.plan.params["members"]
                    if one(conn, "SELECT 1 FROM sessions WHERE id = ?", (sid,))]
        return f"verify: {', '.join(left)} still in {store.key}" if left else None

    def verified(self, outcome, problem):
        outcome.status, outcome.reason = ("failed", problem) if problem else ("applied", "")


def _move_audit(plan, outcome) -> dict:
    return dict(check_code=plan.check, session_ids=[plan.session_id] if plan.session_id else [],
                plan=jsonable(plan.as_dict()), changes=jsonable([c.__dict__ for c in plan.changes]),
                rows_changed=outcome.rows_changed)
