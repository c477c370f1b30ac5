"""The sessions list's filters are validated once per query and choices
(``forms.session_filters``): the remembered result is what a fresh form gives,
each caller gets its own copy, and new choices validate anew."""

import datetime as dt

from django.http import QueryDict

from sessions_app import forms
from sessions_app.forms import SessionFilterForm, session_filters

CHOICES = {"profiles": ["default", "ops"], "sources": ["cli", "discord"], "checks": [("counter_drift", "Drift")]}


def fresh(query, **choices):
    data = QueryDict(query)
    return SessionFilterForm(data or None, **(choices or CHOICES)).filters()


def test_remembered_filters_are_the_forms_own():
    forms._FILTERS.clear()
    for query in ("", "size=50", "profile=default&profile=ops&source=cli&state=open&order=activity&dir=asc",
                  "date_from=2026-01-02&date_to=bogus&q=%20abc%20&check=counter_drift&pinned=yes",
                  "source=nope&order=nope&profile=ghost", "after=xyz&profile=default"):
        for _ in range(2):
            assert session_filters(QueryDict(query), **CHOICES) == fresh(query)
    assert session_filters(QueryDict("date_from=2026-01-02"), **CHOICES).date_from == dt.date(2026, 1, 2)


def test_each_caller_gets_its_own_copy_and_new_choices_validate_anew():
    forms._FILTERS.clear()
    first = session_filters(QueryDict("profile=default&pinned=yes"), **CHOICES)
    first.profiles.append("ops")
    first.flags["hidden"] = "yes"
    first.with_findings["default"] = {"x"}
    again = session_filters(QueryDict("profile=default&pinned=yes"), **CHOICES)
    assert again.profiles == ["default"] and again.flags == {"pinned": "yes"} and again.with_findings == {}
    # A source that was not a choice is dropped; once a store has it, it filters.
    assert session_filters(QueryDict("source=telegram"), **CHOICES).source == ""
    more = {**CHOICES, "sources": ["cli", "discord", "telegram"]}
    assert session_filters(QueryDict("source=telegram"), **more).source == "telegram"
