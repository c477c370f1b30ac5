"""Archived sessions are spared by a prune unless included, as upstream's
``hermes sessions prune`` (0.19.0 ``hermes_cli/main.py``: ``--include-archived``,
"excluded by default"; docs/store.md §10.4): on a 0.19.0 store archived
by the release itself, on the newest shape archived through the dashboard's flag
write; a store without the ``archived`` column prunes as before."""

import pytest

from sessions_app.actions.flags import Flagger
from sessions_app.actions.prune_run import Pruner, preview_store, prune_store
from sessions_app.models import AuditEvent
from sessions_app.stores.retention import Criteria
from tests.checks.helpers import hermes
from tests.conftest import ids

from .conftest import run_command, store
from .delete_helpers import rows
from .prune_helpers import profile_of, prune, spared

pytestmark = pytest.mark.django_db


def planned(report, key):
    return {u["root"] for u in profile_of(report, key)["units"]}


def test_archived_sessions_are_spared_unless_included(aged_home):
    s, edge = store(aged_home, "default"), store(aged_home, "edge")
    d, e = ids("default"), ids("edge")
    hermes(s, f"assert db.set_session_archived({d['long']!r}, True)")  # 0.19.0 archives it itself
    assert Flagger(actor_label="tester").set_flag(edge, e["long"], "archived", True).status == "applied"

    report = prune([s, edge], older_than_days=30)
    for key, sid in (("default", d["long"]), ("edge", e["long"])):
        assert sid not in planned(report, key)
        [kept] = [x for x in spared(report, key, "archived") if sid in x["session_ids"]]
        assert "archived" in kept["detail"] and "--include-archived" in kept["detail"]
    assert report["summary"]["remaining"] == len(profile_of(report, "default")["units"]) + \
        len(profile_of(report, "edge")["units"])  # spared for a durable reason: not "left to prune"

    included = prune([s, edge], older_than_days=30, include_archived=True)
    assert d["long"] in planned(included, "default") and e["long"] in planned(included, "edge")
    assert not spared(included, "default", "archived") and not spared(included, "edge", "archived")

    # Applied: the archived sessions stay, everything else the criteria select goes.
    done = prune([s, edge], apply=True, older_than_days=30)
    assert done["summary"]["failed"] == 0 and done["summary"]["applied"] > 0
    assert rows(s, "SELECT archived FROM sessions WHERE id = ?", (d["long"],)) == [(1,)]
    assert rows(edge, "SELECT archived FROM sessions WHERE id = ?", (e["long"],)) == [(1,)]
    again = prune([s, edge], apply=True, older_than_days=30, include_archived=True)
    assert again["summary"]["applied"] >= 2
    assert rows(s, "SELECT COUNT(*) FROM sessions WHERE id = ?", (d["long"],)) == [(0,)]


def test_archived_meanwhile_is_spared_at_apply(aged_home):
    """Archived after the preview: the batch's re-check inside the transaction spares it."""
    s, d = store(aged_home, "default"), ids("default")
    criteria = Criteria(older_than_days=30)
    previewed = preview_store(s, criteria)
    assert d["long"] in {u.root for u in previewed[0].units}
    hermes(s, f"assert db.set_session_archived({d['long']!r}, True)")
    # One unit per batch: the archived one's batch has nothing left to prune.
    entry = prune_store(s, criteria, apply=True, writer=Pruner(actor_label="tester"), previewed=previewed,
                        batch_units=1)
    [unit] = [u for u in entry["units"] if u["root"] == d["long"]]
    # Archived since the preview: no longer applicable, not a guard saying no.
    assert unit["status"] == "skipped" and "archived" in unit["reason"]
    [batch] = [b for b in entry["batches"] if d["long"] in b["units"]]
    assert batch["status"] == "skipped" and batch["units"] == [d["long"]], batch
    [event] = [e for e in AuditEvent.objects.filter(reason=batch["reason"]) if d["long"] in e.session_ids]
    assert event.outcome == "skipped" and "archived" in event.reason
    assert not AuditEvent.objects.filter(outcome="refused").exists()
    assert rows(s, "SELECT archived FROM sessions WHERE id = ?", (d["long"],)) == [(1,)]


def test_a_store_without_the_archived_column_prunes_as_before(aged_home):
    legacy = store(aged_home, "legacy")  # 0.15.0: no sessions.archived
    assert rows(legacy, "SELECT COUNT(*) FROM pragma_table_info('sessions') WHERE name = 'archived'") == [(0,)]
    plain, included = prune([legacy], older_than_days=30), prune([legacy], older_than_days=30, include_archived=True)
    assert planned(plain, "legacy") == planned(included, "legacy") and planned(plain, "legacy")
    assert not spared(plain, "legacy", "archived")


def test_the_command_takes_include_archived(aged_home):
    s, d = store(aged_home, "default"), ids("default")
    hermes(s, f"assert db.set_session_archived({d['long']!r}, True)")
    code, report = run_command("prune_sessions", "--profile", "default", "--older-than", "30", "--json")
    assert code == 1 and d["long"] not in planned(report, "default")
    assert [x["reason"] for x in spared(report, "default") if d["long"] in x["session_ids"]] == ["archived"]
    code, text = run_command("prune_sessions", "--profile", "default", "--older-than", "30")
    assert "archived" in text and "spared:" in text
    code, report = run_command("prune_sessions", "--profile", "default", "--older-than", "30", "--include-archived",
                               "--json")
    assert d["long"] in planned(report, "default")
    assert report["criteria"]["include_archived"] is True


def test_the_criteria_in_words_count_their_days():
    assert Criteria(older_than_days=1).describe().startswith("ended more than 1 day ago")
    assert Criteria(older_than_days=90, empty=True).describe().startswith("ended more than 90 days ago, empty")
