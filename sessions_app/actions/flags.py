"""Flags and titles: rename, archive, pin and hide sessions, each a guarded write.

Upstream semantics (docs/store.md, Flags and titles):

- **archive / pin / hide** are written across the whole compression lineage, the
  way Hermes' ``_set_lineage_column`` does (its recursive CTE: ancestors and
  descendants through parents whose ``end_reason`` is ``compression``), so
  Desktop's list, which shows a root projected onto its tip, never resurrects a
  half-flagged conversation. A deliberate archive also clears ``auto_archived``
  (newest shape); pinning also clears ``hidden`` across the lineage, except for
  Bot Mode's canonical chat (hidden and titled exactly ``Bot Chat``);
- **rename** is per session, with 0.19.0's ``sanitize_title`` (control,
  zero-width and bidi-override characters removed, whitespace collapsed, at most
  100 characters, an empty title clears it) and its unique-title rule: no other
  session may hold the title (the ``idx_sessions_title_unique`` index where the
  store has it, the same check where it does not), except a compression ancestor
  of the renamed session, from which the title moves over (upstream's transfer);
  any other clash is refused with the session that holds it. Where the store has
  ``title_source`` a rename writes ``user`` (the dashboard's choice: the highest
  rank, so auto-titling never replaces an admin's title); a cleared title clears it.

A column the store lacks is a control that is off (:func:`support`). Every write
refuses while an agent may hold a session it touches (ground rule 6) and needs
the ``change_flags`` permission.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass

from django.utils.crypto import constant_time_compare, salted_hmac

from ..runs import RunReport
from ..stores import registry
from ..stores.connection import classify_error
from ..stores.schema import Capabilities
from ..stores.store import Store
from .guarded import Changed, GuardedWriter, Mismatch, Outcome, Refused, Skip, Write, jsonable, refuse_live

FLAG_ACTION = "set_session_flag"
RENAME_ACTION = "rename_session"
PERMISSION = "sessions_app.change_flags"
FLAGS = ("archived", "pinned", "hidden")
VERBS = {("archived", 1): "archive", ("archived", 0): "unarchive", ("pinned", 1): "pin", ("pinned", 0): "unpin",
         ("hidden", 1): "hide", ("hidden", 0): "unhide"}
PAST = {"archive": "archived", "unarchive": "unarchived", "pin": "pinned", "unpin": "unpinned", "hide": "hidden",
        "unhide": "unhidden"}
MAX_TITLE_LENGTH = 100  # 0.19.0 SessionDB.MAX_TITLE_LENGTH
BOT_CHAT_TITLE = "Bot Chat"  # upstream CANONICAL_BOT_CHAT_TITLE
TITLE_DIGEST_SALT = "hermes-admin.rename-title"
WHY_MISSING = {
    "archived": "this store has no archived column: Hermes releases before 0.17.0 cannot archive",
    "pinned": "this store has no pinned column: only the newest Hermes pins sessions (not 0.19.0)",
    "hidden": "this store has no hidden column: only the newest Hermes hides sessions (not 0.19.0)",
    "title": "this store has no title column",
}

# Upstream's lineage CTE (``_set_lineage_column``); binds the session id twice.
LINEAGE_CTE = """WITH RECURSIVE
  ancestors(id) AS (
    SELECT ? UNION
    SELECT parent.id FROM ancestors a JOIN sessions child ON child.id = a.id
    JOIN sessions parent ON parent.id = child.parent_session_id WHERE parent.end_reason = 'compression'),
  descendants(id) AS (
    SELECT ? UNION
    SELECT child.id FROM descendants d JOIN sessions parent ON parent.id = d.id
    JOIN sessions child ON child.parent_session_id = parent.id WHERE parent.end_reason = 'compression'),
  lineage(id) AS (SELECT id FROM ancestors UNION SELECT id FROM descendants)
"""


class TitleError(ValueError):
    """A title Hermes would refuse (the message says why)."""


def clean_title(title: str | None) -> str | None:
    """0.19.0's ``SessionDB.sanitize_title``; None clears the title. Raises :class:`TitleError`."""
    if not title:
        return None
    title = title.encode("utf-8", "surrogatepass").decode("utf-8", "replace")  # lone surrogates, as upstream
    cleaned = re.sub(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]", "", title)
    cleaned = re.sub(r"[\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufffc\ufff9-\ufffb]", "", cleaned)
    cleaned = re.sub(r"\s+", " ", cleaned).strip()
    if not cleaned:
        return None
    if len(cleaned) > MAX_TITLE_LENGTH:
        raise TitleError(f"title too long ({len(cleaned)} characters, at most {MAX_TITLE_LENGTH})")
    return cleaned


