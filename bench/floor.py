"""Floor views: what each dashboard page costs at the least, served beside the product.

A floor view is a minimal Django view under the very server, middleware, session
authentication and dashboard database the product pages run under
(``bench/settings.py`` adds these routes to the product's own URLconf): it opens
the store read-only with the ``sqlite3`` module, runs the page's own minimal SQL,
and writes the rows it read as escaped HTML (``django.utils.html.escape``), with
no template, no ORM and no product code. ``product ÷ floor`` therefore measures
what the product adds to the unavoidable: request handling and the SQL are in
both. ``bench/pages.py`` measures them interleaved with the product and Hermes.

Stores are found from the bench home's ``manifest.json`` (``BENCH_FLOOR_HOME``),
not through the product's discovery. Every route is ``/bench-floor/...``.
"""

from __future__ import annotations

import json
import os
import sqlite3
from functools import lru_cache
from pathlib import Path

from django.db import connection
from django.http import Http404, HttpResponse
from django.urls import path
from django.utils.html import escape

LIMIT = 20_000  # bytes of a long text column read for a page (the product's TEXT_LIMIT)
LIST_COLUMNS = ("id", "source", "title", "started_at", "ended_at", "end_reason", "message_count",
                "parent_session_id", "model", "profile_name", "session_key")
COUNT_CAP = 10_000


@lru_cache(maxsize=1)
def _home() -> tuple[Path, dict]:
    home = Path(os.environ["BENCH_FLOOR_HOME"])
    return home, json.loads((home / "manifest.json").read_text())


def _db(profile: str) -> Path:
    home, manifest = _home()
    info = manifest["profiles"].get(profile)
    if info is None:
        raise Http404("no such profile")
    return home / info["store"]


