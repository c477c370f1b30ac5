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


def _ids(store, caps, indexed, limit=200):
    qs = filtered(store, caps, Filters(), indexed).order_by("-activity", "-id")
    return list(qs.values_list("pk", "activity")[:limit])


def test_newest_stores_order_by_their_own_activity_index(hermes_home):
    from sessions_app.stores.listing import indexed_activity

    store = store_of(hermes_home, "edge")
    with store.read() as conn:
        caps = store.capabilities(conn)
        assert indexed_activity(conn, caps)
    qs = filtered(store, caps, Filters(), True).order_by("-activity", "-id").values_list("pk", flat=True)[:51]
    sql, params = qs.query.sql_with_params()
    assert "USING INDEX idx_sessions_effective_activity" in _plan(store, sql % tuple(repr(p) for p in params))
    assert _ids(store, caps, True) == _ids(store, caps, False)
    release = store_of(hermes_home, "default")
    with release.read() as conn:
        assert not indexed_activity(conn, release.capabilities(conn))


def test_a_text_activity_falls_back_to_the_guarded_order(hermes_home, settings):
    from sessions_app.stores.listing import indexed_activity

    settings.HERMES_ROOTS = [str(hermes_home)]
    store = store_of(hermes_home, "edge")
    conn = sqlite3.connect(store.path)
    conn.execute("UPDATE sessions SET last_activity_at = 'yesterday' WHERE id = (SELECT MIN(id) FROM sessions)")
    conn.commit()
    conn.close()
    with store.read() as conn:
        assert not indexed_activity(conn, store.capabilities(conn))
    page = list_sessions([store], Filters(profiles=["edge"]), limit=200)
    assert all(isinstance(r["activity"], float) for r in page.rows) and page.rows


def test_distinct_sources_skip_scan_finds_every_source(hermes_home):
    from sessions_app.stores.discovery import discover
    from sessions_app.stores.listing import distinct_sources
    from sessions_app.stores.store import Store

    stores = [Store(p) for p in discover([hermes_home]).profiles]
    expected = set()
    for store in stores:
        conn = sqlite3.connect(f"file:{store.path}?mode=ro", uri=True)
        expected |= {r[0] for r in conn.execute("SELECT DISTINCT source FROM sessions") if r[0]}
        conn.close()
    assert distinct_sources(stores) == sorted(expected) and len(expected) > 3


@pytest.mark.parametrize("profile", ["default", "ops", "research", "legacy", "archive", "edge"])
def test_started_order_walks_the_stores_own_started_index(hermes_home, profile):
    from sessions_app.stores.listing import _started, indexed_started

    store = store_of(hermes_home, profile)
    with store.read() as conn:
        caps = store.capabilities(conn)
        assert indexed_started(conn)
    qs = filtered(store, caps, Filters()).annotate(sort=_started(True)).order_by("-sort", "-id")
    sql, params = qs.values_list("pk", flat=True)[:51].query.sql_with_params()
    plan = _plan(store, sql % tuple(repr(p) for p in params))
    assert "idx_sessions_started" in plan and "messages" not in sql, plan
    assert "USE TEMP B-TREE FOR ORDER BY" not in plan, plan  # only ties are sorted


def _all_stores(hermes_home):
    from sessions_app.stores.discovery import discover
    from sessions_app.stores.store import Store

    return [Store(p) for p in discover([hermes_home]).profiles]


def test_started_and_activity_orders_across_profiles(hermes_home, settings):
    """A reply today to the oldest session of the 0.19.0 store moves it to the top of
    the activity order and leaves it last in the start order."""
    from tests.checks.helpers import hermes

    settings.HERMES_ROOTS = [str(hermes_home)]
    stores = _all_stores(hermes_home)
    oldest = list_sessions(stores, Filters(profiles=["default"]), limit=200).rows[-1]["id"]
    hermes(store_of(hermes_home, "default"), f"db.append_message({oldest!r}, 'user', 'still there?')")
    pages = {}
    for order, column in (("started", "started_at"), ("activity", "activity")):
        rows = list_sessions(stores, Filters(order=order), limit=200).rows
        keys = [(r[column], r["profile"], r["id"]) for r in rows]
        assert len(keys) > 50 and keys == sorted(keys, reverse=True)
        assert all(r["sort"] == r[column] for r in rows)
        pages[order] = [(r["profile"], r["id"]) for r in rows]
    assert sorted(pages["started"]) == sorted(pages["activity"])
    assert pages["activity"][0] == ("default", oldest) != pages["started"][0]


def test_a_text_or_missing_start_falls_back_to_the_guarded_order(hermes_home, settings):
    from sessions_app.stores.listing import indexed_started

    settings.HERMES_ROOTS = [str(hermes_home)]
    store = store_of(hermes_home, "ops")
    before = list_sessions([store], Filters(profiles=["ops"]), limit=200)
    victim = before.rows[0]["id"]
    conn = sqlite3.connect(store.path)
    conn.execute("UPDATE sessions SET started_at = 'yesterday' WHERE id = ?", (victim,))
    conn.commit()
    conn.close()
    with store.read() as conn:
        assert not indexed_started(conn)
    after = list_sessions([store], Filters(profiles=["ops"]), limit=200)
    assert {r["id"] for r in after.rows} == {r["id"] for r in before.rows}
    assert after.rows[-1]["id"] == victim and after.rows[-1]["sort"] == 0.0
    assert after.rows[-1]["started_at"] == "yesterday"  # shown as stored, never rewritten


def test_cached_sources_follow_writes_to_the_store(hermes_home, settings):
    from sessions_app.stores.listing import distinct_sources
    from tests.checks.helpers import hermes

    settings.HERMES_ROOTS = [str(hermes_home)]
    stores = _all_stores(hermes_home)
    assert "matrix" not in distinct_sources(stores)
    hermes(store_of(hermes_home, "ops"), "db.create_session('matrix-1', source='matrix')")
    assert "matrix" in distinct_sources(stores)
