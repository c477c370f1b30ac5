"""Repeated rows of the session and health pages, rendered in Python.

One ``{% include %}`` of a message template per row was over half of a session
page's time (docs/benchmarks.md): Django's template engine resolves every variable
and filter of every row through its generic machinery. :func:`transcript_rows`
writes the same markup with ``format_html``-style escaping: every value goes
through :func:`_v`, which is what ``{{ value }}`` does (localised, then
``conditional_escape``), and the filters are the template's own functions. The
output is what the template gave, byte for byte (``tests/views/test_transcript_rows.py``
renders both and compares). No store is read here: the rows are the page's
:class:`~sessions_app.stores.transcript.TranscriptPage`.
"""

from __future__ import annotations

import html

from django import template
from django.conf import settings
from django.template.defaultfilters import filesizeformat, slugify, urlencode
from django.urls import reverse
from django.utils.formats import localize
from django.utils.html import conditional_escape
from django.utils.safestring import SafeString, mark_safe

from .hermes import check_title, dash, epoch_utc, pretty_json, repair_title

register = template.Library()


def _v(value) -> str:
    """``{{ value }}`` with autoescaping on (Django's ``render_value_in_context``)."""
    if type(value) is str:
        # What localize() and conditional_escape() do with a plain (unsafe) str,
        # without their lazy-text wrappers: tens of thousands of values a page.
        return html.escape(value)
    if type(value) is SafeString:
        return value  # already escaped (a reltime element): as conditional_escape() leaves it
    if type(value) is int and not settings.USE_THOUSAND_SEPARATOR:
        return str(value)  # localize()'s own fast case for a whole number (counts, ids)
    value = localize(value)
    return conditional_escape(value if isinstance(value, str) else str(value))


# Text -> its ``{{ text|slugify }}``: a pure function of the text (Django's slugify
# normalises and runs two regular expressions), remembered because a page shows a
# few roles a hundred times; emptied when full. Only short texts are kept (roles and
# call ids are read whole, and a damaged store can hold megabytes in them).
_SLUGS: dict = {}
SLUGS_KEPT = 4096
SLUG_TEXT_KEPT = 200  # characters


def _slug(value) -> str:
    """``{{ value|slugify }}`` with autoescaping on."""
    if type(value) is not str or len(value) > SLUG_TEXT_KEPT:
        return _v(slugify(value))
    shown = _SLUGS.get(value)
    if shown is None:
        if len(_SLUGS) >= SLUGS_KEPT:
            _SLUGS.clear()
        shown = _SLUGS[value] = _v(slugify(value))
    return shown


def _severity(severity) -> str:
    return f'<span class="sev sev-{_v(severity)}">{_v(severity)}</span>\n'


def _raw_url(store, session_id, message_id) -> str:
    return conditional_escape(reverse("message_raw", args=[store.key, session_id, message_id]))


def _message(m, markers: dict, store, session_id) -> str:
    # The row's columns read from its dict once (``Message.__getattr__`` reaches them
    # only after a failed attribute lookup), the state property once.
    row = m.row
    mid, role, state = row["id"], row["role"], m.state
    out = [f'<article class="msg role-{_slug(role)} state-{_v(state)}" id="m{_v(mid)}">\n  <header>\n'
           f'    <a href="#m{_v(mid)}" class="msg-id">#{_v(mid)}</a> <strong class="role" dir="auto">{_v(role)}'
           f'</strong>\n    <span class="muted">{_v(epoch_utc(row["timestamp"]))}</span>\n    ']
    if state != "active":
        out.append(f'<span class="badge badge-{_v(state)}">{_v(state)}</span>')
    out.append("\n    ")
    if m.compressed_summary:
        out.append('<span class="badge">compaction summary</span>')
    out.append("\n    ")
    if row["finish_reason"]:
        out.append(f'<span class="muted">finish: <bdi>{_v(row["finish_reason"])}</bdi></span>')
    out.append("\n    ")
    if row["platform_message_id"]:
        out.append(f'<span class="muted">platform id <bdi>{_v(row["platform_message_id"])}</bdi></span>')
    out.append("\n    ")
    if role == "tool":
        out.append(f'<span class="muted">result of <code dir="auto">{_v(dash(row["tool_call_id"]))}</code> '
                   f'(<bdi>{_v(dash(row["tool_name"]))}</bdi>)</span>')
    out.append("\n  </header>\n  ")
    if row["reasoning"] or row["reasoning_content"]:
        out.append('\n  <details class="reasoning"><summary>Reasoning</summary><div class="text" dir="auto">'
                   f'{_v(row["reasoning"]) if row["reasoning"] else _v(row["reasoning_content"])}</div></details>\n  ')
    out.append("\n  ")
    if m.text:
        out.append(f'<div class="text" dir="auto">{_v(m.text)}</div>')
    out.append("\n  ")
    for field, marker in m.undecodable:
        out.append(f'<p class="undecodable muted small" data-field="{_v(field)}"><code>{_v(field)}</code> '
                   f'{_v(marker)}</p>')
    out.append("\n  ")
    if m.structured is not None:
        out.append('<details><summary>Structured content (JSON)</summary><pre dir="auto">'
                   f'{_v(pretty_json(m.structured))}</pre></details>')
    out.append("\n  ")
    if m.truncated:
        out.append(f'<p class="muted small">Showing the first 20 KB of {_v(filesizeformat(m.content_length))}. '
                   f'<a href="{_raw_url(store, session_id, mid)}">Full text</a></p>')
    out.append("\n  ")
    for call in m.tool_calls:
        out.append(f'\n  <div class="tool-call" id="call-{_slug(call.get("id", ""))}">\n'
                   f'    <div><span class="tool-name">⚙ <bdi>{_v(call.get("name", ""))}</bdi></span> '
                   f'<code class="muted" dir="auto">{_v(call.get("id", ""))}</code></div>\n'
                   f'    <details><summary>Arguments</summary><pre dir="auto">{_v(call.get("arguments", ""))}'
                   '</pre></details>\n    \n    ')
        r = call.get("result")
        if r:
            try:
                short = r.content_length < 600
            except TypeError:  # the template's {% if %} reads a failed comparison as false
                short = False
            out.append(f'\n    <details class="tool-result" {"open" if short else ""}><summary>Result '
                       f'<a href="#m{_v(r.id)}" id="m{_v(r.id)}">#{_v(r.id)}</a>')
            if r.state != "active":
                out.append(f' <span class="badge badge-{_v(r.state)}">{_v(r.state)}</span>')
            out.append(f' <span class="muted">({_v(filesizeformat(r.content_length))})</span></summary>\n'
                       f'      <div class="text" dir="auto">{_v(r.text)}</div>\n      ')
            if r.truncated:
                out.append(f'<p class="muted small">Cut at 20 KB of {_v(filesizeformat(r.content_length))}. '
                           f'<a href="{_raw_url(store, session_id, r.id)}">Full text</a></p>')
            out.append("\n    </details>\n    ")
        else:
            out.append('\n    <p class="muted small tool-result missing">No result stored for this call.</p>\n    ')
        out.append("\n    \n  </div>\n  ")
    out.append("\n  ")
    marks = markers.get(mid) or ()
    for f in marks:
        out.append(f'\n  <div class="marker sev-{_v(f.severity)}" data-check="{_v(f.check)}">{_severity(f.severity)} '
                   f'{_v(check_title(f.check))} <code>{_v(f.check)}</code>: <bdi>{_v(f.detail)}</bdi></div>\n  ')
    out.append("\n</article>\n")
    for f in marks:
        if f.check == "unanswered_turn":
            out.append('\n<div class="missing-reply" data-check="unanswered_turn">No assistant reply was stored '
                       f'after message #{_v(mid)}: it should be here.</div>\n')
    out.append("\n")
    return "".join(out)


