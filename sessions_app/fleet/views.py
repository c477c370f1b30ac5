"""The fleet pages: every host's profiles, one sessions list, a remote profile and
session, and heal runs sent to the host that holds the store.

Remote reads go through :mod:`.client` (tasks with a timeout); a host that is
unreachable or slow is named on the page with the reason, the other hosts' rows
are shown all the same. Local stores (a dashboard that is also a Hermes host) are
merged into the same list through ``stores.listing`` as on one host. No store
logic here: the worker's read API (:mod:`.reads`) and the run task do the work.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages as flash
from django.core import signing
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from ..health import latest
from ..presenters.labels import facts
from ..secrets import mask, masking_for
from ..stores import registry
from ..stores.listing import Filters, list_sessions
from ..views.common import require_perm
from . import client, split_key

CURSOR_SALT = "fleet-sessions-cursor"
PAGE_SIZE = 50
ORDERS = ("started", "activity")


def _fleet_on():
    if not client.enabled():
        raise Http404("Fleet mode is off (no CELERY_BROKER_URL)")


def overview_hosts() -> list[dict]:
    """The overview's fleet part: one dict per host ``{"host": HostView,
    "profiles": [profile dict + "health": ProfileHealth]}``."""
    views = client.hosts()
    health = latest([p["key"] for h in views for p in h.profiles])
    return [{"host": h, "profiles": [dict(p, health=health.get(p["key"])) for p in h.profiles]} for h in views]


@require_GET
@require_perm("view_dashboard")
def hosts_page(request):
    """``/fleet/``: every host with its reachability and its profiles."""
    _fleet_on()
    return render(request, "fleet/hosts.html", {"fleet": overview_hosts()})


def _cursor(request):
    raw = request.GET.get("after")
    if not raw:
        return None
    try:
        value = signing.loads(raw, salt=CURSOR_SALT)
        return [float(value[0]) if value[0] is not None else None, str(value[1]), str(value[2])]
    except (signing.BadSignature, TypeError, ValueError, IndexError):
        flash.warning(request, "That page link is no longer valid; showing the first page.")
        return None


def _entry_key(row):
    return (row.get("sort") if row.get("sort") is not None else float("-inf"), row["profile"], row["id"])


@require_GET
@require_perm("view_dashboard")
def session_list(request):
    """``/fleet/sessions/``: sessions of every host (and of local stores), newest
    first, keyset-paginated by ``(sort, profile key, id)`` across hosts."""
    _fleet_on()
    order = request.GET.get("order") if request.GET.get("order") in ORDERS else "started"
    profile = request.GET.get("profile") or ""
    filters = {"order": order, "q": (request.GET.get("q") or "")[:200],
               "source": (request.GET.get("source") or "")[:100],
               "state": request.GET.get("state") if request.GET.get("state") in ("open", "ended") else ""}
    after = _cursor(request)
    views = client.hosts()
    wanted_host = split_key(profile)[1] if split_key(profile) else None
    calls = [(h.name, "sessions", {"filters": dict(filters, profiles=[profile] if profile else []),
                                   "limit": PAGE_SIZE, "after": after})
             for h in views if not profile or h.name == wanted_host]
    answers = client.ask_many(calls, views=views)
    rows, problems, count, capped = [], [], 0, False
    for answer in answers:
        if not answer.ok:
            problems.append(answer.error)
            continue
        rows += answer.data["rows"]
        count += answer.data["count"]
        capped |= answer.data["capped"]
        problems += [f"profile {key}: {status} — {reason}" for key, (status, reason) in answer.data["errors"].items()]
    local = registry.glances()
    # Membership in this one scan, not registry.get: an unknown (remote) key makes
    # registry.get rediscover every root, once per row (docs/benchmarks.md,
    # "Fleet: a remote profile's pages against a local one's (issue 17)").
    local_keys = {s.key for s in local}
    if local and (not profile or profile in local_keys):
        page = list_sessions(local, Filters(profiles=[profile] if profile else [], source=filters["source"],
                                            state=filters["state"], q=filters["q"], order=order),
                             limit=PAGE_SIZE, after=tuple(after) if after else None)
        rows += page.rows
        count += page.count
        capped |= page.count_capped
        problems += [f"profile {key}: {status} — {reason}" for key, (status, reason) in page.errors.items()]
    rows.sort(key=_entry_key, reverse=True)
    more = len(rows) > PAGE_SIZE
    rows = rows[:PAGE_SIZE]
    masking = masking_for(request.user)
    for row in rows:
        remote = split_key(row["profile"]) is not None and row["profile"] not in local_keys
        row["remote"] = remote
        row["url"] = (reverse("fleet_session", args=[row["profile"], row["id"]]) if remote
                      else reverse("session", args=[row["profile"], row["id"]]))
        if masking:
            row["title"] = mask(row.get("title"))
    next_token = signing.dumps(list(_entry_key(rows[-1])), salt=CURSOR_SALT) if more and rows else None
    params = request.GET.copy()
    params.pop("after", None)
    return render(request, "fleet/sessions.html", {
        "rows": rows, "problems": problems, "count": count, "capped": capped, "next_token": next_token,
        "base_query": params.urlencode(), "filters": filters, "profile": profile, "hosts": views,
    })


def _remote(profile: str):
    """``(host view, local key)`` of a remote profile key, else 404."""
    _fleet_on()
    parts = split_key(profile)
    view = client.host(parts[1]) if parts else None
    if view is None or not any(p["key"] == profile for p in view.profiles):
        raise Http404("No such profile in the fleet")
    return view, parts[0]


@require_GET
@require_perm("view_dashboard")
def profile_detail(request, profile):
    """``/fleet/p/<key>/``: a remote profile's facts, read now from its host."""
    view, _local = _remote(profile)
    announced = next(p for p in view.profiles if p["key"] == profile)
    answer = client.ask(view, "profile", key=profile)
    return render(request, "fleet/profile.html", {
        "host": view, "key": profile, "announced": announced, "answer": answer,
        "status": answer.data["status"] if answer.ok else None,
        "health": latest([profile])[profile],
    }, status=200 if answer.ok else 503)


