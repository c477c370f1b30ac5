"""The Prune page (all profiles or one): criteria -> what would go -> confirm -> a prune job.

Also Hermes' own auto-prune per profile: what its next start deletes by itself,
read from the profile's ``config.yaml`` (``stores.autoprune``).

Previews need ``view_dashboard``; confirming needs ``delete_sessions`` (a prune
deletes, into the trash). The confirmation is a signed token bound to the user,
the criteria and the units previewed (their lineage roots): the job prunes only
those, each judged again inside its transaction (``actions.prune``); one token
confirms at most :data:`CONFIRM_MAX` units.
"""

from __future__ import annotations

import sqlite3
import time

from django import forms
from django.contrib import messages as flash
from django.core import signing
from django.http import HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from .. import jobs, runs, trash
from ..bidi import isolate
from ..checks.damage import store_damage
from ..secrets import mask, masking_for
from ..stores import autoprune, registry
from ..stores.listing import distinct_sources
from ..stores.retention import MAX_PATTERN, Criteria, CriteriaError
from ..actions.prune_run import run_prune
from .common import refuse_token, require_perm

TOKEN_SALT = "prune-sessions"
TOKEN_MAX_AGE = 3600  # seconds
CONFIRM_MAX = 2000  # units one confirmation may prune
SHOWN_UNITS = 200  # units listed per profile on the page
SHOWN_AUTO = 50  # sessions listed per profile for Hermes' own auto-prune


class PruneForm(forms.Form):
    """The criteria of the Prune page (GET)."""

    profile = forms.MultipleChoiceField(required=False)
    older_than = forms.FloatField(required=False, min_value=0, label="ended more than (days ago)")
    source = forms.MultipleChoiceField(required=False)
    empty = forms.BooleanField(required=False, label="empty (never held a message)")
    match = forms.CharField(required=False, max_length=MAX_PATTERN, label="id or title matching")
    include_archived = forms.BooleanField(required=False, label="include archived sessions (spared otherwise)")

    def __init__(self, *args, profiles=(), sources=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["profile"].choices = [(p, isolate(p)) for p in profiles]
        self.fields["profile"].widget.attrs["size"] = min(max(len(profiles), 2), 8)
        self.fields["source"].choices = [(s, isolate(s)) for s in sources]
        self.fields["source"].widget.attrs["size"] = min(max(len(sources), 2), 8)
        self.fields["match"].help_text = "* any run, ? one character, [abc] one of; without them a substring"

    def clean(self):
        data = super().clean()
        try:
            data["criteria"] = Criteria(data.get("older_than"), tuple(data.get("source") or ()),
                                        bool(data.get("empty")), (data.get("match") or "").strip(),
                                        bool(data.get("include_archived")))
        except CriteriaError as exc:
            raise forms.ValidationError(str(exc))
        return data


def _auto(stores, user) -> list[dict]:
    """Hermes' own auto-prune per store, for the page (busy or damaged stores say so)."""
    found = []
    masking = masking_for(user)
    for store in stores:
        item = {"store": store, "preview": None, "error": ""}
        status = store.glance().readiness()
        if status is not None:
            item["error"] = f"{status.status}: {status.reason}"
        else:
            try:
                item["preview"] = autoprune.preview(store)
            except sqlite3.Error as exc:
                item["error"] = f"the store could not be read ({exc})"
        if item["preview"] is not None and masking:
            for row in item["preview"].sessions:
                row["title"] = mask(row.get("title"))
        found.append(item)
    return found


def _page(request, stores, fixed=None):
    keys = [s.key for s in stores]
    form = PruneForm(request.GET or None, profiles=keys, sources=distinct_sources(stores))
    context = {"form": form, "fixed": fixed, "report": None, "token": "", "auto": _auto(stores, request.user),
               "shown_units": SHOWN_UNITS, "units_slice": f":{SHOWN_UNITS}", "auto_slice": f":{SHOWN_AUTO}", "retention_days": trash.retention_days(),
               "confirm_max": CONFIRM_MAX, "damage": store_damage(fixed) if fixed else None}
    if context["damage"]:  # nothing is pruned from a damaged store: no form, the advice
        return render(request, "sessions/prune.html", context)
    if not form.is_bound or not form.is_valid():
        return render(request, "sessions/prune.html", context)
    criteria = form.cleaned_data["criteria"]
    if not criteria.given:
        form.add_error(None, "Say what to prune: an age, a source, empty sessions or a pattern (they combine).")
        return render(request, "sessions/prune.html", context)
    chosen = [s for s in stores if fixed or not form.cleaned_data["profile"] or s.key in form.cleaned_data["profile"]]
    # In the request: no whole-table structure read (seconds per large store); the
    # apply job makes it before any batch (actions.prune_run.preview_store).
    report = run_prune(chosen, criteria, apply=False, verify=False)
    masking = masking_for(request.user)
    roots: dict[str, list[str]] = {}
    budget = CONFIRM_MAX
    for prof in report["profiles"]:
        for unit in prof["units"]:
            unit["count"] = len(unit["sessions"]) + len(unit["delegates"])
            unit["extra_segments"] = len(unit["sessions"]) - 1
            if masking:
                unit["title"] = mask(unit.get("title"))
        take = [u["root"] for u in prof["units"][:budget]]
        budget -= len(take)
        if take:
            roots[prof["profile"]] = take
    context.update(report=report, criteria=criteria, capped=report["summary"]["units"] > CONFIRM_MAX)
    if roots and request.user.has_perm("sessions_app.delete_sessions"):
        context["token"] = signing.dumps({"criteria": criteria.as_dict(), "roots": roots, "uid": request.user.pk},
                                         salt=TOKEN_SALT, compress=True)
        context["confirm_units"] = sum(len(v) for v in roots.values())
    return render(request, "sessions/prune.html", context)


@require_GET
@require_perm("view_dashboard")
def prune_all(request):
    """Prune across every profile (or the ones picked)."""
    return _page(request, registry.stores())


@require_GET
@require_perm("view_dashboard")
def prune_profile(request, profile):
    """Prune in one profile."""
    store = registry.get(profile)
    if store is None:
        from django.http import Http404

        raise Http404("No such profile")
    return _page(request, [store], fixed=store)


@require_POST
@require_perm("delete_sessions")
def prune_apply(request):
    """The confirmation: a background prune job of the previewed units."""
    try:
        data = signing.loads(request.POST.get("token", ""), salt=TOKEN_SALT, max_age=TOKEN_MAX_AGE)
    except signing.SignatureExpired:
        flash.warning(request, "That preview is more than an hour old; look at what would go again.")
        return redirect("prune")
    except signing.BadSignature:
        return refuse_token(request, "prune_sessions", "invalid prune confirmation")
    if not isinstance(data, dict) or data.get("uid") != request.user.pk:
        return refuse_token(request, "prune_sessions", "this prune confirmation was issued to another user")
    roots = data.get("roots")
    try:
        criteria = Criteria.from_dict(data.get("criteria"))
    except CriteriaError:
        return HttpResponseBadRequest("Malformed prune confirmation")
    if not isinstance(roots, dict) or not roots or sum(len(v) for v in roots.values()) > CONFIRM_MAX:
        return HttpResponseBadRequest("Nothing to prune")
    run = runs.create("prune", "browser", actor=request.user, request_address=request.META.get("REMOTE_ADDR"),
                      plans=[{"criteria": criteria.as_dict(), "roots": roots, "apply": True,
                              "confirmed_at": time.time()}],
                      profiles=sorted(roots), total=sum(len(v) for v in roots.values()))
    jobs.start(run)
    return redirect("run", run.pk)
