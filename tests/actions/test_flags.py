"""Issue 14, flags and titles: rename (Hermes' unique-title rule), archive/pin/hide across
compression lineages, on stores written by the real releases; checked against what
the real 0.19.0 ``SessionDB`` does and reads back."""

import json

import pytest
from django.contrib.auth.models import User

from sessions_app.actions import flags
from sessions_app.models import AuditEvent
from tests.checks.helpers import damage, hermes
from tests.conftest import ids

from .conftest import store
from .delete_helpers import dump, rows, stop
from .prune_helpers import lock_holder

pytestmark = pytest.mark.django_db


def flagger():
    return flags.Flagger(actor_label="tester")


def column(s, name, sids):
    ph = ",".join("?" * len(sids))
    return dict(rows(s, f"SELECT id, {name} FROM sessions WHERE id IN ({ph})", sids))


# --------------------------------------------------------------------------- titles

def test_a_title_clash_is_refused_with_the_session_that_holds_it(aged_home):
    s = store(aged_home, "default")
    d = ids("default")
    before = dump(s)
    outcome = flagger().rename(s, d["long"], "Fix the flaky build", "Long pagination session")
    assert outcome.status == "refused"
    assert "already used by session " + d["cli_main"] in outcome.reason and "unique" in outcome.reason
    assert dump(s) == before
    [event] = AuditEvent.objects.filter(action=flags.RENAME_ACTION)
    assert event.outcome == "refused" and event.session_ids == [d["long"]]
    # The real release agrees that the title is taken.
    out = hermes(s, f"""
try:
    db.set_session_title({d["long"]!r}, 'Fix the flaky build')
    print('set')
except ValueError as exc:
    print('refused:', exc)
""")
    assert out.startswith("refused:") and d["cli_main"] in out


def test_rename_is_what_0_19_0_reads_and_its_rules_apply(aged_home):
    s = store(aged_home, "default")
    d = ids("default")
    title = flags.clean_title("  Quarterly\u200b  numbers\t\u202eok ")
    assert title == "Quarterly numbers ok"
    outcome = flagger().rename(s, d["long"], title, "Long pagination session")
    assert outcome.status == "applied", outcome.reason
    assert hermes(s, f"print(db.get_session_title({d['long']!r}))").strip() == title
    # Cleared: NULL, and a NULL title never clashes.
    assert flagger().rename(s, d["long"], None, title).status == "applied"
    assert column(s, "title", [d["long"]]) == {d["long"]: None}
    with pytest.raises(flags.TitleError):
        flags.clean_title("x" * 101)
    assert flags.clean_title(" \u200b ") is None


def test_a_changed_title_is_not_overwritten(aged_home):
    s = store(aged_home, "default")
    sid = ids("default")["long"]
    hermes(s, f"db.set_session_title({sid!r}, 'Titled by the agent meanwhile')")
    outcome = flagger().rename(s, sid, "Mine", "Long pagination session")
    assert outcome.status == "skipped" and "Titled by the agent meanwhile" in outcome.reason
    assert column(s, "title", [sid]) == {sid: "Titled by the agent meanwhile"}


def test_the_title_moves_over_from_a_compression_ancestor_as_upstream_does(aged_home):
    s = store(aged_home, "default")
    d = ids("default")
    outcome = flagger().rename(s, d["compress_tip"], "Refactor the parser", "Refactor the parser #3")
    assert outcome.status == "applied", outcome.reason
    assert "compression ancestor " + d["compress_root"] in outcome.reason
    assert column(s, "title", [d["compress_root"], d["compress_tip"]]) == {
        d["compress_root"]: None, d["compress_tip"]: "Refactor the parser"}


def test_newest_shape_records_the_title_as_the_users(aged_home):
    edge = store(aged_home, "edge")
    sid = ids("edge")["long"]
    assert flagger().rename(edge, sid, "Admin's name", "Long pagination session").status == "applied"
    assert rows(edge, "SELECT title, title_source FROM sessions WHERE id = ?", (sid,)) == [("Admin's name", "user")]


def test_bot_modes_canonical_chat_keeps_its_title(aged_home):
    edge = store(aged_home, "edge")
    sid = ids("edge")["cron"]
    with damage(edge) as conn:
        conn.execute("UPDATE sessions SET title = 'Bot Chat', hidden = 1 WHERE id = ?", (sid,))
    outcome = flagger().rename(edge, sid, "Something else", "Bot Chat")
    assert outcome.status == "refused" and "Bot Mode" in outcome.reason
    # Pinning it does not unhide it (upstream's exemption).
    assert flagger().set_flag(edge, sid, "pinned", True).status == "applied"
    assert rows(edge, "SELECT pinned, hidden FROM sessions WHERE id = ?", (sid,)) == [(1, 1)]


# --------------------------------------------------------------------------- flags

def test_archive_covers_the_lineage_exactly_as_0_19_0_does(aged_home, tmp_path):
    """Archiving the middle segment archives the whole chain; 0.19.0's own
    ``set_session_archived`` on a twin copy flips the same rows the same way."""
    s = store(aged_home, "default")
    d = ids("default")
    chain = [d["compress_root"], d["compress_mid"], d["compress_tip"]]
    twin_home = tmp_path / "twin"
    import shutil
    shutil.copytree(aged_home, twin_home)
    twin = store(twin_home, "default")
    outcome = flagger().set_flag(s, d["compress_mid"], "archived", True)
    assert outcome.status == "applied" and "3 session(s)" in outcome.reason
    assert column(s, "archived", chain + [d["long"]]) == {**{c: 1 for c in chain}, d["long"]: 0}
    hermes(twin, f"assert db.set_session_archived({d['compress_mid']!r}, True)")
    assert dump(s, ["sessions"]) == dump(twin, ["sessions"])
    [event] = AuditEvent.objects.filter(action=flags.FLAG_ACTION, outcome="applied")
    assert sorted(event.session_ids) == sorted(chain) and len(event.changes) == 3 and event.backup_path
    again = flagger().set_flag(s, d["compress_root"], "archived", True)
    assert again.status == "skipped" and "already archived" in again.reason
    assert flagger().set_flag(s, d["compress_tip"], "archived", False).status == "applied"
    assert set(column(s, "archived", chain).values()) == {0}


