"""Fleet pages that act on a remote profile: search, export, deletion, trash, restore.

Reads go through :mod:`.client` (``hermes.read`` tasks with a timeout, each host
asked at once: a slow or absent host is named on the page, the others answer);
deletions and restores are fleet runs (``hermes.run_job`` on the host's queue,
acknowledged late) that the host's worker runs with the same job code as one host
(``actions/deletion/bulk.py`` on the guarded write). The confirmation of a
deletion is the one-host token (``actions/deletion/tokens.py``: signed, bound to
the user, one nonce per item). No store logic here.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages as flash
from django.core import signing
from django.http import Http404, HttpResponseBadRequest, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from .. import runs
from ..actions import deletion
from ..models import AuditEvent
from ..secrets import masking_for
from ..views.common import require_perm
from . import client
from .views import _remote

SEARCH_SIZES = (10, 20, 50)


@require_GET
@require_perm("view_transcripts")
def search_page(request):
    """``/fleet/search/?q=``: message text, ids and titles on every reachable host at
    once (each host's answer is its own search across its profiles, masked there
    for a user who sees masked text); a slow or absent host says so in its section."""
    client_on()
    q = (request.GET.get("q") or "").strip()[:500]
    size = int(request.GET.get("size")) if request.GET.get("size") in {str(n) for n in SEARCH_SIZES} else 20
    context = {"q": q, "size": size, "sizes": SEARCH_SIZES, "answers": []}
    if q:
        views = client.hosts()
        calls = [(h.name, "search", {"q": q, "limit": size, "masked": masking_for(request.user)}) for h in views]
        context["answers"] = client.ask_many(calls, views=views)
    return render(request, "fleet/search.html", context)


def client_on() -> None:
    """Raise ``Http404`` unless fleet mode is on (``CELERY_BROKER_URL`` set): a fleet
    page of a dashboard that has no fleet does not exist, rather than erroring."""
    if not client.enabled():
        raise Http404("Fleet mode is off (no CELERY_BROKER_URL)")


@require_GET
@require_perm("view_transcripts")
def session_export(request, profile, session_id, fmt):
    """``/fleet/p/<key>/s/<id>/export.<jsonl|md>``: the host's export streamed in
    chunks (``HERMES_ADMIN_FLEET_EXPORT_CHUNK`` bytes, one read task each, each with
    the fleet timeout). The first chunk is read before the response starts (an
    absent host or session is a 503 or 404); a host lost midway ends the file with
    the export's own error marker, so a cut-short export never looks complete."""
    view, _local = _remote(profile)
    if fmt not in ("jsonl", "md"):
        raise Http404("Unknown export format")
    args = {"key": profile, "session_id": session_id, "fmt": fmt, "lineage": request.GET.get("lineage") == "1",
            "include_inactive": request.GET.get("inactive") == "1", "masked": masking_for(request.user),
            "max_bytes": int(settings.HERMES_FLEET_EXPORT_CHUNK)}
    first = client.ask(view, "export", **args, after=None)
    if not first.ok:
        return render(request, "fleet/session.html", {"host": view, "key": profile, "session_id": session_id,
                                                      "answer": first}, status=503)
    if first.data.get("missing"):
        raise Http404("No such session in this profile")

    def chunks():
        data = first.data
        yield data["text"]
        while data.get("next") is not None:
            answer = client.ask(view, "export", **args, after=data["next"])
            if not answer.ok:
                yield _cut_short(fmt, answer.error)
                return
            data = answer.data
            yield data["text"]

    response = StreamingHttpResponse(chunks(), content_type="application/x-ndjson; charset=utf-8" if fmt == "jsonl"
                                     else "text/markdown; charset=utf-8")
    name = "".join(c if c.isalnum() or c in "_.-" else "_" for c in f"{profile}-{session_id}")[:120]
    response["Content-Disposition"] = f'attachment; filename="{name}.{fmt}"'
    return response


def _cut_short(fmt: str, error: str) -> str:
    """The export's own end-of-file marker for a read that failed midway (``stores.export``)."""
    import json

    if fmt == "jsonl":
        return json.dumps({"role": "export_error", "error": error}) + "\n"
    return f"\n---\n\n**Export stopped early: {error}**\n"


