"""Flags and titles in the browser: rename, archive, pin, hide one session or the selected ones.

Every request needs ``change_flags`` (operators and admins), checked on the
server. One session is changed inside the request (one guarded write, one audit
event); a selection from the sessions list becomes a background job, each session
its own guarded write. The rules are ``actions.flags``'.
"""

from __future__ import annotations

from django.contrib import messages as flash
from django.http import HttpResponseBadRequest
from django.shortcuts import redirect
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from .. import jobs, runs
from ..actions import flags
from .common import require_perm, store_view

BULK_MAX = 500
ACTIONS = {"archive": ("archived", 1), "unarchive": ("archived", 0), "pin": ("pinned", 1), "unpin": ("pinned", 0),
           "hide": ("hidden", 1), "unhide": ("hidden", 0)}


def _flagger(request) -> flags.Flagger:
    return flags.Flagger(actor=request.user, actor_label=request.user.get_username(),
                         request_address=request.META.get("REMOTE_ADDR"))


def _back(request, store, session_id):
    """Back to where the form was (a same-site ``next``, e.g. the Prune page), else the session page."""
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()},
                                                  require_https=request.is_secure()):
        return redirect(target)
    return redirect("session", store.key, session_id)


def _say(request, session_id, outcome):
    if outcome.status == "applied" and outcome.problems:
        flash.warning(request, f"{session_id}: {outcome.reason}")
    elif outcome.status == "applied":
        flash.success(request, f"{session_id}: {outcome.reason}")
    elif outcome.status == "skipped":
        flash.info(request, f"{session_id}: nothing to change ({outcome.reason})")
    else:
        flash.error(request, f"{session_id}: not changed ({outcome.status}): {outcome.reason}")


@require_POST
@require_perm("change_flags")
@store_view
def set_flag(request, store, session_id):
    """Archive/unarchive, pin/unpin or hide/unhide one session (its whole compression lineage)."""
    action = request.POST.get("action", "")
    if action not in ACTIONS:
        return HttpResponseBadRequest("Unknown flag action")
    flag, value = ACTIONS[action]
    _say(request, session_id, _flagger(request).set_flag(store, session_id, flag, bool(value)))
    return _back(request, store, session_id)


@require_POST
@require_perm("change_flags")
@store_view
def rename(request, store, session_id):
    """Give one session a new title (Hermes' rules: cleaned, at most 100 characters, unique)."""
    # The form carries the shown title's digest (flags.title_digest), not the title.
    digest = request.POST.get("expected_digest", "")
    if not digest:
        flash.error(request, f"{session_id}: not renamed: the form did not say which title it showed; reload the page")
        return _back(request, store, session_id)
    try:
        title = flags.clean_title(request.POST.get("title", ""))
    except flags.TitleError as exc:
        flash.error(request, f"{session_id}: not renamed: {exc}")
        return _back(request, store, session_id)
    if request.POST.get("masked") == "1" and title is None:
        # That form starts empty (the title holds masked text): a title that cleans to
        # nothing (empty, spaces, zero-width or control characters) is "not typed", not "clear".
        flash.error(request, f"{session_id}: not renamed: type the new title (the field starts empty because "
                             "the title holds masked text)")
        return _back(request, store, session_id)
    _say(request, session_id, _flagger(request).rename(store, session_id, title, None, digest))
    return _back(request, store, session_id)


@require_POST
@require_perm("change_flags")
def bulk_flags(request):
    """The selected sessions of the list: one background job, each session on its own."""
    action = request.POST.get("action", "")
    if action not in ACTIONS:
        return HttpResponseBadRequest("Unknown flag action")
    chosen = []
    for value in request.POST.getlist("s"):
        profile, sep, sid = str(value).partition(" ")
        if sep and profile and sid:
            chosen.append((profile, sid))
    chosen = list(dict.fromkeys(chosen))
    if not chosen:
        flash.warning(request, "Select the sessions first.")
        return redirect("session_list")
    if len(chosen) > BULK_MAX:
        return HttpResponseBadRequest(f"At most {BULK_MAX} sessions at once")
    flag, value = ACTIONS[action]
    items = [{"profile": p, "session_id": s, "flag": flag, "value": value} for p, s in chosen]
    run = runs.create("flags", "browser", actor=request.user, request_address=request.META.get("REMOTE_ADDR"),
                      plans=items, total=len(items), profiles=sorted({p for p, _ in chosen}))
    jobs.start(run)
    return redirect("run", run.pk)
