"""The search page renders its hits in Python (``templatetags/search_hits.py``): the
markup is the template loop's it replaced (``reference_search_hits.html``), byte for
byte, for the hits of every fixture profile on several queries, masking on and off,
and for hits with hostile snippets, titles, ids, roles and states, missing sessions
and columns an old store lacks."""

from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.template import Context, Template

from sessions_app.presenters.search import search_page
from sessions_app.stores import registry
from sessions_app.stores.search import Hit, split_snippet
from sessions_app.templatetags.search_hits import search_hits
from tests.conftest import PROFILES

pytestmark = pytest.mark.django_db
REFERENCE = Template((Path(__file__).parent / "reference_search_hits.html").read_text())


def both(hits, key):
    context = {"results": {"hits": hits}, "key": key}
    return search_hits(hits, key), REFERENCE.render(Context(context))


@pytest.mark.parametrize("mask", [False, True])
def test_hits_of_every_profile_are_the_template_loops(hermes_home, settings, mask):
    settings.HERMES_ADMIN_MASK_SECRETS = mask
    user = User.objects.create_superuser("hits", password="x")
    seen = 0
    for profile in PROFILES:
        store = registry.get(profile)
        for query in ("alert", "onerr*", "the", "a*", "tool*", "sk*"):
            results = search_page(store, query, user=user, size=100).results
            if results is None:
                continue
            mine, reference = both(results.hits, profile)
            assert mine == reference, (profile, query)
            seen += len(results.hits)
    assert seen > 100


ODD_IDS = ["a/b", "sp ace", "ü-ñ", "x?y#z", "50%", "<script>", "a&b", "-", "cron_job.1~2", "日本語", None]
HOSTILE = ("<script>alert(1)</script> & \"q\" 'a' \x02<img src=x onerror=alert(2)>\x03 tail \x02&amp;\x03"
           "\x02</mark><script>\x03 \u202e\x01")


def test_hostile_and_sparse_hits(hermes_home):
    sessions = [None, {}, {"id": "s", "title": None, "source": None}, {"id": "s", "title": ""},
                {"id": "s", "title": "<img src=x onerror=alert(3)> & \u202e", "source": "<b>telegram</b>"},
                {"id": "s", "source": "cli"}]
    hits = []
    for i, sid in enumerate(ODD_IDS):
        for j, session in enumerate(sessions):
            hits.append(Hit(id=1000 * i + j, session_id=sid, role=None if j % 2 else "<user>",
                            timestamp=(None, 1.7e9 + i, "not a time", 2**70, "2026")[(i + j) % 5],
                            state=("active", "compacted", "rewound", "<x>")[(i + j) % 4],
                            parts=split_snippet(HOSTILE) if j % 3 else [("a & b", True), ("", False)],
                            session=dict(session) if session is not None else None))
    mine, reference = both(hits, "p&q")
    assert mine == reference
    assert "<script>" not in mine and "<img" not in mine
    assert '<mark dir="auto">&lt;img src=x onerror=alert(2)&gt;</mark>' in mine
    assert '<mark dir="auto">&lt;/mark&gt;&lt;script&gt;</mark>' in mine
    assert both([], "default") == ("", "")
