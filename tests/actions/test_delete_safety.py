"""Issue 5, review fixes: restores that stay possible, honest outcomes after a commit,
a purge that spares running deletions, liveness of detached and restored sessions,
single-use confirmations, quoted column names.

Same stores as ``test_delete.py``: real-release copies aged 40 days; live agents are
real hermes-agent 0.19.0 processes.
"""

import sqlite3
import time
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from sessions_app import trash
from sessions_app.actions import deletion
from sessions_app.locks import run_lock
from sessions_app.models import AuditEvent
from tests.checks.helpers import damage, hermes, hermes_background
from tests.conftest import ids

from .conftest import store
from .delete_helpers import confirm, dump, rows, stop

pytestmark = pytest.mark.django_db
DAY = 86_400


def deleter(label="alice"):
    return deletion.Deleter(actor_label=label)


def events(action=deletion.DELETE_ACTION):
    return list(AuditEvent.objects.filter(action=action).order_by("id"))


def lock(s, sid):
    """A live hermes-agent 0.19.0 process holding a compression lock on ``sid``."""
    return hermes_background(s, f"""
assert db.try_acquire_compression_lock({sid!r}, f"pid={{os.getpid()}}:tid=1", ttl_seconds=3600)
print("READY", flush=True)
time.sleep(600)
""")


def unlock(s, sid):
    """Remove the lock a killed holder left (its holder cannot be proved dead)."""
    with damage(s) as db:
        db.execute("DELETE FROM compression_locks WHERE session_id = ?", (sid,))


# --------------------------------------------------------------------------- 1. shared prompts

def test_restore_survives_a_shared_prompt_collected_by_a_later_deletion(aged_home):
    """Two sessions share a prompt; deleting the first keeps it (still used), deleting
    the second collects it. The first one's restore must not depend on the store:
    every prompt a target references is in its trash entry."""
    sids = ids("edge")
    s = store(aged_home, "edge")
    first, second = sids["cli_main"], sids["long"]
    [(digest,)] = rows(s, "SELECT system_prompt_hash FROM sessions WHERE id = ?", (first,))
    with damage(s) as db:
        db.execute("UPDATE sessions SET system_prompt_hash = ? WHERE id = ?", (digest, second))
    before = dump(s)
    plan, item = confirm(s, first)
    assert plan.prompts == [] and plan.prompt_refs == [digest]
    one = deleter().delete(s, item)
    assert one.status == "applied" and "system_prompts" not in one.counts  # nothing collected...
    assert trash.rows_tables(one.entry)["system_prompts"]  # ...but exported
    two = deleter().delete(s, confirm(s, second)[1])
    assert two.status == "applied" and two.counts["system_prompts"] == 1
    assert rows(s, "SELECT COUNT(*) FROM system_prompts WHERE hash = ?", (digest,)) == [(0,)]

    back = deleter().restore(s, trash.get_entry(one.entry.id))
    assert back.status == "applied", back.reason
    assert rows(s, "SELECT system_prompt_hash FROM sessions WHERE id = ?", (first,)) == [(digest,)]
    assert deleter().restore(s, trash.get_entry(two.entry.id)).status == "applied"
    assert dump(s) == before


def test_an_entry_without_its_prompt_restores_with_the_link_dropped(aged_home):
    """An entry written before every referenced prompt was exported, whose prompt a
    later deletion collected: restored with ``system_prompt_hash`` NULL, said so."""
    sids = ids("edge")
    s = store(aged_home, "edge")
    first, second = sids["cli_main"], sids["long"]
    [(digest,)] = rows(s, "SELECT system_prompt_hash FROM sessions WHERE id = ?", (first,))
    with damage(s) as db:
        db.execute("UPDATE sessions SET system_prompt_hash = ? WHERE id = ?", (digest, second))
    one = deleter().delete(s, confirm(s, first)[1])
    old = sqlite3.connect(one.entry.rows_path)  # as the previous version wrote it
    old.execute("DELETE FROM system_prompts")
    old.commit()
    old.close()
    assert deleter().delete(s, confirm(s, second)[1]).status == "applied"  # collects the prompt

    back = deleter().restore(s, trash.get_entry(one.entry.id))
    assert back.status == "applied", back.reason
    assert back.report["system_prompt_links_dropped"] == 1 and "system prompt links dropped: 1" in back.reason
    assert rows(s, "SELECT system_prompt_hash FROM sessions WHERE id = ?", (first,)) == [(None,)]
    assert rows(s, "SELECT COUNT(*) FROM messages WHERE session_id = ?", (first,))[0][0] > 0


