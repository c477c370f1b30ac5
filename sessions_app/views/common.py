"""Helpers shared by the page views: resolving a profile key to a readable store."""

from __future__ import annotations

import sqlite3
from functools import wraps

from django.core.exceptions import PermissionDenied
from django.views import defaults
from django.db import DatabaseError
from django.http import Http404, HttpResponseBadRequest
from django.shortcuts import render

from ..checks.damage import known_damage
from ..stores import registry
from ..stores.connection import classify_error
from ..stores.store import Store, StoreStatus, _log_once


def render_store_error(request, store: Store, status: StoreStatus):
    """The store's own error page: what is wrong, why, and what to do (HTTP 503)."""
    if status.status != "missing":
        _log_once(store.path, status.status, status.reason)
    response = render(request, "sessions/store_error.html",
                      {"store": store, "status": status, "damage": known_damage(status=status.status, reason=status.reason)},
                      status=503)
    # Logged once per store and problem above (ground rule 9): Django's request logger
    # would add an ERROR for every view of a store known busy or damaged. There is no
    # public switch for that: ``_has_been_logged`` is Django's own internal flag, which
    # django.utils.log.log_response checks (and sets) so a response is logged once;
    # set here, the 503 is taken as logged already. Private API: recheck on upgrades
    # (present through Django 5.2).
    response._has_been_logged = True
    if status.status == "busy":
        response["Retry-After"] = "5"
    return response


def store_view(view):
    """Resolve the ``profile`` URL argument to a readable :class:`Store`.

    Unknown keys are 404 (after one rescan); a store that cannot be read gets its
    error page instead of a traceback (ground rule 9), including errors raised by
    SQLite while the view runs.
    """

    @wraps(view)
    def wrapper(request, profile: str, *args, **kwargs):
        store = registry.get(profile)
        if store is None:
            raise Http404("No such profile")
        # Opened once per page (its own reads), not twice, while its files are unchanged.
        status = store.readiness(remembered=True)
        if status is not None:
            return render_store_error(request, store, status)
        try:
            return view(request, store, *args, **kwargs)
        except (DatabaseError, sqlite3.Error) as exc:
            code, reason = classify_error(exc)
            return render_store_error(request, store, StoreStatus(code, reason))

    return wrapper


def require_perm(codename: str):
    """Enforce one of the dashboard's permissions (see ``AuditEvent.Meta``) on a view:
    403 for a logged-in user without it (login itself is enforced by middleware);
    a refused POST is audited by :func:`permission_denied`."""
    def decorator(view):
        @wraps(view)
        def wrapper(request, *args, **kwargs):
            if not request.user.has_perm(f"sessions_app.{codename}"):
                raise PermissionDenied(f"this needs the {codename} permission")
            return view(request, *args, **kwargs)
        return wrapper
    return decorator


def refuse_token(request, action: str, reason: str, store: Store | None = None, session_ids=(),
                 profile: str = "") -> HttpResponseBadRequest:
    """A forged, corrupted or misplaced signed token (repair plan, migration plans):
    one audit event (``action``, outcome ``refused``, nothing done) and HTTP 400,
    as deletion does with its confirmation tokens (``views.deletion``). ``profile``:
    the key of a remote profile (no local ``store``; fleet pages)."""
    from ..audit import record

    name = request.user.get_username() if request.user.is_authenticated else "anonymous"
    record(actor=request.user if request.user.is_authenticated else None, actor_label=name, action=action[:64],
           profile=store.key if store else profile, store_path=str(store.path) if store else "",
           session_ids=[str(s) for s in session_ids], outcome="refused", reason=f"{reason}; nothing was done",
           plan={"path": request.path}, request_address=request.META.get("REMOTE_ADDR"))
    return HttpResponseBadRequest(f"{reason[:1].upper()}{reason[1:]}; nothing was done.", content_type="text/plain")


def permission_denied(request, exception=None):
    """The 403 handler (``handler403``). A refused POST is an attempted action
    (heal, delete, restore, move…): it becomes an audit event with outcome
    ``refused`` and action ``denied:<url name>``, so the trail shows who tried
    what they may not do, whichever view refused it. Views that audit a refusal
    themselves set ``request.refusal_audited``. Refused page views are not audited."""
    if request.method == "POST" and not getattr(request, "refusal_audited", False):
        from .. import audit

        match = request.resolver_match
        kwargs = match.kwargs if match else {}
        user = request.user if request.user.is_authenticated else None
        name = request.user.get_username() if user else "anonymous"
        why = str(exception) if exception and str(exception) else "a missing permission"
        audit.record(
            actor=user, actor_label=name,
            action=f"denied:{match.url_name if match else request.path}"[:64],
            profile=str(kwargs.get("profile") or ""), store_path="",
            session_ids=[str(kwargs["session_id"])] if kwargs.get("session_id") else [], outcome="refused",
            reason=f"{name} was refused ({why}); nothing was done", plan={"path": request.path},
            request_address=request.META.get("REMOTE_ADDR"),
        )
    return defaults.permission_denied(request, exception)
