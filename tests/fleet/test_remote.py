"""Remote deletion and restore, search and export through the hosts' workers."""

from __future__ import annotations

import re
import sqlite3
import subprocess
from urllib.parse import quote

import pytest

from sessions_app import runs
from sessions_app.fleet import client
from sessions_app.models import AuditEvent, HealRun

from .conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)
KEY = "default on host-b"
SESSION = "20260301_140000_10a60b"  # the fixture's longest session (60 messages, ended)


def _rows(db, session_id):
    """Every column of the session's row and message rows with its storage class,
    read-only (the worker runs in another process)."""
    conn = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
    try:
        out = {}
        for table, key in (("sessions", "id"), ("messages", "session_id")):
            cols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
            pick = ", ".join(f'typeof("{c}"), "{c}"' for c in cols)
            out[table] = conn.execute(f"SELECT {pick} FROM {table} WHERE {key} = ? ORDER BY rowid",
                                      (session_id,)).fetchall()
        return out
    finally:
        conn.close()


def _finish(run_id, seconds=120):
    return wait_for(lambda: (r := HealRun.objects.get(pk=run_id)).status in ("done", "failed") and r,
                    seconds, f"run #{run_id} to finish")


def _run_of(response):
    assert response.status_code == 302, response.content[:2000]
    return _finish(int(response["Location"].rstrip("/").rsplit("/", 1)[1]))


def _redeliver(run):
    return _redeliver_on(run, "host-b")


