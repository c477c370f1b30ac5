"""The catalog itself, and every check on every pristine real-release store."""

import pytest

from sessions_app.checks import registry, run_store_checks
from sessions_app.checks.base import SEVERITIES

from ..conftest import PROFILES, ids
from .helpers import all_stores, damage, findings, newest_timestamp, serious, store_of

DESIGN_CODES = {
    # docs/architecture.md §4, store level
    "store_unreadable", "store_busy", "store_corrupt", "schema_malformed", "schema_outdated", "fts_damaged",
    "fts_incomplete", "wal_oversized", "wal_generation_split", "repair_leftovers", "stale_lease",
    "orphan_dependents",
    # session level
    "orphan_messages", "dangling_parent", "lineage_cycle", "compression_without_continuation",
    "multiple_continuations", "unanswered_turn", "transcript_on_disk_only", "counter_drift",
    "usage_without_transcript", "orphan_tool_result", "unanswered_tool_call", "duplicate_live_rows",
    "timestamp_disorder", "stale_open", "missing_owner", "owner_mismatch", "id_collision",
    "missing_routing_identity", "leftover_files", "placeholder_session", "history_lost",
}
DESIGN_HEALS = {
    "orphan_messages": "recreate_session_row", "dangling_parent": "detach_from_missing_parent",
    "compression_without_continuation": "reopen_compression_parent", "transcript_on_disk_only": "import_jsonl_transcript",
    "counter_drift": "recount_session", "duplicate_live_rows": "hide_duplicates", "stale_open": "close_stale_session",
    "missing_owner": "stamp_owner", "owner_mismatch": "move_to_owner_store",
    "missing_routing_identity": "inherit_routing_identity", "leftover_files": "remove_leftover_files",
    "stale_lease": "clear_stale_lease", "history_lost": "recover_messages",
}


def test_catalog_matches_the_design():
    assert set(registry.codes()) == DESIGN_CODES
    for entry in registry.catalog():
        assert entry["severity"] in SEVERITIES
        assert entry["scope"] in ("store", "session")
        assert entry["title"] and len(entry["explanation"]) > 80
        assert entry["heal"] == DESIGN_HEALS.get(entry["code"])


def test_unknown_code_is_refused():
    with pytest.raises(ValueError, match="no_such_check"):
        registry.select(["orphan_messages", "no_such_check"])


@pytest.mark.parametrize("profile", PROFILES)
def test_pristine_store_runs_clean(hermes_home, profile):
    """No warning or critical finding on a store exactly as the release wrote it,
    two hours after its last write (idle, so every idle-gated check runs)."""
    store = store_of(hermes_home, profile)
    report = run_store_checks(store, now=newest_timestamp(store) + 7200)
    assert report.status == "ok", report.error
    assert report.notes == []
    assert serious(report) == [], [f.detail for f in serious(report)]
    codes = {f.check for f in report.findings}
    # What remains is known upstream behaviour, reported as info (docs/store.md §9.3).
    assert codes <= {"schema_outdated", "counter_drift"}
    if profile == "edge":
        assert codes == set()


@pytest.mark.parametrize("profile", PROFILES)
def test_pristine_store_findings_are_json_ready(hermes_home, profile):
    import json

    store = store_of(hermes_home, profile)
    report = run_store_checks(store, now=newest_timestamp(store) + 7200)
    json.dumps(report.to_dict())


def test_old_release_rewind_is_info_not_drift(hermes_home):
    """0.17-0.19 rewind_to_message leaves message_count alone (docs/store.md §9.3)."""
    for profile in ("default", "ops", "research"):
        undo = ids(profile)["undo"]
        store = store_of(hermes_home, profile)
        [f] = findings(run_store_checks(store, now=newest_timestamp(store) + 7200, only=["counter_drift"]))
        assert (f.session_id, f.severity, f.heal) == (undo, "info", "recount_session")
        assert f.evidence["explained_by"] == "rewind_without_recount"
        assert f.evidence["message_count"] - f.evidence["active_rows"] == f.evidence["rewound_rows"] == 1


def test_fixture_ids_are_distinct_across_profiles(hermes_home, manifest):
    """Like real Hermes ids (timestamp + random hex), every profile's ids are its own
    (the profile's date in the id): checked together, the pristine stores have no
    id_collision."""
    every = [sid for p in manifest["profiles"].values() for sid in p["sessions_by_id"]]
    assert len(every) == len(set(every))
    stores = all_stores(hermes_home)
    for store in stores:
        report = run_store_checks(store, only=["id_collision"], other_stores=stores,
                                  now=newest_timestamp(store) + 7200)
        assert report.status == "ok" and report.findings == [], store.key


def test_a_session_copied_into_another_profile_collides(hermes_home):
    """A session row copied by hand into another profile's store (or a move that
    stopped halfway): each of the two stores reports the other, and only that id."""
    stores = {s.key: s for s in all_stores(hermes_home)}
    default, ops = stores["default"], stores["ops"]
    sid = ids("default")["cli_main"]
    with default.read() as conn:
        row = conn.execute("SELECT id, source, started_at FROM sessions WHERE id = ?", (sid,)).fetchone()
    with damage(ops) as db:
        db.execute("INSERT INTO sessions (id, source, started_at) VALUES (?, ?, ?)", row)
    for store, other in ((default, "ops"), (ops, "default")):
        report = run_store_checks(store, only=["id_collision"], other_stores=list(stores.values()),
                                  now=newest_timestamp(store) + 7200)
        [f] = findings(report)
        assert (f.session_id, f.severity, f.count) == (sid, "warning", 1)
        assert [o["profile"] for o in f.evidence["other_stores"]] == [other]