def _int(value):
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if -(2**63) <= number < 2**63 else None


@require_GET
@require_perm("view_dashboard")
def session_detail(request, profile, session_id):
    """``/fleet/p/<key>/s/<id>/``: a remote session's metadata, one transcript page
    (with the transcript permission) and its findings, read now from its host."""
    view, _local = _remote(profile)
    can_read = request.user.has_perm("sessions_app.view_transcripts")
    answer = client.ask(view, "session", key=profile, session_id=session_id, size=100,
                        after=_int(request.GET.get("after")), before=_int(request.GET.get("before")),
                        include_inactive=request.GET.get("inactive") == "1", content=can_read)
    context = {"host": view, "key": profile, "session_id": session_id, "answer": answer, "can_read": can_read}
    if not answer.ok:
        return render(request, "fleet/session.html", context, status=503)
    data = answer.data
    if data.get("missing"):
        raise Http404("No such session in this profile")
    if data.get("unavailable"):
        context["unavailable"] = data["unavailable"]
        return render(request, "fleet/session.html", context, status=503)
    session = data["session"] or {}
    if masking_for(request.user):
        session["title"] = mask(session.get("title"))
        for msg in data["messages"]:
            msg["text"] = mask(msg["text"])
            for call in msg["tool_calls"]:
                call["arguments"] = mask(call["arguments"])
        for f in data["findings"]:
            f["detail"] = mask(f["detail"])
    shown = ("id", "title", "source", "profile_name", "model", "started_at", "ended_at", "end_reason",
             "message_count", "parent_session_id", "session_key")
    context.update(data=data, session=session, metadata=facts((k, session.get(k)) for k in shown if k in session))
    return render(request, "fleet/session.html", context)


@require_POST
@require_perm("run_heal")
def heal_profile(request, profile):
    """Start a check (``mode=check``) or heal (``mode=apply``) run of a remote profile
    on its host's queue; the run page (``runs/<id>/``) follows it."""
    from .. import runs

    view, _local = _remote(profile)
    mode = request.POST.get("mode")
    if mode not in ("check", "apply"):
        flash.error(request, "Choose a check or a heal; nothing was started.")
        return redirect("fleet_profile", profile)
    if not view.reachable:
        flash.error(request, f"Host {view.name} is unreachable ({view.why}); nothing was started.")
        return redirect("fleet_profile", profile)
    run = runs.create(mode, runs.FLEET_TRIGGER, actor=request.user, request_address=request.META.get("REMOTE_ADDR"),
                      profiles=[profile], total=1)
    client.start_run(run, view.name)
    return redirect("run", run.pk)


def fleet_context(request) -> dict:
    """Marked hook for one host's overview: the fleet's hosts, or nothing when off."""
    return {"fleet": overview_hosts(), "fleet_mode": True} if getattr(settings, "FLEET", False) else {}