def _redeliver_on(run, host):
    """What a worker killed after its last write leaves: the run ``running`` under a
    dead process; then the task again, as Redis hands it out again."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    HealRun.objects.filter(pk=run.pk).update(status="running", pid=gone.pid, report=None, finished_at=None)
    client.start_run(run, host)
    return _finish(run.pk)


def test_remote_delete_and_restore_round_trip_byte_for_byte(hosts_up, admin):
    db = hosts_up["roots"]["host-b"] / "state.db"
    before = _rows(db, SESSION)
    assert len(before["messages"]) == 60 and len(before["sessions"]) == 1
    untouched_a = _rows(hosts_up["roots"]["host-a"] / "state.db", SESSION)
    url = f"/fleet/p/{quote(KEY)}/s/{SESSION}/delete/"
    page = admin.get(url)
    assert page.status_code == 200 and "60 message rows" in page.content.decode()
    token = re.search(r'name="token" value="([^"]+)"', page.content.decode()).group(1)

    deleted = _run_of(admin.post(url, {"token": token}))
    assert deleted.status == "done", deleted.error
    action = deleted.report["profiles"][0]["actions"][0]
    assert action["status"] == "applied", action
    assert _rows(db, SESSION) == {"sessions": [], "messages": []}
    entry = action["trash_entry"]
    assert entry.startswith("20") and (hosts_up["workers"]["host-b"].data / "trash" / "sessions" / entry).is_dir()
    # The same confirmation again is refused: it deletes once.
    again = _run_of(admin.post(url, {"token": token}))
    refused = again.report["profiles"][0]["actions"][0]
    assert refused["status"] == "refused" and "already used" in refused["reason"], refused
    # A redelivered deletion reports its earlier work, and writes nothing again.
    redone = _redeliver(deleted)
    assert redone.status == "done" and "earlier delivery" in redone.report["profiles"][0]["actions"][0]["reason"]
    assert AuditEvent.objects.filter(run=deleted, action="delete_session", outcome="applied").count() == 1

    listing = admin.get("/fleet/trash/").content.decode()
    assert f'data-entry="{entry}"' in listing
    restored = _run_of(admin.post(f"/fleet/p/{quote(KEY)}/trash/{entry}/restore/"))
    assert restored.status == "done", restored.error
    assert restored.report["profiles"][0]["actions"][0]["status"] == "applied", restored.report
    assert _rows(db, SESSION) == before
    redone = _redeliver(restored)
    assert redone.status == "done" and "earlier delivery" in redone.report["profiles"][0]["actions"][0]["reason"]
    assert _rows(db, SESSION) == before  # nothing inserted twice
    assert _rows(hosts_up["roots"]["host-a"] / "state.db", SESSION) == untouched_a
    assert "restored" in admin.get("/fleet/trash/").content.decode()


def test_remote_writes_naming_anything_not_the_workers_own_are_refused(hosts_up):
    outside = str(hosts_up["roots"]["host-a"])
    for plans, why in (
        ([{"profile": KEY, "trash_entry": "../../" + outside}], "no trash entry"),
        ([{"profile": "default on host-a", "trash_entry": "20260101-000000-x"}], "is not on host host-b"),
    ):
        run = runs.create("restore", runs.FLEET_TRIGGER, actor_label="forger", plans=plans, profiles=[KEY])
        client.start_run(run, "host-b")
        run = _finish(run.pk)
        assert run.status == "failed" and "refused by host host-b" in run.error and why in run.error
    forged = {"profile": "default on host-a", "session_id": SESSION, "lineage": False, "fingerprint": {}, "nonce": "x"}
    run = runs.create("delete", runs.FLEET_TRIGGER, actor_label="forger", plans=[forged], profiles=[KEY])
    client.start_run(run, "host-b")
    assert "is not on host host-b" in _finish(run.pk).error
    answer = client.ask("host-b", "export", key="default on host-a", session_id=SESSION)
    assert not answer.ok and "is not on host host-b" in answer.error
    assert AuditEvent.objects.filter(outcome="refused", action="fleet:run_job").count() >= 3
    assert len(_rows(hosts_up["roots"]["host-a"] / "state.db", SESSION)["messages"]) == 60


def test_remote_search_answers_from_both_hosts(hosts_up, admin):
    page = admin.get("/fleet/search/?q=build").content.decode()
    for host in ("host-a", "host-b"):
        section = page.split(f'data-host="{host}"', 1)[1].split("</section>", 1)[0]
        assert "host-problem" not in section
        assert re.search(r'class="hit state-\w+" data-session="[^"]+"', section)
        assert f'data-profile="default on {host}"' in section
    assert "<mark>" in page


def test_remote_export_is_streamed_in_chunks_and_whole(hosts_up, admin, settings):
    whole = client.ask("host-b", "export", key=KEY, session_id=SESSION, max_bytes=8 * 1024 * 1024)
    assert whole.ok and whole.data["next"] is None
    first = client.ask("host-b", "export", key=KEY, session_id=SESSION, max_bytes=1024)
    assert first.data["next"] is not None  # more than one chunk at this size
    settings.HERMES_FLEET_EXPORT_CHUNK = 1024
    response = admin.get(f"/fleet/p/{quote(KEY)}/s/{SESSION}/export.jsonl")
    assert response.status_code == 200 and response.streaming
    body = b"".join(response.streaming_content).decode()
    assert body == whole.data["text"]
    assert body.count("\n") == 61 and '"role": "session_meta"' in body.splitlines()[0]
    # Markdown of a whole compression chain (three segments), cut between messages.
    chain = "20260301_110000_c7d8e9"
    whole = client.ask("host-b", "export", key=KEY, session_id=chain, fmt="md", lineage=True, masked=False)
    assert whole.ok and whole.data["text"].count("\n# ") >= 2
    response = admin.get(f"/fleet/p/{quote(KEY)}/s/{chain}/export.md?lineage=1")
    assert b"".join(response.streaming_content).decode() == whole.data["text"]
    assert admin.get(f"/fleet/p/{quote(KEY)}/s/nosuch/export.md").status_code == 404


def test_fleet_check_starts_a_check_on_the_named_host(hosts_up):
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("fleet_check", "--host", "host-a", stdout=out)
    run_id = int(re.search(r"host-a: run #(\d+) \(check, 6 profile", out.getvalue()).group(1))
    run = _finish(run_id)
    assert run.status == "done", run.error
    names = ("default", "archive", "edge", "legacy", "ops", "research")
    assert {p["profile"] for p in run.report["profiles"]} == {f"{n} on host-a" for n in names}
    with pytest.raises(SystemExit) as exited:
        call_command("fleet_check", "--host", "nosuch", stdout=StringIO(), stderr=StringIO())
    assert exited.value.code == 1


def test_the_fleet_list_exports_every_remote_row_as_csv(hosts_up, admin, monkeypatch):
    import csv
    import io

    from sessions_app.fleet import views_export

    monkeypatch.setattr(views_export, "PAGE", 2)  # several read tasks for one profile

    listing = admin.get("/fleet/sessions/").content.decode()
    assert "/fleet/sessions/export.csv" in listing
    response = admin.get("/fleet/sessions/export.csv", {"profile": "ops on host-b"})
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    expected = client.ask("host-b", "sessions", filters={"profiles": ["ops on host-b"]}, limit=1).data["count"]
    assert len(rows) == expected > 1 and {r["profile"] for r in rows} == {"ops on host-b"}
    assert len({r["id"] for r in rows}) == len(rows)  # each row once across the pages
    everything = b"".join(admin.get("/fleet/sessions/export.csv").streaming_content).decode()
    assert " on host-a," in everything and " on host-b," in everything and "# host" not in everything
