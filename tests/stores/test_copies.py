"""Copy readers: every kind into one shape, bad files as clear errors, big files in
bounded memory, nothing modified."""

import hashlib
import json
import os
import tracemalloc

import pytest

from sessions_app import trash
from sessions_app.stores import copies, recovery
from sessions_app.stores.backup import backup_store
from tests.checks.helpers import damage, store_of
from tests.conftest import IDS

SID = IDS["cli_main"]


@pytest.fixture
def s(hermes_home, settings, tmp_path):
    settings.DATA_DIR = tmp_path / "data"
    store = store_of(hermes_home, "default")
    store.profile.sessions_dir.mkdir(exist_ok=True)
    return store


def _write(store, name, data) -> "os.PathLike":
    path = store.profile.sessions_dir / name
    path.write_bytes(data if isinstance(data, bytes) else json.dumps(data, indent=2).encode())
    return path


def _read(store, name, kind):
    return copies.read_json_copy(store.profile.sessions_dir / name, kind, SID, store_paths=[store.path])


def _snapshot(messages, sid=SID):
    return {"session_id": sid, "session_start": "2026-03-01T09:00:00", "message_count": len(messages),
            "messages": messages}


def test_snapshot_in_one_shape_with_provenance(s):
    msgs = [{"role": "user", "content": "hi"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
                                                                "function": {"name": "ls", "arguments": "{}"}}],
             "reasoning": "look first", "finish_reason": "tool_calls"},
            {"role": "tool", "content": "a.txt", "tool_call_id": "c1", "name": "ls"},
            {"role": "assistant", "content": [{"type": "text", "text": "one file"}]}]
    path = _write(s, f"session_{SID}.json", _snapshot(msgs))
    before = (path.read_bytes(), os.stat(path).st_mtime_ns)
    c = _read(s, path.name, "snapshot")
    assert c.complete and not c.error and c.message_count == 4
    p = c.provenance
    assert (p.kind, p.message_count, p.size) == ("snapshot", 4, len(before[0]))
    assert p.sha256 == hashlib.sha256(before[0]).hexdigest() and p.mtime == os.stat(path).st_mtime
    got = c.messages_at({1, 2, 3})
    assert got[1].tool_calls[0]["id"] == "c1" and got[1].reasoning == "look first" and got[1].timestamp is None
    assert got[2].tool_name == "ls" and got[2].tool_call_id == "c1"
    assert got[3].content == [{"type": "text", "text": "one file"}]
    assert got[3].row_dict()["role"] == "assistant" and c.meta["session_start"] == "2026-03-01T09:00:00"
    assert (path.read_bytes(), os.stat(path).st_mtime_ns) == before  # read-only


