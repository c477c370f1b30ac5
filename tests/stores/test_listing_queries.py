"""The sessions list's SQL stays cheap on release stores (docs/benchmarks.md): the
capped count reads no messages, and a session's last activity is one index seek."""

import sqlite3

import pytest

from sessions_app.stores.listing import COUNT_CAP, Filters, filtered, list_sessions
from tests.checks.helpers import store_of

pytestmark = pytest.mark.django_db


def _plan(store, sql: str) -> str:
    conn = sqlite3.connect(f"file:{store.path}?mode=ro", uri=True)
    try:
        return "\n".join(r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql))
    finally:
        conn.close()


@pytest.mark.parametrize("profile", ["default", "ops", "research", "legacy", "archive"])
def test_activity_of_release_stores_is_an_index_seek(hermes_home, profile):
    store = store_of(hermes_home, profile)
    with store.read() as conn:
        caps = store.capabilities(conn)
    assert not caps.has("sessions", "last_activity_at")
    qs = filtered(store, caps, Filters()).order_by("-activity", "-id").values("id", "activity")[:51]
    sql, params = qs.query.sql_with_params()
    assert "GROUP BY" not in sql
    plan = _plan(store, sql.replace("%s", "?").replace("?", "{}").format(*[repr(p) for p in params]))
    assert "USING COVERING INDEX idx_messages_session " in plan + " ", plan


def test_capped_count_reads_no_messages(hermes_home):
    store = store_of(hermes_home, "default")
    with store.read() as conn:
        caps = store.capabilities(conn)
    qs = filtered(store, caps, Filters()).order_by().values("pk")[: COUNT_CAP + 1]
    assert "messages" not in str(qs.query)


def test_date_filters_still_apply_to_the_count(hermes_home, settings):
    import datetime as dt

    settings.HERMES_ROOTS = [str(hermes_home)]
    store = store_of(hermes_home, "default")
    everything = list_sessions([store], Filters(profiles=["default"]), limit=200)
    future = list_sessions([store], Filters(profiles=["default"], date_from=dt.date(2100, 1, 1)), limit=200)
    assert everything.count == len(everything.rows) > 0
    assert future.count == 0 and not future.rows
