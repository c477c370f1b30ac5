"""Deletion in the browser: confirm (evidence + signed token) -> delete -> trash -> restore.

Every request is checked on the server: previews, deletions and restores need
``delete_sessions``; an override of a maybe-live verdict also needs
``override_live`` (and the typed session id). The confirmation token binds the
profile, the session ids and the last message id of each, the user it was issued
to, and a nonce per item that makes it good for one deletion (``actions.deletion``);
a token for another profile, session or user, a forged one, or an override typed
without the permission is refused and audited; an expired one sends the admin
back to a fresh confirmation.
"""

from __future__ import annotations

import sqlite3

from django.contrib import messages as flash
from django.core import signing
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.text import capfirst
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from .. import jobs, runs, trash
from ..actions import deletion, flags
from ..presenters.deleted import deleted_session
from ..secrets import masker_for
from ..stores.connection import classify_error
from ..stores import autoprune
from ..stores import registry
from .common import require_perm, store_view

BULK_MAX = 500  # sessions in one bulk deletion


def _masked_titles(user, targets) -> None:
    """Titles of a plan's targets (``.title``) or a trash manifest's (``["title"]``),
    masked where the dashboard masks transcript text (issue 6)."""
    masker = masker_for(user)
    if not masker:
        return
    for target in targets:
        if isinstance(target, dict):
            target["title"] = masker(target.get("title")) if target.get("title") else target.get("title")
        elif target.title:
            target.title = masker(target.title)


def _deleter(request) -> deletion.Deleter:
    return deletion.Deleter(actor=request.user, actor_label=request.user.get_username(),
                            request_address=request.META.get("REMOTE_ADDR"))


def _confirm_context(request, store, plan, **extra):
    _masked_titles(request.user, plan.targets)
    return {
        "store": store, "session_id": plan.session_id, "plan": plan,
        "token": deletion.sign([deletion.token_item(plan)], request.user.pk) if plan.exists else "",
        "can_override": request.user.has_perm("sessions_app.override_live"),
        "retention_days": trash.retention_days(),
        "pinned": flags.pinned_ids(store, plan.target_ids) if plan.exists else [],
        **extra,
    }


@require_GET
@require_perm("delete_sessions")
@store_view
def delete_confirm(request, store, session_id):
    """Step 1: exactly what goes (sessions, messages, children, rows, files) and the evidence."""
    lineage = request.GET.get("lineage") == "1"
    plan = deletion.plan_for(store, session_id, lineage)
    if not plan.exists:
        raise Http404("No such session in this profile")
    return render(request, "sessions/delete_confirm.html", _confirm_context(request, store, plan))


@require_POST
@require_perm("delete_sessions")
@store_view
def delete_apply(request, store, session_id):
    """Step 2: the signed confirmation; deletes, or refuses and shows the evidence again."""
    lineage = request.POST.get("lineage") == "1"
    try:
        items = deletion.unsign(request.POST.get("token", ""), request.user.pk)
    except signing.SignatureExpired:
        flash.warning(request, "That confirmation is more than an hour old; look at the evidence again.")
        url = reverse("delete_confirm", args=[store.key, session_id])
        return redirect(url + ("?lineage=1" if lineage else ""))
    except deletion.TokenMismatch:
        _deleter(request).refuse(store, [session_id], "the confirmation was issued to another user; nothing deleted")
        return HttpResponseBadRequest("This confirmation was issued to another user")
    except signing.BadSignature:
        _deleter(request).refuse(store, [session_id], "invalid confirmation token; nothing deleted")
        return HttpResponseBadRequest("Invalid confirmation")
    if len(items) != 1 or items[0].get("profile") != store.key or items[0].get("session_id") != session_id:
        _deleter(request).refuse(store, [session_id], "the confirmation belongs to another session "
                                 f"({', '.join(str(i.get('profile')) + ' ' + str(i.get('session_id')) for i in items)}); "
                                 "nothing deleted")
        return HttpResponseBadRequest("This confirmation belongs to another session")
    typed = request.POST.get("override_id", "").strip()
    override = typed or None
    may_override = request.user.has_perm("sessions_app.override_live")
    if override is not None and not may_override:
        _deleter(request).refuse(store, [session_id], "an override was typed without the override_live permission; "
                                 "nothing deleted")
        request.refusal_audited = True
        raise PermissionDenied("Overriding a maybe-live verdict needs the override_live permission")
    outcome = _deleter(request).delete(store, items[0], override=override, may_override=may_override)
    if outcome.status == "applied" and outcome.problems:
        # Committed: the sessions are gone from the store; say what did not follow.
        flash.warning(request, f"{session_id}: {outcome.reason}. The rows are in the trash and can be restored.")
        return redirect("trash_entry", outcome.entry.id)
    if outcome.status == "applied":
        flash.success(request, f"Deleted {session_id}: {outcome.reason}. It can be restored from the trash.")
        return redirect("trash_entry", outcome.entry.id)
    plan = outcome.plan or deletion.plan_for(store, session_id, items[0].get("lineage", False))
    if not plan.exists:
        flash.warning(request, outcome.reason)
        return redirect("session_list")
    context = _confirm_context(request, store, plan, refusal=outcome)
    return render(request, "sessions/delete_confirm.html", context, status=409)


