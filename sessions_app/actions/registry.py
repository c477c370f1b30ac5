"""The registry of repairs: action name -> action (docs/architecture.md §8, "Add a repair"),
and the dependencies between them (docs/architecture.md §5.2).

Adding a repair is one class in its own module and one line here. A finding names
its repair by ``Finding.heal``; the heal run, the health and migration pages and
the commands all look it up here, never by a hard-coded name.
"""

from __future__ import annotations

import functools
import sqlite3
import time

from ..stores.store import Store
from ..vocabulary import WRITE_TITLES
from .base import Action, ActionContext, Change, Plan
from .files import RemoveLeftoverFiles
from .guarded import jsonable
from .move import MoveToOwnerStore
from .recovery import RecoverMessages
from .rows import ClearStaleLease, HideDuplicates
from .session_rows import (
    CloseStaleSession, DetachFromMissingParent, InheritRoutingIdentity, RecountSession, RecreateSessionRow,
    ReopenCompressionParent, StampOwner,
)
from .transcripts import ImportJsonlTranscript

ACTIONS: dict[str, Action] = {}


def register(action: Action) -> Action:
    """Add ``action`` under its ``name``; raises ``ValueError`` on a duplicate name."""
    if not action.name or action.name in ACTIONS:
        raise ValueError(f"repair name {action.name!r} is empty or already registered")
    ACTIONS[action.name] = action
    return action


for _action in (
    RecreateSessionRow(), DetachFromMissingParent(), ReopenCompressionParent(), RecountSession(),
    HideDuplicates(), CloseStaleSession(), StampOwner(), ClearStaleLease(), InheritRoutingIdentity(),
    RemoveLeftoverFiles(), ImportJsonlTranscript(), MoveToOwnerStore(), RecoverMessages(),
):
    register(_action)


# What a page calls each repair (its name shows beside, for the commands' --only).
TITLES: dict[str, str] = {
    "recreate_session_row": "Recreate the missing session row",
    "detach_from_missing_parent": "Detach from the missing parent",
    "reopen_compression_parent": "Reopen the compression parent",
    "recount_session": "Recount the session",
    "hide_duplicates": "Hide the duplicate messages",
    "close_stale_session": "Close the stale session",
    "stamp_owner": "Stamp the owning profile",
    "clear_stale_lease": "Clear the stale turn lease",
    "inherit_routing_identity": "Inherit the routing identity",
    "remove_leftover_files": "Archive the leftover files",
    "import_jsonl_transcript": "Import the JSONL transcript",
    "move_to_owner_store": "Move to the owner's store",
    "recover_messages": "Recover the lost messages",
}


def repair_title(name: str) -> str:
    """The human title of repair ``name``, or of another write a run reports
    (``vocabulary.WRITE_TITLES``); the name itself for one without a title."""
    return TITLES.get(name) or WRITE_TITLES.get(name, name or "")


# Repair -> the repairs that change what it plans from, when they touch the same session
# (docs/architecture.md §5.2). A repair is applied after those, and planned again from a
# fresh check once one of them was applied: dropped when that repair already healed it.
# - a JSONL import can create the session row a recreation would make up, and adds rows;
# - recovered messages are written at their place, hiding and rewriting later rows;
# - hiding a duplicate recounts the session itself: a recount planned before it counts
#   the duplicate (and is then not needed at all);
# - a move carries the session (and its unit) to its owner's store: every repair of it
#   here comes first, so the repaired rows are what moves;
# - stamping this store's profile onto a session that moves home would write the wrong
#   owner (and the move, planned against the empty label, would be skipped as changed).
RUNS_AFTER: dict[str, frozenset[str]] = {
    "recreate_session_row": frozenset({"import_jsonl_transcript"}),
    "recover_messages": frozenset({"import_jsonl_transcript", "recreate_session_row"}),
    "hide_duplicates": frozenset({"import_jsonl_transcript", "recreate_session_row", "recover_messages"}),
    "recount_session": frozenset({"import_jsonl_transcript", "recreate_session_row", "recover_messages",
                                  "hide_duplicates"}),
    "move_to_owner_store": frozenset(set(ACTIONS) - {"move_to_owner_store", "stamp_owner"}),
    "stamp_owner": frozenset({"move_to_owner_store"}),
}


