"""Fleet pages that repair a remote profile: one finding's preview and apply, and
the migration page (JSONL imports, moves to the owning profile).

The preview is read on the host (``repair_preview`` of :mod:`.repairs`, a
``hermes.read`` task with the fleet timeout); the plan it returns is kept here
exactly as one host keeps it (``views.common.plan_token``: in the login session of
the user who saw it, the form carrying only a signed reference bound to that user,
good for an hour), and applying it is a fleet ``apply`` run on the host's queue
(``hermes.run_job``, acknowledged late), run there by ``jobs.execute`` through
``Applier.apply_all``, the guarded write of one host. No store logic here.
"""

from __future__ import annotations

from django.contrib import messages as flash
from django.core import signing
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from .. import runs
from ..actions.registry import ACTIONS
from ..checks.registry import BY_CODE as CHECKS
from ..presenters.changes import change_table
from ..presenters.migration import MIGRATION_CHECKS, may_apply
from ..secrets import masking_for
from ..views.common import plan_token, plans_of, refuse_token, require_perm, token_refusal
from ..views.health import PLAN_MAX_AGE, PLAN_SALT, REPAIR_REFUSED
from ..views.migration import MIGRATION_REFUSED, PLANS_MAX_AGE, PLANS_SALT
from . import client
from .views import _remote


@require_GET
@require_perm("view_dashboard")
def repair_preview(request, profile, session_id):
    """``/fleet/p/<key>/s/<id>/repair/?check=<code>``: the concrete plan for one
    finding, read now on its host, and the signed form that applies it."""
    view, _local = _remote(profile)
    code = request.GET.get("check", "")
    if code not in CHECKS:
        raise Http404("Unknown check")
    texts = request.user.has_perm("sessions_app.view_transcripts")
    # ``texts`` is sent only when asked for: a host of an earlier release refuses an
    # argument it does not know, and then every preview of it would fail.
    answer = client.ask(view, "repair_preview", key=profile, session_id=session_id, check=code,
                        masked=masking_for(request.user), **({"texts": True} if texts else {}))
    context = {"host": view, "key": profile, "session_id": session_id, "check": CHECKS[code], "answer": answer}
    if not answer.ok:
        return render(request, "fleet/repair.html", context, status=503)
    shown = answer.data
    plan_data = shown["plan_data"]
    context.update(finding=shown["finding"], plan=shown["plan"], live=shown["live"], first=shown["first"],
                   permission=shown["permission"],
                   # Not trusted to the host alone: no text for a user who may not read it.
                   inserted=(shown.get("inserted") or []) if texts else [],
                   inserted_total=shown.get("inserted_total") or 0,
                   can_apply=request.user.has_perm(f"sessions_app.{shown['permission']}") and view.reachable,
                   changes=change_table(shown["plan"]["changes"]) if shown["plan"] else None,
                   token=plan_token(request, PLAN_SALT, plan_data) if plan_data else None)
    return render(request, "fleet/repair.html", context)


@require_POST
@require_perm("run_heal")
def repair_apply(request, profile, session_id):
    """Apply the previewed (signed) plan as a fleet ``apply`` run on the host's
    queue; a forged or misplaced plan is refused and audited (HTTP 400)."""
    view, _local = _remote(profile)
    try:
        data = plans_of(request, PLAN_SALT, request.POST.get("plan", ""), PLAN_MAX_AGE)
    except signing.SignatureExpired:
        flash.warning(request, "That preview is more than an hour old; here is a fresh one.")
        url = reverse("fleet_repair", args=[profile, session_id])
        return redirect(f"{url}?{urlencode({'check': request.POST.get('check', '')})}")
    except signing.BadSignature as exc:
        return refuse_token(request, REPAIR_REFUSED, token_refusal(exc, "invalid repair plan (forged or corrupted token)"),
                            session_ids=[session_id], profile=profile)
    if not isinstance(data, dict) or data.get("profile") != profile or data.get("session_id") != session_id:
        found = f"{data.get('profile')} {data.get('session_id')}" if isinstance(data, dict) else "nothing"
        return refuse_token(request, REPAIR_REFUSED, f"the repair plan belongs to another session ({found})",
                            session_ids=[session_id], profile=profile)
    action = ACTIONS.get(data.get("action", ""))
    if action is None or not request.user.has_perm(f"sessions_app.{action.permission}"):
        raise PermissionDenied  # e.g. a move needs delete_sessions, not only run_heal
    if not view.reachable:
        flash.error(request, f"Host {view.name} is unreachable ({view.why}); nothing was repaired.")
        return redirect("fleet_session", profile, session_id)
    run = runs.create("apply", runs.FLEET_TRIGGER, actor=request.user, request_address=request.META.get("REMOTE_ADDR"),
                      profiles=[profile], plans=[data], only=[data.get("check")], total=1)
    client.start_run(run, view.name)
    return redirect("run", run.pk)


@require_http_methods(["GET", "POST"])
@require_perm("view_dashboard")
def migrate_profile(request, profile):
    """``/fleet/p/<key>/migrate/``. GET: the profile's migration plans, read now on
    its host; POST: the signed plans (one host's token, ``views.migration``) as a
    fleet ``apply`` run on the host's queue (``migrate_transcripts``' work, there)."""
    view, _local = _remote(profile)
    if request.method == "POST":
        return _migrate_apply(request, view, profile)
    answer = client.ask(view, "migration_plans", key=profile, masked=masking_for(request.user))
    context = {"host": view, "key": profile, "answer": answer, "can_run": request.user.has_perm("sessions_app.run_heal")}
    if not answer.ok:
        return render(request, "fleet/migrate.html", context, status=503)
    rows = answer.data["rows"]
    for row in rows:
        row["allowed"] = request.user.has_perm(f"sessions_app.{row['permission']}")
    ready = [r["plan_data"] for r in rows if not r["blocked"] and r["allowed"]]
    context.update(imports=[r for r in rows if r["action"] == "import_jsonl_transcript"],
                   moves=[r for r in rows if r["action"] == "move_to_owner_store"], ready=len(ready),
                   token=plan_token(request, PLANS_SALT, ready) if ready and view.reachable else None)
    return render(request, "fleet/migrate.html", context)


def _migrate_apply(request, view, profile):
    if not request.user.has_perm("sessions_app.run_heal"):
        raise PermissionDenied
    try:
        data = plans_of(request, PLANS_SALT, request.POST.get("plans", ""), PLANS_MAX_AGE)
    except signing.SignatureExpired:
        flash.warning(request, "Those plans are more than an hour old; here they are again, planned afresh.")
        return redirect("fleet_migrate", profile)
    except signing.BadSignature as exc:
        return refuse_token(request, MIGRATION_REFUSED,
                            token_refusal(exc, "invalid migration plans (forged or corrupted token)"), profile=profile)
    if not isinstance(data, list) or not data or \
            any(not isinstance(d, dict) or d.get("profile") != profile for d in data):
        return refuse_token(request, MIGRATION_REFUSED, "the migration plans belong to another profile",
                            profile=profile)
    if not all(may_apply(request.user, d.get("action", "")) for d in data):
        raise PermissionDenied
    if not view.reachable:
        flash.error(request, f"Host {view.name} is unreachable ({view.why}); nothing was migrated.")
        return redirect("fleet_profile", profile)
    run = runs.create("apply", runs.FLEET_TRIGGER, actor=request.user, request_address=request.META.get("REMOTE_ADDR"),
                      profiles=[profile], plans=data, only=list(MIGRATION_CHECKS), total=len(data))
    client.start_run(run, view.name)
    return redirect("run", run.pk)
