"""A list page's statements are compiled once per page shape (``listing._memo``):
what a page shows still follows the store. Rows written since, pages of other
sizes and orders, a filter changed, the next page, a column added by a migration,
and the same shape over another profile's store all come out as a fresh compile
gives them."""

import os
import sqlite3
import time
from pathlib import Path

import pytest

from sessions_app.stores import listing
from sessions_app.stores.listing import Filters, list_sessions
from tests.checks.helpers import files_aged, store_of

pytestmark = pytest.mark.django_db


def ids(page):
    return [(r["profile"], r["id"], r.get("title"), r.get("activity")) for r in page.rows]


def fresh(stores, filters, **kwargs):
    listing._COMPILED.clear()
    listing._PROOFS.clear()
    listing._COUNTS.clear()
    return list_sessions(stores, filters, **kwargs)


def write_session(store, sid: str, title: str, started: float) -> None:
    conn = sqlite3.connect(store.path)
    conn.execute("INSERT INTO sessions(id, source, started_at, title) VALUES (?, 'cli', ?, ?)", (sid, started, title))
    conn.execute("INSERT INTO messages(session_id, role, content, timestamp) VALUES (?, 'user', 'hi', ?)",
                 (sid, started + 1))
    conn.commit()
    conn.close()


@pytest.mark.parametrize("order", ["started", "activity", "messages", "title"])
def test_memoised_pages_follow_the_store(hermes_home, order):
    store = store_of(hermes_home, "default")
    filters = Filters(profiles=["default"], order=order)
    first = list_sessions([store], filters, limit=3)
    assert ids(list_sessions([store], filters, limit=3)) == ids(first) == ids(fresh([store], filters, limit=3))
    second = list_sessions([store], filters, limit=3, after=first.next_cursor)
    assert ids(second) == ids(fresh([store], filters, limit=3, after=first.next_cursor))
    assert ids(list_sessions([store], filters, limit=5)) == ids(fresh([store], filters, limit=5))
    write_session(store, "memo_new", "memo new", time.time() + 3600)
    again = list_sessions([store], filters, limit=3)
    assert ids(again) == ids(fresh([store], filters, limit=3))
    if order in ("started", "activity"):
        assert again.rows[0]["id"] == "memo_new"
    narrowed = Filters(profiles=["default"], order=order, q="memo")
    assert [r["id"] for r in list_sessions([store], narrowed, limit=3).rows] == ["memo_new"]


def test_same_shape_over_other_stores_and_after_a_migration(hermes_home):
    stores = [store_of(hermes_home, p) for p in ("default", "ops", "legacy", "archive")]
    for store in stores:
        assert ids(list_sessions([store], Filters(), limit=4)) == ids(fresh([store], Filters(), limit=4))
    assert ids(list_sessions(stores, Filters(), limit=10)) == ids(fresh(stores, Filters(), limit=10))
    legacy = stores[2]
    list_sessions([legacy], Filters(order="activity"), limit=4)
    conn = sqlite3.connect(legacy.path)
    conn.execute("ALTER TABLE sessions ADD COLUMN last_activity_at REAL")
    conn.execute("UPDATE sessions SET last_activity_at = 4102444800 WHERE id = (SELECT MIN(id) FROM sessions)")
    conn.commit()
    conn.close()
    page = list_sessions([legacy], Filters(order="activity"), limit=4)
    assert page.rows[0]["activity"] == 4102444800
    assert ids(page) == ids(fresh([legacy], Filters(order="activity"), limit=4))


def test_a_findings_filter_is_keyed_by_its_ids_digest_and_still_follows_them(hermes_home):
    """The "with findings" filter can carry 30,000 session ids per store: the memo's
    key names them by a digest (its entries hold no second copy of the id set),
    and another id set still gives its own page."""
    store = store_of(hermes_home, "default")
    all_ids = [r["id"] for r in list_sessions([store], Filters(), limit=50).rows]
    noise = {f"not-a-session-{n:05d}" for n in range(30_000)}
    listing._COMPILED.clear()
    filters = Filters(check="counter_drift", with_findings={"default": noise | {all_ids[0]}})
    assert [r["id"] for r in list_sessions([store], filters, limit=10).rows] == [all_ids[0]]
    assert max(len(repr(key)) for key in listing._COMPILED) < 2_000
    other = Filters(check="counter_drift", with_findings={"default": noise | {all_ids[1]}})
    assert [r["id"] for r in list_sessions([store], other, limit=10).rows] == [all_ids[1]]
    assert [r["id"] for r in list_sessions([store], filters, limit=10).rows] == [all_ids[0]]


