"""Masking of API keys, tokens and passwords in displayed and exported transcript text.

Patterns come from Yelp's ``detect-secrets`` (its regex-based plugins' ``denylist``
and its ``KeywordDetector`` for ``password = "…"``-style assignments), a maintained
set. It lacks a few shapes agent transcripts are full of, so a short complement
covers them: Anthropic (``sk-ant-…``) and OpenAI project (``sk-proj-…``) keys,
``Authorization: Bearer …`` headers, and ``*_API_KEY=…`` / ``*_TOKEN=…`` shell
assignments. Entropy-based plugins are left out: they would mask every hash and id.

Masking applies when ``HERMES_ADMIN_MASK_SECRETS`` is on, and always for users
without the ``view_transcripts`` permission (issue 6). Pages mask what they show
once, in their presenter, through :func:`masker_for`.

Speed (docs/benchmarks.md): :func:`mask` is one pass over a folded copy of the text
that tells which patterns can match at all. Each pattern's *literal gate* is the
set of strings it cannot match without (taken from the pattern itself by
:func:`required_literals`: a mandatory run of literal characters, or one of the
alternatives of a mandatory group), so a pattern runs only over a text that holds
them; the keyword detector runs only on lines holding one of its keywords. The
result is exactly what running every pattern over every text gives (the gates are
necessary conditions, and are re-read after each replacement), only without the
regex scans that could not match: the 333 texts a masked session page of the bench
home shows (50 KB) took 23 ms, they take 3 ms. One compiled alternation of the 52
patterns was measured too: no faster than the patterns one by one (Python's engine
tries each alternative at each position).
"""

from __future__ import annotations

import hashlib
import re
import re._parser as sre_parse  # the stdlib's own pattern parser (Python 3.11+)
import threading
from collections import OrderedDict
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
# Words that make a text worth the keyword detector (a cheap test kept from the start).
KEYWORD_HINTS = ("pass", "secret", "key", "token", "pwd")
# Every word of KeywordDetector's denylist holds one of these (detect-secrets
# plugins/keyword.py DENYLIST: *_?key, *_?pass, password, passwd, pwd, secret,
# contraseña, contrasena); a line holding none of them cannot yield a finding.
KEYWORD_LINE_WORDS = ("key", "pass", "pwd", "secret", "contraseña", "contrasena")
# Characters ``re.IGNORECASE`` matches to an ASCII letter that ``str.lower()`` does not
# turn into it (the only four, checked over every code point): folded to that letter
# so that a gate never misses a case-insensitive match.
_FOLD = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s"})  # İ ı ſ (K lowers to k)


def fold(text: str) -> str:
    """``text`` lowered the way ``re.IGNORECASE`` sees ASCII letters (see ``_FOLD``)."""
    return text.lower() if text.isascii() else text.translate(_FOLD).lower()


def _requirements(items, ignorecase: bool) -> list[frozenset[str]]:
    """Sets of strings one of which every match of the parsed ``items`` contains (or
    touches, for lookarounds). Lower-cased for ``ignorecase`` patterns."""
    found: list[frozenset[str]] = []
    run: list[str] = []

    def flush():
        if run:
            text = "".join(run)
            if not ignorecase or text.isascii():
                found.append(frozenset({text.lower() if ignorecase else text}))
            run.clear()

    for op, av in items:
        name = str(op)
        if name == "LITERAL":
            run.append(chr(av))
            continue
        flush()
        if name == "SUBPATTERN":
            _group, add, remove, sub = av
            if (add | remove) & re.IGNORECASE:
                continue  # a scoped case change: not worth following
            found += _requirements(sub, ignorecase)
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low, _high, sub = av
            if low >= 1:
                found += _requirements(sub, ignorecase)
        elif name == "ASSERT":  # a positive lookahead/lookbehind: its text is in the string too
            found += _requirements(av[1], ignorecase)
        elif name == "BRANCH":
            union: set[str] = set()
            for alternative in av[1]:
                options = _requirements(alternative, ignorecase)
                if not options:
                    union = set()
                    break
                union |= max(options, key=lambda s: min(map(len, s)))
            if union:
                found.append(frozenset(union))
    flush()
    return found


