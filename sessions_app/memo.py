"""Small per-process memos shared by the pages (docs/architecture.md §11).

``Bounded`` is a least-recently-used map with a size cap, safe when threads share it
(the fleet's Celery worker runs list reads with ``-P threads``; an ``OrderedDict``
read and reordered by two threads can raise ``KeyError``). ``settled`` is the "racy
clean" rule for answers kept under a store's file times: an answer read while the
newest file time is within ``RACY_SECONDS`` of now is not kept, because a write in the
same coarse kernel tick can leave size and mtime as they were.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Iterable

RACY_SECONDS = 1.0


class Bounded:
    """``get(key)`` -> value or None; ``put(key, value)``; at most ``size`` entries,
    the least recently used dropped first. Values must not be None."""

    def __init__(self, size: int):
        self.size = size
        self._items: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key, value) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self):
        with self._lock:
            return iter(list(self._items))

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


def settled(mtimes_ns: Iterable[int], now: float | None = None) -> bool:
    """Whether files last modified at ``mtimes_ns`` (ns since the epoch) are old
    enough, at ``now`` (epoch seconds; the clock when None), that a later write
    cannot share their timestamps: then an answer kept under them is safe."""
    newest = max(mtimes_ns, default=0)
    return (time.time() if now is None else now) - newest / 1e9 > RACY_SECONDS
