"""Fleet pages that prune a remote profile: what would go (read on its host), then
a confirmed ``prune`` run on the host's queue.

The criteria form and the confirmation are one host's (``views.prune``: the same
``PruneForm``, token salt, hour and unit cap, bound to the user); the preview is
``prune_preview`` of :mod:`.prunes`, read on the host with the fleet timeout, and
the run is ``run_prune_job`` there (acknowledged late). No store logic here.
"""

from __future__ import annotations

import time

from django.contrib import messages as flash
from django.core import signing
from django.http import HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from .. import runs, trash
from ..bidi import isolate
from ..secrets import masking_for
from ..stores.retention import Criteria, CriteriaError
from ..views.common import refuse_token, require_perm
from ..views.prune import CONFIRM_MAX, SHOWN_UNITS, TOKEN_MAX_AGE, TOKEN_SALT, PruneForm
from . import client
from .views import _remote


@require_GET
@require_perm("view_dashboard")
def prune_page(request, profile):
    """``/fleet/p/<key>/prune/?older_than=&source=&empty=&match=``: what pruning the
    remote profile would move to its host's trash, and the signed confirmation."""
    view, _local = _remote(profile)
    asked = [s[:200] for s in request.GET.getlist("source")[:50]]
    form = PruneForm(request.GET or None, profiles=[profile], sources=asked)
    context = {"host": view, "key": profile, "form": form, "report": None, "token": "", "answer": None,
               "shown_units": SHOWN_UNITS, "units_slice": f":{SHOWN_UNITS}", "confirm_max": CONFIRM_MAX,
               "retention_days": trash.retention_days()}
    if not form.is_bound or not form.is_valid():
        return render(request, "fleet/prune.html", context)
    criteria = form.cleaned_data["criteria"]
    if not criteria.given:
        form.add_error(None, "Say what to prune: an age, a source, empty sessions or a pattern (they combine).")
        return render(request, "fleet/prune.html", context)
    answer = client.ask(view, "prune_preview", key=profile, criteria=criteria.as_dict(),
                        masked=masking_for(request.user))
    context.update(answer=answer, criteria=criteria)
    if not answer.ok:
        return render(request, "fleet/prune.html", context, status=503)
    form.fields["source"].choices = [(s, isolate(s)) for s in sorted(set(answer.data["sources"]) | set(asked))]
    report = answer.data["report"]
    roots = []
    for prof in report["profiles"]:
        for unit in prof["units"]:
            unit["count"] = len(unit["sessions"]) + len(unit["delegates"])
            unit["extra_segments"] = len(unit["sessions"]) - 1
        roots += [u["root"] for u in prof["units"]]
    roots = roots[:CONFIRM_MAX]
    context.update(report=report, capped=report["summary"]["units"] > CONFIRM_MAX)
    if roots and view.reachable and request.user.has_perm("sessions_app.delete_sessions"):
        context["token"] = signing.dumps({"criteria": criteria.as_dict(), "roots": {profile: roots},
                                          "uid": request.user.pk}, salt=TOKEN_SALT, compress=True)
        context["confirm_units"] = len(roots)
    return render(request, "fleet/prune.html", context)


@require_POST
@require_perm("delete_sessions")
def prune_apply(request, profile):
    """The confirmation: a fleet ``prune`` run of the previewed units on the host."""
    view, _local = _remote(profile)
    try:
        data = signing.loads(request.POST.get("token", ""), salt=TOKEN_SALT, max_age=TOKEN_MAX_AGE)
    except signing.SignatureExpired:
        flash.warning(request, "That preview is more than an hour old; look at what would go again.")
        return redirect("fleet_prune", profile)
    except signing.BadSignature:
        return refuse_token(request, "prune_sessions", "invalid prune confirmation", profile=profile)
    if not isinstance(data, dict) or data.get("uid") != request.user.pk:
        return refuse_token(request, "prune_sessions", "this prune confirmation was issued to another user",
                            profile=profile)
    roots = data.get("roots")
    if not isinstance(roots, dict) or set(roots) != {profile}:
        return refuse_token(request, "prune_sessions", "this prune confirmation is not this profile's",
                            profile=profile)
    try:
        criteria = Criteria.from_dict(data.get("criteria"))
    except CriteriaError:
        return HttpResponseBadRequest("Malformed prune confirmation")
    if not roots[profile] or len(roots[profile]) > CONFIRM_MAX:
        return HttpResponseBadRequest("Nothing to prune")
    if not view.reachable:
        flash.error(request, f"Host {view.name} is unreachable ({view.why}); nothing was pruned.")
        return redirect("fleet_profile", profile)
    run = runs.create("prune", runs.FLEET_TRIGGER, actor=request.user, request_address=request.META.get("REMOTE_ADDR"),
                      plans=[{"criteria": criteria.as_dict(), "roots": roots, "apply": True,
                              "confirmed_at": time.time()}],
                      profiles=[profile], total=len(roots[profile]))
    client.start_run(run, view.name)
    return redirect("run", run.pk)
