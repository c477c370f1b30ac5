"""The profiles overview: every store's status and headline figures, with the
latest stored pass's counts (``Store.probe``: the figures are cached per store
under its file state, so an unchanged store is not counted again)."""

from __future__ import annotations

from ..health import latest, staleness
from ..stores import registry


def overview_rows():
    """``(discovery, [(store, StoreStatus, ProfileHealth)])`` after a rescan of the
    roots; stores are read at a glance (a locked one shows busy at once). Each
    ``ProfileHealth.stale`` says whether the store changed after its pass."""
    found = registry.scan()
    stores = registry.glances()
    health = latest([s.key for s in stores])
    for store in stores:  # "store changed 12 min after this check" (os.stat only)
        health[store.key].stale = staleness(store, health[store.key])
    return found, [(store, store.probe(), health[store.key]) for store in stores]
