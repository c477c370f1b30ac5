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
from django.urls import reverse

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

@pytest.mark.parametrize("profile", ["archive", "legacy"])
def test_before_0_17_an_import_that_would_write_later_rows_again_is_blocked(aged_home, profile, admin_client):
    """0.13.0 (schema 11) and 0.15.0 have no messages.active: the store's later rows
    could only be moved (removed, then inserted again), never hidden. That would be
    a deletion, so the import is blocked, as recover_messages is, and says why;
    nothing is written and the finding stays for an admin to see."""
    s = store(aged_home, profile)
    write_session(s, profile, KEPT)
    before = exact_rows(s, SID)
    start = rows(s, "SELECT MIN(timestamp) FROM messages WHERE session_id = ?", (SID,))[0][0] - 3600
    lines = [{"role": "session_meta", "session": {"id": SID, "source": "telegram"}}] + stamped(EARLIER, start) + [
        dict(m, timestamp=t) for m, (t,) in zip(KEPT, rows(s, "SELECT timestamp FROM messages WHERE session_id = ? ORDER BY id", (SID,)))]
    path = write_jsonl(s, SID, lines)
    original = path.read_bytes()
    total = rows(s, "SELECT COUNT(*), MAX(id) FROM messages")

    with s.read() as conn:
        [f] = findings(s)
        plan = plan_for(s, conn, s.capabilities(conn), f)
    assert plan.blocked == ("this store's schema (before hermes-agent 0.17) cannot hide rows: importing here would "
                            f"remove and re-insert {len(KEPT)} later row(s); only messages after the last row can be "
                            "imported into it")
    assert plan.next_step.startswith("Upgrade this profile's Hermes to 0.17 or later")
    assert not any(c.op == "move" for c in plan.changes)
    # The preview says what the admin can do instead of only offering a plan that cannot run.
    page = admin_client.get(reverse("repair_preview", args=[s.key, SID]) + "?check=transcript_on_disk_only")
    html = page.content.decode()
    assert "This repair cannot be applied" in html and 'id="next-step"' in html
    assert "Upgrade this profile&#x27;s Hermes to 0.17 or later" in html and "repair_apply" not in html and "Apply</button>" not in html
    migration = admin_client.get(reverse("migrate_profile", args=[s.key])).content.decode()
    assert "Not applicable now" in migration and "What you can do: Upgrade this profile&#x27;s Hermes" in migration

    code, report = heal("--profile", profile, "--only", "transcript_on_disk_only", "--apply", "--json")
    [done] = actions(report, profile)
    assert code == 1 and done["status"] == "skipped" and done["reason"] == plan.blocked
    assert [x["check"] for x in profile_entry(report, profile)["findings"]] == ["transcript_on_disk_only"]
    assert exact_rows(s, SID) == before and rows(s, "SELECT COUNT(*), MAX(id) FROM messages") == total
    assert path.read_bytes() == original
    assert not AuditEvent.objects.filter(action="import_jsonl_transcript", outcome="applied").exists()


def test_schema_11_store_takes_messages_after_its_last_row(aged_home):
    """On 0.13.0 (schema 11) what comes after the store's rows imports as usual: nothing
    is written again, so nothing would need hiding."""
    s = store(aged_home, "archive")
    write_session(s, "archive", KEPT)
    before = exact_rows(s, SID)
    last = rows(s, "SELECT MAX(timestamp) FROM messages WHERE session_id = ?", (SID,))[0][0]
    lines = [{"role": "session_meta", "session": {"id": SID, "source": "telegram"}}] + KEPT + stamped(EARLIER, last + 60)
    path = write_jsonl(s, SID, lines)
    original = path.read_bytes()

    code, report = heal("--profile", "archive", "--only", "transcript_on_disk_only", "--apply", "--json")
    [done] = actions(report, "archive")
    assert done["status"] == "applied", done
    assert code == 0 and profile_entry(report, "archive")["findings"] == []
    assert transcript(s, SID) == expected(KEPT + EARLIER)
    assert exact_rows(s, SID)[:len(KEPT)] == before  # the store's rows untouched, in place
    assert [r[0] for r in rows(s, "SELECT timestamp FROM messages WHERE session_id = ? ORDER BY id", (SID,))][len(KEPT):] \
        == [m["timestamp"] for m in lines[len(KEPT) + 1:]]
    hits = rows(s, "SELECT m.session_id FROM messages_fts f JOIN messages m ON m.id = f.rowid WHERE messages_fts MATCH 'quokka'")
    assert hits == [(SID,)]
    assert rows(s, "SELECT message_count, tool_call_count FROM sessions WHERE id = ?", (SID,)) == [(9, 1)]
    assert path.read_bytes() == original
    event = AuditEvent.objects.get(action="import_jsonl_transcript", outcome="applied")
    assert event.session_ids == [SID] and event.backup_path and event.rows_changed == len(EARLIER)

    code, again = heal("--profile", "archive", "--only", "transcript_on_disk_only", "--apply", "--json")
    assert code == 0 and again["summary"]["applied"] == 0 and actions(again, "archive") == []


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
    # The plan's "recount" is listed among its changes (before the messages), as written.
    counter = [c for c in actions(report, profile)[0]["changes"] if c["column"] == "message_count"]
    assert counter == [{"op": "update", "table": "sessions", "key": {"id": SID}, "column": "message_count",
                        "before": len(KEPT), "after": 9}]


