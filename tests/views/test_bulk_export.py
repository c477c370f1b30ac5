"""Bulk export from the sessions list: /sessions/export.zip and /sessions/export.csv."""

import csv
import io
import re
import zipfile

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from tests.checks.helpers import damage, store_of
from tests.conftest import ids
from tests.stores.lock_holders import holding
from tests.views.markup import without_bidi_markup

pytestmark = pytest.mark.django_db


def body(response) -> bytes:
    assert response.status_code == 200, response.status_code
    return b"".join(response.streaming_content) if response.streaming else response.content


def archive(response) -> zipfile.ZipFile:
    assert response["Content-Type"] == "application/zip"
    assert response["Content-Disposition"].startswith('attachment; filename="hermes-sessions-')
    zf = zipfile.ZipFile(io.BytesIO(body(response)))
    assert zf.testzip() is None
    return zf


def listed(client, query: str) -> list[tuple[str, str]]:
    html = without_bidi_markup(client.get(f"/sessions/?size=200&{query}").content.decode())
    table = html[html.index('id="session-table"'):]
    return re.findall(r'<a href="/p/([^/"]+)/s/([^"]+)/">', table)


def csv_of(data: bytes) -> list[dict]:
    return list(csv.DictReader(io.StringIO(data.decode())))


def test_the_zip_holds_each_filtered_session_as_its_single_exports(admin_client, hermes_home):
    query = "profile=ops&profile=archive&source=cli"
    zf = archive(admin_client.get(f"/sessions/export.zip?{query}"))
    names = zf.namelist()
    top = names[0].split("/")[0]
    assert all(n.startswith(top + "/") for n in names) and ".." not in "".join(names)
    sessions = listed(admin_client, query)
    assert len(sessions) > 10
    rows = csv_of(zf.read(f"{top}/sessions.csv"))
    assert [(r["profile"], r["id"]) for r in rows] == sessions  # the list's rows, in its order
    assert len(names) == 2 * len(sessions) + 2
    for profile, sid in sessions:
        for ext in ("jsonl", "md"):
            single = body(admin_client.get(f"/p/{profile}/s/{sid}/export.{ext}"))
            assert zf.read(f"{top}/{profile}/{sid}.{ext}") == single, (profile, sid, ext)
    notes = zf.read(f"{top}/export-notes.txt").decode()
    assert f"export of {len(sessions)} session(s)" in notes and "profile=['ops', 'archive']" in notes
    assert "source=cli" in notes and "was left out" not in notes


def test_filters_are_the_lists_own(admin_client, hermes_home):
    for query in ("q=parser", "state=open&profile=default", "date_from=2026-11-30&date_to=2026-11-30&source=telegram",
                  "order=activity&profile=edge", "profile=nope"):
        rows = csv_of(body(admin_client.get(f"/sessions/export.csv?{query}")))
        assert [(r["profile"], r["id"]) for r in rows] == listed(admin_client, query), query
    rows = csv_of(body(admin_client.get("/sessions/export.csv?q=parser&profile=ops")))
    assert {r["title"] for r in rows} == {"Refactor the parser", "Refactor the parser #2", "Refactor the parser #3"}
    assert rows[0]["started_utc"].startswith("2026-11-30 ") and rows[0]["state"] in ("open", "ended")


def test_rewound_rows_only_on_request(admin_client, hermes_home):
    sid = ids("default")["undo"]
    def lines(zf):
        name, = [n for n in zf.namelist() if n.endswith(f"/default/{sid}.jsonl")]
        return zf.read(name).decode().splitlines()

    short = lines(archive(admin_client.get("/sessions/export.zip?profile=default&q=0d0ba5")))
    long = lines(archive(admin_client.get("/sessions/export.zip?profile=default&q=0d0ba5&inactive=1")))
    assert len(long) > len(short)
    assert long == body(admin_client.get(f"/p/default/s/{sid}/export.jsonl?inactive=1")).decode().splitlines()


SECRET = "sk-ant-api03-" + "Z" * 40


def test_masking_as_for_single_exports(hermes_home, settings):
    d = ids("default")
    with damage(store_of(hermes_home, "default")) as conn:
        conn.execute("INSERT INTO messages(session_id, role, content, timestamp) VALUES (?, 'user', ?, 1796008075.0)",
                     (d["cli_main"], f"the key is {SECRET}"))
        conn.execute("UPDATE sessions SET title = ? WHERE id = ?", (f"key {SECRET}", d["cli_main"]))
    settings.HERMES_ADMIN_MASK_SECRETS = True
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="x"))
    data = body(client.get("/sessions/export.zip?profile=default"))
    zf = zipfile.ZipFile(io.BytesIO(data))
    text = b"".join(zf.read(n) for n in zf.namelist())
    assert SECRET.encode() not in text and b"[secret masked" in text
    assert b"Secrets: masked." in text
    assert SECRET.encode() not in body(client.get("/sessions/export.csv?profile=default"))
    settings.HERMES_ADMIN_MASK_SECRETS = False
    data = body(client.get("/sessions/export.zip?profile=default"))
    assert SECRET.encode() in b"".join(zipfile.ZipFile(io.BytesIO(data)).read(n)
                                       for n in zipfile.ZipFile(io.BytesIO(data)).namelist())


