"""Masking of API keys, tokens and passwords in displayed and exported transcript text.

Patterns come from Yelp's ``detect-secrets`` (its regex-based plugins' ``denylist``
and its ``KeywordDetector`` for ``password = "…"``-style assignments), a maintained
set. It lacks a few shapes agent transcripts are full of, so a short complement
covers them: Anthropic (``sk-ant-…``) and OpenAI project (``sk-proj-…``) keys,
``Authorization: Bearer …`` headers, and ``*_API_KEY=…`` / ``*_TOKEN=…`` shell
assignments. Entropy-based plugins are left out: they would mask every hash and id.

Masking applies when ``HERMES_ADMIN_MASK_SECRETS`` is on, and always for users
without the ``view_transcripts`` permission (issue 6).
"""

from __future__ import annotations

import re
from functools import lru_cache

from django.conf import settings

MASK = "[secret masked: {}]"
SKIPPED_PLUGINS = {"Base64HighEntropyString", "HexHighEntropyString", "IPPublicDetector", "KeywordDetector"}
COMPLEMENT = (
    ("Anthropic key", re.compile(r"sk-ant-[A-Za-z0-9_-]{20,}")),
    ("OpenAI key", re.compile(r"sk-(?:proj-|svcacct-)?[A-Za-z0-9_-]{32,}")),
    ("Bearer token", re.compile(r"(?i)(?<=bearer )[A-Za-z0-9._~+/=-]{16,}")),
    ("credential assignment", re.compile(r"(?i)(?<=API_KEY=)['\"]?[^\s'\"]{8,}")),
    ("credential assignment", re.compile(r"(?i)(?<=TOKEN=)['\"]?[^\s'\"]{8,}")),
    ("credential assignment", re.compile(r"(?i)(?<=SECRET=)['\"]?[^\s'\"]{8,}")),
    ("credential assignment", re.compile(r"(?i)(?<=PASSWORD=)['\"]?[^\s'\"]{8,}")),
)


@lru_cache(maxsize=1)
def _patterns() -> tuple[tuple[str, re.Pattern], ...]:
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    found = []
    for secret_type, plugin in get_mapping_from_secret_type_to_class().items():
        if plugin.__name__ in SKIPPED_PLUGINS:
            continue
        for regex in getattr(plugin, "denylist", ()):
            found.append((secret_type, regex))
    return tuple(found) + COMPLEMENT


@lru_cache(maxsize=1)
def _keyword_detector():
    from detect_secrets.plugins.keyword import KeywordDetector
    return KeywordDetector()


def mask(text):
    """``text`` with every detected secret replaced by a labelled placeholder.

    Non-strings pass through unchanged.
    """
    if not isinstance(text, str) or not text:
        return text
    for label, regex in _patterns():
        text = regex.sub(MASK.format(label), text)
    if any(word in text.lower() for word in ("pass", "secret", "key", "token", "pwd")):
        detector = _keyword_detector()
        for line in set(text.splitlines()):
            for found in detector.analyze_line(filename="transcript.py", line=line, line_number=0):
                if found.secret_value and len(found.secret_value) >= 4:
                    text = text.replace(found.secret_value, MASK.format("keyword"))
    return text


def mask_value(value):
    """Mask every string inside a JSON-like value (lists, dicts)."""
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, list):
        return [mask_value(v) for v in value]
    if isinstance(value, dict):
        return {k: mask_value(v) for k, v in value.items()}
    return value


def masking_for(user) -> bool:
    """Whether ``user`` sees masked text: the setting, or no content permission."""
    return bool(getattr(settings, "HERMES_ADMIN_MASK_SECRETS", False)) or not user.has_perm(
        "sessions_app.view_transcripts"
    )
