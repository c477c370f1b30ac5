"""The worker's read API, continued: search, export chunks, a deletion's plan, trash entries.

Like :mod:`.reads`, each function runs on the host that holds the stores (task
``hermes.read``), reads through the same code one host's pages use
(``stores.search_all``, ``stores.export``, ``actions.deletion.plan_for``,
``trash``) and answers plain JSON; every profile key, session id and trash entry
id is checked against this worker's own discovery and data folder (:mod:`.worker`)
before anything is opened.

Masking: the dashboard knows the user and says ``masked``; the worker then masks
with the very functions one host uses (``presenters.search.mask_profile_results``,
the exports' ``masked``), so a secret never leaves the host unmasked for a user
who sees masked text.
"""

from __future__ import annotations

from .. import trash
from . import worker
from .reads import _int, plain

EXPORT_FORMATS = ("jsonl", "md")
CHUNK_MIN, CHUNK_MAX = 1024, 8 * 1024 * 1024  # bytes of one export chunk


def _bool(value, name: str) -> bool:
    if not isinstance(value, bool):
        raise worker.refuse("read", f"{name} is not true or false")
    return value


def search(q: str, profiles: list | None = None, limit: int = 20, masked: bool = True) -> dict:
    """This host's answer to a search across profiles (``/search/`` of one host).

    ``q`` the words (at most 500 characters); ``profiles`` this host's keys to
    search (empty: all); ``limit`` hits per profile (1-50). Returns ``{"query",
    "profiles": [{"key", "status", "reason", "problem", "count", "count_capped",
    "more", "hits": [{"id", "session_id", "role", "timestamp", "state", "parts",
    "title"}], "titles": [{"id", "title"}]}]}``, or ``{"problem": text}`` when the
    words hold nothing searchable. Errors of one store stay in its entry.
    """
    from ..presenters.search import mask_profile_results
    from ..stores import registry
    from ..stores.search import terms
    from ..stores.search_all import search_everywhere

    if not isinstance(q, str) or not q.strip() or len(q) > 500:
        raise worker.refuse("read", "the search words are not a usable string")
    keys = profiles or []
    if not isinstance(keys, list):
        raise worker.refuse("read", "profiles is not a list")
    for key in keys:
        worker.store_for("read", key)
    masked = _bool(masked, "masked")
    stores = [s for s in registry.glances() if not keys or s.key in keys]
    try:
        found = search_everywhere(stores, q.strip(), limit=_int(limit, 1, 50), texts=masked)
    except ValueError:
        return {"problem": "Type at least one word (letters or digits)."}
    words = [w for w, _ in terms(q)]
    out = []
    for p in found.profiles:
        if masked:
            mask_profile_results(p, words)
        out.append({
            "key": p.key, "status": p.status, "reason": p.reason, "problem": str(p.problem) if p.problem else "",
            "count": p.count, "count_capped": p.count_capped, "more": p.more,
            "hits": [{"id": h.id, "session_id": h.session_id, "role": h.role, "timestamp": h.timestamp,
                      "state": h.state, "parts": [list(part) for part in h.parts],
                      "title": (h.session or {}).get("title")} for h in p.hits],
            "titles": [{"id": t.get("id"), "title": t.get("title")} for t in p.titles],
        })
    return plain({"query": found.query, "profiles": out})


def _position(value):
    """An export cursor from JSON: None, or ``[segment index, message id | None]``."""
    if value is None:
        return None
    ok = (isinstance(value, list) and len(value) == 2 and isinstance(value[0], int) and value[0] >= 0
          and (value[1] is None or isinstance(value[1], int)) and not any(isinstance(v, bool) for v in value))
    if not ok:
        raise worker.refuse("read", "the export cursor is malformed")
    return value[0], value[1]


