"""A profile's *Last activity* is its newest session's last activity, as the sessions
list orders and shows it, not the newest session's start (demo home: sessions whose
last message came after a later session started)."""

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