def support(caps: Capabilities) -> dict[str, str]:
    """``control -> ''`` when the store has its column, else why the control is absent."""
    controls = ("title",) + FLAGS
    return {c: "" if caps.has("sessions", c) else WHY_MISSING[c] for c in controls}


def lineage_ids(conn, session_id: str) -> list[str]:
    """The session's compression lineage as upstream's CTE finds it (sorted)."""
    return sorted(r[0] for r in conn.execute(LINEAGE_CTE + "SELECT id FROM lineage", (session_id, session_id)))


@dataclass
class FlagState:
    """A session's flags for its page: ``values`` (column -> value, present columns
    only), ``missing`` (control -> why absent), ``lineage`` (ids a flag change
    writes), ``title``, ``bot_chat`` (Bot Mode's canonical chat)."""

    values: dict
    missing: dict
    lineage: list[str]
    title: str | None
    bot_chat: bool = False



def flags_box(store: Store, session_id: str, session, conn: sqlite3.Connection | None = None, caps=None) -> dict:
    """What the session page's flags box shows, computed before rendering:
    ``{"state": FlagState | None, "error": str, "title_digest": str}`` (``conn``,
    ``caps``: see :func:`flag_state`; ``title_digest``: :func:`title_digest` of the
    title shown)."""
    if not session:
        return {"state": None, "error": ""}
    try:
        state = flag_state(store, session_id, conn, caps)
        return {"state": state, "error": "",
                "title_digest": title_digest(store.key, session_id, state.title) if state else ""}
    except sqlite3.Error as exc:
        return {"state": None, "error": f"flags could not be read: {exc}"}


def flag_state(store: Store, session_id: str, conn: sqlite3.Connection | None = None,
               caps=None) -> FlagState | None:
    """The flags of ``session_id`` (read-only), or None when it has no row. ``conn``:
    a read-only connection to ``store`` already open (the session page's), read
    with strict UTF-8 as a connection of this function's own would be; ``caps``:
    the capabilities the page read on it (else read here)."""
    if conn is None:
        with store.read() as own:
            return flag_state(store, session_id, own)
    lenient, conn.text_factory = conn.text_factory, str
    try:
        caps = store.capabilities(conn) if caps is None else caps
        cols = [c for c in FLAGS + ("title",) if caps.has("sessions", c)]
        row = conn.execute(f"SELECT {', '.join(['id'] + cols)} FROM sessions WHERE id = ?", (session_id,)).fetchone()
        if row is None:
            return None
        values = dict(zip(cols, row[1:]))
        lineage = lineage_ids(conn, session_id)
    finally:
        conn.text_factory = lenient
    title = values.pop("title", None)
    missing = {k: v for k, v in support(caps).items() if v}
    return FlagState(values, missing, lineage, title, bool(values.get("hidden")) and title == BOT_CHAT_TITLE)


def pinned_ids(store: Store, ids: list[str]) -> list[str]:
    """Which of ``ids`` are pinned ([] on a store without the column)."""
    if not ids:
        return []
    with store.read() as conn:
        if not store.capabilities(conn).has("sessions", "pinned"):
            return []
        found = []
        for i in range(0, len(ids), 400):
            chunk = ids[i:i + 400]
            found += [r[0] for r in conn.execute(
                f"SELECT id FROM sessions WHERE id IN ({','.join('?' * len(chunk))}) AND COALESCE(pinned, 0) != 0",
                chunk)]
    return sorted(found)


class _FlagsWrite(Write):
    """What the flag writes share: the permission and the audit shape."""

    def authorize(self, writer, store, outcome):
        if writer.actor is not None and not writer.actor.has_perm(PERMISSION):
            raise Refused("changing flags and titles needs the change_flags permission")

    def audit_fields(self, store, outcome):
        return {"session_ids": list(getattr(self, "ids", None) or [self.session_id]),
                "plan": jsonable(self.summary()), "changes": jsonable(outcome.changes)}


