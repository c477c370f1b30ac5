"""Migration pages (issue 4 section 3): a profile's import and move plans, a
session's JSONL copy against the store, and the copies of a colliding id.

Plans are made live and read-only (``actions.registry.plan_for``). Text from the
stores and files (plan notes naming titles, bad-line snippets, message excerpts) is
masked for users who see masked text (``secrets.masker_for``), always masked whole
before it is cut, so that a secret cut in half cannot slip past its pattern.
"""

from __future__ import annotations

import logging
import sqlite3

from ..actions.base import Plan
from ..actions.registry import ACTIONS, plan_for
from ..actions.transcripts import jsonl_path
from ..checks import run_store_checks
from ..secrets import mask, mask_value, masking_for
from ..stores import jsonl, registry
from ..stores.connection import classify_error
from ..stores.transcript import decode_content, structured_text
from . import NotFound
from .labels import facts as labelled

MIGRATION_CHECKS = ("transcript_on_disk_only", "history_lost", "owner_mismatch")
EXCERPT = 300  # characters of a message shown in the JSONL comparison
COLLISION_COLUMNS = ("title", "source", "started_at", "ended_at", "end_reason", "message_count", "session_key",
                     "profile_name")
log = logging.getLogger("sessions_app.views")


def may_apply(user, action_name: str) -> bool:
    """Whether ``user`` holds the permission the action needs."""
    action = ACTIONS.get(action_name)
    return bool(action) and user.has_perm(f"sessions_app.{action.permission}")


def _row(plan, masked: bool) -> dict:
    """One line of the migration table: what happens to one session, with counts, and
    its texts (summary, notes, blocking reason) masked for ``masked`` users."""
    p = plan.params
    if plan.action == "import_jsonl_transcript":
        counts = {"messages": len(p.get("imported", [])), "superseded": len(p.get("superseded", [])),
                  "bad_lines": len(p.get("bad_lines", []))}
    else:
        moved = [c.after for c in plan.changes if c.op == "insert" and isinstance(c.after, dict)]
        counts = {"sessions": len(p.get("members", [])), "messages": sum(a.get("messages", 0) for a in moved),
                  "target": p.get("target_profile")}
    texts = {"summary": plan.summary, "blocked": plan.blocked, "notes": list(p.get("notes") or [])}
    return {"plan": plan, "counts": counts, **(mask_value(texts) if masked else texts)}


def migration_plans(store) -> list:
    """Plans for every import and move finding of ``store`` (read-only).

    One finding whose planning fails (an unexpected value in a store or a file) gives
    a blocked plan saying so; the page and the other plans go on, as in heal runs.
    Store errors (busy, damaged) still propagate to the store's error page."""
    report = run_store_checks(store, only=list(MIGRATION_CHECKS), other_stores=[])
    plans = []
    with store.read() as conn:
        caps = store.capabilities(conn)
        for finding in report.findings:
            if finding.heal not in ("import_jsonl_transcript", "move_to_owner_store"):
                continue
            try:
                plan = plan_for(store, conn, caps, finding)
            except sqlite3.Error:
                raise
            except Exception as exc:
                log.exception("planning %s failed on %s", finding.heal, store.path)
                plan = Plan(action=finding.heal, check=finding.check, profile=store.key, store_path=str(store.path),
                            session_id=finding.session_id, summary="Planning failed.",
                            blocked=f"planning failed: {exc.__class__.__name__}: {exc}")
            if plan is not None:
                plans.append(plan)
    return plans


def migration_rows(store, *, user) -> list[dict]:
    """One row per import or move plan of ``store``: ``{"plan", "counts", "summary",
    "blocked", "notes", "allowed"}``, texts masked for ``user``."""
    masked = masking_for(user)
    rows = [_row(plan, masked) for plan in migration_plans(store)]
    for row in rows:
        row["allowed"] = may_apply(user, row["plan"].action)
    return rows