def test_the_started_order_proof_is_taken_again_after_a_write(hermes_home):
    """``indexed_started`` is remembered under the store's file state: a row written
    since with a TEXT ``started_at`` (which sorts above every number in the raw
    index) makes the raw walk wrong, and the next page proves again: the row sorts
    as 0, last, as a fresh page has it."""
    store = store_of(hermes_home, "default")
    filters = Filters(profiles=["default"], order="started")
    key = ("started", str(store.path))
    list_sessions([store], filters, limit=3)
    assert key not in listing._PROOFS  # files written just now (the test's copy): not kept (memo.settled)
    files_aged(store)
    list_sessions([store], filters, limit=3)
    assert listing._PROOFS[key][2] is True
    conn = sqlite3.connect(store.path)
    conn.execute("INSERT INTO sessions(id, source, started_at, title) VALUES ('text_start', 'cli', 'soon', 'x')")
    conn.commit()
    conn.close()
    page = list_sessions([store], filters, limit=3)
    assert listing._PROOFS[key][2] is True and listing._PROOFS[key][0] != store.file_state()  # not kept yet
    assert "text_start" not in [r["id"] for r in page.rows]
    assert ids(page) == ids(fresh([store], filters, limit=3))
    files_aged(store)
    page = list_sessions([store], filters, limit=3)
    assert listing._PROOFS[key][2] is False
    assert "text_start" not in [r["id"] for r in page.rows]
    assert ids(page) == ids(fresh([store], filters, limit=3))


def test_wide_rows_are_read_for_the_shown_rows_and_a_failing_store_is_left_out(hermes_home, monkeypatch):
    """Across stores, the wide read (and liveness) is for the rows the merged page
    shows only; a store whose wide read fails is reported and left out, and the page
    is merged again from the others, as if its count had failed."""
    stores = [store_of(hermes_home, p) for p in ("default", "ops", "legacy", "archive")]
    asked = []
    real = listing._wide_rows

    def spy(store, conn, caps, indexed, pks):
        asked.append((store.key, list(pks)))
        if store.key == failing:
            raise sqlite3.OperationalError("database is locked")
        return real(store, conn, caps, indexed, pks)

    monkeypatch.setattr(listing, "_wide_rows", spy)
    failing = None
    page = list_sessions(stores, Filters(), limit=4, liveness=True)
    assert sum(len(pks) for _, pks in asked) == len(page.rows) == 4
    assert all("liveness" in r for r in page.rows)
    # Each store of the page in turn fails, the last one read too: the stores read
    # before it had rows move up into the page when it was left out, and those rows
    # must be read then, not dropped (a page of 3 rows out of 4 lost one silently).
    by_title = Filters(order="title")  # a first page of rows from several stores
    shown = {r["profile"] for r in list_sessions(stores, by_title, limit=8).rows}
    assert len(shown) > 1
    for failing in shown:
        got = list_sessions(stores, by_title, limit=8, liveness=True)
        others = list_sessions([s for s in stores if s.key != failing], by_title, limit=8, liveness=True)
        assert failing in got.errors and failing not in {r["profile"] for r in got.rows}
        assert ids(got) == ids(others) and got.count == others.count and len(got.rows) == 8
        assert got.next_cursor == others.next_cursor and all("liveness" in r for r in got.rows)


@pytest.mark.parametrize("order", ["started", "activity", "title"])
def test_remembered_counts_follow_the_store(hermes_home, order):
    """A page's capped count is remembered under the store's file state: the same on
    the next view and on a later page, and counted again after a write."""
    store = store_of(hermes_home, "default")
    filters = Filters(profiles=["default"], order=order)
    first = list_sessions([store], filters, limit=3)
    assert first.count == fresh([store], filters, limit=3).count
    assert list_sessions([store], filters, limit=3, after=first.next_cursor).count == first.count
    write_session(store, "count_new", "count new", time.time() + 60)
    again = list_sessions([store], filters, limit=3)
    assert again.count == first.count + 1 == fresh([store], filters, limit=3).count
    narrowed = Filters(profiles=["default"], order=order, q="count new")
    assert list_sessions([store], narrowed, limit=3).count == 1
