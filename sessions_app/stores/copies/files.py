"""Readers of the copies Hermes leaves in ``sessions/`` (docs/store.md, "Copies of a
conversation outside state.db"):

- **snapshot** ``session_<sid>.json`` (0.19.0 ``_save_session_log``): an object with
  ``session_id``, ``session_start``/``last_updated`` (naive local ISO),
  ``message_count`` and ``messages`` (the agent's full in-memory list; no
  per-message timestamps);
- **request dump** ``request_dump_<sid>_<stamp>.json`` (``dump_api_request_debug``):
  ``timestamp``, ``session_id``, ``reason``, ``request.body.messages`` (every
  message sent, starting with the system prompt and ending with the user message
  whose request failed), ``error``;
- **json** ``<id>.json``: legacy per-session dumps; read when they hold a
  top-level ``messages`` list, as a snapshot;
- **jsonl** ``<id>.jsonl``: read with ``stores.jsonl`` (the import's own reader).

JSON files are streamed with ijson: memory stays bounded by one message, whatever
the file's size, and a truncated or invalid file gives the messages before the
fault plus an error in words (``Copy.complete`` False). Files are opened only as
``stores.jsonl.open_transcript`` allows (regular file, no symlink followed, never
a store's file under another name, checked by ``stat`` first) and never written.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import ijson

from .. import jsonl, session_files
from .model import Copy, CopyError, CopyMessage, message_from_dict

READ_BLOCK = 1 << 16
MESSAGES_PREFIX = {"snapshot": "messages", "json": "messages", "request_dump": "request.body.messages"}
META_KEYS = {
    "snapshot": ("session_id", "session_start", "last_updated", "message_count", "platform", "model"),
    "json": ("session_id", "session_start", "last_updated", "message_count"),
    "request_dump": ("session_id", "timestamp", "reason"),
}
SCALAR_EVENTS = ("string", "number", "boolean", "null")


class _HashingReader:
    """A binary file wrapper that hashes and counts what ijson reads."""

    def __init__(self, fh):
        self.fh, self.digest, self.offset = fh, hashlib.sha256(), 0

    def read(self, n: int = -1) -> bytes:
        data = self.fh.read(READ_BLOCK if n is None or n < 0 else n)
        self.digest.update(data)
        self.offset += len(data)
        return data

    def drain(self) -> None:
        while self.read(READ_BLOCK):
            pass


def _open(path: Path, store_paths):
    """The file opened for reading under the store-file guard; raises CopyError."""
    store_paths = list(store_paths)
    why = session_files.refusal(Path(path), session_files.store_identities(store_paths))
    if why:
        raise CopyError(f"{Path(path).name} is not read: {why}")
    try:
        return jsonl.open_transcript(path, store_paths[0] if store_paths else Path(path).with_name(".none"))
    except OSError as exc:
        raise CopyError(f"{Path(path).name} cannot be read ({exc.strerror or exc})") from exc


def _fault(exc: Exception, offset: int) -> str:
    """A JSON fault in words (yajl's own text quotes the file: never shown)."""
    text = str(exc)
    if "UTF8" in text or isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text (invalid bytes near byte {offset})"
    if "premature EOF" in text:
        return f"truncated: the file ends inside the JSON document (after {offset} bytes)"
    if "trailing garbage" in text:
        return f"extra data after the JSON document (near byte {offset})"
    return f"invalid JSON near byte {offset}"


def _events(reader: _HashingReader, item_prefix: str, meta_keys, meta: dict, items_seen: list):
    """Yield each item of the array at ``item_prefix`` as a Python value, filling
    ``meta`` with top-level scalars named in ``meta_keys``. Depth is tracked so a
    key containing dots cannot pose as the array."""
    item_depth = item_prefix.count(".") + 1
    array_prefix = item_prefix.rsplit(".", 1)[0]
    depth = 0
    builder = None
    inner = 0
    for prefix, event, value in ijson.parse(reader, use_float=True):
        if builder is not None:
            builder.event(event, value)
            if event in ("start_map", "start_array"):
                inner += 1
            elif event in ("end_map", "end_array"):
                inner -= 1
            if inner == 0:
                depth -= 1
                yield builder.value
                builder = None
            continue
        if event in ("start_map", "start_array"):
            if depth == item_depth and prefix == item_prefix:
                builder, inner = ijson.ObjectBuilder(), 1
                builder.event(event, value)
                depth += 1
                continue
            if depth == item_depth - 1 and prefix == array_prefix and event == "start_array":
                items_seen.append(True)
            depth += 1
        elif event in ("end_map", "end_array"):
            depth -= 1
        elif event in SCALAR_EVENTS:
            if depth == item_depth and prefix == item_prefix:
                yield value  # a bare value where a message should be
            elif depth == 1 and prefix in meta_keys:
                meta[prefix] = value


def _problem(item, session_id: str) -> str:
    """Why an item is not a message ('' when it is)."""
    if not isinstance(item, dict):
        return f"not a JSON object ({type(item).__name__})"
    odd = jsonl._unusable(item)
    if odd:
        return odd
    role = item.get("role")
    if role in jsonl.SKIP_ROLES:
        return "system prompt (Hermes keeps it on the session row)"
    if role == jsonl.META_ROLE:
        return "session_meta bookkeeping"
    if not isinstance(role, str) or not role:
        return "no role"
    if role not in jsonl.MESSAGE_ROLES:
        return f"unknown role {role[:40]!r}"
    return ""


def _stream(path: Path, kind: str, session_id: str, store_paths, copy: Copy | None, wanted: set[int] | None,
            expect: str = ""):
    """One pass over a JSON copy. With ``copy``: fill its entries and facts. With
    ``wanted``: return the full messages at those indexes, provided the file's
    sha256 is still ``expect``."""
    found: dict[int, CopyMessage] = {}
    meta: dict = {}
    seen: list = []
    index = 0
    with _open(path, store_paths) as fh:
        st = os.fstat(fh.fileno())
        reader = _HashingReader(fh)
        try:
            for position, item in enumerate(_events(reader, MESSAGES_PREFIX[kind] + ".item", META_KEYS[kind], meta, seen)):
                problem = _problem(item, session_id)
                if problem:
                    if copy is not None:
                        copy.skipped.append({"ref": position, "problem": problem})
                    continue
                if copy is not None:
                    copy.entries.append(message_from_dict(item, index, position).entry())
                elif index in wanted:
                    found[index] = message_from_dict(item, index, position)
                index += 1
            reader.drain()
        except (ijson.JSONError, UnicodeDecodeError) as exc:
            # The messages before the fault are whole: kept (a re-read finds them again).
            if copy is not None:
                copy.complete, copy.error = False, _fault(exc, reader.offset)
            reader.drain()
        except OSError as exc:
            raise CopyError(f"{path.name} cannot be read ({exc.strerror or exc})") from exc
    if copy is not None:
        copy.size, copy.mtime, copy.sha256 = st.st_size, st.st_mtime, reader.digest.hexdigest()
        copy.meta.update(meta)
        if not seen and copy.complete:  # whole and valid, but no message list: no copy
            copy.error = f"no {MESSAGES_PREFIX[kind]} list in the file"
        owner = meta.get("session_id")
        if isinstance(owner, str) and owner and owner != session_id:
            raise CopyError(f"{path.name} belongs to session {owner[:80]!r}, not {session_id[:80]!r}")
        return None
    if reader.digest.hexdigest() != expect:
        raise CopyError(f"{path.name} changed since it was read")
    return found


def read_json_copy(path, kind: str, session_id: str, *, store_paths) -> Copy:
    """Read a snapshot, request dump or ``<id>.json`` (``kind``) of ``session_id``.

    ``store_paths``: ``state.db`` paths of every known store (their files are never
    opened, under any name). Raises :class:`CopyError` for a file that is refused,
    unreadable, or names another session; a truncated or invalid file is returned
    with ``complete`` False and ``error`` set. For a request dump the leading
    system message is skipped (Hermes keeps it on the session row) and the last
    user message is noted as the one whose request failed.
    """
    if kind not in MESSAGES_PREFIX:
        raise ValueError(f"not a JSON copy kind: {kind!r}")
    path = Path(path)
    copy = Copy(path, kind, session_id)
    _stream(path, kind, session_id, store_paths, copy, None)
    copy.mtime = float(copy.mtime)
    if kind == "request_dump" and copy.entries and copy.entries[-1].role == "user":
        last = copy.entries[-1]
        copy.entries[-1] = type(last)(last.index, last.key, last.role, last.tool_name, last.digest, last.timestamp,
                                      "the user message of the failed request")
    # Re-reads are checked against this very content (a copy rewritten meanwhile
    # would put other messages at the planned positions).
    sha = copy.sha256

    def loader(wanted: set[int]) -> dict[int, CopyMessage]:
        return _stream(path, kind, session_id, store_paths, None, wanted, sha)

    copy.loader = loader
    return copy


def read_jsonl_copy(path, session_id: str, *, store_path) -> Copy:
    """Read ``sessions/<id>.jsonl`` with ``stores.jsonl.read_file``; broken lines are
    listed in ``skipped`` with their line numbers (``ref``). Raises
    :class:`CopyError` when the file is refused or unreadable."""
    path = Path(path)
    parsed = jsonl.read_file(path, session_id, store_path=store_path)
    if parsed.error:
        raise CopyError(f"{path.name} cannot be read ({parsed.error})")
    copy = Copy(path, "jsonl", session_id, parsed.mtime, parsed.size, parsed.sha256)
    times, _ = jsonl.message_times(parsed.messages, parsed.mtime)
    for i, line in enumerate(parsed.messages):
        own = jsonl.parse_time(line.data.get("timestamp"))
        copy.entries.append(message_from_dict(line.data, i, line.number, timestamp=own).entry())
    copy.skipped = [{"ref": b.number, "problem": b.problem} for b in parsed.bad]
    sha = parsed.sha256

    def loader(wanted: set[int]) -> dict[int, CopyMessage]:
        again = jsonl.read_file(path, session_id, store_path=store_path)
        if again.error or again.sha256 != sha:
            raise CopyError(f"{path.name} changed since it was read")
        return {i: message_from_dict(again.messages[i].data, i, again.messages[i].number,
                                     timestamp=jsonl.parse_time(again.messages[i].data.get("timestamp")))
                for i in wanted if i < len(again.messages)}

    copy.loader = loader
    return copy
