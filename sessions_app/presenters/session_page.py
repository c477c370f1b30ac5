"""The session page: metadata, usage, lineage, liveness, findings and one page of the
transcript, read over one read-only connection and masked once.

What each part comes from:

- the row, system prompt and usage: ``stores.session_info``; lineage:
  ``stores.lineage``; the transcript page: ``stores.transcript`` (ground rule 10);
- liveness: ``stores.liveness.page_indexes`` on the same connection, once for the
  box (deletion's view of it, ``closed_counts=False``: the box sits beside the
  delete buttons) and the session's own checks (``closed_counts=True``);
- findings: the session's own checks, live, unless the session holds more than
  :data:`LIVE_CHECK_ROWS` rows (its checks read every row: seconds for 300,000), in
  which case the latest stored pass's findings are shown with that pass's time;
- other profiles holding the same id: from the latest stored pass's ``id_collision``
  findings when one covered this profile (no other store is opened), else one
  primary-key lookup per other store (``registry.other_copies``);
- the JSONL copy: one ``lstat`` of ``sessions/<id>.jsonl`` (nothing is read).
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass, field, replace
from types import SimpleNamespace

from ..actions.deletion import judge
from ..actions.registry import rank, repair_first
from ..actions.flags import flags_box
from ..actions.transcripts import jsonl_path
from ..checks import Finding, run_store_checks
from ..checks.ownership import collision_profiles
from ..checks.registry import BY_CODE as CHECKS
from ..checks.registry import next_step_of
from ..health import SEVERITY_ORDER as SEVERITY_RANK
from ..health import ProfileHealth, latest, staleness
from ..secrets import masker_for
from ..vocabulary import LIVENESS_SOURCES
from ..stores import jsonl, registry
from ..stores import liveness as live_mod
from ..stores.lineage import Lineage
from ..stores.listing import COUNT_CAP
from ..stores.session_info import session_row, system_prompt, usage_rows
from ..stores.transcript import TranscriptPage
from ..stores.transcript import for_store as transcript_for
from . import NotFound
from ..checks.damage import known_damage, pass_damage
from .labels import Field, facts

# A session's own checks read every row of it (seconds for 300,000 rows): above this
# many rows the session page shows the latest pass's findings unless asked to check
# now (docs/benchmarks.md).
LIVE_CHECK_ROWS = COUNT_CAP
METADATA_HIDDEN = {"system_prompt", "model_config", "origin_json", "tool_names"}
KEY_FIELDS = (
    "id", "title", "source", "profile_name", "model", "started_at", "ended_at", "end_reason",
    "last_activity_at", "message_count", "tool_call_count", "parent_session_id", "session_key",
    "user_id", "chat_id", "cwd", "archived", "pinned", "hidden",
)
USAGE_COLUMNS = (
    "api_call_count", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
    "reasoning_tokens", "estimated_cost_usd", "actual_cost_usd", "cost_status",
)


# Why the flags box offers no rename/archive/pin/hide now, by the session's liveness
# verdict (docs/store.md §7); a verdict not listed lets the writes through.
FLAG_REFUSED = {"live": "the session looks live", "maybe_live": "the session looks maybe live"}


@dataclass
class LivenessBox:
    """The liveness box: ``verdict`` (``live`` | ``maybe_live`` | ``not_live``, None
    without a session row), ``items`` (``{"session_id", "e": Evidence}``), ``error``.
    ``refused``: why deleting the session is refused now (its own evidence judged as
    the deletion judges it, ``actions.deletion.judge``), '' when it may go;
    ``override``: it may go only by an admin's override of a maybe-live verdict."""

    verdict: str | None = None
    items: list[dict] = field(default_factory=list)
    error: str = ""
    refused: str = ""
    override: bool = False