def test_pin_covers_the_lineage_and_unhides_it(aged_home):
    edge = store(aged_home, "edge")
    e = ids("edge")
    chain = [e["compress_root"], e["compress_mid"], e["compress_tip"]]
    with damage(edge) as conn:
        conn.execute("UPDATE sessions SET hidden = 1, archived = 1, auto_archived = 1 WHERE id = ?", (chain[0],))
    assert flagger().set_flag(edge, chain[2], "pinned", True).status == "applied"
    assert column(edge, "pinned", chain) == {c: 1 for c in chain}
    assert column(edge, "hidden", chain) == {c: 0 for c in chain}
    # A deliberate archive clears the idle sweep's provenance (newest shape).
    assert flagger().set_flag(edge, chain[1], "archived", True).status == "applied"
    assert column(edge, "auto_archived", chain) == {c: 0 for c in chain}
    assert flagger().set_flag(edge, chain[0], "hidden", True).status == "applied"
    assert column(edge, "hidden", chain) == {c: 1 for c in chain}


def test_a_store_without_the_column_refuses_and_says_why(aged_home):
    s = store(aged_home, "default")  # 0.19.0: archived only
    sid = ids("default")["long"]
    before = dump(s)
    outcome = flagger().set_flag(s, sid, "pinned", True)
    assert outcome.status == "refused" and "no pinned column" in outcome.reason
    assert dump(s) == before
    state = flags.flag_state(s, sid)
    assert set(state.values) == {"archived"} and set(state.missing) == {"pinned", "hidden"}
    old = store(aged_home, "archive")  # 0.13.0: no archived either
    assert set(flags.flag_state(old, ids("archive")["long"]).missing) == {"archived", "pinned", "hidden"}


def test_a_live_lineage_is_refused(aged_home):
    s = store(aged_home, "default")
    d = ids("default")
    holder = lock_holder(s, d["compress_root"])
    try:
        outcome = flagger().set_flag(s, d["compress_tip"], "archived", True)
    finally:
        stop(holder)
    assert outcome.status == "refused" and "compression lineage" in outcome.reason
    assert set(column(s, "archived", [d["compress_root"], d["compress_tip"]]).values()) == {0}


def test_a_user_without_the_permission_is_refused_by_the_write_itself(aged_home):
    s = store(aged_home, "default")
    user = User.objects.create_user("bob", password="pw")
    outcome = flags.Flagger(actor=user).set_flag(s, ids("default")["long"], "archived", True)
    assert outcome.status == "refused" and "change_flags" in outcome.reason


def test_bulk_flags_job_changes_each_session_on_its_own(aged_home, settings):
    from sessions_app import jobs, runs

    s = store(aged_home, "default")
    d = ids("default")
    settings.HERMES_ROOTS = [str(aged_home)]
    from sessions_app.stores import registry
    registry.reset()
    run = runs.create("flags", "command", actor_label="tester", plans=[
        {"profile": "default", "session_id": d["long"], "flag": "archived", "value": 1},
        {"profile": "default", "session_id": d["cron"], "flag": "pinned", "value": 1},
        {"profile": "gone", "session_id": "x", "flag": "archived", "value": 1},
    ])
    run = jobs.execute(run.pk)
    assert run.status == "done"
    statuses = [a["status"] for p in run.report["profiles"] for a in p["actions"]]
    assert statuses == ["applied", "refused", "failed"]
    assert column(s, "archived", [d["long"], d["cron"]]) == {d["long"]: 1, d["cron"]: 0}
    assert json.dumps(run.report)


# --------------------------------------------------------------------------- busy or damaged

def test_a_rename_on_a_locked_store_is_retried_and_one_on_a_store_linked_out_is_failed(aged_home, tmp_path):
    """Ground rule 9, through the store-error classification (``classify_error``): a
    store a real process holds exclusively is "busy, retry"; one whose file now leads
    out of its root is failed, even though its path has the word "locked" in it."""
    from sessions_app.stores import registry

    from tests.stores.lock_holders import holding

    d = ids("default")
    item = {"profile": "default", "session_id": d["cli_main"], "rename": "Renamed while locked"}
    s = registry.get("default")
    with holding((s.path, "wal_exclusive")):
        [done] = flags.run_changes(flagger(), [item])["profiles"][0]["actions"]
    assert done["status"] == "skipped" and done["retry"] is True, done
    ops = registry.get("ops")  # discovered while its file was inside the root
    elsewhere = tmp_path / "locked-copies"
    elsewhere.mkdir()
    ops.path.rename(elsewhere / "state.db")
    ops.path.symlink_to(elsewhere / "state.db")
    item = {"profile": "ops", "session_id": ids("ops")["cli_main"], "rename": "Renamed elsewhere"}
    [done] = flags.run_changes(flagger(), [item])["profiles"][0]["actions"]
    assert done["status"] == "failed" and done["retry"] is False, done
    assert "outside the root" in done["reason"]
