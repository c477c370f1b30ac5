"""A newcomer adds a check and its repair as docs/architecture.md §8 says — one class in
one file each, one line in each registry — and both work end to end: the heal run finds
it, plans it, applies it on the guarded write (backup, audit event) and a second run
changes nothing. Uses the real fixture stores."""

import sqlite3

from sessions_app.actions import registry as repairs
from sessions_app.actions.heal import heal
from sessions_app.checks import registry as checks
from sessions_app.models import AuditEvent
from sessions_app.stores import registry

from .title_repair import TitleFromId
from .untitled_check import UntitledEndedSession


def test_a_new_check_and_repair_run_through_the_heal(hermes_home, monkeypatch, db):
    # The one line in each registry (sessions_app/checks/registry.py, sessions_app/actions/registry.py).
    monkeypatch.setattr(checks, "CATALOG", (*checks.CATALOG, UntitledEndedSession()))
    monkeypatch.setitem(checks.BY_CODE, "untitled_ended_session", checks.CATALOG[-1])
    monkeypatch.setitem(repairs.ACTIONS, "title_from_id", TitleFromId())

    store = registry.get("default")
    before = heal([store], only=["untitled_ended_session"])
    [entry] = before["profiles"]
    found = {f["session_id"] for f in entry["findings"]}
    assert found and all(f["heal"] == "title_from_id" for f in entry["findings"])
    assert {a["status"] for a in entry["actions"]} == {"planned"}

    applied = heal([store], only=["untitled_ended_session"], apply=True)
    [entry] = applied["profiles"]
    assert {a["status"] for a in entry["actions"]} == {"applied"}, entry["actions"]
    assert entry["findings"] == [] and entry["backup"]
    events = AuditEvent.objects.filter(action="title_from_id", outcome="applied")
    assert {e.session_ids[0] for e in events} == found and all(e.backup_path for e in events)
    conn = sqlite3.connect(f"file:{store.path}?mode=ro", uri=True)
    titles = dict(conn.execute(f"SELECT id, title FROM sessions WHERE id IN ({','.join('?' * len(found))})",
                               sorted(found)))
    conn.close()
    assert titles == {sid: f"untitled {sid}" for sid in found}

    again = heal([store], only=["untitled_ended_session"], apply=True)
    assert again["profiles"][0]["findings"] == [] and again["profiles"][0]["actions"] == []
