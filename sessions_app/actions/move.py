"""``move_to_owner_store``: a session filed in another profile's store goes home.

Issue 4 section 2, mirroring upstream ``hermes sessions repair-profiles``
(docs/store.md §11.1): export, import into the owner's store, verify, delete from the
source, so that at no moment the session exists in neither store.

What moves (the *unit*): the session and its descendants in the source store
(compression continuations, delegates, branches) unless a descendant's own session
key or ``profile_name`` names yet another profile (that one stays and is detached
from the moved parent, as upstream deletion detaches children, docs/store.md §10.1). A
session whose ancestor is itself moving to the same profile is carried by that
ancestor's move (its own plan is blocked saying so).

How (:meth:`MoveToOwnerStore.run`, the multi-store orchestrator the engine calls):

1. refuse while an agent holds any moved session (turn lease, compression lock,
   registry entry, gateway route, recent activity; either store) or a gateway
   backend of either profile heartbeats (docs/store.md §7, §11.1 "refuses while a gateway
   owning any touched store is live"); re-read both stores against the plan. The
   source's checks are step 5's own (``RemoveFromSource``) run ahead through the
   guarded write (``GuardedWriter.precheck``), the target's those of the copy's
   guarded write: no check of its own here;
2. back up both stores (once per store per run, ground rule 4): the source before
   the copy, the target by the copy's guarded write;
3. the source is read inside one read transaction (``BEGIN`` on its read-only
   connection), so the copy and its check see one snapshot, which must still match
   the plan; in one guarded write transaction on the target: prompt rows
   referenced by the sessions (``system_prompts``), the session rows (parents
   first), every message row (inactive and compacted ones too; ``id`` and
   ``display_order`` are the target's own), the usage rows. A parent the target
   lacks is dropped; a clashing title gets `` (<last 12 chars of id>)``; columns the
   target lacks are skipped and named in the plan;
4. still inside that transaction, before ``COMMIT``, the copy is verified against
   the snapshot (:func:`copy_difference`); a difference rolls the copy back;
5. one guarded write transaction on the source re-checks liveness and the
   plan's state, detaches the children that stay, deletes the usage rows, messages
   and session rows, and removes prompt rows nothing references any more
   (upstream ``delete_moved_session``);
6. only once that delete is committed, the sessions' files in ``sessions/`` move
   to the target profile's ``sessions/`` (before it, a refused or failed delete
   would leave the session in the source with its files gone).

Both store writes are guarded writes (``move_copy.py``): one audit event per store
touched. The target's event is created before the copy and completed with the real
outcome and the rows copied there; the repair's own event, on the source, records
the rows deleted there.

An id already present in the target is an ``id_collision``: reported, never
overwritten or merged. The one exception is a copy this action itself left by an
interrupted move (killed between steps 4 and 5): when the target's copy is what
step 3 writes (:func:`copy_difference`: every message value in order, the whole
session row but the columns a move rewrites, the usage rows), the next run skips
the copy, checks it again, and finishes.

Longer than most modules on purpose: the plan reads two stores and must say precisely why a move is blocked; its writes and the unit it moves are in ``move_copy.py`` and ``move_unit.py``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ..stores.session_files import belongs_to
from ..checks.ownership import owner_decision
from ..stores import jsonl
from ..stores.connection import classify_error
from ..stores.store import Store
from .base import Action, Change, one
from .guarded import Changed, Refused, Skip, refuse_live
from .files import ensure_sessions_dir, move_without_loss, session_files_by_id as session_files
from .move_copy import (  # noqa: F401  (NOT_COPIED: what a move never copies, used by tests)
    NOT_COPIED, CopyIntoTarget, RemoveFromSource, copy_difference, message_columns, messages_print,
    target_prompts, unresolved_refs,
)
from .move_unit import (  # noqa: F401
    UNIT_CAP, _prompt_hashes, carried_by, live_gateways, move_unit, sibling_store,
)
from .rowcopy import copy_rows, quote



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
            if any(not belongs_to(n, sid) or "/" in n for n in names):
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
        source = RemoveFromSource(self, plan, target)
        # The source's own pre-checks (hazards, liveness, planned state: the guarded
        # write's steps 3 and 4) and its backup come before the copy: a copy whose
        # source may not give its rows up would only leave an id_collision behind.
        # The target's are the copy's own guarded write (CopyIntoTarget).
        try:
            caps = writer.precheck(store, source, outcome)
        except Refused as exc:
            raise Refused(f"{store.key}: {exc}", exc.evidence) from exc
        outcome.backup = writer.backup_for(store)
        to_copy = [sid for sid in members if sid not in finish]
        copied = 0
        if to_copy:
            copy = CopyIntoTarget(self, plan, store, caps, to_copy)
            done = writer.perform(target, copy)  # the target's own audit event
            if done.refused:  # a hazard or a live session there: refused as before any write
                raise Refused(f"{target.key}: {copy.failure}", done.evidence)
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
                          + (f"; backup of {target.key}: {writer.backups[str(target.path)].path}"
                             if str(target.path) in writer.backups else ""))

    @staticmethod
    def _refuse(store, conn, caps, ids, now, inside: bool = False) -> None:
        """Ground rule 6 in one store: raise ``Refused`` when a moved session looks
        live or a gateway of the profile heartbeats (``inside``: as ``refuse_live``)."""
        refuse_live(store, conn, caps, ids, now, closed_counts=True, where=store.key, inside=inside)
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
                    ensure_sessions_dir(dest)
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
