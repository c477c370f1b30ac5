"""Stopping reads at once (``stores.connection.interrupt_all``), what ``watch_stores``
does on SIGTERM: a statement running in another thread ends with "interrupted",
and once reads are stoppable a long statement started later ends too (within
20,000 SQLite instructions), until reads are resumed."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from sessions_app.stores import connection

# A statement that runs for minutes unless stopped (no table needed).
ENDLESS = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT MAX(x) FROM c"


@pytest.fixture(autouse=True)
def resume():
    yield
    connection.resume_reads()


def _run_endless(db, outcome):
    try:
        with connection.open_ro(db) as conn:
            outcome["started"].set()
            conn.execute(ENDLESS).fetchone()
        outcome["result"] = "finished"
    except sqlite3.OperationalError as exc:
        outcome["result"] = str(exc)


def test_a_running_statement_is_interrupted_from_another_thread(hermes_home):
    db = hermes_home / "state.db"
    outcome = {"started": threading.Event()}
    worker = threading.Thread(target=_run_endless, args=(db, outcome))
    worker.start()
    assert outcome["started"].wait(30)
    time.sleep(0.2)  # inside the statement by now (it runs for minutes otherwise)
    assert connection.interrupt_all() >= 1
    worker.join(30)
    assert not worker.is_alive() and outcome["result"] == "interrupted"


def test_after_a_stop_every_later_statement_ends_too(hermes_home):
    connection.make_reads_stoppable()
    connection.interrupt_all()
    with connection.open_ro(hermes_home / "state.db") as conn:
        with pytest.raises(sqlite3.OperationalError, match="interrupted"):
            conn.execute(ENDLESS).fetchone()
    connection.resume_reads()
    with connection.open_ro(hermes_home / "state.db") as conn:
        assert conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0] > 0
