"""Usage and cost figures (stores/usage.py, stores/usage_report.py) against plain SQL.

Usage is written the way it is in the field: by the real releases' own
``SessionDB.update_token_counts`` (incremental CLI deltas, a mid-session model
switch, the gateway's absolute totals) and 0.19.0's ``record_auxiliary_usage``; on
the newest shape, which no release writes, by the same statements upstream's writer
runs. The totals are then compared with plain SQL sums over the store.
"""

from __future__ import annotations

import datetime as dt
import shutil
import sqlite3

import pytest
from django.core.cache import cache

from sessions_app.stores import registry
from sessions_app.stores.usage import NAMES, StoreUsage, cache_key, store_usage
from sessions_app.stores.usage_report import Period, build, week_start
from tests.checks.helpers import damage, files_aged, hermes, store_of
from tests.conftest import ids

from .lock_holders import holding

ALL_TIME = Period(None, None)
FIGS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens",
        "api_call_count", "estimated_cost_usd", "actual_cost_usd")


@pytest.fixture(autouse=True)
def fresh_cache():
    cache.clear()
    yield
    cache.clear()


def plain(store, sql: str, params=()) -> list[tuple]:
    conn = sqlite3.connect(f"file:{store.path}?mode=ro", uri=True)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def session_sums(store) -> dict[str, float]:
    row = plain(store, "SELECT " + ", ".join(f"COALESCE(SUM({c}), 0)" for c in FIGS) + " FROM sessions")[0]
    return dict(zip(FIGS, row))


def reconciled_sums(store) -> dict[str, float]:
    """Per session the greater of its counter and the sum of its usage rows, summed:
    Hermes' insights rule, as plain SQL."""
    row = plain(store, "SELECT " + ", ".join(
        f"COALESCE(SUM(MAX(COALESCE(s.{c}, 0), COALESCE((SELECT SUM(u.{c}) FROM session_model_usage u "
        f"WHERE u.session_id = s.id), 0))), 0)" for c in FIGS) + " FROM sessions s")[0]
    return dict(zip(FIGS, row))


def aux_sums(store) -> dict[str, float]:
    row = plain(store, "SELECT " + ", ".join(f"COALESCE(SUM(u.{c}), 0)" for c in FIGS)
                + " FROM session_model_usage u JOIN sessions s ON s.id = u.session_id WHERE u.task <> ''")[0]
    return dict(zip(FIGS, row))


def close(a: dict, b: dict) -> bool:
    return all(abs((a[k] or 0) - (b[k] or 0)) < 1e-9 for k in FIGS)


def totals(store, **kw):
    report = build([store], ALL_TIME, **kw)
    assert report.errors == {}
    return report


def by_key(report) -> dict[str, dict]:
    return {line.key: line.values for line in report.lines}


# --------------------------------------------------------------------------- 0.13.0

def test_totals_match_a_plain_sum_on_a_0130_store(hermes_home):
    """0.13.0 has only the sessions counters: the totals, by profile, model and
    source, are plain SUMs over ``sessions`` after the release itself wrote usage."""
    store = store_of(hermes_home, "archive")
    a = ids("archive")
    hermes(store, f"""
db.update_token_counts({a['cli_main']!r}, input_tokens=1000, output_tokens=200, cache_read_tokens=50,
                       cache_write_tokens=7, reasoning_tokens=30, model="anthropic/claude-sonnet-4",
                       estimated_cost_usd=0.5, actual_cost_usd=0.25, api_call_count=2)
db.update_token_counts({a['telegram_open']!r}, input_tokens=5000, output_tokens=700, api_call_count=9,
                       estimated_cost_usd=0.125, absolute=True)
db.update_token_counts({a['slack_ended']!r}, input_tokens=40, output_tokens=4, api_call_count=1)
""", "0.13.0")
    with damage(store) as conn:  # a session of another model, as a /model switch at start leaves it
        conn.execute("UPDATE sessions SET model = 'openai/gpt-5' WHERE id = ?", (a["slack_ended"],))
    report = totals(store)
    expected = session_sums(store)
    assert close(report.total.values, expected)
    assert report.total.values["input_tokens"] == 1850 + 1000 + 5000 + 40
    assert report.total.sessions == plain(store, "SELECT COUNT(*) FROM sessions")[0][0]
    assert report.without_model_usage == ["archive"] and report.missing == {}

    models = by_key(totals(store, group="model"))
    for model, *sums in plain(store, "SELECT COALESCE(model, 'unknown'), " + ", ".join(
            f"SUM({c})" for c in FIGS) + " FROM sessions GROUP BY 1"):
        assert close(models[model], dict(zip(FIGS, sums))), model
    assert models["openai/gpt-5"]["input_tokens"] == 40

    sources = {line.key: line for line in totals(store, group="source").lines}
    for source, count, *sums in plain(store, "SELECT source, COUNT(*), " + ", ".join(
            f"SUM({c})" for c in FIGS) + " FROM sessions GROUP BY 1"):
        assert close(sources[source].values, dict(zip(FIGS, sums))) and sources[source].sessions == count