# --------------------------------------------------------------------------- 2. after the commit

def test_a_file_that_will_not_move_after_the_commit_is_deleted_but_said(aged_home, monkeypatch):
    """The store committed: the outcome is applied with the real counts, the reason
    says what did not follow, the entry is 'deleted' and the file is where it was."""
    s = store(aged_home, "default")
    sid = ids("default")["hostile"]
    folder = s.profile.sessions_dir
    folder.mkdir(exist_ok=True)
    (folder / f"{sid}.jsonl").write_bytes(b"kept\n")
    (folder / f"{sid}.json").write_bytes(b"{}\n")
    real = deletion.move_without_loss

    def stubborn(source, target):
        if source.name.endswith(".jsonl"):
            raise PermissionError(13, "Permission denied", str(source))
        return real(source, target)

    monkeypatch.setattr(deletion.apply, "move_without_loss", stubborn)
    done = deleter().delete(s, confirm(s, sid)[1])
    assert done.status == "applied" and done.committed
    assert done.reason.startswith("deleted, but file ") and "Permission denied" in done.reason
    assert f"moved to the trash ({done.entry.id})" in done.reason
    assert rows(s, "SELECT COUNT(*) FROM sessions WHERE id = ?", (sid,)) == [(0,)]
    assert (folder / f"{sid}.jsonl").read_bytes() == b"kept\n"  # not lost, not half-moved
    assert (done.entry.files_dir / f"{sid}.json").read_bytes() == b"{}\n"
    entry = trash.get_entry(done.entry.id)
    assert entry.state == "deleted" and entry.manifest["files"] == [f"{sid}.json"]
    assert "Permission denied" in entry.manifest["file_problems"][0]
    [event] = events()
    assert event.outcome == "applied" and event.reason == done.reason
    assert event.rows_changed == done.rows_changed > 0 and event.changes and event.backup_path
    assert event.plan["problems_after_commit"] == done.problems


def test_an_error_after_the_commit_is_applied_not_failed(aged_home, monkeypatch):
    s = store(aged_home, "default")
    sid = ids("default")["hostile"]

    def broken(*args):
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(deletion.apply, "verify_deleted", broken)
    done = deleter().delete(s, confirm(s, sid)[1])
    assert done.status == "applied"
    assert done.reason.startswith("deleted, but OperationalError: database is locked; moved to the trash")
    [event] = events()
    assert (event.outcome, event.rows_changed) == ("applied", done.rows_changed) and event.rows_changed > 0
    assert trash.get_entry(done.entry.id).state == "deleted"


def test_a_file_that_will_not_move_back_is_restored_but_said(aged_home, monkeypatch):
    s = store(aged_home, "default")
    sid = ids("default")["hostile"]
    folder = s.profile.sessions_dir
    folder.mkdir(exist_ok=True)
    (folder / f"{sid}.jsonl").write_bytes(b"transcript\n")
    done = deleter().delete(s, confirm(s, sid)[1])
    assert done.status == "applied" and not done.problems

    def stubborn(source, target):
        raise PermissionError(13, "Permission denied", str(target))

    monkeypatch.setattr(deletion.restore, "move_without_loss", stubborn)
    back = deleter().restore(s, trash.get_entry(done.entry.id))
    assert back.status == "applied" and back.reason.startswith("restored, but file ")
    assert rows(s, "SELECT COUNT(*) FROM sessions WHERE id = ?", (sid,)) == [(1,)]
    entry = trash.get_entry(done.entry.id)
    assert entry.state == "restored" and "Permission denied" in entry.manifest["restore_file_problems"][0]
    assert (entry.files_dir / f"{sid}.jsonl").read_bytes() == b"transcript\n"  # still safe in the entry
    [event] = events(deletion.RESTORE_ACTION)
    assert event.outcome == "applied" and event.rows_changed > 0 and event.changes
    again = deleter().restore(s, entry)
    assert again.status == "refused" and "restored" in again.reason


# --------------------------------------------------------------------------- 3. purge

