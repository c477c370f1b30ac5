"""JSONL transcripts beside a store (``sessions/<id>.jsonl``): parse, match, align.

Shared by the ``transcript_on_disk_only`` check, the ``import_jsonl_transcript``
action and the session page's JSONL view, so that what the check calls missing is
exactly what the import writes, and a second import finds nothing.

Layout (docs/store.md §1.3, §12.2, §12.2): one JSON object per line. Legacy gateway files
hold message dicts (``role``, ``content``, ``tool_calls``, ``tool_call_id``,
``tool_name``, reasoning fields, ``timestamp``...) and ``session_meta``
bookkeeping lines; divert files hold the agent's flush rows. The dashboard's own
export writes the same shape (plus ``session_id`` on each line).

Line kinds (:class:`JsonlLine`):

- ``message``: a dict whose ``role`` is one of :data:`MESSAGE_ROLES`;
- ``meta``: ``session_meta`` bookkeeping (never a message; may name the source);
- ``skipped``: ``system`` lines (Hermes keeps the system prompt on the session row);
- ``bad``: broken JSON, a value that is not an object (a bare string), no role or an
  unknown role, a ``session_id`` naming another session, or a value no store or page
  can take: nesting deeper than :data:`MAX_DEPTH` (the parser, or any recursive reader
  after it, would hit Python's recursion limit), a lone surrogate (``"\\ud800"`` is
  valid JSON but cannot be encoded as UTF-8, so SQLite and the page would both
  fail), ``tool_calls`` that are not a list or ``content`` that is a number or a
  boolean (Hermes cannot read either back from the store), or a line longer than
  the per-line limit. Reported with its 1-based line number, never imported; one
  odd line never stops the others (the check, the import and the pages all read
  the same lines).

Size limits (``settings.HERMES_JSONL_MAX_LINE_BYTES``, default 8 MiB, and
``HERMES_JSONL_MAX_FILE_BYTES``, default 512 MiB; README, Configuration): the file
is read in chunks, line by line; a line past the limit is skipped to the next
newline without ever being held in memory (a ``bad`` line saying its size), and a
file past its limit is not read at all (``JsonlFile.error``), so neither is
imported and memory stays within one chunk plus one allowed line.

Matching (issue 4): a JSONL message and a store row are the same message when
role, content, tool call id and tool calls are equal (structured content and tool
calls compared as canonical JSON; NULL, absent, ``""`` and ``[]`` are all "none"),
and the tool name too when the line carries one (old gateway lines often do not,
while the store row has it). Matching is ordered: the longest common subsequence
of the file's messages and the session's rows in ``messages.id`` order (ground
rule 10), every row counted (rewound and compacted rows are still in the store).

Plain file I/O here touches only the ``.jsonl`` file, never ``state.db`` (rule 5):
:func:`open_transcript` opens regular files only, without following a symlink
(``O_NOFOLLOW``), and never a file that is the store's ``state.db``, ``-wal`` or
``-shm`` under another name (same device and inode, checked with ``stat`` before
opening), so a ``sessions/<id>.jsonl`` planted as a link can neither make this
process drop its SQLite locks nor show an arbitrary file on a page.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from .discovery import root_of_home, within
from .jsondecode import Undecodable, decode
from .jsonl_align import MAX_DEPTH, SANE_EPOCH  # noqa: F401  (the limits lines are read with)

MESSAGE_ROLES = ("user", "assistant", "tool", "developer")
META_ROLE = "session_meta"
SKIP_ROLES = ("system",)
# Epoch seconds outside this window are not message times (docs/store.md §4.2
# ``_coerce_timestamp``; 10.21 garbage timestamps): 2000-01-01 .. far future.
# Deeper JSON is never a message (structured content and tool calls nest a few
# levels), and recursive readers (masking, rendering) must stay far from the limit.
DEFAULT_MAX_LINE_BYTES = 8 * 1024 * 1024
DEFAULT_MAX_FILE_BYTES = 512 * 1024 * 1024
CHUNK_BYTES = 1024 * 1024  # read size: the most held besides one line


def size_limits() -> tuple[int, int]:
    """``(per-line, per-file)`` byte limits from settings (documented defaults)."""
    from django.conf import settings

    return (int(getattr(settings, "HERMES_JSONL_MAX_LINE_BYTES", DEFAULT_MAX_LINE_BYTES)),
            int(getattr(settings, "HERMES_JSONL_MAX_FILE_BYTES", DEFAULT_MAX_FILE_BYTES)))


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB" if size >= 2**20 else f"{size:,} bytes"


@dataclass
class JsonlLine:
    """One non-blank line. ``number`` is 1-based; ``kind`` message | meta | skipped | bad;
    ``data`` the parsed object (None for broken JSON); ``problem`` why a line is bad or skipped."""

    number: int
    kind: str
    data: object = None
    problem: str = ""

    @property
    def role(self) -> str | None:
        return self.data.get("role") if isinstance(self.data, dict) else None


def classify(number: int, raw: bytes, session_id: str | None = None) -> JsonlLine | None:
    """Classify one raw line (None for a blank line); ``session_id`` is the file's session."""
    text = raw.strip()
    if not text:
        return None
    obj = decode(text, max_bytes=len(text), max_depth=MAX_DEPTH, surrogates="keep")
    if isinstance(obj, Undecodable):
        problem = {"syntax": "broken JSON", "depth": f"nested deeper than {MAX_DEPTH} levels"}.get(obj.kind, obj.reason)
        return JsonlLine(number, "bad", None, problem)
    odd = _unusable(obj)
    if odd:
        return JsonlLine(number, "bad", None, odd)
    if not isinstance(obj, dict):
        kind = {str: "a bare string", list: "a list"}.get(type(obj), f"a bare {type(obj).__name__}")
        return JsonlLine(number, "bad", obj, f"not a JSON object ({kind})")
    role = obj.get("role")
    if role == META_ROLE:
        return JsonlLine(number, "meta", obj, "session_meta bookkeeping")
    if role in SKIP_ROLES:
        return JsonlLine(number, "skipped", obj, "system prompt (Hermes keeps it on the session row)")
    if not isinstance(role, str) or not role:
        return JsonlLine(number, "bad", obj, "no role")
    if role not in MESSAGE_ROLES:
        return JsonlLine(number, "bad", obj, f"unknown role {role[:40]!r}")
    owner = obj.get("session_id")
    if session_id is not None and isinstance(owner, str) and owner and owner != session_id:
        return JsonlLine(number, "bad", obj, f"belongs to session {owner[:80]}")
    odd = _unreadable_fields(obj)
    if odd:
        return JsonlLine(number, "bad", obj, odd)
    return JsonlLine(number, "message", obj)


