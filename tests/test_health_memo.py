"""The latest stored pass's findings, as pages ask for them on every view: the
groupings ``ProfileHealth`` keeps per pass and profile (``health.latest``), and the
store's known damage from them (``checks.damage.pass_damage``)."""

import pytest
from django.utils import timezone

from sessions_app.checks import Finding
from sessions_app.checks.damage import pass_damage
from sessions_app.health import ProfileHealth, latest
from sessions_app.models import HealRun


def _finding(check, session_id=None, severity="warning", detail=None):
    return {"check": check, "session_id": session_id, "severity": severity, "detail": detail or check}


def _pass(profiles: dict) -> HealRun:
    """A finished whole check pass over ``profiles`` (key -> entry fields)."""
    return HealRun.objects.create(
        mode="check", trigger="command", actor_label="cron", status="done", finished_at=timezone.now(),
        checked_profiles=sorted(profiles),
        report={"profiles": [{"profile": key, **entry} for key, entry in profiles.items()]})


def test_of_checks_keeps_the_pass_order_and_only_the_codes_asked():
    entry = {"profile": "default", "findings": [
        _finding("orphan_messages", "s1"), _finding("schema_malformed", severity="critical"),
        _finding("unanswered_turn", "s2"), _finding("store_corrupt", severity="critical")]}
    health = ProfileHealth(None, entry)
    got = health.of_checks(("store_corrupt", "schema_malformed"))
    assert [f["check"] for f in got] == ["schema_malformed", "store_corrupt"]
    assert health.of_checks(("unanswered_turn",)) == [entry["findings"][2]]
    assert health.of_checks(("no_such_check",)) == []
    with pytest.raises(TypeError):
        health.of_checks("store_corrupt")  # a string is not a set of codes


def test_by_session_puts_the_most_severe_first_and_keeps_the_pass_order_within_a_severity():
    findings = [_finding("orphan_messages", "s1", "info", "a"), _finding("unanswered_turn", "s2"),
                _finding("fk_orphans", "s1", "critical", "b"), _finding("store_corrupt", severity="critical"),
                _finding("unanswered_turn", "s1", "warning", "c"), _finding("orphan_messages", "s1", "info", "d"),
                _finding("fk_orphans", "s1", "critical", "e")]
    grouped = ProfileHealth(None, {"findings": findings}).by_session()
    assert set(grouped) == {"s1", "s2"}
    assert [f["detail"] for f in grouped["s1"]] == ["b", "e", "c", "a", "d"]
    assert [f["check"] for f in grouped["s2"]] == ["unanswered_turn"]  # a finding without a session is in none


def test_sessions_with_a_check_are_those_holding_one_of_its_findings():
    health = ProfileHealth(None, {"findings": [
        _finding("unanswered_turn", "s1"), _finding("orphan_messages", "s2"),
        _finding("unanswered_turn", "s3"), _finding("unanswered_turn")]})
    assert health.sessions_with("unanswered_turn") == {"s1", "s3"}
    assert health.sessions_with("no_such_check") == set()


@pytest.mark.django_db
def test_each_profile_of_a_pass_gets_its_own_findings_and_they_are_kept_per_pass():
    _pass({"default": {"status": "ok", "findings": [_finding("orphan_messages", "s1")]},
           "laptop": {"status": "corrupt", "error": "database disk image is malformed",
                      "findings": [_finding("store_corrupt", severity="critical", detail="page 7 garbage")]}})
    first = latest(["default", "laptop"])
    assert first["default"].of_checks(("store_corrupt",)) == []
    assert [f["detail"] for f in first["laptop"].of_checks(("store_corrupt",))] == ["page 7 garbage"]
    # The next view of the same pass is answered from what the first built.
    again = latest(["laptop", "default"])
    assert again["laptop"].of_checks(("store_corrupt",)) is first["laptop"].of_checks(("store_corrupt",))
    assert again["default"].by_session() is first["default"].by_session()
    assert list(again["default"].by_session()) == ["s1"]
    # A newer pass finds laptop salvaged: its pages stop calling it damaged.
    _pass({"default": {"status": "ok", "findings": []}, "laptop": {"status": "ok", "findings": []}})
    newer = latest(["default", "laptop"])
    assert newer["laptop"].of_checks(("store_corrupt",)) == []
    assert pass_damage(newer["laptop"]) is None
    assert newer["default"].by_session() == {}


@pytest.mark.django_db
def test_pass_damage_from_the_pages_findings_then_the_pass():
    _pass({"laptop": {"status": "corrupt", "error": "SQLite refuses the schema: malformed", "findings": []},
           "ops": {"status": "ok", "findings": [_finding("store_corrupt", severity="critical", detail="from pass")]},
           "research": {"status": "ok", "findings": [_finding("orphan_messages", "s1")]}})
    health = latest(["laptop", "ops", "research", "never"])
    # A corrupt status with no damage finding: the error says which damage.
    assert pass_damage(health["laptop"])["check"] == "schema_malformed"
    assert pass_damage(health["ops"])["detail"] == "from pass"
    # The page's own finding comes first, whether a Finding or a dict.
    own = Finding(check="store_corrupt", severity="critical", session_id=None, count=1, detail="seen by this page",
                  heal=None)
    assert pass_damage(health["ops"], [own])["detail"] == "seen by this page"
    assert pass_damage(health["research"], [_finding("schema_malformed", detail="dict")])["detail"] == "dict"
    assert pass_damage(health["research"]) is None
    # Never checked: the page's findings alone.
    assert health["never"].run is None and pass_damage(health["never"]) is None
    assert pass_damage(health["never"], [own])["check"] == "store_corrupt"
