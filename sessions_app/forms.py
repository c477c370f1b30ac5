"""Forms: the sessions-list filters."""

import dataclasses

from django import forms

from .bidi import isolate
from .memo import Bounded
from .stores.listing import ORDERS, Filters


class SessionFilterForm(forms.Form):
    """GET filters of the sessions list; choices are filled from the known stores."""

    profile = forms.MultipleChoiceField(required=False)
    source = forms.ChoiceField(required=False)
    state = forms.ChoiceField(required=False, choices=[("", "open or ended"), ("open", "open"), ("ended", "ended")])
    date_from = forms.DateField(required=False, label="active from", widget=forms.DateInput(attrs={"type": "date"}))
    date_to = forms.DateField(required=False, label="active to", widget=forms.DateInput(attrs={"type": "date"}))
    q = forms.CharField(required=False, max_length=200, label="id or title")
    check = forms.ChoiceField(required=False, label="health")
    order = forms.ChoiceField(required=False, label="sort by", choices=list(ORDERS.items()))
    # Set by the column headers (each order has its own first direction, listing.DESCENDING).
    dir = forms.ChoiceField(required=False, choices=[("", "default for the column"), ("asc", "ascending"), ("desc", "descending")])
    archived = forms.ChoiceField(required=False, choices=[("", "archived or not"), ("yes", "archived"),
                                                          ("no", "not archived")])
    pinned = forms.ChoiceField(required=False, choices=[("", "pinned or not"), ("yes", "pinned"), ("no", "not pinned")])
    hidden = forms.ChoiceField(required=False, choices=[("", "hidden or not"), ("yes", "hidden"), ("no", "not hidden")])

    def __init__(self, *args, profiles=(), sources=(), checks=(), **kwargs):
        super().__init__(*args, **kwargs)
        # Labels isolated: sources come from the stores, profile keys from folder names.
        # ``checks``: codes, or ``(code, label)`` pairs (``checks.registry.choices()``).
        self.fields["check"].choices = [("", "any health")] + [c if isinstance(c, tuple) else (c, c) for c in checks]
        self.fields["profile"].choices = [(p, isolate(p)) for p in profiles]
        self.fields["profile"].widget.attrs["size"] = min(max(len(profiles), 2), 8)
        self.fields["profile"].help_text = "Ctrl-click to pick several"
        self.fields["source"].choices = [("", "any source")] + [(s, isolate(s)) for s in sources]

    def filters(self) -> Filters:
        # An invalid field is dropped from cleaned_data; the valid ones still apply.
        self.is_valid()
        data = getattr(self, "cleaned_data", {})
        return Filters(
            profiles=list(data.get("profile") or []),
            source=data.get("source") or "",
            state=data.get("state") or "",
            date_from=data.get("date_from"),
            date_to=data.get("date_to"),
            q=(data.get("q") or "").strip(),
            check=data.get("check") or "",
            order=data.get("order") or "started",
            descending={"asc": False, "desc": True}.get(data.get("dir") or ""),
            flags={k: data[k] for k in ("archived", "pinned", "hidden") if data.get(k)},
        )


# Validated filters by what they are validated from: the query's values of the form's
# fields and the choices (profile keys, sources, check codes). Validation is a pure
# function of those (choice membership, date parsing, lengths), so a remembered result
# is the one the form would give; a new choice (a store's new source) is a new key.
# Building and validating the bound form was ~0.6 ms of every list view, while its
# HTML is a cached fragment (templates/sessions/list.html) that needs the form only
# when it is rendered anew.
FILTERS_KEPT = 256
_FILTERS = Bounded(FILTERS_KEPT)


def session_filters(data, *, profiles=(), sources=(), checks=()) -> Filters:
    """``SessionFilterForm(data or None, ...).filters()``, remembered per query and
    choices (see above); a fresh copy each time (a page narrows its own)."""
    key = (bool(data), tuple((name, tuple(data.getlist(name))) for name in SessionFilterForm.base_fields if data),
           tuple(profiles), tuple(sources), tuple(checks))
    found = _FILTERS.get(key)
    if found is None:
        found = SessionFilterForm(data or None, profiles=profiles, sources=sources, checks=checks).filters()
        _FILTERS.put(key, found)
    return dataclasses.replace(found, profiles=list(found.profiles), with_findings={}, flags=dict(found.flags))