def test_hostile_ids_get_safe_unique_names(admin_client, hermes_home):
    evil = ["../../etc/passwd", "a/b", "a_b", "C:\\x", "ümlaut", ".hidden", "=1+2"]
    with damage(store_of(hermes_home, "edge")) as conn:
        for sid in evil:
            conn.execute("INSERT INTO sessions(id, source, started_at) VALUES (?, 'cli', 1796008075.0)", (sid,))
            conn.execute("INSERT INTO messages(session_id, role, content, timestamp) VALUES (?, 'user', 'hi', 1796008075.0)",
                         (sid,))
    zf = archive(admin_client.get("/sessions/export.zip?profile=edge"))
    names = zf.namelist()
    assert len(names) == len(set(names))
    for name in names:
        parts = name.split("/")
        assert len(parts) in (2, 3) and all(p not in ("", ".", "..") and "\\" not in p for p in parts), name
    top = names[0].split("/")[0]
    rows = {r["id"]: r for r in csv_of(zf.read(f"{top}/sessions.csv"))}
    assert {"'=1+2", "../../etc/passwd", "a/b", "ümlaut"} <= set(rows)  # CSV keeps the ids (formula-guarded)
    exported = [n for n in names if n.endswith(".jsonl")]
    heads = {zf.read(n).decode().splitlines()[0] for n in exported}
    assert all(any(f'"id": "{sid}"'.replace("\\", "\\\\") in h for h in heads) for sid in evil)


def test_a_locked_store_is_left_out_and_named(admin_client, hermes_home, settings):
    settings.HERMES_READ_TIMEOUT = 30
    with holding((hermes_home / "profiles" / "archive" / "state.db", "rollback")):
        zf = archive(admin_client.get("/sessions/export.zip"))
        tail = body(admin_client.get("/sessions/export.csv")).decode().splitlines()[-1]
    top = zf.namelist()[0].split("/")[0]
    notes = zf.read(f"{top}/export-notes.txt").decode()
    assert re.search(r"Profile archive was left out: busy: store is locked", notes)
    assert not any(n.startswith(f"{top}/archive/") for n in zf.namelist())
    assert any(n.startswith(f"{top}/ops/") for n in zf.namelist())
    assert tail.startswith("# profile archive left out: busy")


def test_transcripts_need_their_permission_and_the_list_links_both(hermes_home):
    user = User.objects.create_user("aud", password="x")
    user.user_permissions.add(Permission.objects.get(codename="view_dashboard"))
    client = Client()
    client.force_login(user)
    assert client.get("/sessions/export.zip").status_code == 403
    assert client.get("/sessions/export.csv?profile=ops").status_code == 200
    html = client.get("/sessions/?profile=ops&source=cli").content.decode()
    assert 'href="/sessions/export.csv?profile=ops&amp;source=cli"' in html and "export.zip" not in html
    admin = Client()
    admin.force_login(User.objects.create_superuser("root", password="x"))
    html = admin.get("/sessions/?profile=ops&source=cli&after=x").content.decode()
    assert 'href="/sessions/export.zip?profile=ops&amp;source=cli"' in html  # without the page cursor


def test_an_empty_selection_is_a_valid_empty_archive(admin_client, hermes_home):
    zf = archive(admin_client.get("/sessions/export.zip?q=no-such-session-anywhere"))
    top = zf.namelist()[0].split("/")[0]
    assert sorted(zf.namelist()) == [f"{top}/export-notes.txt", f"{top}/sessions.csv"]
    assert csv_of(zf.read(f"{top}/sessions.csv")) == []


def test_the_store_is_not_written(admin_client, hermes_home):
    """Read-only: the store file is untouched (size, mtime by os.stat) and the -wal
    SQLite creates for a reader stays empty."""
    db = hermes_home / "profiles" / "ops" / "state.db"
    before = (db.stat().st_size, db.stat().st_mtime_ns)
    body(admin_client.get("/sessions/export.zip?profile=ops"))
    assert (db.stat().st_size, db.stat().st_mtime_ns) == before
    wal = db.with_name("state.db-wal")
    assert not wal.exists() or wal.stat().st_size == 0
