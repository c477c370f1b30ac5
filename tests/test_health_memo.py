"""ProfileHealth keeps its groupings of a stored pass's findings per pass and profile:
the session and health pages ask on every view which findings name damage."""

from sessions_app.health import ProfileHealth


def _finding(check, session_id=None, severity="warning"):
    return {"check": check, "session_id": session_id, "severity": severity, "detail": check}


def test_of_checks_keeps_the_pass_order_and_only_the_codes_asked():
    entry = {"profile": "default", "findings": [
        _finding("orphan_messages", "s1"), _finding("schema_malformed", severity="critical"),
        _finding("unanswered_turn", "s2"), _finding("store_corrupt", severity="critical")]}
    health = ProfileHealth(None, entry)
    got = health.of_checks(("store_corrupt", "schema_malformed"))
    assert [f["check"] for f in got] == ["schema_malformed", "store_corrupt"]
    assert health.of_checks(("unanswered_turn",)) == [entry["findings"][2]]
    assert health.of_checks(("no_such_check",)) == []


def test_groupings_are_shared_by_the_health_of_one_pass_and_profile():
    entry = {"profile": "default", "findings": [_finding("store_corrupt", severity="critical")]}
    memo: dict = {}
    first, second = ProfileHealth(None, entry, memo), ProfileHealth(None, entry, memo)
    assert first.of_checks(("store_corrupt",)) is second.of_checks(("store_corrupt",))
    assert first.by_session() is second.by_session()
    # Another profile's health (its own memo) is not answered from this one's.
    other = ProfileHealth(None, {"profile": "x", "findings": []}, {})
    assert other.of_checks(("store_corrupt",)) == []
