"""Issue 4 section 1: legacy JSONL transcripts imported into real-release stores.

Every store is a copy written by the real hermes-agent release; sessions added here
are written through that release's own ``SessionDB`` (``hermes(..., version=...)``),
then aged, and a ``sessions/<id>.jsonl`` is left beside the store the way old
gateways (or the divert path) left it.
"""

import json
import os
import time

import pytest

from sessions_app.actions.engine import Applier, plan_for
from sessions_app.actions.rowcopy import exact_select
from sessions_app.checks import run_store_checks
from sessions_app.models import AuditEvent
from tests.checks.helpers import RELEASES, damage, hermes
from tests.conftest import ids

from .conftest import DAY, heal, profile_entry, store

pytestmark = pytest.mark.django_db

SID = "20260220_101500_77aa11"  # a gateway session written here (no fixture id has this date)
EARLIER = [  # what the legacy transcript holds before the turns the store kept
    {"role": "user", "content": "Which days am I free next week?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_cal_1", "type": "function", "function": {"name": "calendar", "arguments": "{\"week\": 9}"}}]},
    {"role": "tool", "content": "{\"free\": [\"Tuesday\", \"Thursday\"]}", "tool_call_id": "call_cal_1",
     "tool_name": "calendar"},
    {"role": "assistant", "content": "You are free on Tuesday and Thursday (quokka)."},
    {"role": "user", "content": "Book Tuesday for the dentist."},
    {"role": "assistant", "content": "Booked: dentist on Tuesday."},
]
KEPT = [  # the latest turns, which the store has
    {"role": "user", "content": "and on Friday?"},
    {"role": "assistant", "content": "Friday is free."},
    {"role": "user", "content": "thanks"},
]


def rows(s, sql, params=()):
    with s.read() as conn:
        return conn.execute(sql, params).fetchall()


def columns(s, table="messages"):
    with s.read() as conn:
        return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]


def exact_rows(s, sid):
    """Every message row of ``sid`` without its id, value for value, by id."""
    cols = [c for c in columns(s) if c not in ("id", "display_order", "display_identity")]
    return rows(s, f"SELECT {exact_select(cols)} FROM messages WHERE session_id = ? ORDER BY id", (sid,))


def write_session(s, profile, messages, sid=SID, source="telegram"):
    """Create ``sid`` through the profile's own release and append ``messages``,
    then age it 40 days (its agent is long gone)."""
    calls = "\n".join(
        f"db.append_message({sid!r}, {m['role']!r}, {m.get('content')!r}, tool_name={m.get('tool_name')!r}, "
        f"tool_calls={m.get('tool_calls')!r}, tool_call_id={m.get('tool_call_id')!r})" for m in messages)
    hermes(s, f"db.create_session({sid!r}, {source!r})\n{calls}\n", version=RELEASES.get(profile, "0.19.0"))
    with damage(s) as db:
        db.execute("UPDATE sessions SET started_at = started_at - ? WHERE id = ?", (40 * DAY, sid))
        db.execute("UPDATE messages SET timestamp = timestamp - ? WHERE session_id = ?", (40 * DAY, sid))


def write_jsonl(s, sid, lines, extra="", quiet=True):
    """``sessions/<sid>.jsonl`` with ``lines`` (dicts, or raw strings written as is)."""
    folder = s.profile.sessions_dir
    folder.mkdir(exist_ok=True)
    path = folder / f"{sid}.jsonl"
    text = "".join((line if isinstance(line, str) else json.dumps(line, ensure_ascii=False)) + "\n" for line in lines)
    path.write_text(text + extra, encoding="utf-8")
    if quiet:  # written long ago, like every legacy transcript
        old = time.time() - 2 * DAY
        os.utime(path, (old, old))
    return path


def stamped(messages, start):
    return [dict(m, timestamp=start + 60 * n) for n, m in enumerate(messages)]


def transcript(s, sid, active_only=True):
    where = " AND active = 1" if active_only and "active" in columns(s) else ""
    return [(r[0], r[1]) for r in rows(s, f"SELECT role, content FROM messages WHERE session_id = ?{where} ORDER BY id", (sid,))]


