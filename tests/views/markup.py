"""Page text with the bidi isolation markup taken out (``<bdi>``, ``dir="auto"``),
for tests that look for a sentence or a cell; ``test_bidi`` checks the markup itself."""

import re

BIDI_MARKUP = re.compile(r'</?bdi\b[^>]*>| dir="auto"')


def without_bidi_markup(html: str) -> str:
    """``html`` with ``<bdi>`` tags (not their content) and ``dir="auto"`` removed."""
    return BIDI_MARKUP.sub("", html)