def _parse_selection(values) -> list[tuple[str, str]]:
    chosen = []
    for value in values:
        profile, sep, sid = str(value).partition(" ")
        if sep and profile and sid:
            chosen.append((profile, sid))
    return list(dict.fromkeys(chosen))


@require_POST
@require_perm("delete_sessions")
def bulk_confirm(request):
    """Step 1 of a bulk deletion: each selected session judged on its own."""
    chosen = _parse_selection(request.POST.getlist("s"))
    if not chosen:
        flash.warning(request, "Select the sessions to delete first.")
        return redirect("session_list")
    if len(chosen) > BULK_MAX:
        return HttpResponseBadRequest(f"At most {BULK_MAX} sessions at once")
    rows, items, covered = [], [], {}
    for profile, sid in chosen:
        store = registry.get(profile)
        if store is None:
            rows.append({"profile": profile, "session_id": sid, "problem": "no such profile"})
            continue
        problem = store.glance().readiness()  # a list across profiles: a locked store is busy at once
        if problem is not None:
            rows.append({"profile": profile, "session_id": sid, "problem": problem.reason})
            continue
        try:
            plan = deletion.plan_for(store, sid)
        except sqlite3.Error as exc:  # locked or damaged since the list was shown: say so for this row
            rows.append({"profile": profile, "session_id": sid, "problem": classify_error(exc)[1]})
            continue
        if not plan.exists:
            rows.append({"profile": profile, "session_id": sid, "problem": "no longer exists"})
            continue
        _masked_titles(request.user, plan.targets)
        rows.append({"profile": profile, "session_id": sid, "plan": plan,
                     "pinned": flags.pinned_ids(store, plan.target_ids)})
    # A selected delegate child goes with its selected parent: one deletion, not two.
    for row in rows:
        if "plan" in row:
            for t in row["plan"].delegates:
                covered[(row["profile"], t.id)] = row["session_id"]
    going = []
    for row in rows:
        if "plan" in row and (row["profile"], row["session_id"]) in covered:
            row["with_parent"] = covered[(row["profile"], row["session_id"])]
        elif "plan" in row and row["plan"].verdict == "not_live":
            items.append(deletion.token_item(row["plan"]))
            going.append(row["plan"])
        elif "plan" in row:
            # A bulk deletion has no override: a live or maybe-live session is left
            # out of the confirmation, so the button counts only what will go (the
            # job still judges each confirmed session again and refuses one an agent took since).
            row["left_out"] = True
    context = {"rows": rows, "items": items, "token": deletion.sign(items, request.user.pk) if items else "",
               "retention_days": trash.retention_days(),
               "going_sessions": sum(len(p.targets) for p in going), "going_messages": sum(p.messages for p in going),
               "left_out": sum(1 for r in rows if r.get("left_out") or r.get("problem")),
               "pinned_count": sum(len(r.get("pinned") or ()) for r in rows
                                   if not r.get("with_parent") and not r.get("left_out"))}
    return render(request, "sessions/delete_bulk.html", context)


