"""CSV cells that spreadsheets will not run, and a pass-through writer for streaming.

A cell starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is run
as a formula by spreadsheet programs (CSV injection, OWASP); such text gets a
leading ``'``. Numbers are written as numbers.
"""

from __future__ import annotations

import json


class Echo:
    """A file-like object whose ``write`` returns what it was given, so
    ``csv.writer(Echo()).writerow(...)`` yields one CSV line as a string."""

    def write(self, value):
        return value


def cell(value):
    """One CSV cell: numbers as they are, lists and dicts as JSON, None as empty,
    text guarded against formula injection."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, (list, dict)):
        value = json.dumps(value, ensure_ascii=False)
    text = "" if value is None else str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text
