"""Template filters for store values (epoch seconds, durations, JSON, bidi isolation)
and check titles.

Formatting only: the human forms themselves live in ``sessions_app.timefmt`` so
presenters can build the same words in Python."""

import datetime as dt
import html
import json

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

from .. import timefmt
from ..presenters.changes import change_table as _change_table
from ..presenters.labels import label as _label
from ..presenters.labels import money as _money
from ..actions.registry import repair_title as _repair_title
from ..checks.registry import BY_CODE as CHECKS
from ..stores.jsondecode import Undecodable, decode, depth_of, limits
from ..bidi import isolate as _isolate
from ..bidi import plain as _plain

register = template.Library()


@register.filter
def epoch(value):
    """Epoch seconds (float) as ``YYYY-MM-DD HH:MM:SS`` UTC; other values as they are."""
    if not timefmt.is_number(value):  # text, a bool, ±Inf: shown as they are
        return "—" if value is None else value
    try:
        return dt.datetime.fromtimestamp(value, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return value


@register.filter
def epoch_utc(value):
    """:func:`epoch` followed by `` UTC`` when the value was a time (the stores keep
    epoch seconds; every page shows them in UTC)."""
    shown = epoch(value)
    return f"{shown} UTC" if shown is not value and shown != "—" else shown


# Epoch seconds -> (their aware UTC datetime, the <time> element's opening tag): a
# pure function of the number, so remembered (a list view formats the same hundred
# times on every view); emptied when full.
_TIMES: dict = {}
TIMES_KEPT = 4096


@register.filter
def reltime(value):
    """Epoch seconds as a relative time with the exact UTC time on hover:
    ``<time datetime="2026-12-02T05:00:00Z" title="2026-12-02 05:00:00 UTC">3 hours
    ago</time>``. ``—`` for None; any other non-time value is shown as it is."""
    number = type(value) is float or type(value) is int
    hit = _TIMES.get(value) if number else None
    if hit is None:
        when = timefmt.to_datetime(value)
        if when is None:
            return "—" if value is None else value
        # One conversion for the three forms. The two times are strftime's digits and
        # separators, nothing to escape; the words are escaped as format_html would.
        iso = when.strftime("%Y-%m-%dT%H:%M:%SZ")
        hit = (when, f'<time datetime="{iso}" title="{iso[:-1].replace("T", " ")} UTC">')
        if number:
            if len(_TIMES) >= TIMES_KEPT:
                _TIMES.clear()
            _TIMES[value] = hit
    when, head = hit
    return SafeString(f"{head}{html.escape(timefmt.relative_to(when))}</time>")


@register.filter
def exact_reltime(value):
    """Epoch seconds as the exact UTC time followed by the relative one, for fact
    lists where the exact time is the point: ``2026-12-02 05:00:00 UTC (3 hours
    ago)``. None-safe like :func:`reltime`."""
    when = timefmt.to_datetime(value)
    if when is None:
        return "—" if value is None else value
    return format_html('<time datetime="{}">{}</time> <span class="muted">({})</span>',
                       when.strftime("%Y-%m-%dT%H:%M:%SZ"), timefmt.exact_utc(value),
                       timefmt.relative(value))


@register.filter
def human_duration(value):
    """Seconds as ``12 s``, ``1 h 58 min``, ``3 days`` (``timefmt.human_duration``);
    ``—`` when not a number."""
    return timefmt.human_duration(value)


@register.filter
def plain(value):
    """A value as plain words, never a Python repr: a list joined with commas, a
    dict as ``key: value`` pairs, anything else as it is."""
    if isinstance(value, (list, tuple)):
        return ", ".join(str(plain(v)) for v in value)
    if isinstance(value, dict):
        return "; ".join(f"{words(k)}: {plain(v)}" for k, v in value.items())
    return value


@register.filter
def column_label(column):
    """A store column's label (``presenters.labels``), or its raw name when none is known."""
    return _label(str(column))


@register.filter
def as_change_table(changes):
    """Recorded changes (a run report's or an audit event's list of
    ``{"op", "table", "key", "column", "before", "after"}``) as the plan table's rows
    (``presenters.changes.change_table``), for ``{% include "sessions/_changes.html"
    with table=a.changes|as_change_table %}``. Formatting only: masking is the
    presenter's, before the page gets the changes."""
    return _change_table(changes)


@register.filter
def words(value):
    """A snake_case key as words (``files_kept_in_trash`` -> ``files kept in trash``)."""
    return str(value).replace("_", " ")


@register.filter
def pretty_json(value):
    """Indented JSON for a JSON string or value (decoded through
    ``stores.jsondecode``); text that is not JSON is returned as is, a value past
    the size or depth limits as its "undecodable" marker followed by the text."""
    if isinstance(value, (str, bytes)):
        decoded = decode(value)
        if isinstance(decoded, Undecodable):
            text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
            return text if decoded.kind == "syntax" else f"{decoded.marker}\n{text[:20_000]}"
        value = decoded
    elif depth_of(value, stop=limits()[1]) > limits()[1]:
        return Undecodable("depth", f"nested deeper than {limits()[1]} levels").marker
    return json.dumps(value, ensure_ascii=False, indent=2)


@register.filter
def get_item(mapping, key):
    try:
        return mapping.get(key)
    except AttributeError:
        return None


@register.filter
def dash(value):
    """``—`` for None or empty values."""
    return "—" if value in (None, "") else value


@register.filter(is_safe=True)
def isolate(value):
    """A store value for plain-text places (``<option>``): wrapped in
    FSI…PDI so an unclosed bidi override in it cannot reorder the text after it
    (``sessions_app.bidi``). In HTML text use ``<bdi>`` or ``dir="auto"`` instead."""
    return _isolate(value)


@register.filter
def title_text(value):
    """A store value for the page ``<title>``: its text without bidi controls
    (``sessions_app.bidi.plain``; a tab title shows isolates as they are)."""
    return _plain(value)


@register.filter
def check_title(code):
    """The catalog's short human title of a check ``code`` ('' for a code the
    catalog does not know, e.g. one from an older run)."""
    check = CHECKS.get(code) if isinstance(code, str) else None
    return check.title if check else ""


@register.filter
def check_repair_title(code):
    """The title of the repair check ``code`` offers, as the health page's *Preview:*
    links name it ('' for a check without one)."""
    check = CHECKS.get(code) if isinstance(code, str) else None
    return _repair_title(check.heal) if check and check.heal else ""


@register.filter
def repair_title(name):
    """The human title of a repair ``name`` (``actions.registry.TITLES``)."""
    return _repair_title(name) if isinstance(name, str) else ""


@register.filter
def money(value):
    """A USD amount with two decimals (four below a cent), ``—`` when absent."""
    return "—" if value in (None, "") else _money(value)