class FlagWrite(_FlagsWrite):
    """Set ``flag`` (archived | pinned | hidden) to ``value`` across the lineage of ``session_id``."""

    action = FLAG_ACTION

    def __init__(self, session_id: str, flag: str, value: bool):
        if flag not in FLAGS:
            raise ValueError(f"unknown flag {flag!r}")
        self.session_id, self.flag, self.value = session_id, flag, 1 if value else 0
        self.verb = PAST[VERBS[(flag, self.value)]]
        self.ids: list[str] = []
        self.before: dict[str, dict] = {}
        self.unhide = False

    def summary(self) -> dict:
        return {"session_id": self.session_id, "flag": self.flag, "value": self.value, "lineage": self.ids,
                "before": self.before, "also_unhide": self.unhide}

    def _read(self, ctx) -> dict[str, dict]:
        cols = [c for c in ("archived", "pinned", "hidden", "auto_archived", "title") if ctx.caps.has("sessions", c)]
        ph = ",".join("?" * len(self.ids))
        return {r[0]: dict(zip(cols, r[1:])) for r in ctx.conn.execute(
            f"SELECT id, {', '.join(cols)} FROM sessions WHERE id IN ({ph})", self.ids)}

    def check(self, ctx):
        if not ctx.caps.has("sessions", self.flag):
            raise Refused(f"{WHY_MISSING[self.flag]}; nothing written")
        if ctx.conn.execute("SELECT 1 FROM sessions WHERE id = ?", (self.session_id,)).fetchone() is None:
            raise Refused("the session no longer exists; nothing written")
        ids = lineage_ids(ctx.conn, self.session_id)
        if ctx.inside and ids != self.ids:
            raise Changed(f"its compression lineage changed ({len(self.ids)} -> {len(ids)} segments)")
        self.ids = ids
        refuse_live(ctx.store, ctx.conn, ctx.caps, ids, ctx.now, closed_counts=False,
                    where="its compression lineage" if len(ids) > 1 else "", inside=ctx.inside)
        rows = self._read(ctx)
        if ctx.inside and rows != self.before:
            raise Changed("its flags changed meanwhile")
        self.before = rows
        # Pinning unhides, except Bot Mode's canonical chat (upstream set_session_pinned).
        me = rows.get(self.session_id, {})
        self.unhide = (self.flag == "pinned" and self.value == 1 and ctx.caps.has("sessions", "hidden")
                       and not (me.get("hidden") and me.get("title") == BOT_CHAT_TITLE))
        if all(r.get(self.flag) == self.value for r in rows.values()) and not (
                self.unhide and any(r.get("hidden") for r in rows.values())):
            raise Skip(f"already {self.verb}" + (f" across its {len(ids)} segments" if len(ids) > 1 else ""))

    def execute(self, ctx):
        sets = [f"{self.flag} = ?"]
        if self.flag == "archived" and ctx.caps.has("sessions", "auto_archived"):
            sets.append("auto_archived = 0")  # a deliberate archive, not the idle sweep's
        if self.unhide:
            sets.append("hidden = 0")
        ctx.conn.execute(LINEAGE_CTE + f"UPDATE sessions SET {', '.join(sets)} WHERE id IN (SELECT id FROM lineage)",
                         (self.session_id, self.session_id, self.value))
        # A statement led by WITH reports no rowcount to Python's sqlite3 (-1).
        n = ctx.conn.execute("SELECT changes()").fetchone()[0]
        if n != len(self.ids):
            raise Mismatch(f"updated {n} rows, planned {len(self.ids)}")
        ctx.outcome.rows_changed = n
        ctx.outcome.changes = [{"op": "update", "table": "sessions", "key": {"id": sid}, "column": col,
                                "before": self.before[sid].get(col), "after": after}
                               for sid in self.ids
                               for col, after in [(self.flag, self.value)] + ([("hidden", 0)] if self.unhide else [])
                               if self.before[sid].get(col) != after]
        what = VERBS[(self.flag, self.value)]
        ctx.outcome.done = (f"{what}: {n} session(s) of its compression lineage" if n > 1 else f"{what}: done") + (
            "; pinning also unhid it" if self.unhide and any(r.get("hidden") for r in self.before.values()) else "")

    def verify(self, store, outcome):
        with store.read() as conn:
            ph = ",".join("?" * len(self.ids))
            wrong = conn.execute(f"SELECT COUNT(*) FROM sessions WHERE id IN ({ph}) AND {self.flag} IS NOT ?",
                                 self.ids + [self.value]).fetchone()[0]
        return f"verify: {wrong} row(s) do not carry {self.flag} = {self.value}" if wrong else None


