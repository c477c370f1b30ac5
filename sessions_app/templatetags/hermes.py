"""Template filters for store values (epoch seconds, JSON, bidi isolation)."""

import datetime as dt
import json

from django import template

from ..stores.jsondecode import Undecodable, decode, depth_of, limits
from ..bidi import isolate as _isolate

register = template.Library()


@register.filter
def epoch(value):
    """Epoch seconds (float) as ``YYYY-MM-DD HH:MM:SS`` UTC; other values as they are."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
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
    """A store value for plain-text places (``<title>``, ``<option>``): wrapped in
    FSI…PDI so an unclosed bidi override in it cannot reorder the text after it
    (``sessions_app.bidi``). In HTML text use ``<bdi>`` or ``dir="auto"`` instead."""
    return _isolate(value)
