"""URL converters.

``rowid``: a message id as SQLite stores it, a signed 64-bit integer; an id past
``2**63 - 1`` in a URL matches no route (404) instead of reaching SQLite, which
cannot bind it (``OverflowError``, a 500 before this existed; issue 13).
"""

from __future__ import annotations

ROWID_MAX = 2**63 - 1


class RowIdConverter:
    regex = "[0-9]{1,19}"

    def to_python(self, value: str) -> int:
        number = int(value)
        if number > ROWID_MAX:
            raise ValueError("beyond SQLite's 64-bit integers")  # Django: this route does not match
        return number

    def to_url(self, value) -> str:
        return str(int(value))
