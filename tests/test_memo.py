"""memo.Bounded keeps the most recently used entries within its size, from several
threads at once; memo.settled keeps nothing read under file times of the last second."""

import threading
import time
from collections import OrderedDict

from sessions_app.memo import Bounded, settled


def test_bounded_drops_the_least_recently_used():
    memo = Bounded(2)
    memo.put("a", 1)
    memo.put("b", 2)
    assert memo.get("a") == 1  # a is now the most recent
    memo.put("c", 3)
    assert (memo.get("a"), memo.get("b"), memo.get("c")) == (1, None, 3)
    assert len(memo) == 2 and sorted(memo) == ["a", "c"]


class SlowOrder(OrderedDict):
    """Reorders slowly: another thread gets its turn between a read and the reorder."""

    def move_to_end(self, key, last=True):
        time.sleep(0.0002)
        super().move_to_end(key, last)


def test_bounded_from_many_threads():
    memo, errors = Bounded(8), []
    memo._items = SlowOrder()  # without the lock, an entry evicted meanwhile raises KeyError

    def hammer(offset):
        try:
            for i in range(1_500):
                key = (i + offset) % 12
                if memo.get(key) is None:
                    memo.put(key, i + 1)
        except Exception as exc:  # an OrderedDict shared without a lock raises KeyError here
            errors.append(exc)

    threads = [threading.Thread(target=hammer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(memo) <= 8


def test_settled():
    now = time.time()
    assert settled([int((now - 5) * 1e9)], now=now)
    assert not settled([int((now - 5) * 1e9), int((now - 0.2) * 1e9)], now=now)
    assert settled([], now=now)
