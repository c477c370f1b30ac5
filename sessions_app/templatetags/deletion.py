"""Small filters for the liveness box and the deletion pages (labels, durations).

The session page's liveness evidence itself is read by its presenter
(``presenters.session_page``); nothing here opens a store."""

from __future__ import annotations

from django import template

from .. import timefmt
from ..vocabulary import LIVENESS_SOURCES as SOURCE_LABELS

register = template.Library()

VERDICT_LINES = {  # shown after the verdict word itself ("live — …")
    "live": "a Hermes process holds this session; it cannot be deleted now.",
    "maybe_live": "something suggests an agent may still use this session; deleting needs an override.",
    "not_live": "no lease, lock, open surface, routing gateway or recent activity.",
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
    """Seconds as ``42 s``, ``1 h 58 min``, ``3 days``; ``—`` when unknown
    (``timefmt.human_duration``, the same words as the ``hermes`` filter)."""
    return timefmt.human_duration(seconds)
