"""A profile's *Last activity* is its newest session's last activity, as the sessions
list orders and shows it, not the newest session's start (demo home: sessions whose
last message came after a later session started)."""

import datetime as dt
import re

import pytest
from django.contrib.auth.models import User

pytestmark = pytest.mark.django_db


def test_profile_last_activity_is_the_lists_newest_activity(client, demo_home, use_roots, tmp_path, settings):
    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir()
    use_roots(demo_home)
    client.force_login(User.objects.create_superuser("root", password="x"))
    for key in ("default", "ops", "research", "legacy", "archive", "edge"):
        profile = client.get(f"/p/{key}/").content.decode()
        shown = re.search(r'<dt>Last activity</dt><dd><time datetime="([^"]+)Z">', profile).group(1)
        listed = client.get(f"/sessions/?profile={key}&order=activity").content.decode()
        newest = re.search(r'<td data-label="Last activity">(?:<time datetime="([^"]+)Z"|([0-9-]+ [0-9:]+) UTC)',
                           listed)
        assert (newest.group(1) or newest.group(2).replace(" ", "T")) == shown, key


def test_a_text_last_activity_falls_back_to_the_start_on_the_profile_as_in_the_list(admin_client, hermes_home):
    """A salvaged row's TEXT ``last_activity_at`` (docs/store.md §13 row 21): the list
    reads that session's activity as its start, and so does the profile page, rather
    than leave the newest session out."""
    from sessions_app.stores import registry

    from tests.checks.helpers import damage

    registry.scan()
    edge = registry.get("edge")
    with damage(edge) as db:
        newest = max(db.execute("SELECT MAX(started_at), MAX(last_activity_at) FROM sessions").fetchone()
                     + db.execute("SELECT MAX(timestamp) FROM messages").fetchone())
        db.execute("UPDATE sessions SET last_activity_at = 'yesterday', started_at = ? "
                   "WHERE id = (SELECT MIN(id) FROM sessions)", (newest + 3600,))
    profile = admin_client.get("/p/edge/").content.decode()
    shown = re.search(r'<dt>Last activity</dt><dd><time datetime="([^"]+)Z">', profile).group(1)
    listed = admin_client.get("/sessions/?profile=edge&order=activity").content.decode()
    first = re.search(r'<td data-label="Last activity">(?:<time datetime="([^"]+)Z"|([0-9-]+ [0-9:]+) UTC)', listed)
    assert (first.group(1) or first.group(2).replace(" ", "T")) == shown
    assert shown.startswith(dt.datetime.fromtimestamp(newest + 3600, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M"))