@dataclass
class SessionPage:
    """Everything the session page shows. ``page`` is None without the transcript
    permission; ``metadata`` / ``more_metadata`` / ``usage`` are the row's columns as
    labelled fields (``presenters.labels``: unknown columns under their raw name);
    ``notice`` is a message for the user (an ``at`` id not on the page);
    ``findings`` are ``(Finding, Check | None, [Finding], next step)`` in repair order, the
    list the findings of this session whose repairs come first, the next step what to do
    about a finding with no repair ("" when it has one or its check says none); ``markers`` message id ->
    findings; ``findings_stored`` True when they come from ``findings_run``."""

    session: dict | None
    page: TranscriptPage | None
    can_read: bool
    include_inactive: bool
    has_active_column: bool
    metadata: list[Field]
    more_metadata: list[Field]
    usage: list[Field]
    usage_rows: list[dict]
    model_config: object
    system_prompt: str | None
    parent: dict | None
    children: list[dict]
    chain: list[dict]
    findings: list[tuple]
    markers: dict[int, list]
    findings_stored: bool
    findings_run: object
    liveness: LivenessBox
    jsonl_name: str
    other_copies: list[str]
    live_check_rows: int
    flags: dict = field(default_factory=dict)
    notice: str = ""
    damage: dict | None = None  # checks.damage.known_damage: no write controls then


def session_page(store, session_id: str, *, user, size: int = 100, after: int | None = None,
                 before: int | None = None, at: int | None = None, include_inactive: bool = False,
                 recheck: bool = False) -> SessionPage:
    """The page of ``session_id`` in ``store`` as ``user`` sees it (transcript
    permission, masking). ``after``/``before``/``at`` are message ids
    (``before=-1``: the last page). Raises :class:`NotFound` when the store holds
    neither a row nor a message of that session; ``sqlite3.Error`` from the store."""
    masker = masker_for(user)
    can_read = user.has_perm("sessions_app.view_transcripts")
    notice = ""
    with store.read(lenient=True) as conn:
        caps = store.capabilities(conn)
        session = session_row(conn, caps, session_id)
        transcript = transcript_for(conn, caps, session_id, include_inactive)
        lineage = Lineage(conn, caps.columns("sessions"), known=session)
        if session is None and not transcript.page(size=1).messages:
            # Messages may outlive their session row (FK orphans): shown, marked.
            raise NotFound("No such session in this profile")
        page = None
        if can_read:  # without the content permission: metadata, counts and findings only
            page = transcript.page(size=size, after=after, before=before, at=at)
            if at is not None and (not page.messages or page.messages[0].id != at):
                notice = (f"Message #{at} is not among this session's visible messages; "
                          "showing the page that follows it.")
        parent = lineage.parent(session) if session else None
        children = lineage.children(session_id)  # children may outlive a deleted parent row
        chain = lineage.chain(session_id) if session else []
        prompt = system_prompt(conn, caps, session) if can_read else None
        # Rows counted up to COUNT_CAP + 1 (the page already counted them).
        counted = page.total + page.total_capped if page is not None else transcript.count()
        usage = usage_rows(conn, caps, session_id)
        now = time.time()
        checks_index, shown_index = _indexes(store, conn, caps, session_id, now) if session else (None, None)
        box = _liveness(store, conn, caps, session_id, now, shown_index) if session else LivenessBox()
        flags = flags_box(store, session_id, session, conn, caps)  # on this connection, not one of its own
        # A rename or flag write refuses any session not judged not-live (ground rule 6,
        # actions.guarded.refuse_live): the box offers no control that would only refuse.
        flags["refused"] = _flag_refusal(box)
        stored = counted > LIVE_CHECK_ROWS and not recheck
        # The session's own checks on this connection (its text read strictly for them).
        checked = None if stored else run_store_checks(store, session_id=session_id, conn=conn, now=now,
                                                       liveness=checks_index).findings
    health = latest([store.key])[store.key]
    findings = [Finding.from_json(f) for f in health.findings_of(session_id)] if stored else checked
    if masker:
        _mask_page(masker, session, page)
        # The rename field starts empty where masking changes the title (its value would
        # give the secret away); the placeholder shows the masked title.
        state = flags.get("state")
        shown_title = masker.remembered(state.title) if state and state.title else None
        flags["title_masked"] = shown_title if shown_title != (state.title if state else None) else ""
        prompt = masker.remembered(prompt)  # one prompt for many sessions, on every view of each
        # Details may quote store text; the findings box and the transcript's markers show them.
        findings = [replace(f, detail=masker.remembered(f.detail)) for f in findings]
        for row in [parent or {}, *children, *chain]:  # titles of the lineage too
            if row.get("title"):
                row["title"] = masker(row["title"])
    shown = session or {}
    return SessionPage(
        session=session, page=page, can_read=can_read, include_inactive=include_inactive,
        has_active_column=caps.has("messages", "active"),
        metadata=facts((k, shown[k]) for k in KEY_FIELDS if k in shown),
        more_metadata=facts((k, v) for k, v in shown.items()
                            if k not in KEY_FIELDS and k not in METADATA_HIDDEN and k not in USAGE_COLUMNS),
        usage=facts((k, session.get(k)) for k in USAGE_COLUMNS if session and k in session),
        usage_rows=usage, model_config=shown.get("model_config"), system_prompt=prompt,
        parent=parent, children=children, chain=chain if len(chain) > 1 else [],
        findings=[(f, CHECKS.get(f.check), repair_first(f.heal, findings), next_step_of(f))
                  for f in in_repair_order(findings)],
        markers=message_markers(findings),
        findings_stored=stored, findings_run=health.run if stored else None, liveness=box,
        jsonl_name=_jsonl_name(store, session_id), other_copies=other_copies(store, session_id, health),
        live_check_rows=LIVE_CHECK_ROWS, flags=flags, notice=notice,
        damage=_damage(store, findings, health),
    )


