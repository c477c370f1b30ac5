"""Template filters for the pages' layout (issue 15): long paths that wrap."""

from django import template
from django.utils.html import conditional_escape
from django.utils.safestring import mark_safe

register = template.Library()


@register.filter(needs_autoescape=True)
def pathbreaks(value, autoescape=True):
    """``value`` (a path, str or ``Path``) escaped, with a line-break opportunity
    (``<wbr>``) after each ``/``: a narrow column wraps it between folder names rather
    than one character a line (static/app.css, ``td.path code``). ``None`` stays empty."""
    if value is None:
        return ""
    escape = conditional_escape if autoescape else (lambda text: text)
    return mark_safe("/<wbr>".join(escape(part) for part in str(value).split("/")))
