"""Small filters for the liveness box and the deletion pages (labels, durations).

The session page's liveness evidence itself is read by its presenter
(``presenters.session_page``); nothing here opens a store."""

from __future__ import annotations

from django import template

register = template.Library()

VERDICT_LINES = {  # shown after the verdict word itself ("live — …")
    "live": "a Hermes process holds this session; it cannot be deleted now.",
    "maybe_live": "something suggests an agent may still use this session; deleting needs an override.",
    "not_live": "no lease, lock, open surface, routing gateway or recent activity.",
}
SOURCE_LABELS = {
    "turn_lease": "turn lease", "compression_lock": "compression lock", "registry": "active-session registry",
    "gateway": "gateway routing", "activity": "recent activity", "unknown": "unreadable evidence",
}


@register.filter
def verdict_line(verdict: str) -> str:
    return VERDICT_LINES.get(verdict, verdict)


@register.filter
def verdict_label(verdict: str) -> str:
    return {"live": "live", "maybe_live": "maybe live", "not_live": "not live"}.get(verdict, verdict)


@register.filter
def source_label(source: str) -> str:
    return SOURCE_LABELS.get(source, source)


@register.filter
def duration(seconds) -> str:
    """Seconds as ``42 s``, ``5 min``, ``3 h``, ``2 d``; ``—`` when unknown."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        return "—"
    seconds = max(0.0, float(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"
