"""The session page's labelled facts (metadata, other columns, usage), rendered in Python.

``{% include "sessions/_facts.html" %}`` with one ``{% include "sessions/_value.html" %}``
per fact was a few milliseconds of every session page (bench/analysis.md): Django's
template engine resolves each variable, condition and include of each of the session
row's fifty-odd columns through its generic machinery. :func:`fact_list` writes the same
markup, escaping every value as ``{{ value }}`` does (``transcript._v``) and formatting
with the templates' own filters. The output is that template's, byte for byte
(``tests/views/test_fact_list.py`` renders both and compares, ``reference_facts.html``
being the template it replaced). No store is read here: the facts are the page's
:class:`~sessions_app.presenters.labels.Field` s.
"""

from __future__ import annotations

from django import template
from django.urls import reverse
from django.utils.html import conditional_escape
from django.utils.safestring import mark_safe

from .hermes import exact_reltime
from .transcript import _v

register = template.Library()


def _value(c) -> str:
    """``sessions/_value.html`` with ``exact=True`` (a fact list's values, nested ones too)."""
    kind = c.kind
    if kind == "empty":
        return '<span class="muted">—</span>'
    if kind == "time":
        return _v(exact_reltime(c.value))
    if kind == "fields":
        return ('<div class="cell-fields">'
                + "".join(f'<div data-column="{_v(f.column)}"><span class="muted field-label" title="{_v(f.column)}">'
                          f'{_v(f.label)}</span> {_value(f.cell)}</div>' for f in c.fields)
                + "</div>")
    return f"<bdi>{_v(c.value)}</bdi>"


def _fact(f, store) -> str:
    column, label = f.column, f.label
    if label != column:
        head = f'<dt dir="auto" data-column="{_v(column)}" title="{_v(column)}">{_v(label)}</dt>'
    else:
        head = f'<dt dir="auto" data-column="{_v(column)}"><code dir="auto">{_v(column)}</code></dt>'
    value = f.cell.value
    if column == "parent_session_id" and value:
        url = conditional_escape(reverse("session", args=[store.key, value]))
        shown = f'<a href="{url}"><code dir="auto">{_v(value)}</code></a>'
    elif column == "id":
        shown = f'<code dir="auto">{_v(value)}</code>'
    else:
        shown = _value(f.cell)
    return f"\n  {head}<dd dir=\"auto\">{shown}</dd>\n  "


@register.simple_tag
def fact_list(facts, store):
    """``facts`` (labelled :class:`~sessions_app.presenters.labels.Field` s) as the
    page's ``<dl class="facts">``, escaped; ``store``: the profile parent links point into."""
    return mark_safe('<dl class="facts">\n  ' + "".join(_fact(f, store) for f in facts) + "\n</dl>\n")