def test_request_dump_skips_the_system_prompt_and_notes_the_failed_turn(s):
    dump = {"timestamp": "2026-03-01T09:05:00", "session_id": SID, "reason": "non_retryable_client_error",
            "request": {"body": {"messages": [{"role": "system", "content": "You are Hermes."},
                                              {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                                              {"role": "user", "content": "c"}]}}}
    c = _read(s, _write(s, f"request_dump_{SID}_20260301_090500_000001.json", dump).name, "request_dump")
    assert [e.role for e in c.entries] == ["user", "assistant", "user"]
    assert c.entries[-1].note == "the user message of the failed request"
    assert c.skipped == [{"ref": 0, "problem": "system prompt (Hermes keeps it on the session row)"}]
    assert c.meta["reason"] == "non_retryable_client_error"


def test_truncated_snapshot_keeps_what_came_before(s):
    whole = json.dumps(_snapshot([{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"},
                                  {"role": "user", "content": "three"}]), indent=2).encode()
    cut = whole[: whole.index(b'"three"')]
    c = _read(s, _write(s, f"session_{SID}.json", cut).name, "snapshot")
    assert not c.complete and c.error.startswith("truncated") and c.message_count == 2
    assert c.messages_at({1})[1].content == "two"


@pytest.mark.parametrize("data, error", [
    (b"<html>502 Bad Gateway</html>", "invalid JSON"),
    (b'{"session_id": "x\xff\xfe", "messages": []}', "not UTF-8"),
    (b"", "truncated"),
    (b'{"messages": []} {"more": 1}', "extra data"),
])
def test_files_that_are_not_json_give_clear_errors(s, data, error):
    c = _read(s, _write(s, f"request_dump_{SID}_20260301_090500_000001.json", data).name, "request_dump")
    assert not c.complete and c.error.startswith(error) and not c.entries
    assert "502" not in c.error and "\xff" not in c.error  # the file's text is never quoted


@pytest.mark.parametrize("doc, error, skipped", [
    ([{"role": "user", "content": "a list at the top"}], "no messages list", []),
    ({"session_id": SID, "messages": "not a list"}, "no messages list", []),
    ({"session_id": SID, "messages": [1, "two", {"content": "no role"}, {"role": "narrator", "content": "x"},
                                      {"role": "user", "content": "ok"}]}, "",
     ["not a JSON object (int)", "not a JSON object (str)", "no role", "unknown role 'narrator'"]),
])
def test_wrong_shapes(s, doc, error, skipped):
    c = _read(s, _write(s, f"session_{SID}.json", doc).name, "snapshot")
    assert c.error == ("" if not error else f"{error} in the file")
    assert [x["problem"] for x in c.skipped] == skipped
    assert c.message_count == (1 if skipped else 0)


def test_a_copy_naming_another_session_is_refused(s):
    path = _write(s, f"session_{SID}.json", _snapshot([{"role": "user", "content": "x"}], sid="someone-else"))
    with pytest.raises(copies.CopyError, match="belongs to session 'someone-else'"):
        _read(s, path.name, "snapshot")


def test_a_store_under_a_copy_name_is_never_opened(s):
    os.link(s.path, s.profile.sessions_dir / f"session_{SID}.json")
    with pytest.raises(copies.CopyError, match="store's own database file"):
        _read(s, f"session_{SID}.json", "snapshot")
    assert copies.copies_of(s, SID).copies == []  # not even listed


def test_a_copy_rewritten_after_reading_is_not_used(s):
    path = _write(s, f"session_{SID}.json", _snapshot([{"role": "user", "content": "x"}]))
    c = _read(s, path.name, "snapshot")
    path.write_text(json.dumps(_snapshot([{"role": "user", "content": "y"}])))
    with pytest.raises(copies.CopyError, match="changed since it was read"):
        c.messages_at({0})


def test_a_big_snapshot_is_read_in_bounded_memory(s):
    """40 MB of snapshot: the reader holds one message at a time, never the document."""
    path = s.profile.sessions_dir / f"session_{SID}.json"
    body = "x" * 20_000
    with open(path, "w") as fh:
        fh.write('{"session_id": "%s", "messages": [' % SID)
        for n in range(2000):
            fh.write(("," if n else "") + json.dumps({"role": "user" if n % 2 == 0 else "assistant",
                                                     "content": f"{n} {body}"}))
        fh.write("]}")
    assert os.stat(path).st_size > 40_000_000
    tracemalloc.start()
    try:
        c = _read(s, path.name, "snapshot")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert c.complete and c.message_count == 2000
    assert peak < 8 * 2**20, f"peak {peak} bytes"


def test_jsonl_copy(s):
    lines = [{"role": "session_meta", "source": "telegram"}, {"role": "user", "content": "hi", "timestamp": 1772355600},
             "a bare string", {"role": "assistant", "content": "hello"}]
    path = s.profile.sessions_dir / f"{SID}.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n{broken\n")
    c = copies.read_jsonl_copy(path, SID, store_path=s.path)
    assert [e.role for e in c.entries] == ["user", "assistant"] and c.entries[0].timestamp == 1772355600.0
    assert [x["ref"] for x in c.skipped] == [3, 5]
    assert c.messages_at({1})[1].content == "hello"


def test_backup_and_trash_copies(s):
    """A dashboard backup taken before rows were lost, and a trash entry holding the
    rows a deletion exported: both read through read-only connections."""
    with s.read() as conn:
        before = recovery.store_messages(conn, s.capabilities(conn), SID)
    record = backup_store(s, "test")
    entry = trash.new_entry(s.key, SID, store_path=str(s.path), targets=[SID], state="deleted")
    cols = ("id", "session_id", "role", "content", "tool_call_id", "tool_calls", "tool_name", "timestamp",
            "active", "compacted")
    trash.export_rows(entry, s.path, {"messages": (cols, "session_id IN (SELECT v FROM temp.t)")}, {"t": [SID]})
    with damage(s) as conn:
        last = conn.execute("SELECT MAX(id) FROM messages WHERE session_id = ?", (SID,)).fetchone()[0]
        conn.execute("DELETE FROM messages WHERE id = ?", (last,))
    found = copies.copies_of(s, SID)
    by_kind = {c.kind: c for c in found.copies}
    assert set(by_kind) == {"backup", "trash"} and not found.failed
    visible = [r for r in before if r.visible]
    for c in by_kind.values():
        assert c.message_count == len(visible)
        assert [e.key for e in c.entries] == [r.key for r in visible]
    assert by_kind["backup"].sha256 == record.sha256
    assert by_kind["trash"].sha256 == hashlib.sha256(entry.rows_path.read_bytes()).hexdigest()
    with s.read() as conn:
        plan = recovery.plan_recovery(SID, recovery.store_messages(conn, s.capabilities(conn), SID), found.copies)
    [ins] = plan.insertions
    assert ins.source.kind == "backup" and not ins.timestamp_estimated  # its own time fits
    assert ins.message.ref == last and ins.after_id == before[-2].id


def test_hermes_own_store_copies_are_listed_not_read(s):
    home = s.path.parent
    (home / "state.db.malformed-backup-20260301_090000").write_bytes(b"SQLite format 3\x00junk")
    (home / "state.db.zeroed-20260301-090000-42.bak").write_bytes(b"\x00" * 10)
    (home / "state-snapshots" / "20260301-090000").mkdir(parents=True)
    (home / "state-snapshots" / "20260301-090000" / "state.db").write_bytes(b"SQLite format 3\x00")
    unread = {u.kind: u for u in copies.copies_of(s, SID).unread}
    assert set(unread) == {"malformed_backup", "quarantined", "state_snapshot"}
    assert "-wal/-shm" in unread["state_snapshot"].reason and "not SQLite" in unread["quarantined"].reason
    assert not (home / "state-snapshots" / "20260301-090000" / "state.db-wal").exists()
    assert not (home / "state.db.malformed-backup-20260301_090000-shm").exists()


def test_store_copy_that_is_not_a_database(s, settings):
    folder = settings.DATA_DIR / "backups" / "20260301-090000-default-x"
    folder.mkdir(parents=True)
    (folder / "state.db").write_bytes(b"not a database at all")
    (folder / "backup.json").write_text(json.dumps({"store_path": str(s.path), "profile": "default",
                                                    "created_at": 1772355600, "sha256": "0" * 64}))
    found = copies.copies_of(s, SID)
    assert [f["kind"] for f in found.failed] == ["backup"] and "cannot be read" in found.failed[0]["error"]
    assert (folder / "state.db").read_bytes() == b"not a database at all"
    assert sorted(os.listdir(folder)) == ["backup.json", "state.db"]  # no sidecar created
