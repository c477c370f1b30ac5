"""The registry of repairs: action name -> action (docs/architecture.md §8, "Add a repair").

Adding a repair is one class in its own module and one line here. A finding names
its repair by ``Finding.heal``; the heal run, the health and migration pages and
the commands all look it up here, never by a hard-coded name.
"""

from __future__ import annotations

import sqlite3
import time

from ..stores.store import Store
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