def expected(messages):
    return [(m["role"], m.get("content")) for m in messages]


def actions(report, key, name="import_jsonl_transcript"):
    return [a for a in profile_entry(report, key)["actions"] if a["action"] == name]


def findings(s, code="transcript_on_disk_only"):
    return [f for f in run_store_checks(s, only=[code]).findings]


# --------------------------------------------------------------------------- the usual case

def test_schema_11_store_with_a_longer_legacy_jsonl(aged_home):
    """0.13.0 (schema 11, no messages.active): the store kept only the latest turns."""
    s = store(aged_home, "archive")
    write_session(s, "archive", KEPT)
    before = exact_rows(s, SID)
    start = rows(s, "SELECT MIN(timestamp) FROM messages WHERE session_id = ?", (SID,))[0][0] - 3600
    lines = [{"role": "session_meta", "session": {"id": SID, "source": "telegram"}}] + stamped(EARLIER, start) + [
        dict(m, timestamp=t) for m, (t,) in zip(KEPT, rows(s, "SELECT timestamp FROM messages WHERE session_id = ? ORDER BY id", (SID,)))]
    path = write_jsonl(s, SID, lines)
    original = path.read_bytes()

    code, preview = heal("--profile", "archive", "--only", "transcript_on_disk_only", "--json")
    [planned] = actions(preview, "archive")
    assert code == 1 and planned["status"] == "planned"
    assert [c["op"] for c in planned["changes"]].count("insert") == len(EARLIER)
    assert [c["op"] for c in planned["changes"]].count("move") == len(KEPT)  # cannot hide: moved, said so
    with s.read() as conn:
        [f] = findings(s)
        plan = plan_for(s, conn, s.capabilities(conn), f)
    assert any("no messages.active column" in n for n in plan.params["notes"])

    code, report = heal("--profile", "archive", "--only", "transcript_on_disk_only", "--apply", "--json")
    [done] = actions(report, "archive")
    assert done["status"] == "applied", done
    assert code == 0 and profile_entry(report, "archive")["findings"] == []
    # the whole conversation, in transcript order by messages.id
    assert transcript(s, SID) == expected(EARLIER + KEPT)
    # the rows the store had are still there, moved, byte for byte identical
    assert exact_rows(s, SID)[len(EARLIER):] == before
    # imported rows keep their own timestamps
    assert [r[0] for r in rows(s, "SELECT timestamp FROM messages WHERE session_id = ? ORDER BY id LIMIT 6", (SID,))] == \
        [m["timestamp"] for m in lines[1:7]]
    # search finds an imported message (FTS triggers fired)
    hits = rows(s, "SELECT m.session_id FROM messages_fts f JOIN messages m ON m.id = f.rowid WHERE messages_fts MATCH 'quokka'")
    assert hits == [(SID,)]
    assert rows(s, "SELECT message_count, tool_call_count FROM sessions WHERE id = ?", (SID,)) == [(9, 1)]
    assert path.read_bytes() == original  # the file is never modified
    event = AuditEvent.objects.get(action="import_jsonl_transcript", outcome="applied")
    assert event.session_ids == [SID] and event.backup_path and event.rows_changed == len(EARLIER) + len(KEPT)

    code, again = heal("--profile", "archive", "--only", "transcript_on_disk_only", "--apply", "--json")
    assert code == 0 and again["summary"]["applied"] == 0 and actions(again, "archive") == []
    assert transcript(s, SID) == expected(EARLIER + KEPT)