# --------------------------------------------------------------------------- newest shape

def record_call(conn, sid: str, model: str, task: str = "", **figures) -> None:
    """What upstream's writer runs for one call: the counters (main loop only)
    incremented and the per-model row upserted (``_record_model_usage``)."""
    if not task:
        sets = ", ".join(f"{k} = COALESCE({k}, 0) + ?" for k in figures)
        conn.execute(f"UPDATE sessions SET {sets} WHERE id = ?", (*figures.values(), sid))
    cols = ", ".join(figures)
    conn.execute(
        f"INSERT INTO session_model_usage (session_id, model, billing_provider, billing_base_url, billing_mode, "
        f"task, {cols}, first_seen, last_seen) VALUES (?, ?, 'openrouter', 'https://openrouter.ai/api/v1', '', ?, "
        f"{', '.join('?' * len(figures))}, 1796008080, 1796008080) "
        f"ON CONFLICT(session_id, model, billing_provider, billing_base_url, billing_mode, task) DO UPDATE SET "
        + ", ".join(f"{k} = {k} + excluded.{k}" for k in figures),
        (sid, model, task, *figures.values()))


def test_totals_match_a_plain_sum_on_the_newest_shape(hermes_home):
    """Counters, per-model rows, auxiliary rows, a model switch and an absolute
    gateway total: per session the greater of counter and rows (Hermes' insights
    rule), each row under its model, the counter's remainder under the session's."""
    store = store_of(hermes_home, "edge")
    e = ids("edge")
    with damage(store) as conn:
        record_call(conn, e["cli_main"], "openai/gpt-5", input_tokens=400, output_tokens=60, api_call_count=1,
                    estimated_cost_usd=0.02, actual_cost_usd=0.015)
        record_call(conn, e["cli_main"], "google/gemini-2.5-flash", task="title_generation", input_tokens=300,
                    output_tokens=12, api_call_count=1, estimated_cost_usd=0.001)
        record_call(conn, e["compress_root"], "google/gemini-2.5-flash", task="compression", input_tokens=9000,
                    output_tokens=800, api_call_count=1)
        conn.execute("UPDATE sessions SET input_tokens = 7000, output_tokens = 900, api_call_count = 12 "
                     "WHERE id = ?", (e["telegram_open"],))  # the gateway's absolute totals, no row
        record_call(conn, e["telegram_open"], "google/gemini-2.5-flash", task="vision", input_tokens=500,
                    api_call_count=1)
    report = totals(store)
    assert close(report.total.values, reconciled_sums(store))
    # cli_main: counter 1850 + 400 < its rows 1850 + 400 + 300; telegram: counter 7000 > its row 500
    # (Hermes hides that auxiliary call inside the gateway's total, and so do these figures).
    assert report.total.values["input_tokens"] == (1850 + 400 + 300) + 9000 + 7000
    assert report.total.values["api_call_count"] == (3 + 1 + 1) + 1 + 12

    # Per model, the same rule as correlated plain SQL.
    per_model = {}
    for model, *sums in plain(store, "SELECT model, " + ", ".join(f"SUM({c})" for c in FIGS) + " FROM ("
            "SELECT u.model, " + ", ".join(f"u.{c}" for c in FIGS) + " FROM session_model_usage u "
            "UNION ALL SELECT COALESCE(s.model, 'unknown'), " + ", ".join(
                f"MAX(0, COALESCE(s.{c}, 0) - COALESCE((SELECT SUM(x.{c}) FROM session_model_usage x "
                f"WHERE x.session_id = s.id), 0))" for c in FIGS)
            + " FROM sessions s) GROUP BY model"):
        per_model[model] = dict(zip(FIGS, sums))
    models = by_key(totals(store, group="model"))
    assert set(models) == set(per_model)
    for model, sums in per_model.items():
        assert close(models[model], sums), model
    assert models["openai/gpt-5"]["input_tokens"] == 400
    assert models["google/gemini-2.5-flash"]["input_tokens"] == 300 + 9000 + 500
    assert models["anthropic/claude-sonnet-4"]["input_tokens"] == 1850 + 6500

    tasks = by_key(totals(store, group="task"))
    assert tasks["title_generation"]["input_tokens"] == 300 and tasks["compression"]["input_tokens"] == 9000
    assert tasks["vision"]["input_tokens"] == 500
    assert tasks["main loop"]["input_tokens"] == 1850 + 400 + 6500