def _damage(store, findings, health) -> dict | None:
    """The store's known damage: this page's findings, else the latest pass's while the
    store's files are as that pass found them (a salvaged store is not held against)."""
    if staleness(store, health):
        return known_damage(findings)
    return pass_damage(health, findings)


RAW_FIELDS = ("content", "reasoning", "reasoning_content")


def raw_message(store, session_id: str, message_id: int, field: str, *, user) -> str:
    """One message's whole ``field`` (``content``, ``reasoning`` or
    ``reasoning_content``) as text, masked for ``user``; inactive rows too. Raises
    :class:`NotFound` for a message of another session or an unknown field."""
    if field not in RAW_FIELDS:
        raise NotFound("No such field")
    with store.read(lenient=True) as conn:
        row = transcript_for(conn, store.capabilities(conn), session_id, include_inactive=True).message(message_id)
    if row is None:
        raise NotFound("No such message")
    return masker_for(user)(row.get(field) or "")


def _indexes(store, conn, caps, session_id: str, now: float) -> tuple:
    """``(the checks' index, the box's index)`` of the session, read once
    (``liveness.page_indexes``) with the strict text reading a check's own
    connection has; ``(None, None)`` when that read fails, and then the box and the
    checks each read theirs as before (a lenient box, an error the checks report)."""
    lenient, conn.text_factory = conn.text_factory, str
    try:
        return live_mod.page_indexes(store, conn, caps, session_id, now, cached_routing=True)
    except sqlite3.Error:
        return None, None
    finally:
        conn.text_factory = lenient


def _liveness(store, conn, caps, session_id: str, now: float, index=None) -> LivenessBox:
    try:
        if index is not None:
            found = live_mod.Liveness(live_mod.verdict_of(index.evidence(session_id)), index.evidence(session_id))
        else:
            found = live_mod.evidence_for(store, conn, caps, session_id, now, closed_counts=False,
                                          cached_routing=True)
    except sqlite3.Error as exc:
        return LivenessBox(error=f"liveness could not be read: {exc}")
    # The session page judges the session's own evidence; children a deletion would
    # detach are judged on the confirmation page (a live one refuses there).
    verdict, possible, blocker = judge([SimpleNamespace(id=session_id, verdict=found.verdict, liveness=found)])
    refused = "an agent holds this session" if verdict == "live" else blocker
    return LivenessBox(found.verdict, [{"session_id": session_id, "e": e} for e in found.evidence],
                       refused=refused, override=verdict == "maybe_live" and possible)