def _unreadable_fields(obj: dict) -> str:
    """Why a message line's ``content`` or ``tool_calls`` could not be read back by
    Hermes once stored ('' when they can): content must be text, structured
    (a list or an object) or absent; tool calls a list, the JSON text of one, or
    absent (upstream ``get_messages`` decodes ``tool_calls`` as a JSON list and
    content as text or ``\\x00json:`` structured content, docs/store.md §4.2)."""
    content = obj.get("content")
    if content is not None and not isinstance(content, (str, list, dict)):
        kind = "a boolean" if isinstance(content, bool) else f"a number ({str(content)[:40]})"
        return f"content is {kind}, not text: Hermes could not read it back"
    calls = obj.get("tool_calls")
    if calls in (None, "", [], {}):
        return ""
    if isinstance(calls, str):
        decoded = decode(calls, max_depth=MAX_DEPTH, surrogates="keep")
        if isinstance(decoded, Undecodable):
            return f"tool_calls is text that is not a JSON list ({decoded.reason})"
        calls = decoded
        if calls in (None, [], {}):
            return ""
    if not isinstance(calls, list):
        kind = {dict: "an object", str: "text", bool: "a boolean"}.get(type(calls), f"a {type(calls).__name__}")
        return f"tool_calls is {kind}, not a list: Hermes could not read it back"
    return ""