def test_the_real_0190_writer_splits_models_and_keeps_auxiliary_calls(hermes_home):
    """hermes-agent 0.19.0 itself: a /model switch mid-session, an auxiliary title
    call (recorded only in session_model_usage) and the gateway's absolute update
    (recorded only in the counters)."""
    store = store_of(hermes_home, "default")
    d = ids("default")
    hermes(store, f"""
sid = {d['cli_main']!r}
db.update_token_counts(sid, input_tokens=400, output_tokens=60, model="openai/gpt-5", api_call_count=1,
                       estimated_cost_usd=0.02, billing_provider="openrouter",
                       billing_base_url="https://openrouter.ai/api/v1")
db.record_auxiliary_usage(sid, "title_generation", model="google/gemini-2.5-flash", input_tokens=300,
                          output_tokens=12, estimated_cost_usd=0.001)
db.update_token_counts({d['telegram_open']!r}, input_tokens=7000, output_tokens=900, api_call_count=12,
                       absolute=True)
db.flush_token_counts() if hasattr(db, "flush_token_counts") else None
""")
    report = totals(store)
    assert close(report.total.values, reconciled_sums(store))
    # Rows and counters agree on the CLI path: SUM(sessions) + SUM(auxiliary rows).
    assert close(report.total.values, {k: session_sums(store)[k] + aux_sums(store)[k] for k in FIGS})
    assert report.total.values["input_tokens"] == 1850 + 400 + 300 + 7000
    models = by_key(totals(store, group="model"))
    assert models["openai/gpt-5"]["input_tokens"] == 400
    assert models["google/gemini-2.5-flash"]["input_tokens"] == 300
    assert models["anthropic/claude-sonnet-4"]["input_tokens"] == 1850 + 7000
    tasks = by_key(totals(store, group="task"))
    assert tasks["title_generation"]["input_tokens"] == 300 and tasks["main loop"]["input_tokens"] == 1850 + 400 + 7000


# --------------------------------------------------------------------------- missing columns, periods, cache

def test_a_missing_column_is_a_missing_figure_not_zero(hermes_home):
    """A store whose ``sessions`` lacks ``reasoning_tokens`` and ``actual_cost_usd``
    (as releases before the v5/v6 migrations wrote them) reports them as missing
    for that profile, and the other profiles' figures still add up."""
    legacy = store_of(hermes_home, "legacy")
    with damage(legacy) as conn:
        conn.execute("ALTER TABLE sessions DROP COLUMN reasoning_tokens")
        conn.execute("ALTER TABLE sessions DROP COLUMN actual_cost_usd")
    archive = store_of(hermes_home, "archive")
    report = build([legacy, archive], ALL_TIME)
    assert report.errors == {}
    assert report.missing == {"reasoning_tokens": ["legacy"], "actual_cost_usd": ["legacy"]}
    lines = by_key(build([legacy, archive], ALL_TIME, group="profile"))
    assert lines["legacy"]["reasoning_tokens"] is None and lines["legacy"]["actual_cost_usd"] is None
    assert lines["legacy"]["input_tokens"] == plain(legacy, "SELECT SUM(input_tokens) FROM sessions")[0][0] == 2750
    assert report.total.values["reasoning_tokens"] == session_sums(archive)["reasoning_tokens"] == 96