def title_digest(store_key: str, session_id: str, title) -> str:
    """What a rename form carries of the title it was shown: a keyed digest
    (``salted_hmac`` with the dashboard's SECRET_KEY) of the profile, the session
    and the title, the title's type included (a salvaged store may hold a BLOB or a
    number there). Keyed, so that a masked title's digest cannot be matched against
    guesses offline; the page never puts the title itself in a hidden field."""
    typed = repr(title) if not isinstance(title, str) else "s:" + title
    return salted_hmac(TITLE_DIGEST_SALT, f"{store_key}\0{session_id}\0{typed}", algorithm="sha256").hexdigest()


class RenameWrite(_FlagsWrite):
    """Give ``session_id`` the title ``title`` (already cleaned; None clears it).
    ``expected``: the title the admin saw (a different one now is a change); or,
    from the page, ``expected_digest``: its :func:`title_digest`."""

    action = RENAME_ACTION
    verb = "renamed"

    def __init__(self, session_id: str, title: str | None, expected: str | None,
                 expected_digest: str | None = None):
        # expected_digest: title_digest(store key, session_id, title shown)
        self.session_id, self.title, self.expected = session_id, title, expected
        self.expected_digest = expected_digest
        self.transfer_from: str | None = None
        self.before: str | None = None

    def summary(self) -> dict:
        return {"session_id": self.session_id, "title": self.title, "before": self.before,
                "moved_from_ancestor": self.transfer_from}

    def _ancestors(self, conn) -> set[str]:
        rows = conn.execute("""WITH RECURSIVE ancestors(id) AS (
            SELECT ? UNION SELECT parent.id FROM ancestors a JOIN sessions child ON child.id = a.id
            JOIN sessions parent ON parent.id = child.parent_session_id WHERE parent.end_reason = 'compression')
            SELECT id FROM ancestors""", (self.session_id,))
        return {r[0] for r in rows} - {self.session_id}

    def check(self, ctx):
        if not ctx.caps.has("sessions", "title"):
            raise Refused(f"{WHY_MISSING['title']}; nothing written")
        hidden = "hidden" if ctx.caps.has("sessions", "hidden") else "0"
        row = ctx.conn.execute(f"SELECT title, {hidden} FROM sessions WHERE id = ?", (self.session_id,)).fetchone()
        if row is None:
            raise Refused("the session no longer exists; nothing written")
        current, is_hidden = row
        if self.expected_digest is not None:
            shown = title_digest(ctx.store.key, self.session_id, current)
            if not constant_time_compare(shown, self.expected_digest):  # titles stay out of the message
                raise Changed("its title changed since the page was shown")
        elif current != self.expected:
            raise Changed(f"its title is now {current!r}, not {self.expected!r} as shown")
        if is_hidden and current == BOT_CHAT_TITLE:
            raise Refused("this is Bot Mode's canonical chat (hidden, titled 'Bot Chat'): Hermes finds it by that "
                          "title, so it keeps it; nothing written")
        self.before = current
        refuse_live(ctx.store, ctx.conn, ctx.caps, [self.session_id], ctx.now, closed_counts=False,
                    inside=ctx.inside)
        self.transfer_from = None
        if self.title is not None:
            clash = ctx.conn.execute("SELECT id FROM sessions WHERE title = ? AND id != ? ORDER BY id LIMIT 1",
                                     (self.title, self.session_id)).fetchone()
            if clash and clash[0] in self._ancestors(ctx.conn):
                self.transfer_from = clash[0]  # upstream: the title moves off a compressed-away ancestor
            elif clash:
                raise Refused(f"the title {self.title!r} is already used by session {clash[0]} in this profile: "
                              "Hermes keeps titles unique in a store; choose another, or rename that session first")
        if current == self.title:
            raise Skip("the session already has this title")

    def execute(self, ctx):
        changes = []
        if self.transfer_from:
            ctx.conn.execute("UPDATE sessions SET title = NULL WHERE id = ?", (self.transfer_from,))
            changes.append({"op": "update", "table": "sessions", "key": {"id": self.transfer_from},
                            "column": "title", "before": self.title, "after": None})
        sets, params = ["title = ?"], [self.title]
        if ctx.caps.has("sessions", "title_source"):
            sets.append("title_source = ?")
            params.append("user" if self.title is not None else None)
        n = ctx.conn.execute(f"UPDATE sessions SET {', '.join(sets)} WHERE id = ?",
                             params + [self.session_id]).rowcount
        if n != 1:
            raise Mismatch(f"updated {n} rows, planned 1")
        changes.append({"op": "update", "table": "sessions", "key": {"id": self.session_id}, "column": "title",
                        "before": self.before, "after": self.title})
        ctx.outcome.changes, ctx.outcome.rows_changed = changes, len(changes)
        ctx.outcome.done = ("title cleared" if self.title is None else f"renamed to {self.title!r}") + (
            f" (the title moved over from its compression ancestor {self.transfer_from})" if self.transfer_from else "")

    def verify(self, store, outcome):
        with store.read() as conn:
            row = conn.execute("SELECT title FROM sessions WHERE id = ?", (self.session_id,)).fetchone()
        return None if row and row[0] == self.title else f"verify: the title reads {row[0] if row else None!r}"


