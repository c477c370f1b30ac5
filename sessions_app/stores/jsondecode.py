"""The one guarded JSON decoder for data read from stores and files beside them.

Stores and files hold JSON written by many hands (Hermes releases, gateways, other
tools, salvaged pages): ``tool_calls``, structured ``\\x00json:`` content,
``model_config``, routing ``entry_json``, JSONL lines, manifests and registries.
Any of it may be broken, huge or nested so deep that ``json.loads`` (or any
recursive reader after it: rendering, masking, ``json.dumps``) hits Python's
recursion limit; hermes-agent 0.19.0's ``append_message`` stores tool calls nested
990 levels as they come. :func:`decode` therefore never raises for the data: it
returns the value, or an :class:`Undecodable` marker saying why, which pages show in
place and exports keep as the stored text (docs/store.md §5.2, values).

Limits (``settings``, documented in the README's configuration table):
``HERMES_JSON_MAX_BYTES`` (default 32 MiB, measured in characters for text, bytes
for bytes) and ``HERMES_JSON_MAX_DEPTH`` (default 64 levels of lists/objects; what
Hermes writes nests a handful). A lone UTF-16 surrogate escape (``"\\ud800"``),
valid JSON that no UTF-8 page, export or SQLite text can hold, is decoded as
U+FFFD.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

DEFAULT_MAX_BYTES = 32 * 1024 * 1024
DEFAULT_MAX_DEPTH = 64

# An escaped backslash (kept), a surrogate pair (kept), or a lone surrogate escape.
_SURROGATE = re.compile(r"\\\\|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


@dataclass(frozen=True)
class Undecodable:
    """Why a JSON value was not decoded. ``kind``: ``syntax`` (not JSON), ``size``
    (past the size limit), ``depth`` (nested past the depth limit) or ``memory``;
    ``reason`` says it in words; ``size`` is the raw length (characters or bytes)."""

    kind: str
    reason: str
    size: int = 0

    def __str__(self) -> str:
        return f"undecodable: {self.reason}"

    @property
    def marker(self) -> str:
        """What a page shows in place of the value."""
        return f"[{self}]"


# (max_bytes, max_depth) once read from configured settings; None until then and
# after any change to either setting. Read on every decode (450k decodes in a check
# pass of the 1M-message store), ``settings`` lookups were ~6 % of the pass.
_limits: tuple[int, int] | None = None


def limits() -> tuple[int, int]:
    """``(max_bytes, max_depth)`` from settings (defaults outside Django); read
    once, again after Django's ``setting_changed`` names either setting
    (``override_settings`` in tests)."""
    global _limits
    if _limits is not None:
        return _limits
    try:
        from django.conf import settings

        found = (int(getattr(settings, "HERMES_JSON_MAX_BYTES", DEFAULT_MAX_BYTES)),
                 int(getattr(settings, "HERMES_JSON_MAX_DEPTH", DEFAULT_MAX_DEPTH)))
    except Exception:  # settings not configured (a script): the documented defaults, not kept
        return DEFAULT_MAX_BYTES, DEFAULT_MAX_DEPTH
    _limits = found
    return found


def _setting_changed(*, setting, **kwargs) -> None:
    global _limits
    if setting in ("HERMES_JSON_MAX_BYTES", "HERMES_JSON_MAX_DEPTH"):
        _limits = None


try:
    from django.core.signals import setting_changed
except ImportError:  # pragma: no cover - Django is a requirement; a bare script still decodes
    pass
else:
    setting_changed.connect(_setting_changed, dispatch_uid="hermes_admin.jsondecode.limits")


def _fix_surrogates(text: str) -> str:
    def repl(match: re.Match) -> str:
        token = match.group(0)
        return token if token == "\\\\" or len(token) == 12 else "\\ufffd"

    return _SURROGATE.sub(repl, text) if "\\u" in text else text


def depth_of(value, stop: int | None = None) -> int:
    """Nesting depth of a decoded value (a scalar is 0, ``[]`` is 1), walked without
    recursion; stops counting once past ``stop``."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if stop is not None and deepest > stop:
            return deepest
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def decode(raw, *, max_bytes: int | None = None, max_depth: int | None = None, surrogates: str = "replace"):
    """``raw`` (str or bytes; bytes are read as UTF-8 with replacement characters)
    decoded, or an :class:`Undecodable`. Never raises for the data: not JSON,
    larger than ``max_bytes``, deeper than ``max_depth`` (defaults: :func:`limits`),
    too deep for the parser (``RecursionError``) and ``MemoryError`` all give the
    marker. ``surrogates="keep"`` leaves lone surrogate escapes as Python decodes
    them (a reader that refuses such values, like the JSONL import, checks itself)."""
    default_bytes, default_depth = limits()
    max_bytes = default_bytes if max_bytes is None else max_bytes
    max_depth = default_depth if max_depth is None else max_depth
    if raw is None:
        return Undecodable("syntax", "no value")
    size = len(raw) if isinstance(raw, (str, bytes, bytearray)) else 0
    if size > max_bytes:
        return Undecodable("size", f"{_mib(size)} of JSON, past the {_mib(max_bytes)} limit "
                                   "(HERMES_ADMIN_JSON_MAX_BYTES)", size)
    if isinstance(raw, (bytes, bytearray)):
        raw = bytes(raw).decode("utf-8", "replace")
    if not isinstance(raw, str):
        return Undecodable("syntax", f"a {type(raw).__name__}, not JSON text", size)
    try:
        value = json.loads(_fix_surrogates(raw) if surrogates == "replace" else raw)
    except RecursionError:
        return Undecodable("depth", f"nested deeper than {max_depth} levels", size)
    except MemoryError:
        return Undecodable("memory", f"{_mib(size)} of JSON did not fit in memory", size)
    except ValueError as exc:  # JSONDecodeError, and integers past Python's digit limit
        return Undecodable("syntax", f"not JSON ({_short(exc)})", size)
    # A value holds no more lists and objects than its text has opening brackets
    # (those inside strings only add to the count), so a text with at most
    # ``max_depth`` of them cannot nest deeper: the walk is left out for it (most
    # tool calls and contents hold a handful), the verdict is the same.
    if raw.count("[") + raw.count("{") > max_depth and depth_of(value, stop=max_depth) > max_depth:
        return Undecodable("depth", f"nested deeper than {max_depth} levels", size)
    return value