@register.simple_tag
def transcript_rows(page, markers, store, session_id):
    """The messages of ``page`` not shown under their tool call, as HTML (escaped);
    ``markers``: message id -> findings to mark on that row (``message_markers``)."""
    return mark_safe("".join(_message(m, markers or {}, store, session_id) for m in page.messages if not m.nested))


def _health_row(f) -> str:
    sid = f.get("session_id")
    session = (f'<a href="{_v(f.get("session_url", ""))}"><code dir="auto">{_v(sid)}</code></a>' if sid
               else '<span class="muted">store</span>')
    heal = f.get("heal")
    if heal and f.get("repair_blocked"):
        repair = '<span class="muted">none while the store is damaged</span>'
    elif heal and sid and f.get("first"):  # a repair it depends on comes first, and may heal this too
        repair = "".join(f'<a href="{_v(f.get("repair_url", ""))}?check={_v(urlencode(d["check"]))}" class="first">'
                         f'Preview first: {_v(repair_title(d["heal"]))}</a> <code class="small">{_v(d["heal"])}</code> '
                         for d in f["first"])
        repair += f'<span class="muted small">it may heal this too ({_v(heal)} is planned again after it)</span>'
    elif heal and sid:
        repair = (f'<a href="{_v(f.get("repair_url", ""))}?check={_v(urlencode(f.get("check", "")))}">Preview: '
                  f'{_v(repair_title(heal))}</a> <code class="small">{_v(heal)}</code>')
    elif heal and f.get("repair_all_url"):
        repair = (f'<a href="{_v(f["repair_all_url"])}">Preview: {_v(repair_title(heal))}</a> '
                  f'<code class="small">{_v(heal)}</code>')
    elif heal:
        repair = _v(heal)
    elif f.get("check") == "id_collision" and sid:
        repair = f'<a href="{_v(f.get("collision_url", ""))}">Compare the copies</a>'
    elif f.get("next_step"):  # this case's own next step (the group's sentence is for the others)
        repair = f'<span class="muted">no automatic repair.</span> <span class="next-step small">{_v(f["next_step"])}</span>'
    else:
        repair = '<span class="muted">no automatic repair</span>'
    return (f'\n    <tr>\n      <td>{session}</td>\n      <td class="num">{_v(f.get("count", ""))}</td>\n'
            f'      <td dir="auto">{_severity(f["severity"]) if f.get("show_severity") else ""}'
            f'{_v(f.get("detail", ""))}{_raw_report(f)}</td>\n      <td>{repair}</td>\n    </tr>')


def _raw_report(f) -> str:
    """SQLite's own quick_check lines of a damage finding, folded (the detail says it readably)."""
    lines = f.get("sqlite_report")
    if not lines:
        return ""
    return (f'<details class="raw-report"><summary class="small">SQLite\'s own report</summary>'
            f'<pre class="small">{_v(chr(10).join(str(x) for x in lines))}</pre></details>')


@register.simple_tag
def health_rows(rows):
    """The health page's rows of one check (``presenters.health``: finding dicts with
    their links), as HTML (escaped): a few hundred rows per page."""
    return mark_safe("".join(_health_row(f) for f in rows))