def test_bad_lines_are_reported_with_line_numbers_and_the_rest_is_imported(aged_home):
    s = store(aged_home, "research")  # 0.17.0
    write_session(s, "research", KEPT)
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
    code, report = heal("--profile", "research", "--only", "transcript_on_disk_only", "--apply", "--json")
    [done] = actions(report, "research")
    assert done["status"] == "applied" and "lines not imported (unreadable), by line number: 3, 4, 5, 7" in done["reason"]
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
    assert refused["status"] == "refused" and "looks" in refused["reason"] and "activity" in refused["reason"]
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


# --------------------------------------------------------------------------- odd lines (review of issue 4)

DEEP = "[" * 5000 + "]" * 5000              # the parser itself hits the recursion limit
NESTED = '{"role": "user", "content": ' + "[" * 70 + '"x"' + "]" * 70 + "}"  # parses, still too deep
SURROGATE = '{"role": "user", "content": "half a character: \\ud800"}'
HUGE_TS = '{"role": "assistant", "content": "a huge timestamp", "timestamp": 1' + "0" * 400 + "}"


def test_classify_and_parse_time_never_raise_on_odd_lines():
    from sessions_app.stores import jsonl

    assert jsonl.classify(4, DEEP.encode()).kind == "bad"
    assert jsonl.classify(4, DEEP.encode()).problem == "nested deeper than 64 levels"
    assert jsonl.classify(5, NESTED.encode()).problem == "nested deeper than 64 levels"
    odd = jsonl.classify(6, SURROGATE.encode())
    assert (odd.number, odd.kind) == (6, "bad") and "lone surrogate" in odd.problem
    assert jsonl.classify(7, b'{"role": "user", "\\udfff": 1}').kind == "bad"  # in a key too
    assert jsonl.classify(8, HUGE_TS.encode()).kind == "message"
    for value in (10**400, "1" + "0" * 400, "9999-99-99", "0001-01-01T00:00:00", float("nan"), float("inf"), [1]):
        assert jsonl.parse_time(value) is None


def test_odd_lines_are_bad_lines_and_the_good_ones_are_imported(aged_home):
    """Deep nesting, a lone surrogate and a 400-digit timestamp once crashed the check
    (reduced to a note: exit 0, nothing imported, every night) and the pages."""
    s = store(aged_home, "default")
    write_session(s, "default", KEPT)
    lines = [EARLIER[0], DEEP, SURROGATE, HUGE_TS, NESTED, dict(EARLIER[3], token_count=10**30), *KEPT]
    write_jsonl(s, SID, lines)
    [f] = findings(s)
    assert [b["line"] for b in f.evidence["bad_lines"]] == [2, 3, 5]
    assert "line 2: nested deeper than 64 levels" in f.detail and "line 3: a lone surrogate" in f.detail
    with s.read() as conn:
        plan = plan_for(s, conn, s.capabilities(conn), f)
    assert plan.params["imported"] == [1, 4, 6]
    assert any("3 line(s) carry no usable timestamp (line 1, 4, 6)" in n for n in plan.params["notes"])
    assert any("Field 'token_count' of 1 line(s) is not kept" in n for n in plan.params["notes"])

    code, report = heal("--profile", "default", "--only", "transcript_on_disk_only", "--apply", "--json")
    [done] = actions(report, "default")
    assert done["status"] == "applied" and "lines not imported (unreadable), by line number: 2, 3, 5" in done["reason"], done
    assert code == 0 and profile_entry(report, "default")["error"] is None
    assert transcript(s, SID) == expected([EARLIER[0], {"role": "assistant", "content": "a huge timestamp"},
                                           EARLIER[3]] + KEPT)


def test_a_check_that_crashes_makes_the_run_exit_2(aged_home, monkeypatch):
    """A crashed check is no longer only a note nobody reads: the profile entry gets an
    error and the command exits 2 (its findings are unknown), other profiles still pass."""
    from sessions_app.checks.files import TranscriptOnDiskOnly

    def boom(self, ctx):
        raise RuntimeError("an unexpected value")
        yield  # pragma: no cover

    monkeypatch.setattr(TranscriptOnDiskOnly, "run", boom)
    code, report = heal("--profile", "default", "--only", "transcript_on_disk_only", "--json")
    entry = profile_entry(report, "default")
    assert code == 2 and entry["status"] == "ok"
    assert entry["error"] == "check(s) could not run: transcript_on_disk_only could not run: RuntimeError: an unexpected value"
    code, text = heal("--profile", "default", "--only", "transcript_on_disk_only")
    assert code == 2 and "transcript_on_disk_only could not run" in text