def _connect(db: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(db.absolute().as_uri() + "?mode=ro", uri=True, isolation_level=None)
    conn.text_factory = lambda b: b.decode("utf-8", "replace")
    return conn


def _page(rows: list[str]) -> HttpResponse:
    return HttpResponse("<!doctype html><title>floor</title><table>" + "".join(rows) + "</table>")


def _row(values) -> str:
    return "<tr>" + "".join(f"<td>{escape('' if v is None else v)}</td>" for v in values) + "</tr>"


def _columns(conn, table: str) -> set[str]:
    return {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}


def session_page(request, profile: str, session_id: str):
    """The session row, then ``size`` messages in id order (``at=`` / ``before=-1``),
    long columns cut inside SQLite. ``walk=rowid`` (the bench passes it for the big
    session of a release store) reads ``messages NOT INDEXED``, as the product does
    for a session above 10,000 rows on a store without a ``(session_id, id)`` index."""
    if not request.user.has_perm("sessions_app.view_transcripts"):
        raise Http404
    size = int(request.GET.get("size", 100))
    source = "messages NOT INDEXED" if request.GET.get("walk") == "rowid" else "messages"
    cols = ("id, role, timestamp, tool_call_id, tool_name, "
            f"substr(CAST(content AS BLOB), 1, {LIMIT + 1}), length(CAST(content AS BLOB)), tool_calls")
    conn = _connect(_db(profile))
    try:
        session = conn.execute("SELECT * FROM sessions WHERE id = ?", (session_id,)).fetchone()
        if request.GET.get("before") == "-1":
            rows = conn.execute(f"SELECT {cols} FROM {source} WHERE session_id = ? ORDER BY id DESC LIMIT ?",
                                (session_id, size + 1)).fetchall()[::-1]
        else:
            after = int(request.GET["at"]) - 1 if request.GET.get("at") else -1
            rows = conn.execute(f"SELECT {cols} FROM {source} WHERE session_id = ? AND id > ? ORDER BY id LIMIT ?",
                                (session_id, after, size + 1)).fetchall()
    finally:
        conn.close()
    out = [_row(session or ())]
    for r in rows[:size]:
        text = r[5].decode("utf-8", "replace") if isinstance(r[5], bytes) else r[5]
        out.append(_row((*r[:5], text, r[6], r[7])))
    return _page(out)


def _list_rows(conn, order: str) -> tuple[list[tuple], int]:
    cols = _columns(conn, "sessions")
    picked = ", ".join(c if c in cols else f"NULL AS {c}" for c in LIST_COLUMNS)
    if order == "activity":
        if "last_activity_at" in cols:
            key = "COALESCE(last_activity_at, started_at)"
        else:  # release stores: the newest message's time, one index seek per session
            key = ("COALESCE((SELECT MAX(m.timestamp) FROM messages m WHERE m.session_id = sessions.id), "
                   "started_at)")
    else:
        key = "started_at"
    rows = conn.execute(f"SELECT {picked}, {key} AS sort FROM sessions ORDER BY sort DESC, id DESC LIMIT 51"
                        ).fetchall()
    count = conn.execute("SELECT COUNT(*) FROM (SELECT 1 FROM sessions LIMIT ?)", (COUNT_CAP + 1,)).fetchone()[0]
    return rows, count


def session_list(request):
    """The first page (50) of one profile (``profile=``) or of every profile, by start
    time or last activity (``order=``), with each store's capped count."""
    _, manifest = _home()
    wanted = request.GET.get("profile")
    order = request.GET.get("order", "started")
    keys = [wanted] if wanted else list(manifest["profiles"])
    merged, total = [], 0
    for key in keys:
        conn = _connect(_db(key))
        try:
            rows, count = _list_rows(conn, order)
        finally:
            conn.close()
        total += count
        merged += [(key, *r) for r in rows]
    merged.sort(key=lambda r: (r[-1] or 0, r[0], r[1]), reverse=True)
    return _page([f"<p>{total}</p>"] + [_row(r) for r in merged[:50]])


def search(request, profile: str):
    """The FTS query of the product's search page, then the hits' rows and sessions."""
    if not request.user.has_perm("sessions_app.view_transcripts"):
        raise Http404
    words = " ".join('"' + w.replace('"', '""') + '"' for w in request.GET.get("q", "").split())
    conn = _connect(_db(profile))
    try:
        hits = conn.execute("SELECT rowid, snippet(messages_fts, -1, '\x02', '\x03', '…', 24) FROM messages_fts "
                            "WHERE messages_fts MATCH ? ORDER BY rowid DESC LIMIT 51", (words,)).fetchall()[:50]
        ids = [h[0] for h in hits]
        marks = ",".join("?" * len(ids)) or "NULL"
        msgs = {r[0]: r for r in conn.execute(
            f"SELECT id, session_id, role, timestamp FROM messages WHERE id IN ({marks})", ids)}
        sids = sorted({m[1] for m in msgs.values()})
        smarks = ",".join("?" * len(sids)) or "NULL"
        titles = dict(conn.execute(f"SELECT id, title FROM sessions WHERE id IN ({smarks})", sids).fetchall())
    finally:
        conn.close()
    out = []
    for rowid, snippet in hits:
        m = msgs.get(rowid, (rowid, None, None, None))
        out.append(_row((rowid, m[1], titles.get(m[1]), m[2], m[3], snippet)))
    return _page(out)


def health(request, profile: str):
    """The latest finished whole pass's report from the dashboard's database (one
    query, decoded), then this profile's findings as rows, at most 200 per check."""
    with connection.cursor() as cur:
        cur.execute("SELECT report FROM sessions_app_healrun WHERE status = 'done' AND report IS NOT NULL "
                    "AND plans = '[]' AND only = '[]' ORDER BY finished_at DESC LIMIT 1")
        found = cur.fetchone()
    report = json.loads(found[0]) if found else {"profiles": []}
    entry = next((p for p in report["profiles"] if p.get("profile") == profile), {"findings": []})
    shown: dict[str, int] = {}
    out = []
    for f in entry["findings"]:
        shown[f["check"]] = shown.get(f["check"], 0) + 1
        if shown[f["check"]] <= 200:
            out.append(_row((f["check"], f["severity"], f.get("session_id"), f["count"], f["detail"], f["heal"])))
    return _page(out)


def overview(request):
    """Every store's headline figures, as the overview shows them: schema version,
    journal mode, session and message counts, the newest activity."""
    _, manifest = _home()
    out = []
    for key in manifest["profiles"]:
        db = _db(key)
        conn = _connect(db)
        try:
            figures = (
                key, db.stat().st_size,
                conn.execute("PRAGMA schema_version").fetchone()[0],
                conn.execute("PRAGMA journal_mode").fetchone()[0],
                conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0],
                conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0],
                conn.execute("SELECT MAX(started_at) FROM sessions").fetchone()[0],
                (conn.execute("SELECT timestamp FROM messages ORDER BY id DESC LIMIT 1").fetchone() or (None,))[0],
            )
        finally:
            conn.close()
        out.append(_row(figures))
    return _page(out)


urlpatterns = [
    path("bench-floor/", overview),
    path("bench-floor/sessions/", session_list),
    path("bench-floor/p/<str:profile>/health/", health),
    path("bench-floor/p/<str:profile>/search/", search),
    path("bench-floor/p/<str:profile>/s/<path:session_id>/", session_page),
]
