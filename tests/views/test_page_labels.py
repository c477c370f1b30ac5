"""Pages say words where labels exist (demo home after a check pass): the sessions
list's badges name each check by its title (code and detail on hover), repair links
and preview headings name each repair by its title (its name beside), end reasons
show their label."""

import html
import re
import shutil

import pytest
from django.contrib.auth.models import User

from sessions_app.actions.registry import ACTIONS, TITLES
from sessions_app.checks.registry import BY_CODE as CHECKS
from tests.actions.conftest import heal

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo(demo_home, use_roots, tmp_path, settings, client):
    home = shutil.copytree(demo_home, tmp_path / "demo-home")
    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir()
    use_roots(home)
    heal("--all-profiles", "--json")
    client.force_login(User.objects.create_superuser("root", password="x"))
    return home


def test_every_repair_has_a_title():
    assert set(TITLES) == set(ACTIONS)


def test_session_list_badges_say_check_titles_with_the_code_on_hover(client, demo):
    body = client.get("/sessions/?profile=default&check=history_lost").content.decode()
    badge = re.search(r'<span class="sev sev-critical titled" title="history_lost: [^"]*">([^<]*)</span>', body)
    assert badge and badge.group(1) == CHECKS["history_lost"].title


def test_repair_links_and_preview_heading_say_repair_titles(client, demo):
    health = client.get("/p/default/health/").content.decode()
    links = re.findall(r'>Preview(?: first)?: ([^<]*)</a> <code class="small">([a-z_]+)</code>', health)
    assert links and all(html.unescape(title) == TITLES[name] for title, name in links)
    assert not re.search(r">Preview [a-z]+_[a-z_]+", health)
    url = re.search(r'href="(/p/default/s/[^"]+/repair/\?check=([a-z_]+))"', health)
    preview = client.get(url.group(1).replace("&amp;", "&")).content.decode()
    heading = re.search(r"<h1>Repair preview: ([^<]*) <code", preview).group(1)
    assert html.unescape(heading) == TITLES[CHECKS[url.group(2)].heal]


def test_end_reasons_show_labels(client, demo):
    body = client.get("/sessions/?state=ended&size=200").content.decode()
    reasons = re.findall(r'<span class="muted small" title="([a-z_]+)">\(<bdi>([^<]*)</bdi>\)', body)
    assert reasons
    labelled = {code: shown for code, shown in reasons}
    seen = {"cron_complete", "cli_close", "startup_orphan_reap"} & set(labelled)
    assert seen, labelled
    assert all(labelled[code] != code for code in seen)


def test_page_titles_are_plain_text(client, demo):
    for url in ("/p/default/", "/p/default/health/", "/p/edge/health/", "/sessions/?profile=default"):
        body = client.get(url).content.decode()
        title = re.search(r"<title>(.*?)</title>", body, re.S).group(1)
        assert not set(title) & {"\u2068", "\u2069", "\u202e"}, (url, title)
        assert "default" in title or "edge" in title or "Sessions" in title, title


def test_a_store_wide_repair_is_a_preview_link(client, demo):
    body = client.get("/p/edge/health/").content.decode()
    assert (f'<a href="/p/edge/repair-all/stale_lease/">Preview: {TITLES["clear_stale_lease"]}</a> '
            '<code class="small">clear_stale_lease</code>') in body
    assert client.get("/p/edge/repair-all/stale_lease/").status_code == 200
