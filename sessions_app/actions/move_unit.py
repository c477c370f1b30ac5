"""What a move of a misfiled session carries (``move.py``): the unit of sessions that
travel together to their owner's store, and the facts its plan rests on.

The unit is the session and its descendants in the source store (compression
continuations, delegates, branches) unless a descendant's own session key or
``profile_name`` names yet another profile (docs/store.md §11.1, upstream
``hermes sessions repair-profiles``).
"""

from __future__ import annotations

import dataclasses

from ..checks.ownership import key_profile, owner_decision
from ..stores import liveness
from ..stores.discovery import discover
from ..stores.lineage import UP_CAP
from ..stores.store import Store
from .base import one
from .move_copy import HASH_RE

UNIT_CAP = 500  # sessions moved together at most
OWNER_COLUMNS = ("id", "parent_session_id", "session_key", "profile_name", "title")


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
    """Backends of this profile that heartbeat and run (docs/store.md §7.6)."""
    return liveness._live_backends(conn, caps, now)  # noqa: SLF001 (the same rule the session evidence uses)