def required_literals(regex: re.Pattern) -> tuple[bool, tuple[tuple[str, ...], ...]]:
    """``(ignorecase, requirements)`` for a compiled pattern: every match needs, for
    each requirement, one of its strings in the text (in :func:`fold`-ed text when
    ``ignorecase``). Empty when nothing can be told (then the pattern always runs)."""
    ignorecase = bool(regex.flags & re.IGNORECASE)
    try:
        parsed = sre_parse.parse(regex.pattern, regex.flags)
    except Exception:  # a pattern the parser of this Python reads differently: no gate
        return ignorecase, ()
    ignorecase = bool(parsed.state.flags & re.IGNORECASE)  # inline (?i) included
    reqs = sorted(set(_requirements(parsed, ignorecase)), key=lambda s: -min(map(len, s)))
    # Most selective first, each a tuple with its longest strings first.
    return ignorecase, tuple(tuple(sorted(r, key=len, reverse=True)) for r in reqs[:4])


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
def _gated() -> tuple[tuple[str, re.Pattern, bool, tuple], ...]:
    """Every pattern with its replacement text and literal gate (:func:`required_literals`)."""
    return tuple((MASK.format(label), regex, *required_literals(regex)) for label, regex in _patterns())


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
    folded = None
    for replacement, regex, ignorecase, requirements in _gated():
        if requirements:
            if ignorecase:
                if folded is None:
                    folded = fold(text)
                hay = folded
            else:
                hay = text
            # Plain loops, not all(any(...)): this runs 52 times per text shown.
            for options in requirements:
                for literal in options:
                    if literal in hay:
                        break
                else:
                    break  # a requirement none of whose strings is there: cannot match
            else:
                requirements = ()
            if requirements:
                continue
        changed = regex.sub(replacement, text)
        if changed != text:
            text, folded = changed, None  # later gates look at the text as it is now
    lower = text.lower()
    if any(word in lower for word in KEYWORD_HINTS):
        detector = _keyword_detector()
        for line in set(text.splitlines()):
            if not any(word in fold(line) for word in KEYWORD_LINE_WORDS):
                continue  # none of the detector's keywords: it cannot find anything here
            for found in detector.analyze_line(filename="transcript.py", line=line, line_number=0):
                if found.secret_value and len(found.secret_value) >= 4:
                    text = text.replace(found.secret_value, MASK.format("keyword"))
    return text


MEMO_CHARS = 2_000_000  # masked characters remembered at most (a few MB), oldest out first
MEMO_ENTRY = 100  # what an entry counts beyond its characters (key and bookkeeping): many short texts stay bounded too
_memo: OrderedDict[bytes, str] = OrderedDict()
_memo_size = [0]
_memo_lock = threading.Lock()


def mask_remembered(text):
    """``mask(text)``, remembered by a digest of ``text``.

    For pages that mask the same texts on every view: a search page masks about
    150 (each hit's message around its snippet, the snippet, the titles), the
    health page the details of the stored pass's findings (a few hundred), and
    :func:`mask` scans each text for every pattern's literals. Safe to remember:
    ``mask`` is a pure function of its text (the patterns are fixed for the
    process), so the text, which the key digests, is all that can change its
    answer; a text changed in the store is another key. Only masked text (what a
    user who sees masked text is shown) is kept, not the text itself, and at most
    :data:`MEMO_CHARS` characters of it (each entry counting :data:`MEMO_ENTRY` more)."""
    if not isinstance(text, str) or not text:
        return mask(text)
    key = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
    with _memo_lock:
        found = _memo.get(key)
        if found is not None:
            _memo.move_to_end(key)
            return found
    found = mask(text)
    with _memo_lock:
        if key not in _memo:
            _memo[key] = found
            _memo_size[0] += len(found) + MEMO_ENTRY
            while _memo_size[0] > MEMO_CHARS and _memo:
                _memo_size[0] -= len(_memo.popitem(last=False)[1]) + MEMO_ENTRY
    return found


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


class Masker:
    """What a presenter masks its page's texts with: :func:`mask` / :func:`mask_value`
    when ``on``, the identity otherwise (so a presenter masks in one place, whoever
    looks). ``bool(masker)`` says whether it masks."""

    def __init__(self, on: bool):
        self.on = on

    def __bool__(self) -> bool:
        return self.on

    def __call__(self, text):
        return mask(text) if self.on else text

    def value(self, value):
        return mask_value(value) if self.on else value

    def remembered(self, text):
        """:meth:`__call__` through :func:`mask_remembered`: for a page's texts that
        its next views show again (a transcript page, its system prompt), not for
        an export's stream of texts shown once."""
        return mask_remembered(text) if self.on else text


def masker_for(user) -> Masker:
    """The :class:`Masker` for what ``user`` is shown (:func:`masking_for`)."""
    return Masker(masking_for(user))
