"""The process-wide set of known stores, rescanned on demand.

The overview rescans on every load, so a profile created while the server runs
shows up without a restart; other pages rescan once when asked for a key they do
not know before answering 404. Keys from URLs are only ever looked up here.
"""

from __future__ import annotations

import threading

from django.conf import settings

from .connection import forget_alias
from .discovery import Discovery, configured_roots, discover
from .store import Store, Unavailable

_lock = threading.Lock()
_current: Discovery | None = None
_stores: dict[str, Store] = {}


def scan(roots: list[str] | None = None) -> Discovery:
    """Rediscover profiles under ``roots`` (default: settings/env) and remember them."""
    global _current, _stores
    found = discover(configured_roots(roots if roots is not None else settings.HERMES_ROOTS))
    if getattr(settings, "HERMES_ADMIN_HOST", ""):  # fleet worker (issue 17): keys carry the host
        from ..fleet.worker import with_host_keys
        found = with_host_keys(found, settings.HERMES_ADMIN_HOST)
    with _lock:
        _current = found
        _stores = {p.key: Store(p) for p in found.profiles}
    return found


def current() -> Discovery:
    """The last scan, scanning first if none was made yet."""
    return _current if _current is not None else scan()


def stores() -> list[Store]:
    """Every known store, in discovery order (root order, then default, then by name)."""
    current()
    return list(_stores.values())


def glances(own: Store | None = None) -> list[Store]:
    """Every known store as a page that reads several of them may read it: each a
    :meth:`Store.glance` (short busy timeout, a store found locked moments ago shown
    busy without a new try), except ``own``, the page's own store (same key), which
    waits its full read timeout. A locked store thus costs its own pages only
    (docs/store.md §5.2, locked stores)."""
    return [s if own is not None and s.key == own.key else s.glance() for s in stores()]


def other_copies(store: Store, session_id: str) -> list[str]:
    """Keys of the other readable profiles whose store also holds ``session_id`` (an
    ``id_collision``): one primary-key lookup per other store, each a glance, so a
    locked store elsewhere does not hold up this store's session page."""
    found = []
    for other in glances(own=store):
        if other.key == store.key or other.path == store.path:
            continue
        try:
            with other.browse() as (conn, _caps):
                if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone():
                    found.append(other.key)
        except Unavailable:
            continue
    return found


def get(key: str) -> Store | None:
    """The store for a profile key, rescanning once if the key is unknown."""
    current()
    store = _stores.get(key)
    if store is None:
        scan()
        store = _stores.get(key)
    return store


def reset() -> None:
    """Forget the last scan and unregister its aliases (tests change roots between cases)."""
    global _current, _stores
    with _lock:
        for store in _stores.values():
            forget_alias(store.profile)
        _current = None
        _stores = {}
