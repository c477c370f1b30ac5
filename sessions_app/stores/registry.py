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
from .store import Store

_lock = threading.Lock()
_current: Discovery | None = None
_stores: dict[str, Store] = {}


def scan(roots: list[str] | None = None) -> Discovery:
    """Rediscover profiles under ``roots`` (default: settings/env) and remember them."""
    global _current, _stores
    found = discover(configured_roots(roots if roots is not None else settings.HERMES_ROOTS))
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