def test_period_is_sessions_started_in_it_by_utc_day_and_week(hermes_home):
    store = store_of(hermes_home, "edge")
    e = ids("edge")
    day = dt.date(2026, 3, 4)  # a Wednesday
    start = dt.datetime(2026, 3, 4, 23, 59, 59, tzinfo=dt.timezone.utc).timestamp()
    with damage(store) as conn:
        conn.execute("UPDATE sessions SET started_at = ? WHERE id = ?", (start, e["cli_main"]))
        conn.execute("UPDATE sessions SET started_at = 'garbage' WHERE id = ?", (e["slack_ended"],))
    report = build([store], Period(day, day))
    assert report.total.sessions == 1 and report.total.values["input_tokens"] == 1850
    after = day + dt.timedelta(days=1)
    assert build([store], Period(after, after)).total.values["input_tokens"] == 0
    assert report.undated == {"edge": 1}
    days = build([store], Period(day - dt.timedelta(days=6), day), group="day")
    assert [line.key for line in days.lines] == ["2026-03-04"]
    assert [d for d, _ in days.series][0] == (day - dt.timedelta(days=6) - dt.date(1970, 1, 1)).days
    assert len(days.series) == 7
    weeks = build([store], Period(day, day), group="week", bucket="week")
    assert [line.key for line in weeks.lines] == ["2026-W10 (from 2026-03-02)"]
    assert week_start((day - dt.date(1970, 1, 1)).days) == (dt.date(2026, 3, 2) - dt.date(1970, 1, 1)).days


def test_cached_until_the_store_is_written(hermes_home):
    """Cached under the store's file signature; a read that changed it (the first
    read of a copy creates its -wal and -shm) is not cached; a write makes a new key."""
    store = store_of(hermes_home, "ops")
    assert not (store.path.parent / "state.db-wal").exists()
    store_usage(store, 0, 1e12)
    assert (store.path.parent / "state.db-wal").exists()
    key = cache_key(store, 0, 1e12, None)
    assert cache.get(key) is None
    store_usage(store, 0, 1e12)
    assert cache.get(key) is None  # files written within the last second: not kept (memo.settled)
    files_aged(store)
    key = cache_key(store, 0, 1e12, None)
    first = store_usage(store, 0, 1e12)
    assert StoreUsage.from_cache(cache.get(key)) == first  # kept as plain tuples, the same figures
    cache.set(key, StoreUsage(undated=12345).to_cache())  # what a read would not return
    assert store_usage(store, 0, 1e12).undated == 12345
    with damage(store) as conn:
        conn.execute("UPDATE sessions SET input_tokens = input_tokens + 5 WHERE id = ?", (ids("ops")["cli_main"],))
    assert cache_key(store, 0, 1e12, None) != key  # the store's file state changed
    again = store_usage(store, 0, 1e12)
    total = lambda u: sum(r.values["input_tokens"] for r in u.rows)  # noqa: E731
    assert total(again) == total(first) + 5


@pytest.mark.django_db
def test_a_locked_store_is_said_busy_and_the_others_are_counted(hermes_home, settings):
    settings.HERMES_READ_TIMEOUT = 30
    db = hermes_home / "profiles" / "archive" / "state.db"
    with holding((db, "rollback")):
        report = build(registry.glances(), ALL_TIME)
    assert set(report.errors) == {"archive"} and report.errors["archive"][0] == "busy"
    assert "archive" not in report.profiles and len(report.profiles) == 5


def test_a_damaged_store_is_said_damaged(hermes_home, tmp_path):
    broken = store_of(hermes_home, "research")
    shutil.copy(broken.path, tmp_path / "keep.db")  # no connection of ours is open on it
    with open(broken.path, "r+b") as fh:  # the header survives, the pages do not
        fh.seek(4096)
        fh.write(b"\xff" * 8192)
    report = build([broken, store_of(hermes_home, "ops")], ALL_TIME)
    assert set(report.errors) == {"research"} and report.errors["research"][0] in ("corrupt", "unreadable")
    assert report.profiles == ["ops"]


def test_every_figure_is_named():
    assert set(NAMES) == set(FIGS)
