"""The one shape every copy of a session is read into (docs/store.md, "Copies of
a conversation outside state.db").

A :class:`Copy` is what one file (or one store copy) holds of a session: its
provenance (path, kind, modification time in epoch seconds, size in bytes,
sha256 of the file) and, for every message in transcript order, an
:class:`Entry` (what matching needs: the match key, role, tool name, a digest of
the text). Entries are small on purpose: a 500 MB snapshot gives a list of short
digests, not 500 MB of Python objects. The full messages are read again, by
position, only for those a plan inserts (:meth:`Copy.messages_at`).

Matching is the JSONL import's (``stores.jsonl.message_key``): role, content,
tool call id and tool calls, structured values compared as canonical JSON.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .. import jsonl

COPY_KINDS = ("snapshot", "request_dump", "jsonl", "json", "backup", "trash")
# Message fields a copy may carry besides role/content, as store columns name them
# (``actions.transcripts.row_values`` takes a dict with these keys).
TEXT_FIELDS = ("tool_call_id", "tool_name", "finish_reason", "reasoning", "reasoning_content",
               "platform_message_id", "api_content", "display_kind", "effect_disposition")
JSON_FIELDS = ("tool_calls", "reasoning_details", "codex_reasoning_items", "codex_message_items", "display_metadata")
INT_FIELDS = ("token_count", "observed", "_compressed_summary")
FIELDS = TEXT_FIELDS + JSON_FIELDS + INT_FIELDS


class CopyError(Exception):
    """A copy that cannot be read at all (refused, unreadable, not the right shape)."""


def normal_text(content) -> str:
    """Content as compared (``jsonl.normal_content``)."""
    return jsonl.normal_content(content)


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()


@dataclass(frozen=True)
class CopyMessage:
    """One message of a copy, in the shape of a store row.

    ``role``: user | assistant | tool | developer. ``content``: text, a structured
    value (list/dict), or None; store copies keep the stored text as is, with the
    ``\\x00json:`` prefix of structured content, so it is written back byte for
    byte. ``tool_calls``: a list (parsed) or the stored JSON text, or None.
    ``timestamp``: epoch seconds, or None when the copy has no time for it
    (snapshots and request dumps never do). ``fields``: every other field of
    :data:`FIELDS` the copy carries (``tool_call_id``, ``tool_name``, reasoning…).
    ``index``: 0-based position among the copy's messages; ``ref``: where it is
    in the copy (item index in a JSON file, line number in a JSONL file, row id in
    a store copy).
    """

    role: str
    content: object
    timestamp: float | None
    fields: dict
    index: int
    ref: object

    @property
    def tool_calls(self):
        return self.fields.get("tool_calls")

    @property
    def tool_call_id(self):
        return self.fields.get("tool_call_id")

    @property
    def tool_name(self):
        return self.fields.get("tool_name")

    @property
    def reasoning(self):
        return self.fields.get("reasoning")

    def key(self) -> str:
        return jsonl.message_key(self.role, self.content, self.tool_call_id, self.tool_calls)

    def row_dict(self) -> dict:
        """``{"role", "content", "timestamp", **fields}``: what the import's
        ``row_values`` writes (structured content stays a value, re-encoded there)."""
        return {"role": self.role, "content": self.content, "timestamp": self.timestamp, **self.fields}

    def entry(self, note: str = "") -> "Entry":
        name = self.tool_name
        return Entry(self.index, self.key(), self.role, name if isinstance(name, str) and name else None,
                     text_digest(normal_text(self.content)), self.timestamp, note)


@dataclass(frozen=True)
class Entry:
    """What matching needs of one message: ``index`` in the copy, match ``key``,
    ``role``, ``tool_name`` (or None), ``digest`` of the compared text, its own
    ``timestamp`` (epoch s or None), and a ``note`` ("the user message of the
    failed request" for a dump's trailing user message)."""

    index: int
    key: str
    role: str
    tool_name: str | None
    digest: str
    timestamp: float | None
    note: str = ""


@dataclass(frozen=True)
class Provenance:
    """Where a copy comes from: ``path``, ``kind`` (:data:`COPY_KINDS`), ``mtime``
    epoch seconds, ``size`` bytes, ``sha256`` of the file (for a store copy: of
    its database file), ``message_count`` (messages read)."""

    path: str
    kind: str
    mtime: float
    size: int
    sha256: str
    message_count: int

    def as_dict(self) -> dict:
        return {"path": self.path, "kind": self.kind, "mtime": self.mtime, "size": self.size,
                "sha256": self.sha256, "message_count": self.message_count}


@dataclass
class Copy:
    """One copy of one session, read once (module docstring).

    ``entries``: its messages in order; ``complete``: False when reading stopped
    early (truncated or invalid JSON, a broken line…), the entries read before
    that are kept; ``error``: why it stopped, in words; ``skipped``: messages not
    taken (``{"ref", "problem"}``: a system message, an unknown role, nesting too
    deep…); ``meta``: kind-specific facts (a snapshot's ``session_start``,
    ``last_updated`` and declared ``message_count``; a dump's ``reason``,
    ``timestamp``); ``loader`` re-reads full messages by index.
    """

    path: Path
    kind: str
    session_id: str
    mtime: float = 0.0
    size: int = 0
    sha256: str = ""
    entries: list[Entry] = field(default_factory=list)
    complete: bool = True
    error: str = ""
    skipped: list[dict] = field(default_factory=list)
    meta: dict = field(default_factory=dict)
    loader: Callable[[set[int]], dict[int, CopyMessage]] | None = field(default=None, repr=False, compare=False)

    @property
    def message_count(self) -> int:
        return len(self.entries)

    @property
    def provenance(self) -> Provenance:
        return Provenance(str(self.path), self.kind, self.mtime, self.size, self.sha256, self.message_count)

    def messages_at(self, indexes) -> dict[int, CopyMessage]:
        """Full messages at ``indexes`` (read again from the copy, read-only).
        Raises :class:`CopyError` when the copy changed since it was read (its
        sha256 differs) or cannot be read any more."""
        wanted = set(indexes)
        if not wanted:
            return {}
        if self.loader is None:
            raise CopyError(f"{self.path} cannot be read again")
        found = self.loader(wanted)
        lost = wanted - set(found)
        if lost:
            raise CopyError(f"{self.path} no longer holds message(s) at position {sorted(lost)[:5]}")
        return found


# --------------------------------------------------------------------------- dict -> message

def _as_text(value):
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return None


def message_from_dict(data: dict, index: int, ref, *, timestamp: float | None = None) -> CopyMessage:
    """A :class:`CopyMessage` from a message dict of a JSON copy (snapshot, dump,
    JSONL line). Fields of the wrong kind are left out; OpenAI's tool-message
    ``name`` is taken as ``tool_name`` when no ``tool_name`` is given."""
    fields: dict = {}
    for name in TEXT_FIELDS:
        value = _as_text(data.get(name))
        if value not in (None, ""):
            fields[name] = value
    if "tool_name" not in fields and data.get("role") == "tool" and isinstance(data.get("name"), str) and data["name"]:
        fields["tool_name"] = data["name"]
    for name in JSON_FIELDS:
        value = data.get(name)
        if value not in (None, "", [], {}):
            fields[name] = value
    for name in INT_FIELDS:
        value = data.get(name)
        if isinstance(value, (int, bool)) and -2**63 <= int(value) < 2**63:
            fields[name] = int(value)
    content = data.get("content")
    if content is not None and not isinstance(content, (str, list, dict)):
        content = str(content)
    return CopyMessage(data["role"], content, timestamp, fields, index, ref)


def message_from_row(row: dict, index: int) -> CopyMessage:
    """A :class:`CopyMessage` from a row of a store copy (``sqlite3.Row``-like dict
    of column -> value); content kept exactly as stored."""
    fields = {}
    for name in FIELDS:
        value = row.get(name)
        if value is None or (name in JSON_FIELDS and value in ("", "[]", "{}")):
            continue
        if isinstance(value, bytes) and name in TEXT_FIELDS + JSON_FIELDS:
            value = value.decode("utf-8", "replace")
        fields[name] = value
    content = row.get("content")
    if isinstance(content, bytes):
        content = content.decode("utf-8", "replace")
    ts = row.get("timestamp")
    ts = float(ts) if isinstance(ts, (int, float)) and not isinstance(ts, bool) else None
    return CopyMessage(row["role"], content, ts, fields, index, row.get("id"))