def loads(raw, default=None, **limits_):
    """:func:`decode`, with ``default`` instead of a marker (for readers to whom an
    undecodable value means "none", e.g. ``model_config`` markers)."""
    value = decode(raw, **limits_)
    return default if isinstance(value, Undecodable) else value


def read_json_file(path, max_bytes: int | None = None):
    """A small JSON document from a file (manifests, registries, ledgers): at most
    ``max_bytes`` (default :func:`limits`) read, never more. Returns the value or an
    :class:`Undecodable`; raises ``OSError`` from opening or reading, and before
    opening anything when the path is a symlink, not a regular file, or a file with
    more than one link — a hard link could be a store's own ``state.db``, ``-wal`` or
    ``-shm``, and closing any descriptor of those drops this process's locks on the
    store (docs/architecture.md §2, rule 5). Hermes and the dashboard write these
    documents by atomic replace, so they always have exactly one link."""
    import os
    import stat

    limit = limits()[0] if max_bytes is None else max_bytes
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise OSError(f"{path} is not a regular file (a symlink or a special file is not read)")
    if st.st_nlink != 1:
        raise OSError(f"{path} has {st.st_nlink} links (a hard-linked file may be a store; not read)")
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as fh:
        if (os.fstat(fh.fileno()).st_ino, os.fstat(fh.fileno()).st_dev) != (st.st_ino, st.st_dev):
            raise OSError(f"{path} was replaced while it was opened")
        data = fh.read(limit + 1)
    if len(data) > limit:
        return Undecodable("size", f"the file is larger than the {_mib(limit)} limit", len(data))
    return decode(data, max_bytes=limit)


def _short(exc: Exception) -> str:
    text = str(exc)
    return text if len(text) <= 120 else text[:117] + "…"


def _mib(size: int) -> str:
    if size >= 1024 * 1024:
        return f"{size / (1024 * 1024):.1f} MiB".replace(".0 MiB", " MiB")
    if size >= 1024:
        return f"{size / 1024:.1f} KiB".replace(".0 KiB", " KiB")
    return f"{size} bytes"
