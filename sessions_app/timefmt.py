"""Human forms of the stores' times: epoch seconds as a relative time with the exact
UTC time beside it, and spans of seconds as "1 h 58 min".

Pure formatting (no store access), shared by the template filters
(``templatetags/hermes.py``) and by the few presenters and evidence lines that build
sentences in Python. The stores keep times as epoch seconds (docs/store.md
§4.1, §4.2); every page shows them in UTC.
"""

from __future__ import annotations

import datetime as dt
import math

from django.conf import settings
from django.contrib.humanize.templatetags.humanize import naturaltime
from django.utils import timezone
from django.utils.timesince import timesince, timeuntil

UTC_FORMAT = "%Y-%m-%d %H:%M:%S"


def is_number(value, *, finite: bool = True) -> bool:
    """Whether ``value`` is a stored number: an ``int`` or ``float``, never a bool
    (a Python True is 1 to SQLite, never a time or a count). NaN is never a number;
    ``finite`` (the default) also refuses ±Inf, which SQLite keeps in a REAL column
    (``9e999``) and which no time or span can be. The one number check of the
    project: times, spans, lease expiries and display cells all use it."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    return math.isfinite(value) if finite else not math.isnan(value)


def to_datetime(value) -> dt.datetime | None:
    """Epoch seconds (int or float) as an aware UTC datetime (an aware datetime, such
    as a run's ``finished_at``, passes through in UTC); ``None`` for anything else
    (``None``, text, a bool, a naive datetime, a value outside the calendar)."""
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.timezone.utc) if value.tzinfo else None
    if not is_number(value):
        return None
    try:
        return dt.datetime.fromtimestamp(value, dt.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None


def exact_utc(value) -> str | None:
    """Epoch seconds (or an aware datetime) as ``2026-12-02 05:00:00 UTC``; ``None``
    when not a time."""
    when = to_datetime(value)
    return None if when is None else f"{when.strftime(UTC_FORMAT)} UTC"


def relative(value) -> str | None:
    """Epoch seconds (or an aware datetime) as "3 hours ago" / "2 days from now" /
    "now": the largest unit only (the exact time goes beside it or on hover), from
    Django's ``timesince`` / ``naturaltime``, with plain spaces; ``None`` when not a time."""
    when = to_datetime(value)
    return None if when is None else relative_to(when)


def relative_to(when: dt.datetime) -> str:
    """:func:`relative` of an aware UTC datetime (the one a caller already has from
    :func:`to_datetime`)."""
    now = timezone.now()
    if abs((now - when).total_seconds()) < 60:
        shown = str(naturaltime(when))  # "now", "20 seconds ago", "a minute from now"
    elif settings.USE_I18N:  # translated words: Django's own
        shown = f"{timesince(when, now, depth=1)} ago" if when <= now else f"{timeuntil(when, now, depth=1)} from now"
    elif when <= now:
        shown = f"{_largest_unit(when, now)} ago"
    else:
        shown = f"{_largest_unit(now, when)} from now"
    return shown.replace("\xa0", " ")


_UNIT_SECONDS = ((7 * 86400, "week"), (86400, "day"), (3600, "hour"), (60, "minute"))


def _largest_unit(d: dt.datetime, now: dt.datetime) -> str:
    """``timesince(d, now, depth=1)`` in English, without its lazy translated strings
    (a list page has two relative times per row, and Django's version was a quarter
    of the page's CPU). The same steps as Django's: whole calendar months (years and
    months) first, then weeks, days, hours, minutes of what is left; the first unit
    that is not zero, in the singular for 1. ``tests/views/test_readable.py``
    compares the two on many spans."""
    delta = now - d
    if delta.days * 86400 + delta.seconds <= 0:
        return "0 minutes"
    months = (now.year - d.year) * 12 + (now.month - d.month)
    if d.day > now.day or (d.day == now.day and d.time() > now.time()):
        months -= 1
    years, months = divmod(months, 12)
    if years:
        count, name = years, "year"
    elif months:
        count, name = months, "month"
    else:  # under a month: Django's pivot is ``d`` itself
        remaining = delta.total_seconds()
        for size, name in _UNIT_SECONDS:
            count = int(remaining // size)
            if count:
                break
        else:
            return "0 minutes"
    return f"{count} {name}" if count == 1 else f"{count} {name}s"


_UNITS = ((86400, "day"), (3600, "h"), (60, "min"), (1, "s"))
# Spans longer than this are no real wait (a lease "expiring" at 1e300 or +Inf):
# said as "more than 100 years", not as a number of days with 290 digits.
LONGEST_YEARS = 100
LONGEST_SECONDS = LONGEST_YEARS * 365 * 86400


def human_duration(seconds) -> str:
    """A span of seconds (int or float, clamped at 0) in its two largest units, cut
    (not rounded) to whole units: ``12 s``, ``1 min 30 s``, ``1 h 58 min``,
    ``3 days``, ``1 day 4 h``; ``more than 100 years`` past :data:`LONGEST_SECONDS`
    (+Inf included). ``—`` for anything that is not a number (NaN, text, a bool)."""
    if not is_number(seconds, finite=False):
        return "—"
    if seconds > LONGEST_SECONDS:
        return f"more than {LONGEST_YEARS} years"
    left = int(max(0.0, float(seconds)))
    parts = []
    for size, unit in _UNITS:
        count, left = divmod(left, size)
        if count and len(parts) < 2:
            parts.append(f"{count} {unit}{'s' if unit == 'day' and count != 1 else ''}")
        elif parts:
            break  # two units at most, and no gap ("1 day 5 s" reads as noise)
    return " ".join(parts) if parts else "0 s"