class Flagger(GuardedWriter):
    """The writer of flag changes: one backup per store, one audit event per session."""

    backup_label = "flags"

    def set_flag(self, store: Store, session_id: str, flag: str, value: bool) -> Outcome:
        return self.perform(store, FlagWrite(session_id, flag, value))

    def rename(self, store: Store, session_id: str, title: str | None, expected: str | None,
               expected_digest: str | None = None) -> Outcome:
        return self.perform(store, RenameWrite(session_id, title, expected, expected_digest))


def run_bulk_flags(run, progress) -> dict:
    """The background job of a flag change on selected sessions (``HealRun.mode ==
    "flags"``): ``run.plans`` holds ``{profile, session_id, flag, value}`` items,
    each its own guarded write and audit event. Report in the heal report shape."""
    flagger = Flagger(actor=run.actor, actor_label=run.actor_label, run=run, request_address=run.request_address)
    return run_changes(flagger, list(run.plans), progress)


def run_changes(flagger: Flagger, items: list[dict], progress=None) -> dict:
    """Flag changes and renames, each its own guarded write and audit event, as a
    version-2 report (``mode`` ``flags``). An item is ``{profile, session_id, flag,
    value}`` or ``{profile, session_id, rename}`` (a title :func:`clean_title`
    accepted; None clears it). A rename expects the title the session has when its
    turn comes (the re-check inside the transaction still catches a change).

    Each ``actions[]`` entry adds ``refused`` (the write was refused) and ``retry``
    (not done for a passing reason: an agent holds the session, the store stayed
    locked, it changed meanwhile; ``Outcome.retry``)."""
    report = RunReport(mode="flags")
    for n, item in enumerate(items, start=1):
        key, sid = str(item.get("profile", "")), str(item.get("session_id", ""))
        renaming = "rename" in item
        flag, value = str(item.get("flag", "")), bool(item.get("value"))
        action = RENAME_ACTION if renaming else FLAG_ACTION
        store = registry.get(key)
        entry = report.profile(key, str(store.path) if store else "")
        refused = retry = False
        if store is None or not (renaming or flag in FLAGS):
            status, reason = "failed", "the profile no longer exists" if store is None else f"unknown flag {flag!r}"
            flagger.note(store, action, [sid], "failed", reason, profile=key)
        else:
            try:
                state = flag_state(store, sid) if renaming else None
            except (sqlite3.Error, OSError) as exc:
                # The title could not be read before the write: the write would hit the same.
                retry = classify_error(exc)[0] == "busy"  # busy passes; damaged does not
                status = "skipped" if retry else "failed"
                reason, outcome = f"the store could not be read ({exc}); nothing written", None
            else:
                outcome = (flagger.rename(store, sid, item["rename"], state.title if state else None) if renaming
                           else flagger.set_flag(store, sid, flag, value))
            if outcome is not None:
                status, reason = outcome.report_status, outcome.reason
                refused, retry = outcome.refused, outcome.retry
            backup = flagger.backups.get(str(store.path))
            entry.backup = backup.path if backup else None
        done = {"action": action, "session_id": sid, "status": status, "reason": reason, "changes": [],
                "refused": refused, "retry": retry}
        done.update({"title": item["rename"]} if renaming else {"flag": flag, "value": int(value)})
        entry.actions.append(done)
        if progress:
            what = "rename" if renaming else VERBS.get((flag, int(value)), flag)
            progress(f"{what} {sid}: {status}", n, len(items))
    return report.as_json()