@pytest.mark.parametrize("profile", ["default", "research"])
def test_later_rows_are_superseded_and_hidden_where_active_exists(aged_home, profile):
    """0.19.0 and 0.17.0 have messages.active: originals stay, hidden."""
    s = store(aged_home, profile)
    write_session(s, profile, KEPT)
    cols = [c for c in columns(s) if c not in ("id", "active", "compacted")]
    content = f"SELECT {exact_select(cols)} FROM messages WHERE session_id = ?"
    before = rows(s, content + " ORDER BY id", (SID,))
    write_jsonl(s, SID, stamped(EARLIER, 1.77e9) + KEPT)
    total = rows(s, "SELECT COUNT(*) FROM messages")[0][0]
    code, report = heal("--profile", profile, "--only", "transcript_on_disk_only", "--apply", "--json")
    assert actions(report, profile)[0]["status"] == "applied", report
    assert transcript(s, SID) == expected(EARLIER + KEPT)
    assert rows(s, "SELECT COUNT(*) FROM messages")[0][0] == total + len(EARLIER) + len(KEPT)
    # every pre-existing row is still present with its content unchanged, hidden
    assert rows(s, content + " AND active = 0 ORDER BY id", (SID,)) == before
    assert rows(s, content + " AND active = 1 ORDER BY id", (SID,))[len(EARLIER):] == before  # the copies
    assert rows(s, "SELECT message_count FROM sessions WHERE id = ?", (SID,)) == [(9,)]
    assert not findings(s, "duplicate_live_rows") and not findings(s)


def test_bad_lines_are_reported_with_line_numbers_and_the_rest_is_imported(aged_home):
    s = store(aged_home, "legacy")  # 0.15.0
    write_session(s, "legacy", KEPT)
    lines = [
        {"role": "session_meta", "session_id": SID, "platform": "telegram"},  # line 1
        EARLIER[0],                                                           # line 2
        "{broken json",                                                       # line 3
        json.dumps("a bare string"),                                          # line 4
        {"role": "narrator", "content": "once upon a time"},                  # line 5
        EARLIER[3],                                                           # line 6
        {"content": "no role at all"},                                        # line 7
        *KEPT,
    ]
    write_jsonl(s, SID, lines, extra="\n   \n")
    [f] = findings(s)
    assert f.count == 2 and f.evidence["bad_lines"] == [
        {"line": 3, "problem": "broken JSON"}, {"line": 4, "problem": "not a JSON object (a bare string)"},
        {"line": 5, "problem": "unknown role 'narrator'"}, {"line": 7, "problem": "no role"}]
    assert "line 3: broken JSON" in f.detail
    with s.read() as conn:
        plan = plan_for(s, conn, s.capabilities(conn), f)
    assert plan.params["bad_lines"] == f.evidence["bad_lines"] and plan.params["imported"] == [2, 6]
    assert plan.params["other_lines"] == [{"line": 1, "problem": "session_meta bookkeeping"}]
    assert any("line 1: session_meta bookkeeping" in n for n in plan.params["notes"])
    code, report = heal("--profile", "legacy", "--only", "transcript_on_disk_only", "--apply", "--json")
    [done] = actions(report, "legacy")
    assert done["status"] == "applied" and "bad lines not imported: 3, 4, 5, 7" in done["reason"]
    assert transcript(s, SID) == expected([EARLIER[0], EARLIER[3]] + KEPT)
    assert not rows(s, "SELECT 1 FROM messages WHERE content LIKE '%once upon%' OR content LIKE '%no role at all%'")


# --------------------------------------------------------------------------- other shapes

def test_missing_session_row_is_created_from_the_file(aged_home):
    s = store(aged_home, "default")  # 0.19.0
    sid = "20260210_080000_0ddba11"
    lines = [{"role": "session_meta", "source": "discord"}] + stamped(EARLIER, 1.77e9)
    write_jsonl(s, sid, lines)
    code, report = heal("--profile", "default", "--only", "transcript_on_disk_only", "--apply", "--json")
    assert actions(report, "default")[0]["status"] == "applied", report
    [(source, started, owner, count)] = rows(
        s, "SELECT source, started_at, profile_name, message_count FROM sessions WHERE id = ?", (sid,))
    assert (source, started, owner, count) == ("discord", 1.77e9, "default", len(EARLIER))
    assert transcript(s, sid) == expected(EARLIER)


def test_without_metadata_the_source_is_unknown(aged_home):
    s = store(aged_home, "edge")
    sid = "20260210_090000_0ddba12"
    write_jsonl(s, sid, [dict(m, timestamp="2026-02-10T09:00:00+00:00") for m in EARLIER[:2]])
    code, report = heal("--profile", "edge", "--only", "transcript_on_disk_only", "--apply", "--json")
    assert actions(report, "edge")[0]["status"] == "applied", report
    assert rows(s, "SELECT source, started_at FROM sessions WHERE id = ?", (sid,)) == [("unknown", 1770714000.0)]


