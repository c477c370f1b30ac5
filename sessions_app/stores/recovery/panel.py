"""The session page's *Copies on disk* panel, computed before rendering.

A presenter: it reads the store (read-only) and the copies, runs the same
analysis the ``history_lost`` check reports, and returns plain values for the
template (which holds no store logic). Previews of message text are only made
when the viewer may read transcripts, masked when the viewer sees masked text,
and cut short; the template escapes everything (hostile content stays text).
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from ...secrets import mask
from ..connection import classify_error
from ..copies import CopyError
from ..transcript import visible_text
from .analysis import analyse

PREVIEW_CHARS = 240
ITEM_CAP = 200  # rows of the comparison shown per copy (the counts are always whole)
KIND_LABELS = {"snapshot": "session snapshot", "request_dump": "request dump", "jsonl": "JSONL transcript",
               "json": "JSON dump", "backup": "dashboard backup", "trash": "trash entry"}
STATUS_LABELS = {"missing": "missing from the store", "differing": "differs from the store",
                 "merged": "one message in the copy, several user rows in the store", "extra": "only in the store",
                 "present_hidden": "in the store, hidden"}


@dataclass
class CopyItem:
    """One message of a copy that is not plainly in the store (or one store row
    the copy lacks): ``status`` (:data:`STATUS_LABELS`), ``index`` in the copy
    (None for a store row), ``role``, ``after_id``/``row_ids`` in the store,
    ``preview`` (text or '')."""

    status: str
    label: str
    index: int | None
    role: str
    after_id: int | None = None
    row_ids: tuple = ()
    preview: str = ""


@dataclass
class CopyPanelRow:
    """One copy: file ``name``, ``path``, ``kind`` and its label, ``mtime`` epoch s,
    ``message_count``, counts by status (``message_count`` = ``present`` +
    ``missing`` + ``differing`` + ``merged``, ``hidden`` counted in ``present``), ``complete``/``error``, ``items``
    (capped at :data:`ITEM_CAP`, ``items_total`` the whole number)."""

    name: str
    path: str
    kind: str
    kind_label: str
    mtime: float
    message_count: int
    present: int  # matched by a store row, visible or hidden (``hidden`` of them)
    hidden: int
    missing: int
    differing: int
    merged: int
    extra: int
    complete: bool
    error: str
    sha256: str
    items: list[CopyItem] = field(default_factory=list)
    items_total: int = 0


@dataclass
class CopiesPanel:
    """Everything the panel shows; ``error`` when the store could not be read."""

    session_id: str
    store_rows: int = 0
    copies: list[CopyPanelRow] = field(default_factory=list)
    conflicts: list[dict] = field(default_factory=list)
    recoverable: int = 0
    repair_check: str | None = None  # the check to preview the repair under (RecoveryPlan.repaired_by)
    session_exists: bool = True
    failed: list[dict] = field(default_factory=list)
    unread: list[dict] = field(default_factory=list)
    error: str = ""


def copy_name(path, kind: str) -> str:
    """How pages name a copy: its file name, with its folder for a backup or a trash
    entry (their files are all called ``state.db``)."""
    parts = Path(path).parts
    return parts[-1] if kind not in ("backup", "trash") else "/".join(parts[-2:])


def message_preview(message, masked: bool) -> str:
    """The first :data:`PREVIEW_CHARS` characters of a copy's ``message`` (its content,
    else its tool calls as JSON), masked when ``masked``; "…" marks a cut."""
    content = message.content
    if content is not None and not isinstance(content, str):
        content = json.dumps(content, ensure_ascii=False)
    text = content or ""
    if not text and message.tool_calls:
        calls = message.tool_calls
        text = "tool calls: " + (calls if isinstance(calls, str) else json.dumps(calls, ensure_ascii=False))
    text = visible_text(text[:PREVIEW_CHARS * 4])  # control characters shown as U+FFFD, as in the transcript
    if masked:
        text = mask(text)
    return text[:PREVIEW_CHARS] + ("…" if len(text) > PREVIEW_CHARS else "")


def _row(comp, previews: bool, masked: bool) -> CopyPanelRow:
    copy = comp.copy
    statuses = comp.statuses()
    items: list[CopyItem] = []
    after_of = {i: m.after_id for m in comp.missing for i in m.indexes}
    after_of.update({i: d.after_id for d in comp.differing for i in d.indexes})
    rows_of = {i: d.row_ids for d in comp.differing for i in d.indexes}
    rows_of.update({m.index: m.row_ids for m in comp.merged})
    for index in sorted(i for i, s in statuses.items() if s != "present"):
        e = copy.entries[index]
        items.append(CopyItem(statuses[index], STATUS_LABELS[statuses[index]], index, e.role,
                              after_of.get(index), tuple(rows_of.get(index, ()))))
    for extra in comp.extra:
        if extra["where"] == "inside":
            items.append(CopyItem("extra", STATUS_LABELS["extra"], None, "", row_ids=(extra["id"],)))
    total = len(items)
    items = items[:ITEM_CAP]
    if previews:
        try:
            loaded = copy.messages_at({i.index for i in items if i.index is not None})
        except CopyError:
            loaded = {}
        for item in items:
            if item.index in loaded:
                item.preview = message_preview(loaded[item.index], masked)
    name = copy_name(copy.path, copy.kind)
    return CopyPanelRow(
        name, str(copy.path), copy.kind, KIND_LABELS.get(copy.kind, copy.kind), copy.mtime, copy.message_count,
        len(comp.pairs), len(comp.hidden), comp.missing_count, sum(len(d.indexes) for d in comp.differing),
        len(comp.merged), sum(1 for x in comp.extra if x["where"] == "inside"), copy.complete, copy.error,
        copy.sha256, items, total)


def copies_panel(store, session_id: str, *, others=(), previews: bool = False, masked: bool = True) -> CopiesPanel:
    """The panel of ``session_id`` (module docstring). Never raises for a store
    problem: ``error`` says busy/damaged and why (ground rule 9)."""
    panel = CopiesPanel(session_id)
    try:
        with store.read() as conn:
            analysis = analyse(store, conn, store.capabilities(conn), session_id, others=others)
            panel.session_exists = conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is not None
    except sqlite3.Error as exc:
        panel.error = classify_error(exc)[1]
        return panel
    plan = analysis.plan
    panel.store_rows = len(analysis.rows)
    panel.copies = [_row(c, previews, masked) for c in plan.comparisons]
    panel.conflicts = [{"after_id": c.after_id,
                        "proposals": [{"name": copy_name(p.source.path, p.source.kind), "kind": p.source.kind,
                                       "roles": [s["role"] for s in p.summaries]} for p in c.proposals]}
                       for c in plan.conflicts]
    panel.recoverable = len(plan.insertions)
    panel.repair_check = plan.repaired_by(panel.session_exists)
    panel.failed = [{"name": copy_name(f["path"], f["kind"]), "kind": f["kind"],
                     "error": mask(f["error"]) if masked else f["error"]} for f in analysis.copyset.failed]
    panel.unread = [{"name": copy_name(u.path, u.kind), "kind": u.kind, "mtime": u.mtime, "size": u.size,
                     "reason": u.reason} for u in analysis.copyset.unread]
    return panel
