"""Health pages, repair preview/apply, and heal runs (background jobs)."""

from __future__ import annotations

from django.contrib import messages as flash
from django.core import signing
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.db.models.fields.json import KeyTransform
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from .. import jobs, runs
from ..actions.registry import ACTIONS
from ..health import latest
from ..models import HealRun
from ..presenters import NotFound
from ..presenters.changes import change_table
from ..presenters.health import health_page, planned_repairs
from ..presenters.health import repair_preview as preview_for
from ..presenters.repair_all import REPAIR_ALL_MAX, repair_all_preview
from ..stores import registry
from .common import plan_token, plans_of, refuse_token, require_perm, store_view, token_refusal

PLAN_SALT = "repair-plan"
PLANS_SALT = "repair-all-plans"
REPAIR_REFUSED = "repair_apply"  # audit action of a refused plan token
REPAIR_ALL_REFUSED = "repair_all_apply"
PLAN_MAX_AGE = 3600  # seconds a previewed plan stays valid
RUN_CHANGES = 50  # changes of one action listed on a run page (the rest are counted)


def _start(request, **fields) -> HealRun:
    mode = fields.pop("mode")
    run = runs.create(mode, "browser", actor=request.user, request_address=request.META.get("REMOTE_ADDR"),
                      **fields)
    jobs.start(run)
    return run


@require_GET
@require_perm("view_dashboard")
@store_view
def profile_health(request, store):
    """Findings of the latest pass over this profile, grouped by check (``presenters.health``)."""
    page = health_page(store, user=request.user)
    return render(request, "sessions/health.html", {
        "store": store, "health": page.health, "groups": page.groups, "counts": page.counts,
        "entry": page.entry, "catalog": page.catalog, "damage": page.damage,
    })


@require_POST
@require_perm("run_heal")
def start_check(request):
    """Start a check pass (no writes) over the posted profiles, or all of them."""
    known = {s.key for s in registry.stores()}
    profiles = [p for p in request.POST.getlist("profile") if p]
    if any(p not in known for p in profiles):
        raise Http404("No such profile")
    run = _start(request, mode="check", profiles=profiles)
    return redirect("run", run.pk)


@require_http_methods(["GET", "POST"])
@require_perm("run_heal")
@store_view
def heal_profile(request, store):
    """GET: what a heal pass would do (from the latest check); POST: start it.

    The pass itself re-checks and re-plans: the preview is the latest known plan,
    and every repair is re-verified against the store before it is written.
    """
    if request.method == "POST":
        run = _start(request, mode="apply", profiles=[store.key])
        return redirect("run", run.pk)
    health = latest([store.key])[store.key]
    planned, total = planned_repairs(health, user=request.user)
    return render(request, "sessions/heal_confirm.html", {"store": store, "health": health, "planned": planned,
                                                          "planned_total": total})


@require_GET
@require_perm("view_dashboard")
def run_detail(request, pk):
    """A run's progress (polled by htmx while it runs) and its report."""
    run = jobs.mark_if_dead(get_object_or_404(HealRun, pk=pk))
    for prof in (run.report or {}).get("profiles", []):  # shown, never saved
        prof["any_changes"] = any(action.get("changes") for action in prof.get("actions", []))
        for action in prof.get("actions", []):
            if action.get("changes"):
                action["change_table"] = change_table(action["changes"], limit=RUN_CHANGES)
    kind = runs.kind(run)
    context = {"run": run, "report": run.report or {}, "finished": run.status in ("done", "failed"),
               "kind": kind, "kind_label": runs.kind_label(kind), "result": runs.run_result(run),
               "outcome_words": runs.outcome_words(run.report), "took": runs.took(run)}
    if request.htmx:
        return render(request, "sessions/run.html#run-status", context)
    return render(request, "sessions/run.html", context)


@require_GET
@require_perm("view_dashboard")
def run_list(request):
    """The latest 100 runs. The light passes of ``watch_stores`` (one every few
    minutes) are left out unless ``?light=1``: they would push every other run off
    the page; the page says how many there are."""
    show_light = request.GET.get("light") == "1"
    light = Q(trigger="watch") & ~Q(only=[])
    # Each row needs its report's summary and its first plan's action, not the
    # report itself (megabytes on a big home) nor every plan of a bulk deletion.
    rows = HealRun.objects.defer("report", "plans", "log_tail").annotate(
        summary=KeyTransform("summary", "report"), first_action=KeyTransform("action", KeyTransform("0", "plans")),
        prune_apply=KeyTransform("apply", KeyTransform("0", "plans")))
    hidden = 0
    if not show_light:
        hidden = HealRun.objects.filter(light).count()
        rows = rows.exclude(light)
    rows = list(rows[:100])
    for run in rows:
        run.kind = runs.kind_of(run.mode, run.trigger, run.only, run.actor_label, run.first_action,
                                prune_apply=run.prune_apply)
        run.kind_label = runs.kind_label(run.kind)
        run.took = runs.took(run)
        run.result = runs.result(run.kind, run.summary, run.mode, run.status,
                                 scoped=run.first_action is not None and run.mode == "apply")
    return render(request, "sessions/runs.html", {"runs": rows, "show_light": show_light, "hidden_light": hidden})


