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