def _unusable(obj) -> str:
    """Why a parsed line cannot be kept ('' when it can): too deep, or a string (key
    or value) with a lone surrogate. Walked without recursion."""
    stack = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            return f"nested deeper than {MAX_DEPTH} levels"
        if isinstance(value, dict):
            stack.extend((k, depth) for k in value)
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return "a lone surrogate (\\ud800-\\udfff escape) that is not valid text"
    return ""


class UnsafeFile(OSError):
    """A transcript path that must not be opened (not a regular file, or the store itself)."""


def store_inodes(store_path) -> set[tuple[int, int]]:
    """``(device, inode)`` of ``state.db``, ``-wal`` and ``-shm`` (``stat`` only, no descriptor)."""
    found = set()
    for suffix in ("", "-wal", "-shm"):
        try:
            st = os.stat(f"{store_path}{suffix}")
        except OSError:
            continue
        found.add((st.st_dev, st.st_ino))
    return found


def _data_dir() -> Path:
    """The dashboard's own data folder (archived transcripts are read back there)."""
    from django.conf import settings

    return Path(settings.DATA_DIR)


def open_transcript(path: Path, store_path):
    """``path`` opened for binary reading, if it is a regular file inside the store's
    root (or, for archived copies, in the dashboard's data folder) that is not one
    of the store's files (``store_path``: its ``state.db``);
    raises OSError (``UnsafeFile`` for a refused file). Checked with ``lstat`` and
    ``realpath`` before any descriptor exists (a ``sessions/`` folder that is a
    symlink out of the root is refused: docs/store.md §1.2, §5.2: symlinks),
    opened with ``O_NOFOLLOW``, and re-checked with ``fstat`` against a swap in
    between."""
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise UnsafeFile(errno.EPERM, "not a regular file (a symlink, folder or device is never followed)")
    root = root_of_home(Path(store_path).parent)
    if not within(path, root) and not within(path, _data_dir()):
        raise UnsafeFile(errno.EPERM, f"it resolves to {os.path.realpath(path)}, outside the root {root}; never opened")
    if (st.st_dev, st.st_ino) in store_inodes(store_path):
        raise UnsafeFile(errno.EPERM, "it is the store's own database file under another name; never opened")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(now.st_mode):
            raise UnsafeFile(errno.EPERM, "the file was replaced while it was being opened")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def is_regular(path: Path) -> bool:
    """Whether ``path`` itself (not a symlink's target) is a regular file."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


@dataclass
class JsonlFile:
    """A whole transcript file read once: its message lines in file order, the rest
    by kind, and the file's identity (``size`` bytes, ``mtime`` epoch s, ``sha256``).

    ``error``: why nothing of the file was read (unreadable, refused, past the
    per-file limit); ``oversized``: line numbers past the per-line limit (also in
    ``bad``); ``too_large``: the file was past the per-file limit."""

    path: Path
    messages: list[JsonlLine] = field(default_factory=list)
    meta: list[JsonlLine] = field(default_factory=list)
    skipped: list[JsonlLine] = field(default_factory=list)
    bad: list[JsonlLine] = field(default_factory=list)
    size: int = 0
    mtime: float = 0.0
    sha256: str = ""
    error: str = ""
    oversized: list[int] = field(default_factory=list)
    too_large: bool = False

    @property
    def unread(self) -> str:
        """Why part or all of the file was never read because of a size limit
        ('' when every line was read): what may still hold messages the store
        lacks, for a check to say (the file is then no leftover either)."""
        if self.too_large:
            return self.error
        if self.oversized:
            shown = ", ".join(map(str, self.oversized[:10])) + (" …" if len(self.oversized) > 10 else "")
            return (f"{len(self.oversized)} line(s) past the {_mib(size_limits()[0])} per-line limit "
                    f"(HERMES_ADMIN_JSONL_MAX_LINE_BYTES) were not read (line {shown})")
        return ""

    def source(self) -> str | None:
        """The platform named by a ``session_meta`` line (``source``, ``platform``, or
        ``session.source``), or None."""
        for line in self.meta:
            data = line.data
            for value in (data.get("source"), data.get("platform"),
                          data["session"].get("source") if isinstance(data.get("session"), dict) else None):
                if isinstance(value, str) and value.strip() and len(value.strip()) <= 64:
                    return value.strip()
        return None


def iter_lines(fh, max_line: int, max_file: int | None = None, digest=None):
    """``(number, raw bytes or None, length)`` for each line of the binary file
    ``fh`` (1-based numbers; ``raw`` without its newline). A line longer than
    ``max_line`` bytes comes as ``None`` with its length: its bytes are skipped
    up to the next newline, never held. Reads ``CHUNK_BYTES`` at a time and feeds
    ``digest`` (a hashlib object) with everything read. Raises :class:`TooLarge`
    once more than ``max_file`` bytes were read (a file growing while read)."""
    number, held, length, total = 0, bytearray(), 0, 0
    while True:
        chunk = fh.read(CHUNK_BYTES)
        if not chunk:
            break
        total += len(chunk)
        if max_file is not None and total > max_file:
            raise TooLarge(total)
        if digest is not None:
            digest.update(chunk)
        pos = 0
        while True:
            end = chunk.find(b"\n", pos)
            piece = chunk[pos:] if end < 0 else chunk[pos:end]
            length += len(piece)
            if length <= max_line:
                held += piece
            elif held:
                held = bytearray()  # past the limit: drop what was kept, count the rest
            if end < 0:
                break
            number += 1
            yield number, (bytes(held) if length <= max_line else None), length
            held, length, pos = bytearray(), 0, end + 1
    if length or held:
        number += 1
        yield number, (bytes(held) if length <= max_line else None), length


class TooLarge(Exception):
    """More bytes than the per-file limit were read."""

    def __init__(self, size: int):
        super().__init__(size)
        self.size = size


def read_file(path: Path, session_id: str | None = None, *, store_path) -> JsonlFile:
    """Read and classify ``path`` (:func:`open_transcript`; ``store_path`` is the
    store's ``state.db``), within the size limits (:func:`size_limits`); an
    unreadable, refused or too large file gives ``error`` and no lines."""
    result = JsonlFile(Path(path))
    digest = hashlib.sha256()
    max_line, max_file = size_limits()
    try:
        with open_transcript(path, store_path) as fh:
            st = os.fstat(fh.fileno())
            result.size, result.mtime = st.st_size, st.st_mtime
            if st.st_size > max_file:
                raise TooLarge(st.st_size)
            for number, raw, length in iter_lines(fh, max_line, max_file, digest):
                if raw is None:
                    result.oversized.append(number)
                    result.bad.append(JsonlLine(number, "bad", None,
                                                f"line of {_mib(length)}, past the {_mib(max_line)} per-line limit "
                                                "(HERMES_ADMIN_JSONL_MAX_LINE_BYTES): not read, never imported"))
                    continue
                line = classify(number, raw, session_id)
                if line is not None:
                    {"message": result.messages, "meta": result.meta, "skipped": result.skipped,
                     "bad": result.bad}[line.kind].append(line)
    except TooLarge as exc:
        result.messages, result.meta, result.skipped, result.bad, result.oversized = [], [], [], [], []
        result.too_large = True
        result.error = (f"{Path(path).name} is {_mib(max(exc.size, result.size))}, past the {_mib(max_file)} "
                        "per-file limit (HERMES_ADMIN_JSONL_MAX_FILE_BYTES): not read, not imported")
        return result
    except OSError as exc:
        result.error = f"{exc.__class__.__name__}: {exc.strerror or exc}"
        return result
    result.sha256 = digest.hexdigest()
    return result


def file_identity(path: Path, *, store_path) -> list | None:
    """``[size, mtime_ns, sha256]`` of a transcript, or None when it is gone or refused
    (:func:`open_transcript`); plan guards and archiving compare it."""
    try:
        with open_transcript(path, store_path) as fh:
            st = os.fstat(fh.fileno())
            digest = hashlib.file_digest(fh, "sha256").hexdigest()
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, digest]


# --------------------------------------------------------------------------- identity


# The alignment half lives in its own module; its names stay importable from here.
from .jsonl_align import (  # noqa: E402,F401
    Alignment, StoreRow, align, line_key, message_key, message_times, normal_content, normal_tool_calls,
    parse_time, store_rows,
)