def test_diverted_turns_after_the_store_rows_are_appended(aged_home):
    """Divert files hold only the turns the store could not take: nothing to supersede."""
    s = store(aged_home, "edge")
    sid = ids("edge")["long"]
    before = exact_rows(s, sid)
    write_jsonl(s, sid, [{"role": "user", "content": "one more (diverted)"},
                         {"role": "assistant", "content": "noted (diverted)"}])
    code, report = heal("--profile", "edge", "--only", "transcript_on_disk_only", "--apply", "--json")
    assert actions(report, "edge")[0]["status"] == "applied", report
    assert exact_rows(s, sid)[:len(before)] == before
    assert transcript(s, sid)[-2:] == [("user", "one more (diverted)"), ("assistant", "noted (diverted)")]
    assert rows(s, "SELECT COUNT(*) FROM messages WHERE session_id = ? AND active = 0", (sid,)) == [(0,)]


def test_archive_setting_moves_the_file_after_a_verified_import(aged_home, settings, data_dir):
    settings.HERMES_ARCHIVE_IMPORTED_JSONL = True
    s = store(aged_home, "default")
    write_session(s, "default", KEPT)
    path = write_jsonl(s, SID, EARLIER + KEPT)
    content = path.read_bytes()
    code, report = heal("--profile", "default", "--only", "transcript_on_disk_only", "--apply", "--json")
    [done] = actions(report, "default")
    assert done["status"] == "applied" and "archived to" in done["reason"]
    assert not path.exists()
    [archived] = list((data_dir / "archive" / "jsonl").rglob(f"{SID}.jsonl"))
    assert archived.read_bytes() == content and "/default/sessions/" in str(archived)
    code, again = heal("--profile", "default", "--apply", "--json")
    assert not actions(again, "default") and not [f for f in profile_entry(again, "default")["findings"]
                                                   if f["check"] in ("transcript_on_disk_only", "leftover_files")]


# --------------------------------------------------------------------------- refusals

def test_a_jsonl_written_moments_ago_is_not_imported(aged_home):
    s = store(aged_home, "default")
    write_session(s, "default", KEPT)
    write_jsonl(s, SID, EARLIER + KEPT, quiet=False)
    code, report = heal("--profile", "default", "--only", "transcript_on_disk_only", "--apply", "--json")
    [skipped] = actions(report, "default")
    assert skipped["status"] == "skipped" and "an agent may still be diverting" in skipped["reason"]
    assert transcript(s, SID) == expected(KEPT)


def test_a_live_session_is_refused(aged_home):
    s = store(aged_home, "default")
    hermes(s, f"db.create_session({SID!r}, 'telegram')\ndb.append_message({SID!r}, 'user', 'and on Friday?')\n")
    write_jsonl(s, SID, EARLIER + KEPT[:1])
    code, report = heal("--profile", "default", "--only", "transcript_on_disk_only", "--apply", "--json")
    [refused] = actions(report, "default")
    assert refused["status"] == "skipped" and "looks" in refused["reason"] and "activity" in refused["reason"]
    assert AuditEvent.objects.get(action="import_jsonl_transcript").outcome == "refused"
    assert transcript(s, SID) == [("user", "and on Friday?")]


def test_a_write_between_plan_and_apply_is_never_overwritten(aged_home):
    s = store(aged_home, "default")
    write_session(s, "default", KEPT)
    write_jsonl(s, SID, EARLIER + KEPT)
    with s.read() as conn:
        [f] = findings(s)
        plan = plan_for(s, conn, s.capabilities(conn), f)
    with damage(s) as db:  # an agent appended meanwhile
        db.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', 'late', ?)",
                   (SID, time.time() - 40 * DAY))
    outcome = Applier(actor_label="test").apply(s, plan)
    assert outcome.status == "skipped" and "changed since it was planned" in outcome.reason
    assert transcript(s, SID) == expected(KEPT) + [("user", "late")]