@require_http_methods(["GET", "POST"])
@require_perm("delete_sessions")
def delete_session(request, profile, session_id):
    """GET: what deleting a remote session removes (read now on its host) and a
    signed confirmation; POST: the confirmation, checked here, becomes a fleet
    ``delete`` run on the host's queue (the run page follows it). A maybe-live
    session is refused on the host (no override from afar)."""
    view, _local = _remote(profile)
    lineage = request.POST.get("lineage", request.GET.get("lineage")) == "1"
    if request.method == "POST":
        return _delete_apply(request, view, profile, session_id)
    answer = client.ask(view, "delete_plan", key=profile, session_id=session_id, lineage=lineage)
    context = {"host": view, "key": profile, "session_id": session_id, "answer": answer, "lineage": lineage}
    if not answer.ok:
        return render(request, "fleet/delete_confirm.html", context, status=503)
    if answer.data.get("missing"):
        raise Http404("No such session in this profile")
    plan = answer.data["plan"]
    if masking_for(request.user):
        from ..secrets import mask

        plan["titles"] = {k: mask(v) if v else v for k, v in plan["titles"].items()}
    context.update(plan=plan, token=deletion.sign([answer.data["item"]], request.user.pk))
    return render(request, "fleet/delete_confirm.html", context)


def _delete_apply(request, view, profile, session_id):
    deleter = deletion.Deleter(actor=request.user, actor_label=request.user.get_username(),
                               request_address=request.META.get("REMOTE_ADDR"))
    try:
        items = deletion.unsign(request.POST.get("token", ""), request.user.pk)
    except signing.SignatureExpired:
        flash.warning(request, "That confirmation is more than an hour old; look at the evidence again.")
        return redirect("fleet_delete", profile, session_id)
    except signing.BadSignature as exc:  # TokenMismatch too: another user's
        deleter.note(None, deletion.DELETE_ACTION, [session_id], "refused", f"{exc}; nothing deleted", profile=profile)
        return HttpResponseBadRequest("Invalid confirmation")
    if len(items) != 1 or items[0].get("profile") != profile or items[0].get("session_id") != session_id:
        deleter.note(None, deletion.DELETE_ACTION, [session_id], "refused",
                     "the confirmation belongs to another session; nothing deleted", profile=profile)
        return HttpResponseBadRequest("This confirmation belongs to another session")
    if not view.reachable:
        flash.error(request, f"Host {view.name} is unreachable ({view.why}); nothing was deleted.")
        return redirect("fleet_session", profile, session_id)
    run = runs.create("delete", runs.FLEET_TRIGGER, actor=request.user, request_address=request.META.get("REMOTE_ADDR"),
                      plans=items, total=1, profiles=[profile])
    client.start_run(run, view.name)
    return redirect("run", run.pk)


def remote_trash() -> list[dict]:
    """The fleet's trash index, from the central audit log: every applied deletion
    of a remote profile, newest first, ``{"event", "profile", "entry", "sessions",
    "messages", "restored": restore event | None}`` (the entries' contents stay on
    their hosts)."""
    deleted = (AuditEvent.objects.filter(action=deletion.DELETE_ACTION, outcome="applied",
                                         profile__contains=" on ").order_by("-pk")[:500])
    restores = {}
    for event in AuditEvent.objects.filter(action=deletion.RESTORE_ACTION, outcome="applied",
                                           profile__contains=" on ").order_by("pk"):
        restores[(event.profile, (event.plan or {}).get("trash_entry"))] = event
    out = []
    for event in deleted:
        entry = (event.plan or {}).get("trash_entry")
        if entry:
            targets = (event.plan or {}).get("targets") or []
            out.append({"event": event, "profile": event.profile, "entry": entry, "sessions": event.session_ids,
                        "messages": sum(t.get("messages") or 0 for t in targets),
                        "restored": restores.get((event.profile, entry))})
    return out


@require_GET
@require_perm("view_dashboard")
def trash_page(request):
    """``/fleet/trash/``: deletions on every host, each restorable on its host."""
    client_on()
    return render(request, "fleet/trash.html", {"entries": remote_trash(),
                                                "hosts": {h.name: h for h in client.hosts()}})


@require_POST
@require_perm("delete_sessions")
def restore_entry(request, profile, entry_id):
    """A fleet ``restore`` run of one trash entry on the host that holds it."""
    view, _local = _remote(profile)
    if not view.reachable:
        flash.error(request, f"Host {view.name} is unreachable ({view.why}); nothing was restored.")
        return redirect("fleet_trash")
    run = runs.create("restore", runs.FLEET_TRIGGER, actor=request.user,
                      request_address=request.META.get("REMOTE_ADDR"),
                      plans=[{"profile": profile, "trash_entry": entry_id}], total=1, profiles=[profile])
    client.start_run(run, view.name)
    return redirect("run", run.pk)
