"""The session page writes its fact lists in Python (``templatetags/facts.py``): the
markup is what the template it replaced gave, byte for byte (``reference_facts.html`` is
that template, kept here as the reference), for every fixture session's metadata, other
columns and usage, and for hostile and odd values."""

from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.template import Context, Template

from sessions_app.presenters.labels import facts
from sessions_app.presenters.session_page import session_page
from sessions_app.stores import registry
from sessions_app.templatetags.facts import fact_list
from tests.conftest import MANIFEST

pytestmark = pytest.mark.django_db
REFERENCE = Template((Path(__file__).parent / "reference_facts.html").read_text())


def reference(fields, store) -> str:
    return REFERENCE.render(Context({"facts": fields, "store": store}))


def test_fact_lists_are_the_templates_markup_for_every_fixture_session(hermes_home):
    user = User.objects.create_superuser("facts", password="x")
    compared = 0
    for profile in MANIFEST["profiles"]:
        store = registry.get(profile)
        for sid in MANIFEST["profiles"][profile]["session_ids"].values():
            shown = session_page(store, sid, user=user, size=10)
            for fields in (shown.metadata, shown.more_metadata, shown.usage):
                assert fact_list(fields, store) == reference(fields, store), (profile, sid)
                compared += len(fields)
    assert compared > 100


def test_hostile_and_odd_values_too(hermes_home):
    store = registry.get(next(iter(MANIFEST["profiles"])))
    fields = facts([
        ("id", "<script>&'\""), ("id", None), ("parent_session_id", "a b/<c>?&d"), ("parent_session_id", ""),
        ("title", "<b>x</b> & 'y' \"z\""), ("started_at", 1_700_000_000.5), ("ended_at", "not a <time>"),
        ("model_config", {"temp<": 0.5, "nested": {"a": [1, 2]}, "at_time": 1_700_000_000, "empty": None,
                          "flag": True, "name": "<i>&amp;</i>"}),
        ("input_tokens", 12345), ("estimated_cost_usd", 0.00123), ("end_reason", "compression"),
        ("<odd column>", "\u202eoverride"), ("archived", 1), ("big", 10 ** 30), ("neg", -3.25),
        ("raw", b"bytes \xff"), ("list", ["a", None, 3]), ("f", 1.0),
    ])
    assert fact_list(fields, store) == reference(fields, store)
    assert fact_list([], store) == reference([], store)
