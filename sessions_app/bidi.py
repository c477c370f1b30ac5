"""Bidirectional-text isolation of store-derived strings (issue 13).

A title, id or message holding an unclosed right-to-left override (U+202E) would
reverse the page's own text after it. In HTML, templates wrap such values in
``<bdi>`` or give their element ``dir="auto"`` (both isolate: an override inside
ends with the element). Where no element can be used (the page ``<title>``,
``<option>`` labels), :func:`isolate` wraps the text in FIRST STRONG ISOLATE …
POP DIRECTIONAL ISOLATE, the plain-text equivalent (Unicode UAX #9, X5c/X6a: a
PDI closes every embedding and override opened since its isolate initiator).
The page ``<title>`` gets :func:`plain` instead: the value without bidi controls.
"""

FSI, PDI = "\u2068", "\u2069"


def isolate(text) -> str:
    """``text`` (``str()`` of any value) between FSI and PDI; '' stays ''."""
    text = "" if text is None else str(text)
    return f"{FSI}{text}{PDI}" if text else text


# Embeddings, overrides, isolates and marks: what can reorder plain text.
BIDI_CONTROLS = dict.fromkeys(map(ord, "\u200e\u200f\u061c\u202a\u202b\u202c\u202d\u202e"
                                       "\u2066\u2067\u2068\u2069"))


def plain(text) -> str:
    """``text`` without bidi control characters, for a page ``<title>``: a browser's
    tab or window title shows FSI/PDI (or an override) as they are, so there the
    text is plain, and nothing in it can reorder what follows."""
    return ("" if text is None else str(text)).translate(BIDI_CONTROLS)