def jsonl_page(store, session_id: str, *, user) -> dict:
    """The session's ``sessions/<id>.jsonl`` line by line against its rows in the store:
    ``{"path", "file", "items", "problems", "missing", "store_only"}``.

    Only a regular file is read: a symlink is never followed, and ``read_file``
    refuses the store's own files under another name (ground rule 5). Raises
    :class:`NotFound` when the session has no such file."""
    path = jsonl_path(store, session_id)
    if path is None or not jsonl.is_regular(path):
        raise NotFound("This session has no JSONL copy")
    parsed = jsonl.read_file(path, session_id, store_path=store.path)
    masked = masking_for(user)
    with store.read() as conn:
        caps = store.capabilities(conn)
        rows = jsonl.store_rows(conn, caps, session_id)
        alignment = jsonl.align(parsed.messages, rows)
        missing = set(alignment.missing)
        contents = _row_contents(conn, [r.id for r in rows], whole=masked)
    problems = {kind: [(line.number, mask(line.problem) if masked else line.problem) for line in lines]
                for kind, lines in (("bad", parsed.bad), ("other", sorted(parsed.meta + parsed.skipped,
                                                                           key=lambda x: x.number)))}
    items = []
    for item in alignment.merged:
        if item[0] == "row":
            row = rows[item[1]]
            items.append({"state": "store_only", "row": row, "role": contents.get(row.id, ("", ""))[0],
                          "text": _excerpt(contents.get(row.id, ("", ""))[1], masked)})
            continue
        line = parsed.messages[item[1]]
        row = rows[item[2]] if item[0] == "both" else None
        content = line.data.get("content")
        text = decode_content(content)[0] if isinstance(content, str) or content is None else structured_text(content)
        items.append({"state": "missing" if item[1] in missing else "matched", "line": line, "row": row,
                      "role": line.role, "text": _excerpt(text, masked)})
    return {"path": path, "file": parsed, "items": items, "problems": problems, "missing": len(missing),
            "store_only": sum(1 for i in items if i["state"] == "store_only")}


def _content_sql(whole: bool) -> str:
    """The content column, cut by SQLite only when nothing is masked afterwards
    (masking needs the whole text: :func:`_excerpt` masks, then cuts)."""
    return "content" if whole else f"substr(content, 1, {EXCERPT * 4})"


def _row_contents(conn, ids: list[int], whole: bool = False) -> dict[int, tuple[str, str]]:
    out = {}
    for start in range(0, len(ids), 900):
        part = ids[start:start + 900]
        marks = ",".join("?" * len(part))
        for mid, role, content in conn.execute(
                f"SELECT id, role, {_content_sql(whole)} FROM messages WHERE id IN ({marks})", part):
            out[mid] = (role, decode_content(content)[0])
    return out


def _excerpt(text, masked: bool) -> str:
    """The first :data:`EXCERPT` characters, masked first (a secret cut at the
    boundary would no longer match its pattern and would show in part)."""
    text = text or ""
    if masked:
        text = mask(text)
    return text[:EXCERPT] + ("…" if len(text) > EXCERPT else "")


def collision_page(store, session_id: str, *, user) -> dict:
    """Every copy of a session id across the known stores, side by side (never merged):
    ``{"copies": [{"store", "facts", "first", "here"}], "unreadable": [{"store", "reason"}],
    "show_text"}``.

    Another profile's store that cannot be read (busy, damaged) is listed as
    unreadable, since a copy there can be neither shown nor ruled out; this profile's
    own read errors propagate (its error page). Raises :class:`NotFound` when this
    profile's store does not hold the id."""
    copies, unreadable = [], []
    show_text = user.has_perm("sessions_app.view_transcripts")
    masked = masking_for(user)
    for other in registry.glances(own=store):
        here = other.key == store.key
        status = other.readiness()
        if status is not None:
            if status.status != "missing" and not here:
                unreadable.append({"store": other, "reason": f"{status.status}: {status.reason}"})
            continue
        try:
            found = _collision_copy(other, session_id, show_text, masked)
        except sqlite3.Error as exc:
            if here:
                raise
            code, reason = classify_error(exc)
            unreadable.append({"store": other, "reason": f"{code}: {reason}"})
            continue
        if found is not None:
            copies.append({"store": other, **found, "here": here})
    if not any(c["here"] for c in copies):
        raise NotFound("No such session in this profile")
    return {"copies": copies, "unreadable": unreadable, "show_text": show_text}


def _collision_copy(other, session_id: str, show_text: bool, masked: bool) -> dict | None:
    """``{"facts", "first"}`` of ``session_id`` in ``other`` (``facts`` labelled
    ``labels.Field`` s, message rows and the newest message's time last), or None when it is not
    there. Texts are masked whole, then cut (no ``substr`` in SQL when masking)."""
    with other.read() as conn:
        caps = other.capabilities(conn)
        cols = [c for c in COLLISION_COLUMNS if caps.has("sessions", c)]
        row = conn.execute(f"SELECT {', '.join(cols)} FROM sessions WHERE id = ?", (session_id,)).fetchone()
        if row is None:
            return None
        facts = dict(zip(cols, row))
        facts["rows"], facts["last_message_at"] = conn.execute(
            "SELECT COUNT(*), MAX(timestamp) FROM messages WHERE session_id = ?", (session_id,)).fetchone()
        first = []
        if show_text:
            for role, content in conn.execute(
                    f"SELECT role, {_content_sql(masked)} FROM messages WHERE session_id = ? "
                    "AND role IN ('user', 'assistant') ORDER BY id LIMIT 3", (session_id,)):
                first.append((role, _excerpt(decode_content(content)[0], masked)))
    if masked and facts.get("title"):
        facts["title"] = mask(facts["title"])
    return {"facts": labelled(facts.items()), "first": first}
