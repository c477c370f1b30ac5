"""Ownership and routing identity checks (docs/store.md §2, §4.1, §11.1, §13 row 22-§13 row 23).

Every ``state.db`` belongs to exactly one profile. A row's owner shows in
``profile_name`` and, for gateway rows, in the session-key namespace
``agent:<ns>:`` (``main`` = the default profile). Profile existence is decided
from the directory layout (``<root>/profiles/<name>/``, not tombstoned), so these
checks work on a single store without opening any other.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ..stores.connection import ro_uri
from ..stores.discovery import DEFAULT_PROFILE, PROFILE_NAME_RE
from ..stores.lineage import Lineage
from .base import Check, chunks, placeholders

# Gateway platforms whose sessions are routed by a session key (hermes-agent 0.19.0
# gateway/config.py Platform, minus local/api_server/webhooks/relay which do not route
# through per-chat keys).
MESSAGING_SOURCES = (
    "telegram", "discord", "whatsapp", "whatsapp_cloud", "slack", "signal", "mattermost", "matrix",
    "homeassistant", "email", "sms", "dingtalk", "feishu", "wecom", "wecom_callback", "weixin",
    "bluebubbles", "qqbot", "yuanbao",
)
# Routing identity columns copied from a compression parent (docs/store.md §4.1:
# compression children inherit routing columns).
ROUTING_COLUMNS = ("session_key", "chat_id", "chat_type", "thread_id", "user_id", "display_name",
                   "origin_json", "transport_profile")


def key_profile(session_key: str | None) -> str | None:
    """Profile named by an ``agent:<ns>:...`` key (``main`` -> default), else None."""
    if not session_key or not session_key.startswith("agent:"):
        return None
    parts = session_key.split(":")
    if len(parts) < 3 or not parts[1]:
        return None
    return DEFAULT_PROFILE if parts[1] == "main" else parts[1]


def profile_home(store, name: str) -> Path | None:
    """Home of profile ``name`` in the store's root, or None if no such live profile."""
    root = store.profile.root
    if name == DEFAULT_PROFILE:
        return root
    if not PROFILE_NAME_RE.match(name) or (root / "profiles" / ".deleted" / name).exists():
        return None
    home = root / "profiles" / name
    return home if home.is_dir() else None


class MissingOwner(Check):
    code = "missing_owner"
    severity = "warning"
    heal = "stamp_owner"
    title = "Session has no owning profile"
    next_step = (
        "Use the repair. If the session key names another profile, the owner_mismatch finding's move is "
        "the fix instead."
    )
    explanation = (
        "profile_name is empty. Several upstream readers then treat the session as belonging to "
        "the default profile, and profile repair may move it there. Stamping the store's own "
        "profile records the truth. In the default profile's store an empty profile_name is how "
        "release 0.19 writes every row (it stamps only named profiles), so it is not reported there."
    )
    requires = (("sessions", "profile_name"),)

    def applies(self, ctx):
        return super().applies(ctx) and ctx.store.profile.name != DEFAULT_PROFILE

    def run(self, ctx):
        where, params = ctx.session_filter("id")
        own = ctx.store.profile.name
        key = ctx.col("sessions", "session_key")
        rows = ctx.conn.execute(
            f"SELECT id, {key} FROM sessions WHERE (profile_name IS NULL OR trim(profile_name) = ''){where}", params)
        for sid, session_key in rows:
            detail = f"profile_name is empty; this store belongs to profile '{own}'"
            by_key = key_profile(session_key)
            if by_key is not None and by_key != own:
                # The key says the session is another profile's (owner_mismatch moves it
                # there, or reports it): stamping this store's profile would record the
                # wrong owner, and a move planned against the empty label would then be
                # skipped as changed (docs/architecture.md §5.2).
                yield self.finding(sid, 1, f"{detail}, but its session key names profile '{by_key}' "
                                           "(see owner_mismatch): not stamped",
                                   {"expected_profile": own, "key_profile": by_key}, heal=None)
                continue
            yield self.finding(sid, 1, detail, {"expected_profile": own})