def test_purge_spares_a_running_deletions_pending_entry(aged_home):
    s = store(aged_home, "default")
    sid = ids("default")["hostile"]
    running = trash.new_entry("default", sid, store_path=str(s.path), session_id=sid)  # pending, seconds old
    stale = trash.new_entry("default", "old", now=__import__("time").time() - 2 * DAY, session_id="old")
    done = deleter().delete(s, confirm(s, ids("default")["long"])[1])
    call_command("purge_trash", "--older-than", "0", stdout=StringIO())
    assert running.path.exists()  # a deletion may still be writing it
    assert not stale.path.exists() and not done.entry.path.exists()
    purged = AuditEvent.objects.filter(action="purge_trash")
    assert sorted(e.plan["state"] for e in purged) == ["deleted", "pending"]


def test_purge_waits_for_the_run_lock_and_audits_each_removal_as_it_goes(aged_home, monkeypatch):
    s = store(aged_home, "default")
    first = deleter().delete(s, confirm(s, ids("default")["hostile"])[1]).entry
    second = deleter().delete(s, confirm(s, ids("default")["long"])[1]).entry
    with run_lock("heal", label="run #3 by bob"):
        with pytest.raises(CommandError) as refused:
            call_command("purge_trash", "--older-than", "0", stdout=StringIO())
    assert refused.value.returncode == 2 and "run #3 by bob" in str(refused.value)
    assert first.path.exists() and second.path.exists()
    assert not AuditEvent.objects.filter(action="purge_trash").exists()

    real = trash.shutil.rmtree
    calls = []

    def rmtree(path, *args, **kwargs):
        calls.append(path)
        if len(calls) == 2:
            raise PermissionError(13, "Permission denied", path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(trash.shutil, "rmtree", rmtree)
    with pytest.raises(CommandError):
        call_command("purge_trash", "--older-than", "0", stdout=StringIO())
    [event] = AuditEvent.objects.filter(action="purge_trash")  # the one removal that happened
    assert event.plan["path"] == calls[0] and not __import__("os").path.exists(calls[0])


# --------------------------------------------------------------------------- 4. liveness

def test_a_live_child_to_detach_blocks_the_deletion_and_its_restore(aged_home):
    """Deleting a branch parent clears the child's parent link: a write to the child.
    An agent holding the child refuses the deletion; later, holding it again, the
    restore (which re-attaches it)."""
    sids = ids("default")
    s = store(aged_home, "default")
    parent, child = sids["branch_parent"], sids["branch_child"]
    before = dump(s)
    proc = lock(s, child)
    try:
        plan, item = confirm(s, parent)
        assert [t.verdict for t in plan.targets] == ["not_live"]
        assert plan.verdict == "live" and plan.live_children == [child] and not plan.override_possible
        assert any(sid == child and e.source == "compression_lock" for sid, e in plan.evidence)
        done = deleter().delete(s, item, override=parent, may_override=True)
        assert done.status == "refused" and child in done.reason and "detach" in done.reason
    finally:
        stop(proc)
    unlock(s, child)
    assert dump(s) == before and not trash.list_entries()

    done = deleter().delete(s, confirm(s, parent)[1])
    assert done.status == "applied" and done.counts["detached"] == 1
    proc = lock(s, child)
    try:
        after = dump(s)
        back = deleter().restore(s, trash.get_entry(done.entry.id))
        assert back.status == "refused" and f"an agent holds {child}" in back.reason
        assert "compression_lock" in back.reason
    finally:
        stop(proc)
    assert dump(s) == after and trash.get_entry(done.entry.id).state == "deleted"
    unlock(s, child)
    back = deleter().restore(s, trash.get_entry(done.entry.id))
    assert back.status == "applied" and back.counts["reattached"] == 1
    assert dump(s) == before


def test_restore_is_refused_while_an_agent_holds_a_deleted_id(aged_home):
    s = store(aged_home, "default")
    sid = ids("default")["hostile"]
    done = deleter().delete(s, confirm(s, sid)[1])
    proc = lock(s, sid)  # an agent still working on the id it had open
    try:
        back = deleter().restore(s, trash.get_entry(done.entry.id))
    finally:
        stop(proc)
    assert back.status == "refused" and f"an agent holds {sid}" in back.reason
    assert rows(s, "SELECT COUNT(*) FROM sessions WHERE id = ?", (sid,)) == [(0,)]
    [event] = events(deletion.RESTORE_ACTION)
    assert event.outcome == "refused" and not event.backup_path


# --------------------------------------------------------------------------- 5. single use

def test_a_confirmation_deletes_once_even_after_a_restore(aged_home):
    s = store(aged_home, "default")
    sid = ids("default")["hostile"]
    plan, item = confirm(s, sid)
    assert item["nonce"]
    done = deleter().delete(s, item)
    assert deleter().restore(s, done.entry).status == "applied"
    before = dump(s)
    assert deletion.plan_for(s, sid).fingerprint == plan.fingerprint  # same rows again
    again = deleter().delete(s, item)
    assert again.status == "refused" and "already used" in again.reason
    assert dump(s) == before
    applied, refused = events()
    assert applied.plan["token_nonce"] == refused.plan["token_nonce"] == item["nonce"]
    assert f"#{applied.pk}" in refused.reason
    assert deleter().delete(s, confirm(s, sid)[1]).status == "applied"  # a fresh confirmation works


def test_a_token_is_bound_to_its_user_and_needs_a_nonce(aged_home):
    s = store(aged_home, "default")
    sid = ids("default")["hostile"]
    token = deletion.sign([deletion.token_item(deletion.plan_for(s, sid))], user_id=7)
    assert deletion.unsign(token, 7)[0]["session_id"] == sid
    for other in (8, None):
        with pytest.raises(deletion.TokenMismatch):
            deletion.unsign(token, other)
    item = {k: v for k, v in deletion.unsign(token, 7)[0].items() if k != "nonce"}
    done = deleter().delete(s, item)
    assert done.status == "refused" and "nonce" in done.reason


# --------------------------------------------------------------------------- 6. quoting

def test_a_column_name_with_a_double_quote_survives_the_round_trip(aged_home):
    """Column names come from the store: quoted (doubled quotes), never pasted."""
    s = store(aged_home, "default")
    sid = ids("default")["hostile"]
    with damage(s) as db:
        db.execute('ALTER TABLE sessions ADD COLUMN "odd""name" TEXT')
        db.execute('UPDATE sessions SET "odd""name" = ? WHERE id = ?', ("kept", sid))
    before = dump(s)
    done = deleter().delete(s, confirm(s, sid)[1])
    assert done.status == "applied", done.reason
    back = deleter().restore(s, trash.get_entry(done.entry.id))
    assert back.status == "applied", back.reason
    assert dump(s) == before


def test_a_maybe_live_compression_continuation_refuses_deleting_its_parent(aged_home, settings):
    """Deleting a compression root alone clears its continuation's parent link: a
    write to the continuation. A real agent just wrote into that continuation
    (activity within the idle window: maybe live), so the deletion is refused,
    even with an admin's typed override, and nothing is touched; once the
    continuation is quiet the same deletion goes through and detaches it."""
    sids = ids("default")
    s = store(aged_home, "default")
    root, mid = sids["compress_root"], sids["compress_mid"]
    hermes(s, f"db.append_message({mid!r}, 'user', 'and the totals for March?')")
    # Its message moved to ten minutes ago (0.19.0 keeps no last_activity_at): inside
    # an hour's idle window now, outside a five-minute one below, with no waiting.
    written = time.time() - 600
    with damage(s) as db:
        db.execute("UPDATE messages SET timestamp = ? WHERE session_id = ? AND timestamp > ?",
                   (written, mid, written))
    settings.HERMES_IDLE_SECONDS = 3600
    before = dump(s)
    plan, item = confirm(s, root)
    assert [c["id"] for c in plan.detach] == [mid] and plan.detach[0]["edge"] == "compression"
    assert [t.verdict for t in plan.targets] == ["not_live"]
    assert plan.verdict == "maybe_live" and plan.held_children == [mid] and not plan.override_possible
    assert mid in plan.override_blocker and "may be live" in plan.override_blocker
    assert any(sid == mid and e.source == "activity" for sid, e in plan.evidence)
    done = deleter().delete(s, item, override=root, may_override=True)
    assert done.status == "refused" and mid in done.reason and "detach" in done.reason
    assert dump(s) == before and not trash.list_entries()
    [event] = events()
    assert event.outcome == "refused" and mid in event.reason

    settings.HERMES_IDLE_SECONDS = 300  # ten minutes quiet: the continuation has gone idle
    plan, item = confirm(s, root)
    assert plan.verdict == "not_live" and plan.held_children == []
    done = deleter().delete(s, item)
    assert done.status == "applied" and done.counts["detached"] == 1
    assert rows(s, "SELECT parent_session_id FROM sessions WHERE id = ?", (mid,)) == [(None,)]
