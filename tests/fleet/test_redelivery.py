"""A worker killed (SIGKILL) mid-heal: the redelivered task finishes the run."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

import pytest

from sessions_app import runs
from sessions_app.fleet import client
from sessions_app.fleet.models import FleetHost
from sessions_app.models import AuditEvent, HealRun

from tests.conftest import copy_home
from .conftest import BASE, Worker, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
ROOTS = ("c1", "c2", "c3", "c4")  # four copies of the fixture home: 24 stores to heal


def _contents(root) -> dict:
    """Per store under ``root``: every message row and (id, message_count) of every
    session, read through SQLite (read-only; no worker runs on it any more)."""
    out = {}
    for db in sorted(root.rglob("state.db")):
        conn = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
        try:
            out[str(db.relative_to(root))] = (
                conn.execute("SELECT * FROM messages ORDER BY id").fetchall(),
                conn.execute("SELECT id, message_count FROM sessions ORDER BY id").fetchall(),
            )
        finally:
            conn.close()
    return out


def _reference_heal(base):
    """The same heal on pristine copies, on one host without a broker (the embedded
    default): ``manage.py heal_sessions --apply`` with its own SQLite database."""
    ref = base / "reference"
    for name in ROOTS:
        copy_home(ref / name)
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND", "HERMES_ADMIN_HOST")}
    env["HERMES_ADMIN_DATA"] = tempfile.mkdtemp(prefix="fleet-ref-")
    manage = [sys.executable, str(BASE / "manage.py")]
    subprocess.run(manage + ["migrate", "-v0"], env=env, check=True, cwd=BASE)
    args = [a for name in ROOTS for a in ("--root", str(ref / name))]
    done = subprocess.run(manage + ["heal_sessions", *args, "--all-profiles", "--apply", "--json"],
                          env=env, cwd=BASE, capture_output=True, text=True)
    assert done.returncode in (0, 1), done.stderr
    return ref, json.loads(done.stdout)


def test_a_worker_killed_mid_heal_finishes_the_run_after_restart(fleet, transactional_db):
    base = fleet["base"]
    ref, ref_report = _reference_heal(base)
    assert ref_report["summary"]["applied"] >= 4  # enough work to be killed in the middle of
    roots = [copy_home(base / "victim" / name) for name in ROOTS]
    host = Worker("host-c", roots, fleet["db_url"]).start()
    try:
        keys = [p["key"] for p in FleetHost.objects.get(name="host-c").profiles]
        assert len(keys) == 24
        run = runs.create("apply", runs.FLEET_TRIGGER, actor_label="tester", profiles=keys, total=len(keys))
        client.start_run(run, "host-c")
        wait_for(lambda: AuditEvent.objects.filter(run=run, outcome="applied").exists(), 120,
                 "the first applied repair")
        host.kill(signal.SIGKILL)  # the whole process group, mid-run
        killed = HealRun.objects.get(pk=run.pk)
        assert killed.status == "running" and killed.done < killed.total, "the run ended before the kill"
        applied_before = AuditEvent.objects.filter(run=run, outcome="applied").count()
        assert applied_before < ref_report["summary"]["applied"]

        host.start()  # the same host comes back; Redis hands the unacknowledged task out again
        finished = wait_for(lambda: (r := HealRun.objects.get(pk=run.pk)).status in ("done", "failed") and r,
                            180, "the redelivered run to finish")
        assert finished.status == "done", finished.error
    finally:
        host.kill(signal.SIGTERM)
    # Nothing applied twice: one applied event per repair and session.
    applied = list(AuditEvent.objects.filter(run=run, outcome="applied").values_list("action", "profile", "session_ids"))
    assert len(applied) == len({(a, p, tuple(s)) for a, p, s in applied})
    # Nothing lost or duplicated in the stores: exactly what the same heal on one host leaves.
    victim = _contents(base / "victim")
    assert victim == _contents(ref)
    # And the pass after the restart found nothing left to repair.
    left = [a for p in finished.report["profiles"] for a in p["actions"] if a["status"] != "applied"]
    assert not [a for a in left if a["status"] == "failed"]


def _message_rows(root) -> dict:
    """``{(store, session id): message row count}`` under ``root``, read-only."""
    out = {}
    for db in sorted(root.rglob("state.db")):
        conn = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
        try:
            for sid, n in conn.execute("SELECT s.id, COUNT(m.id) FROM sessions s LEFT JOIN messages m "
                                       "ON m.session_id = s.id GROUP BY s.id"):
                out[(str(db.relative_to(root)), sid)] = n
        finally:
            conn.close()
    return out


def test_a_worker_killed_mid_deletion_finishes_it_after_restart_without_a_duplicate(fleet, transactional_db):
    from django.core import signing

    from sessions_app.actions import deletion

    base = fleet["base"]
    roots = [copy_home(base / "deleting" / name) for name in ("d1", "d2")]
    host = Worker("host-d", roots, fleet["db_url"]).start()
    try:
        items = []
        for profile in FleetHost.objects.get(name="host-d").profiles:
            rows = client.ask("host-d", "sessions", filters={"profiles": [profile["key"]]}, limit=200).data["rows"]
            for row in rows:
                answer = client.ask("host-d", "delete_plan", key=profile["key"], session_id=row["id"])
                plan = answer.data.get("plan") if answer.ok else None
                # One session each (no delegate child, no chain): each item deletes exactly its own rows.
                if plan and plan["verdict"] == "not_live" and len(plan["targets"]) == 1 and not plan["detach"]:
                    items.append(answer.data["item"])
        assert len(items) >= 40, len(items)
        items = signing.loads(deletion.sign(items), salt=deletion.tokens.TOKEN_SALT)["items"]  # with their nonces
        before = _message_rows(base / "deleting")
        run = runs.create("delete", runs.FLEET_TRIGGER, actor_label="tester", plans=items, total=len(items),
                          profiles=sorted({i["profile"] for i in items}))
        client.start_run(run, "host-d")
        wait_for(lambda: AuditEvent.objects.filter(run=run, outcome="applied").exists(), 120, "the first deletion")
        host.kill(signal.SIGKILL)
        killed = HealRun.objects.get(pk=run.pk)
        assert killed.status == "running" and killed.done < killed.total, \
            f"the run ended before the kill ({killed.status}, {killed.done}/{killed.total})"
        host.start()
        finished = wait_for(lambda: (r := HealRun.objects.get(pk=run.pk)).status in ("done", "failed") and r,
                            180, "the redelivered deletion to finish")
        assert finished.status == "done", finished.error
    finally:
        host.kill(signal.SIGTERM)
    actions = [a for p in finished.report["profiles"] for a in p["actions"]]
    assert len(actions) == len(items) and {a["status"] for a in actions} == {"applied"}, \
        [a for a in actions if a["status"] != "applied"][:3]
    # Each confirmation used once: one applied deletion per nonce, one trash entry each.
    # (A deletion killed between its commit and its end is finished by resume.py,
    # whose own applied event carries no nonce.)
    nonces = [e.plan.get("token_nonce") for e in AuditEvent.objects.filter(run=run, action="delete_session",
                                                                            outcome="applied")]
    nonces = [n for n in nonces if n]
    assert len(nonces) == len(set(nonces)) <= len(items)
    assert len({a["trash_entry"] for a in actions}) == len(items)
    # The stores lost exactly the deleted sessions' rows, nothing else.
    after = _message_rows(base / "deleting")
    gone = {k for k in before if k not in after}
    assert len(gone) == len(items) and {sid for _db, sid in gone} == {i["session_id"] for i in items}
    assert all(after[k] == before[k] for k in after)