class OwnerMismatch(Check):
    code = "owner_mismatch"
    severity = "warning"
    heal = "move_to_owner_store"
    title = "Session filed in another profile's store"
    next_step = (
        "When only the label disagrees with the key, or the key names a profile that does not exist, "
        "decide by hand: create the owning profile and check again (the move is offered then), or relabel "
        "with 'hermes sessions repair-profiles'."
    )
    explanation = (
        "The session's profile_name or its gateway session key names a different profile than the "
        "store it sits in (a bot wrote into the wrong profile, or a copy was left behind). The "
        "owning profile's agents cannot see it. When only the label is wrong (the key matches this "
        "store) the label is restamped; when the owner exists the session can be moved there; a key "
        "naming a profile that does not exist is only reported."
    )

    def run(self, ctx):
        own = ctx.store.profile.name
        prefix = f"agent:{'main' if own == DEFAULT_PROFILE else own}:"
        conds = []
        if ctx.has("sessions", "profile_name"):
            conds.append("(profile_name IS NOT NULL AND trim(profile_name) != '' AND profile_name != :own)")
        if ctx.has("sessions", "session_key"):
            conds.append("(session_key LIKE 'agent:%' AND substr(session_key, 1, :plen) != :prefix)")
        if not conds:
            return
        label = ctx.col("sessions", "profile_name")
        key = ctx.col("sessions", "session_key")
        where = " AND id = :sid" if ctx.session_id else ""
        rows = ctx.conn.execute(
            f"SELECT id, {label}, {key} FROM sessions WHERE ({' OR '.join(conds)}){where}",
            {"own": own, "plen": len(prefix), "prefix": prefix, "sid": ctx.session_id})
        for sid, profile_name, session_key in rows:
            yield self._finding(ctx, sid, own, profile_name, session_key)

    def _finding(self, ctx, sid, own, profile_name, session_key):
        decision = owner_decision(ctx.store, profile_name, session_key)
        evidence = {"profile_name": profile_name, "session_key": session_key, "store_profile": own,
                    "key_profile": key_profile(session_key), "kind": decision["kind"],
                    "target_profile": decision["target"], "target_home": decision["home"]}
        return self.finding(sid, 1, decision["detail"], evidence, heal=decision["heal"])


def owner_decision(store, profile_name: str | None, session_key: str | None) -> dict:
    """Who owns a row of ``store`` and what heals it, upstream's repair-profiles rules
    (docs/store.md §11.1): ``{"kind", "target", "heal", "detail", "home"}``.

    ``kind``: ``ok`` (this store's own), ``wrong_store`` (the key names another existing
    profile: move), ``labelled_elsewhere`` (only ``profile_name`` names another existing
    profile: move), ``mislabelled`` (the key is this store's, the label is not: restamp),
    ``legacy_main`` (``agent:main:`` in a named store: report), ``unclaimed_namespace``
    (the named profile does not exist: report). ``home`` is the target's home (str) or None.
    """
    own = store.profile.name
    by_key = key_profile(session_key)
    label = profile_name.strip() if isinstance(profile_name, str) else ""
    if by_key is not None and by_key != own:
        target = by_key
        if own != DEFAULT_PROFILE and by_key == DEFAULT_PROFILE:
            kind, heal = "legacy_main", None  # upstream: report, or rekey/move by choice
        else:
            kind, heal = "wrong_store", "move_to_owner_store"
        detail = f"session key {session_key} belongs to profile '{by_key}', not '{own}'"
    elif by_key == own:
        if not label or label == own:
            return {"kind": "ok", "target": own, "heal": None, "detail": "", "home": str(store.profile.home)}
        # Reported only: stamp_owner never overwrites a value (issue 4), and no
        # relabel action exists yet (upstream repair-profiles relabels, docs/store.md §11.1).
        target, kind, heal = own, "mislabelled", None
        detail = f"profile_name is '{profile_name}' but the session key belongs to this profile '{own}'"
    elif label and label != own:
        target, kind, heal = label, "labelled_elsewhere", "move_to_owner_store"
        detail = f"profile_name says '{profile_name}', but the session sits in profile '{own}'"
    else:
        return {"kind": "ok", "target": own, "heal": None, "detail": "", "home": str(store.profile.home)}
    home = profile_home(store, target) if target else None
    if home is None and kind != "mislabelled":
        kind, heal = "unclaimed_namespace", None
        detail += f"; profile '{target}' does not exist"
    return {"kind": kind, "target": target, "heal": heal, "detail": detail, "home": str(home) if home else None}


COLLISION_DETAIL = "the same session id also exists in profile "


def collision_profiles(detail: str) -> list[str]:
    """The other profiles' keys an ``id_collision`` finding's ``detail`` names (a
    stored report keeps the detail, not the evidence). Keys hold no ", "
    (``name`` or ``name@root-label`` in ``[a-z0-9_.@-]``, stores/discovery.py)."""
    if not detail.startswith(COLLISION_DETAIL):
        return []
    return [key for key in detail[len(COLLISION_DETAIL):].split(", ") if key]