def export(key: str, session_id: str, fmt: str = "jsonl", lineage: bool = False, include_inactive: bool = False,
           masked: bool = True, after=None, max_bytes: int = 1024 * 1024) -> dict:
    """One chunk of a session's export (``stores.export.positioned``): ``{"text",
    "next", "missing"?}``. ``after``: the cursor a previous chunk returned as
    ``next`` (None: from the start); pieces are taken until the chunk holds at least
    ``max_bytes`` (UTF-8 bytes), cut only between two messages, so a chunk may pass
    ``max_bytes`` by one message; ``next`` is None at the end. Each chunk is its own
    read of the store, resumed after the last message sent (by ``messages.id``): a
    session that grows between chunks exports its new rows at the end, as a longer
    single read would, and no chunk reads what an earlier one sent.
    """
    from ..stores import export as exports
    from ..stores import session_info

    store = worker.store_for("read", key, session_ids=[session_id])
    session_id = worker.session_id_arg("read", session_id, key)
    if fmt not in EXPORT_FORMATS:
        raise worker.refuse("read", f"unknown export format {fmt!r}")
    start, max_bytes = _position(after), _int(max_bytes, CHUNK_MIN, CHUNK_MAX)
    flags = {"lineage": _bool(lineage, "lineage"), "include_inactive": _bool(include_inactive, "include_inactive"),
             "masked": _bool(masked, "masked")}
    if start is None and not session_info.exists(store, session_id):
        return {"missing": True, "text": "", "next": None}
    pieces, size, last = [], 0, None
    body = exports.positioned(store, session_id, fmt, start=start, **flags)
    try:
        for pos, piece in body:
            if pos is not None and last is not None and pos != last and size >= max_bytes:
                return {"text": "".join(pieces), "next": list(last)}
            pieces.append(piece)
            size += len(piece.encode())
            last = pos if pos is not None else last
    finally:
        body.close()
    return {"text": "".join(pieces), "next": None}


def delete_plan(key: str, session_id: str, lineage: bool = False) -> dict:
    """What deleting ``session_id`` (``lineage``: its whole compression chain) would
    remove, read-only (``actions.deletion.plan_for``): ``{"plan": DeletePlan.summary()
    plus "messages", "dependent_rows", "override_possible", "override_blocker",
    "titles": {id: title}, "item": the confirmation item (profile, session_id,
    lineage, fingerprint)}`` or ``{"missing": True}``."""
    from ..actions import deletion

    store = worker.store_for("read", key, session_ids=[session_id])
    session_id = worker.session_id_arg("read", session_id, key)
    plan = deletion.plan_for(store, session_id, _bool(lineage, "lineage"))
    if not plan.exists:
        return {"missing": True}
    summary = plan.summary()
    summary.update(messages=plan.messages, dependent_rows=plan.dependent_rows,
                   override_possible=plan.override_possible, override_blocker=plan.override_blocker,
                   titles={t.id: t.title for t in plan.targets})
    return plain({"plan": summary, "item": deletion.token_item(plan)})


def entry_for(task: str, key, entry_id) -> trash.TrashEntry:
    """This worker's trash entry ``entry_id`` of profile ``key``, else refuse: the
    id must be an entry folder name (never a path) and the entry must say it was
    deleted from that profile's store."""
    store = worker.store_for(task, key)
    entry = trash.get_entry(entry_id) if isinstance(entry_id, str) else None
    if entry is None:
        raise worker.refuse(task, f"host {worker.own_host()} has no trash entry {entry_id!r}",
                            profile=key, path=str(entry_id))
    if entry.profile != key or entry.manifest.get("store_path") != str(store.path):
        raise worker.refuse(task, f"trash entry {entry_id} is not of profile {key}'s store", profile=key,
                            path=str(entry.path))
    return entry


def trash_entry(key: str, entry_id: str) -> dict:
    """One trash entry of this host: ``{"id", "state", "manifest"}`` (the manifest
    as ``trash`` writes it: targets, counts, files, times in epoch seconds)."""
    entry = entry_for("read", key, entry_id)
    return plain({"id": entry.id, "state": entry.state, "manifest": entry.manifest})


BROWSE = {"search": search, "export": export, "delete_plan": delete_plan, "trash_entry": trash_entry}