def prerequisites(name: str) -> frozenset[str]:
    """The repairs ``name`` runs after (see :data:`RUNS_AFTER`); empty for most."""
    return RUNS_AFTER.get(name, frozenset())


@functools.lru_cache(maxsize=1)
def _ranks() -> dict[str, int]:
    """Action name -> its depth in the dependency graph (0: depends on nothing).
    Raises ``ValueError`` for a cycle or an unknown name, at import time."""
    ranks: dict[str, int] = {}

    def rank(name: str, path: tuple) -> int:
        if name in path:
            raise ValueError(f"repair dependencies loop: {' -> '.join(path + (name,))}")
        if name not in ranks:
            ranks[name] = 1 + max((rank(dep, path + (name,)) for dep in prerequisites(name)), default=-1)
        return ranks[name]

    for name in set(ACTIONS) | set(RUNS_AFTER):
        rank(name, ())
    unknown = sorted(n for n in ranks if n not in ACTIONS)
    if unknown:
        raise ValueError(f"repair dependencies name unknown repairs: {', '.join(unknown)}")
    return ranks


def order(plans: list) -> list:
    """``plans`` (``Plan`` objects, or their dicts) in the order they are applied:
    every repair after the ones it depends on (:data:`RUNS_AFTER`), otherwise as
    given. One order for all sessions of a store, so a move also comes after the
    repairs of the other sessions of its unit."""
    ranks = _ranks()

    def action(plan):
        return plan["action"] if isinstance(plan, dict) else plan.action
    return sorted(plans, key=lambda plan: ranks.get(action(plan), 0))


def waits_for(plan, earlier: list) -> list[str]:
    """Names of the repairs in ``earlier`` (plans before ``plan``, same store) that
    ``plan`` depends on: those of its own session, and any move (a move carries
    other sessions along). Each name once, in the order of ``earlier``."""
    def get(p, key):
        return p[key] if isinstance(p, dict) else getattr(p, key)
    needs = prerequisites(get(plan, "action"))
    found: list[str] = []
    for other in earlier:
        name = get(other, "action")
        same = get(other, "session_id") == get(plan, "session_id") or getattr(ACTIONS.get(name), "multi_store", False)
        if name in needs and same and name not in found:
            found.append(name)
    return found


def repair_first(heal: str | None, others) -> list:
    """Of ``others`` (findings of the same session, ``Finding`` objects or their
    dicts), those whose repair ``heal`` depends on: what a page offers before
    ``heal``'s own repair, since applying them first may heal its finding too."""
    needs = prerequisites(heal or "")
    if not needs:
        return []

    def repair(f):
        return f.get("heal") if isinstance(f, dict) else f.heal
    return [f for f in others if repair(f) in needs]


def rank(heal: str | None) -> int:
    """Position of repair ``heal`` in the dependency order (0 for none or unknown)."""
    return _ranks().get(heal or "", 0)


_ranks()  # a loop or a typo in RUNS_AFTER fails at import, not in a run


def plan_for(store: Store, conn: sqlite3.Connection, caps, finding, now: float | None = None) -> Plan | None:
    """The plan healing ``finding`` (read-only), or None when no repair heals its check."""
    action = ACTIONS.get(getattr(finding, "heal", None) or "")
    if action is None:
        return None
    plan = action.plan(ActionContext(store, conn, caps, now or time.time()), finding)
    plan.guard = jsonable(plan.guard)
    return plan


def plan_from_dict(data: dict) -> Plan:
    """Rebuild a plan serialized with ``dataclasses.asdict`` (guard included)."""
    data = dict(data)
    data["changes"] = [Change(**c) for c in data.get("changes", [])]
    return Plan(**data)