@require_GET
@require_perm("view_dashboard")
@store_view
def repair_preview(request, store, session_id):
    """The concrete plan for one finding, and the form to apply it (``presenters.health``)."""
    try:
        shown = preview_for(store, session_id, request.GET.get("check", ""), user=request.user)
    except NotFound as exc:
        raise Http404(str(exc)) from exc
    token = plan_token(request, PLAN_SALT, shown.plan_data) if shown.plan_data is not None else None
    return render(request, "sessions/repair.html", {
        "store": store, "session_id": session_id, "check": shown.check, "finding": shown.finding,
        "plan": shown.plan, "changes": shown.changes, "token": token, "live": shown.live,
        "permission": shown.permission,
        "can_apply": request.user.has_perm(f"sessions_app.{shown.permission}"), "first": shown.first,
        "inserted": shown.inserted, "inserted_total": shown.inserted_total,
    })


@require_POST
@require_perm("run_heal")
@store_view
def repair_apply(request, store, session_id):
    """Apply the previewed (signed) plan as a background job."""
    try:
        data = plans_of(request, PLAN_SALT, request.POST.get("plan", ""), PLAN_MAX_AGE)
    except signing.SignatureExpired:
        flash.warning(request, "That preview is more than an hour old; here is a fresh one.")
        url = reverse("repair_preview", args=[store.key, session_id])
        return redirect(f"{url}?{urlencode({'check': request.POST.get('check', '')})}")
    except signing.BadSignature as exc:
        return refuse_token(request, REPAIR_REFUSED, token_refusal(exc, "invalid repair plan (forged or corrupted token)"),
                            store, [session_id])
    if not isinstance(data, dict) or data.get("profile") != store.key or data.get("session_id") != session_id:
        found = f"{data.get('profile')} {data.get('session_id')}" if isinstance(data, dict) else "nothing"
        return refuse_token(request, REPAIR_REFUSED, f"the repair plan belongs to another session ({found})", store,
                            [session_id])
    action = ACTIONS.get(data.get("action", ""))
    if action is None or not request.user.has_perm(f"sessions_app.{action.permission}"):
        raise PermissionDenied  # e.g. a move needs delete_sessions, not only run_heal
    run = _start(request, mode="apply", profiles=[store.key], plans=[data], only=[data["check"]])
    return redirect("run", run.pk)


@require_GET
@require_perm("run_heal")
@store_view
def repair_all(request, store, check):
    """*Repair all findings of this kind*: every ``check`` finding of the profile,
    checked live and planned one by one (``presenters.repair_all``), to confirm at once."""
    try:
        shown = repair_all_preview(store, check, user=request.user)
    except NotFound as exc:
        raise Http404(str(exc)) from exc
    missing = sorted(p for p in shown.permissions if not request.user.has_perm(f"sessions_app.{p}"))
    token = plan_token(request, PLANS_SALT, shown.plans) if shown.plans and not missing else None
    return render(request, "sessions/repair_all.html", {
        "store": store, "shown": shown, "check": shown.check, "token": token,
        "missing": [p.replace("_", " ") for p in missing],
        "cap": REPAIR_ALL_MAX,
    })


@require_POST
@require_perm("run_heal")
@store_view
def repair_all_apply(request, store, check):
    """Apply the confirmed plans of :func:`repair_all` as one background job (the
    plan job of single repairs: each plan its own guarded write)."""
    try:
        plans = plans_of(request, PLANS_SALT, request.POST.get("plans", ""), PLAN_MAX_AGE)
    except signing.SignatureExpired:
        flash.warning(request, "That preview is more than an hour old; here is a fresh one.")
        return redirect("repair_all", store.key, check)
    except signing.BadSignature as exc:
        return refuse_token(request, REPAIR_ALL_REFUSED,
                            token_refusal(exc, "invalid repair plans (forged or corrupted token)"), store)
    if not isinstance(plans, list) or not plans or not all(
            isinstance(p, dict) and p.get("profile") == store.key and p.get("check") == check for p in plans):
        return refuse_token(request, REPAIR_ALL_REFUSED, f"the repair plans are not this profile's {check} findings",
                            store)
    for data in plans:
        action = ACTIONS.get(data.get("action", ""))
        if action is None or not request.user.has_perm(f"sessions_app.{action.permission}"):
            raise PermissionDenied  # e.g. moves need delete_sessions, not only run_heal
    run = _start(request, mode="apply", profiles=[store.key], plans=plans, only=[check])
    return redirect("run", run.pk)
