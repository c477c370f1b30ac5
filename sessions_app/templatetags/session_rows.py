"""The sessions list's rows, rendered in Python.

The template loop it replaces was over half of the list page's time (50 rows, a
dozen variables and filters each, through Django's generic resolution; a
``{% url %}`` per row). :func:`session_rows` writes the same markup, byte for byte
(``tests/views/test_session_rows.py`` renders both and compares), every value
escaped as ``{{ value }}`` escapes it (``transcript._v``), links from one reversed
prefix per profile (``presenters.health.session_url_maker``). No store is read
here: the rows are the page's (``presenters.session_list.list_page``).
"""

from __future__ import annotations

from django import template
from django.utils.html import conditional_escape
from django.utils.safestring import mark_safe

from ..presenters.health import session_url_maker
from .hermes import dash, reltime
from .transcript import _v as _e  # plain text, safe elements and whole numbers first

register = template.Library()


def _row(row: dict, url, checked, select: bool) -> str:
    sid, title = row.get("id", ""), row.get("title")
    out = ["\n    <tr>\n      "]
    if select:
        out.append(f'<td class="select"><input type="checkbox" name="s" value="{_e(row.get("profile", ""))} {_e(sid)}" '
                   f'form="bulk-delete" aria-label="select {_e(sid)}"></td>')
    out.append(f'\n      <td dir="auto" data-label="Profile">{_e(row.get("profile", ""))}</td>\n'
               f'      <td data-label="Session"><a href="{_e(url(sid))}">')
    out.append(f"<bdi>{_e(title)}</bdi>" if title else f'<code dir="auto">{_e(sid)}</code>')
    out.append("</a>\n        ")
    if title:
        out.append(f'<div class="muted small"><code dir="auto">{_e(sid)}</code></div>')
    out.append("\n        ")
    if row.get("parent_session_id"):
        out.append(f'<div class="muted small">child of <code dir="auto">{_e(row["parent_session_id"])}</code></div>')
    out.append('</td>\n      <td data-label="Health" class="badges">')
    if row.get("profile", "") not in checked:
        out.append('<span class="muted small">not checked</span>')
    for f in row.get("findings") or ():
        out.append(f'<span class="sev sev-{_e(f.get("severity", ""))} titled" '
                   f'title="{_e(f.get("check", ""))}: {_e(f.get("detail", ""))}">{_e(f.get("title", f.get("check", "")))}</span> ')
    if row.get("more_findings"):
        out.append(f'<span class="muted small">+{_e(row["more_findings"])}</span>')
    out.append(f'</td>\n      <td dir="auto" data-label="Source">{_e(row.get("source", ""))}</td>\n'
               f'      <td data-label="Liveness" class="badges"><span class="live live-{_e(row.get("live_class", ""))}"')
    if row.get("live_evidence"):
        # The join filter: each item escaped (not localised), the separator too.
        out.append(f' title="{"; ".join(conditional_escape(e) for e in row["live_evidence"])}"')
    out.append(f'>{_e(row.get("live_label", ""))}</span>')
    if row.get("live_label") == "ended" and row.get("end_reason"):
        out.append(f' <span class="muted small" title="{_e(row["end_reason"])}">'
                   f'(<bdi>{_e(row.get("end_reason_label") or row["end_reason"])}</bdi>)</span>')
    for flag in ("pinned", "archived", "hidden"):
        if row.get(flag):
            out.append(f' <span class="badge flag-{flag}">{flag}</span>')
    out.append(f'</td>\n      <td class="num" data-label="Messages">{_e(dash(row.get("message_count", "")))}</td>\n'
               f'      <td data-label="Started">{_e(reltime(row.get("started_at", "")))}</td>\n'
               f'      <td data-label="Last activity">{_e(reltime(row.get("activity", "")))}</td>\n    </tr>\n    ')
    return "".join(out)


@register.simple_tag(takes_context=True)
def session_rows(context, rows, checked):
    """The ``<tr>`` of each row of a sessions list page (dicts of
    ``listing.list_sessions`` with ``findings`` and ``more_findings``), as HTML
    (escaped). ``checked``: profile keys a stored pass covered. The selection
    column is there when the context's ``can_delete`` or ``can_flag`` is true."""
    select = bool(context.get("can_delete") or context.get("can_flag"))
    urls: dict[str, object] = {}
    out = []
    for row in rows:
        profile = row.get("profile", "")
        url = urls.get(profile)
        if url is None:
            url = urls[profile] = session_url_maker("session", profile)
        out.append(_row(row, url, checked or (), select))
    return mark_safe("".join(out))
