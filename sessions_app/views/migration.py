"""Migration in the browser (issue 4 section 3): the per-profile migration page, a
session's JSONL copy against the store, and the two copies of a colliding id
(what they show: ``presenters.migration``).

*Apply* runs exactly the previewed plans (kept in the user's login session, the
form carrying a signed reference: ``views.common.plan_token``) and runs them as a background job
(``jobs.py``), whose page shows progress and the result with backup paths.
Permissions are enforced here, not by hiding buttons: imports need ``run_heal``,
moves ``delete_sessions`` (``Action.permission``), and the job's engine checks again.
"""

from __future__ import annotations

from dataclasses import asdict

from django.contrib import messages as flash
from django.core import signing
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from ..presenters import NotFound
from ..checks.damage import store_damage
from ..presenters.migration import MIGRATION_CHECKS, collision_page, jsonl_page, may_apply, migration_rows
from .common import plan_token, plans_of, refuse_token, require_perm, store_view, token_refusal
from .health import _start

PLANS_SALT = "migration-plans"
MIGRATION_REFUSED = "migrate_apply"  # audit action of refused plan tokens
PLANS_MAX_AGE = 3600  # seconds a previewed set of plans stays valid


@require_http_methods(["GET", "POST"])
@require_perm("view_dashboard")
@store_view
def migrate_profile(request, store):
    """GET: the plans, per session, with counts; POST: apply the previewed plans as a job."""
    if request.method == "POST":
        if not request.user.has_perm("sessions_app.run_heal"):
            raise PermissionDenied
        try:
            data = plans_of(request, PLANS_SALT, request.POST.get("plans", ""), PLANS_MAX_AGE)
        except signing.SignatureExpired:
            flash.warning(request, "Those plans are more than an hour old; here they are again, planned afresh.")
            return redirect("migrate_profile", store.key)
        except signing.BadSignature as exc:
            return refuse_token(request, MIGRATION_REFUSED,
                                token_refusal(exc, "invalid migration plans (forged or corrupted token)"), store)
        if not isinstance(data, list) or not data or \
                any(not isinstance(d, dict) or d.get("profile") != store.key for d in data):
            return refuse_token(request, MIGRATION_REFUSED, "the migration plans belong to another profile", store)
        if not all(may_apply(request.user, d.get("action", "")) for d in data):
            raise PermissionDenied
        run = _start(request, mode="apply", profiles=[store.key], plans=data, only=list(MIGRATION_CHECKS))
        return redirect("run", run.pk)
    rows = migration_rows(store, user=request.user)
    ready = [asdict(r["plan"]) for r in rows if not r["plan"].blocked and r["allowed"]]
    token = plan_token(request, PLANS_SALT, ready) if ready else None
    return render(request, "sessions/migrate.html", {
        "store": store, "imports": [r for r in rows if r["plan"].action == "import_jsonl_transcript"],
        "moves": [r for r in rows if r["plan"].action == "move_to_owner_store"], "ready": len(ready),
        "token": token, "can_run": request.user.has_perm("sessions_app.run_heal"), "damage": store_damage(store),
    })


@require_GET
@require_perm("view_transcripts")
@store_view
def session_jsonl(request, store, session_id):
    """The session's ``sessions/<id>.jsonl`` line by line against its rows in the store."""
    try:
        shown = jsonl_page(store, session_id, user=request.user)
    except NotFound as exc:
        raise Http404(str(exc)) from exc
    return render(request, "sessions/jsonl.html", {"store": store, "session_id": session_id, **shown})


@require_GET
@require_perm("view_dashboard")
@store_view
def session_collision(request, store, session_id):
    """Every copy of a session id across the known stores, side by side (never merged)."""
    try:
        shown = collision_page(store, session_id, user=request.user)
    except NotFound as exc:
        raise Http404(str(exc)) from exc
    return render(request, "sessions/collision.html", {"store": store, "session_id": session_id, **shown})