@require_POST
@require_perm("delete_sessions")
def bulk_apply(request):
    """Step 2: one background job; each session is re-judged and deleted on its own."""
    try:
        items = deletion.unsign(request.POST.get("token", ""), request.user.pk)
    except signing.SignatureExpired:
        flash.warning(request, "That confirmation is more than an hour old; select the sessions again.")
        return redirect("session_list")
    except deletion.TokenMismatch:
        _deleter(request).refuse(None, [], "bulk deletion: the confirmation was issued to another user; nothing deleted")
        return HttpResponseBadRequest("This confirmation was issued to another user")
    except signing.BadSignature:
        _deleter(request).refuse(None, [], "bulk deletion: invalid confirmation token; nothing deleted")
        return HttpResponseBadRequest("Invalid confirmation")
    if not items or len(items) > BULK_MAX:
        return HttpResponseBadRequest("Nothing to delete")
    run = runs.create("delete", "browser", actor=request.user, request_address=request.META.get("REMOTE_ADDR"),
                      plans=items, total=len(items), profiles=sorted({i.get("profile", "") for i in items}))
    jobs.start(run)
    return redirect("run", run.pk)


def deleted_session_page(request, store, session_id):
    """The page of a session ``store`` no longer holds (HTTP 404): when it was
    deleted, pruned or moved and by whom, with its trash entry, or that the entry
    was purged; what the latest pass found of the id, and (loaded by the page) its
    copies on disk (``presenters.deleted``: the trash, the audit trail and the stored
    pass; no store is opened).
    Called by the session page's view, which has checked the permission."""
    shown = deleted_session(store, session_id, user=request.user)
    return render(request, "sessions/deleted.html", {"store": store, "session_id": session_id, "gone": shown,
                                                     "retention_days": trash.retention_days()}, status=404)


@require_GET
@require_perm("view_dashboard")
def trash_list(request):
    """Everything deletions put in the trash, newest first."""
    profile = request.GET.get("profile") or None
    entries = trash.list_entries(profile)
    for entry in entries:
        _masked_titles(request.user, entry.manifest.get("targets_info", []))
    return render(request, "sessions/trash.html", {
        "entries": entries, "retention_days": trash.retention_days(), "profile": profile,
    })


@require_GET
@require_perm("view_dashboard")
def trash_entry(request, entry_id):
    entry = trash.get_entry(entry_id)
    if entry is None:
        raise Http404("No such trash entry")
    _masked_titles(request.user, entry.manifest.get("targets_info", []))
    store = registry.get(entry.profile)
    hermes_prune, again = (None, [])
    if store is not None and entry.state in ("deleted", "pending"):
        hermes_prune, again = autoprune.would_prune_entry(entry, store)
    counts = entry.manifest.get("counts") or {}
    return render(request, "sessions/trash_entry.html", {"entry": entry, "store": store,
                                                         "rows_total": sum(n for n in counts.values()
                                                                           if isinstance(n, int)),
                                                         "retention_days": trash.retention_days(),
                                                         "hermes_prune": hermes_prune, "pruned_again": again})


@require_http_methods(["POST"])
@require_perm("delete_sessions")
def trash_restore(request, entry_id):
    """Put a trash entry back (same ids and content), or say why not."""
    entry = trash.get_entry(entry_id)
    if entry is None:
        raise Http404("No such trash entry")
    store = registry.get(entry.profile)
    outcome = _deleter(request).restore(store, entry)
    if outcome.status == "applied":
        if outcome.problems:
            flash.warning(request, capfirst(outcome.reason))  # committed: the sessions are back; what did not follow
        else:
            flash.success(request, capfirst(outcome.reason))  # the reason is worded mid-sentence
        _, again = autoprune.would_prune_entry(entry, store)
        if again:
            flash.warning(request, f"Hermes' own auto-prune will delete {len(again)} of these session(s) again at "
                                   "its next start (they are older than its retention): pin or export them.")
        return redirect("session", entry.profile, entry.manifest.get("session_id"))
    flash.error(request, f"Not restored: {outcome.reason}")
    return redirect("trash_entry", entry.id)
