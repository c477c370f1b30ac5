"""The search page's hits, rendered in Python.

The template loop it replaces was most of the search page's time (50 hits, a
dozen variables each and a loop over every snippet's pieces, through Django's
generic resolution; a ``{% url %}`` per hit). :func:`search_hits` writes the same
markup, byte for byte (``tests/views/test_search_hits.py`` renders both and
compares), every value escaped as ``{{ value }}`` escapes it (``transcript._v``:
snippet text is message content, hostile until escaped; the highlight markers
were split out by ``stores.search.split_snippet``, so ``<mark>`` is only ever
written here), links from one reversed prefix per profile
(``presenters.health.session_url_maker``). No store is read here: the hits are
the page's (``presenters.search.search_page``).
"""

from __future__ import annotations

from django import template
from django.utils.safestring import mark_safe

from ..presenters.health import session_url_maker
from .hermes import reltime
from .transcript import _v as _e  # plain text, safe elements and whole numbers first

register = template.Library()


def _snippet(parts) -> str:
    return "".join(f'<mark dir="auto">{_e(text)}</mark>' if matched else f"<bdi>{_e(text)}</bdi>"
                   for text, matched in parts)


def _hit(hit, url) -> str:
    hid, session, visible = _e(hit.id), hit.session, hit.visible
    out = [f'\n    <li data-message="{hid}">\n      <a href="{_e(url(hit.session_id))}?at={hid}']
    if not visible:
        out.append("&amp;inactive=1")
    out.append(f"#m{hid}\">")
    # {% if hit.session.title %}: a missing session or a missing title column is false.
    title = session.get("title") if session else None
    out.append(f"<bdi>{_e(title)}</bdi>" if title else f'<code dir="auto">{_e(hit.session_id)}</code>')
    out.append(f'</a>\n      <span class="muted small">#{hid} · <bdi>{_e(hit.role)}</bdi> · '
               f"{_e(reltime(hit.timestamp))}")
    if session:
        # {{ hit.session.source }}: "" for a store without the column, "None" for NULL.
        out.append(f' · <bdi>{_e(session["source"]) if "source" in session else ""}</bdi>')
    else:
        out.append(' · <span class="error">session row missing</span>')
    if not visible:
        out.append(f" · {_e(hit.state)}")
    out.append(f'</span>\n      <div class="snippet" dir="auto">{_snippet(hit.parts)}</div>\n    </li>\n  ')
    return "".join(out)


@register.simple_tag
def search_hits(hits, profile):
    """The ``<li>`` of each hit of a search page (``stores.search.Hit``) of the
    store ``profile`` (its key), as HTML (escaped)."""
    url = session_url_maker("session", profile)
    return mark_safe("".join(_hit(hit, url) for hit in hits))