class IdCollision(Check):
    code = "id_collision"
    severity = "warning"
    reads_other_stores = True
    title = "Same session id in two profiles"
    next_step = (
        "Compare the two copies (link on the row), keep the complete one and delete the other from its "
        "profile; a move that stopped halfway is finished by the next heal run of its source profile "
        "instead."
    )
    explanation = (
        "A session with this id also exists in another profile's store: a move that stopped "
        "halfway, or a store copied by hand. The two copies can drift apart and a move or delete "
        "may act on the wrong one. An admin should compare them and keep one."
    )

    def run(self, ctx):
        found: dict[str, list[dict]] = {}
        for other in ctx.other_stores:
            if Path(other.path).resolve() == Path(ctx.store.path).resolve() or other.preflight() is not None:
                continue
            try:
                for sid in self._shared_ids(ctx, other):
                    found.setdefault(sid, []).append({"profile": other.key, "path": str(other.path)})
            except sqlite3.Error as exc:
                ctx.notes.append(f"id_collision: could not read {other.key}: {exc}")
        for sid, others in sorted(found.items()):
            names = ", ".join(o["profile"] for o in others)
            yield self.finding(sid, len(others), f"{COLLISION_DETAIL}{names}",
                               {"other_stores": others})

    @staticmethod
    def _shared_ids(ctx, other) -> list[str]:
        # ATTACH read-only and join on the sessions primary keys (set-based, no copy).
        ctx.conn.execute("ATTACH DATABASE ? AS other_store", (ro_uri(other.path),))
        try:
            where, params = ctx.session_filter("s.id")
            return [r[0] for r in ctx.conn.execute(
                "SELECT s.id FROM main.sessions s WHERE EXISTS "
                f"(SELECT 1 FROM other_store.sessions o WHERE o.id = s.id){where}", params)]
        finally:
            ctx.conn.execute("DETACH DATABASE other_store")


class MissingRoutingIdentity(Check):
    code = "missing_routing_identity"
    severity = "warning"
    heal = "inherit_routing_identity"
    title = "Messaging session without routing identity"
    next_step = (
        "Without a parent that carries the identity, stop the gateway and run 'hermes sessions "
        "repair-routing --apply' so Hermes reconnects the rows to their chat; or leave it, and the chat "
        "goes on in a new session."
    )
    explanation = (
        "A session from a messaging platform has messages but no session key, so the gateway cannot "
        "route the chat back to it and starts a fresh conversation instead. When the session is the "
        "compression continuation of a parent that has the identity, the missing columns (only those "
        "that are empty) can be copied from that parent; otherwise it needs a human decision."
    )
    requires = (("sessions", "session_key"),)

    def run(self, ctx):
        where, params = ctx.session_filter("c.id")
        sources = ",".join(f"'{s}'" for s in MESSAGING_SOURCES)
        rows = ctx.conn.execute(
            f"SELECT c.id, c.source FROM sessions c WHERE c.source IN ({sources}) "
            f"AND (c.session_key IS NULL OR c.session_key = ''){where} "
            "AND EXISTS (SELECT 1 FROM messages m WHERE m.session_id = c.id)", params).fetchall()
        if not rows:
            return
        lineage = Lineage(ctx.conn, ctx.caps.columns("sessions"))
        cols = [c for c in ROUTING_COLUMNS if ctx.has("sessions", c)]
        for sid, source in rows:
            child = lineage.get(sid)
            parent = lineage.parent(child) if child else None
            if parent and not parent.get("missing") and parent["edge"] in ("delegate", "branch"):
                continue  # fork children carry no routing identity of their own
            copy, heal, detail = {}, None, f"{source} session with messages but no session key"
            if parent and not parent.get("missing") and parent["edge"] == "compression":
                values = self._routing(ctx, cols, [sid, parent["id"]])
                mine, theirs = values.get(sid, {}), values.get(parent["id"], {})
                copy = {c: theirs[c] for c in cols if mine.get(c) in (None, "") and theirs.get(c) not in (None, "")}
                if copy.get("session_key"):
                    heal = "inherit_routing_identity"
                    detail += f"; its compression parent {parent['id']} has one"
            yield self.finding(sid, 1, detail, {
                "source": source, "parent_session_id": parent["id"] if parent else None,
                "parent_edge": parent.get("edge") if parent else None, "copy_from_parent": copy,
            }, heal=heal)

    @staticmethod
    def _routing(ctx, cols: list[str], ids: list[str]) -> dict[str, dict]:
        out = {}
        for part in chunks(ids):
            cur = ctx.conn.execute(f"SELECT id, {', '.join(cols)} FROM sessions WHERE id IN ({placeholders(len(part))})", part)
            for row in cur:
                out[row[0]] = dict(zip(cols, row[1:]))
        return out