def _jsonl_name(store, session_id: str) -> str:
    """File name of the session's ``sessions/<id>.jsonl`` when one exists, else ''
    (an ``lstat`` of that one file, a symlink is not one; nothing is read)."""
    path = jsonl_path(store, session_id)
    return path.name if path is not None and jsonl.is_regular(path) else ""


def other_copies(store, session_id: str, health: ProfileHealth) -> list[str]:
    """Keys of the other profiles whose store also holds ``session_id``.

    From the latest stored pass over this profile when it compared with the others
    (its ``id_collision`` findings), so a session page opens no other store; else,
    or when that pass could not run the check, one lookup per other store."""
    entry = health.entry
    if health.run is not None and entry.get("status") == "ok" and "id_collision" not in (entry.get("error") or ""):
        return [key for f in health.findings_of(session_id, "id_collision") for key in collision_profiles(f["detail"])]
    return registry.other_copies(store, session_id)


def _mask_page(masker, session, page) -> None:
    """Mask secrets in everything a session page shows from the store's texts
    (remembered by their digests: a page's next views, and its neighbours', show
    many of them again; ``secrets.mask_remembered`` says why that is safe)."""
    if session:
        session["title"] = masker.remembered(session.get("title"))
    if page is None:
        return
    seen = set()
    for msg in page.messages + [c["result"] for m in page.messages for c in m.tool_calls if c.get("result")]:
        if id(msg) in seen:
            continue
        seen.add(id(msg))
        msg.text = masker.remembered(msg.text)
        msg.structured = masker.value(msg.structured)
        for key in ("reasoning", "reasoning_content"):
            msg.row[key] = masker.remembered(msg.row.get(key))
        for call in msg.tool_calls:
            call["arguments"] = masker.remembered(call["arguments"])


def in_repair_order(findings) -> list:
    """Most severe first, and within a severity the repairs in the order they are
    applied (docs/architecture.md §5.2): a duplicate's hide before the recount."""
    return sorted(findings, key=lambda f: (SEVERITY_RANK.get(f.severity, 9), rank(f.heal)))


def message_markers(findings) -> dict[int, list]:
    """Findings keyed by the message ids their evidence names, to mark rows in place.

    Any evidence entry named ``*message_ids``/``*_ids`` (a list of ids) or
    ``*message_id`` (one id) points at messages; ``unanswered_turn`` marks where
    the missing reply should be. A finding about a whole range of the session
    (``first_message_id``..``last_message_id``: orphan rows) marks no row: the
    findings box says it once, instead of a banner under every message.
    """
    marks: dict[int, list] = {}
    for finding in findings:
        ids: set[int] = set()
        evidence = finding.evidence or {}
        if "first_message_id" in evidence and "last_message_id" in evidence:
            continue
        for key, value in evidence.items():
            if (key.endswith("_ids") or key == "hide") and isinstance(value, list):
                ids.update(v for v in value if isinstance(v, int))
            elif key.endswith("message_id") and isinstance(value, int):
                ids.add(value)
        for msg_id in ids:
            marks.setdefault(msg_id, []).append(finding)
    return marks


def _flag_refusal(box: "LivenessBox") -> str:
    """Why renames and flags are refused now, naming the evidence the box shows
    (a gateway's routing entry, a lease…), or "" when they are not."""
    words = FLAG_REFUSED.get(box.verdict, "")
    if not words:
        return ""
    sources = sorted({LIVENESS_SOURCES.get(i["e"].source, i["e"].source) for i in box.items if i["e"].blocks}
                     or {LIVENESS_SOURCES.get(i["e"].source, i["e"].source) for i in box.items})
    return f"{words} ({', '.join(sources)})" if sources else words