def test_a_turn_diverted_after_the_import_is_not_archived_unimported(aged_home, settings, monkeypatch):
    """Archiving compares the file with the plan's guard first: a line appended between
    the import's COMMIT and the archiving keeps the file in place, for the next run."""
    from sessions_app.actions.transcripts import ImportJsonlTranscript

    settings.HERMES_ARCHIVE_IMPORTED_JSONL = True
    s = store(aged_home, "default")
    write_session(s, "default", KEPT)
    path = write_jsonl(s, SID, EARLIER + KEPT)
    verify = ImportJsonlTranscript.verify
    late = json.dumps({"role": "user", "content": "diverted after the commit"}) + "\n"

    def verify_then_divert(self, conn, caps, plan):
        problem = verify(self, conn, caps, plan)
        with open(path, "a", encoding="utf-8") as fh:  # an agent diverts a turn right now
            fh.write(late)
        return problem

    monkeypatch.setattr(ImportJsonlTranscript, "verify", verify_then_divert)
    code, report = heal("--profile", "default", "--only", "transcript_on_disk_only", "--apply", "--json")
    [done] = actions(report, "default")
    assert done["status"] == "applied" and "not archived: it changed after the import was planned" in done["reason"]
    assert path.read_text(encoding="utf-8").endswith(late)  # still in sessions/, with the diverted line
    assert not (settings.DATA_DIR / "archive").exists() or not list((settings.DATA_DIR / "archive").rglob("*.jsonl"))
    [f] = findings(s)  # the diverted line is still to import
    assert f.count == 1


def test_a_turn_appended_during_the_archive_move_puts_the_file_back(aged_home, settings, monkeypatch):
    from sessions_app.actions import transcripts

    settings.HERMES_ARCHIVE_IMPORTED_JSONL = True
    s = store(aged_home, "default")
    write_session(s, "default", KEPT)
    path = write_jsonl(s, SID, EARLIER + KEPT)
    real = transcripts.move_without_loss
    late = json.dumps({"role": "user", "content": "appended through an open descriptor"}) + "\n"

    def move_while_appending(source, target):
        final = real(source, target)
        if source == path:
            with open(final, "a", encoding="utf-8") as fh:  # the agent's descriptor follows the inode
                fh.write(late)
        return final

    monkeypatch.setattr(transcripts, "move_without_loss", move_while_appending)
    code, report = heal("--profile", "default", "--only", "transcript_on_disk_only", "--apply", "--json")
    [done] = actions(report, "default")
    assert done["status"] == "applied" and "changed while it was being archived; put back in place" in done["reason"]
    assert path.read_text(encoding="utf-8").endswith(late)
    assert not list((settings.DATA_DIR / "archive").rglob("*.jsonl"))


def _opened(monkeypatch):
    """Record every path Python code opens (builtins.open and os.open)."""
    import builtins

    seen = []
    real_open, real_os_open = builtins.open, os.open

    def spy_open(file, *args, **kwargs):
        seen.append(str(file))
        return real_open(file, *args, **kwargs)

    def spy_os_open(path, *args, **kwargs):
        seen.append(str(path))
        return real_os_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", spy_open)
    monkeypatch.setattr(os, "open", spy_os_open)
    return seen


@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_a_transcript_linked_to_the_store_is_never_opened(aged_home, monkeypatch, link):
    """``sessions/<id>.jsonl`` as a symlink or a hard link to ``state.db``: neither the
    check nor the import action opens it as a plain file (ground rule 5)."""
    from sessions_app.stores import jsonl

    s = store(aged_home, "default")
    s.profile.sessions_dir.mkdir(exist_ok=True)
    path = s.profile.sessions_dir / f"{SID}.jsonl"
    (os.symlink if link == "symlink" else os.link)(s.path, path)
    store_inode = os.stat(s.path).st_ino
    seen = _opened(monkeypatch)
    assert not findings(s)
    parsed = jsonl.read_file(path, SID, store_path=s.path)
    assert parsed.error and not parsed.messages and jsonl.file_identity(path, store_path=s.path) is None
    assert "not a regular file" in parsed.error if link == "symlink" else "store's own database file" in parsed.error
    opened = [p for p in seen if os.path.exists(p) and os.stat(p).st_ino == store_inode]
    assert opened == []


def test_a_symlinked_transcript_swapped_in_after_planning_is_not_imported(aged_home, tmp_path):
    """The import action reads through the same guard: a regular file planned, then
    replaced by a symlink to another file, is skipped as changed, nothing written."""
    s = store(aged_home, "default")
    write_session(s, "default", KEPT)
    path = write_jsonl(s, SID, EARLIER + KEPT)
    with s.read() as conn:
        [f] = findings(s)
        plan = plan_for(s, conn, s.capabilities(conn), f)
    elsewhere = tmp_path / "elsewhere.jsonl"
    path.rename(elsewhere)
    path.symlink_to(elsewhere)
    outcome = Applier(actor_label="test").apply(s, plan)
    assert outcome.status == "skipped" and "changed since it was planned" in outcome.reason
    assert transcript(s, SID) == expected(KEPT)
