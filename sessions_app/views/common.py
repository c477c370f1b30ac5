"""Helpers shared by the page views: resolving a profile key to a readable store,
permissions, refused tokens, and the plan tokens of the Apply forms."""

from __future__ import annotations

import secrets
import sqlite3
from functools import wraps

from django.core import signing
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


PLANS_SESSION_KEY = "hermes_plans"  # request.session key of the plans behind the Apply forms
PLANS_KEPT = 20  # previewed plans kept per login session (the oldest go first)


class PlanTokenMismatch(signing.BadSignature):
    """A genuine plan token posted by another user than the one who previewed it."""


class PlanGone(signing.SignatureExpired):
    """A plan token whose plan this login session no longer keeps (signed out and
    in again, or more than ``PLANS_KEPT`` previews since): planned afresh like an
    expired one."""


def plan_token(request, salt: str, plans) -> str:
    """The Apply form's token for ``plans`` (a repair plan dict, or a list of them),
    previewed by ``request.user``.

    The plans stay on the server, in the user's login session (``request.session``)
    under a random nonce; the token is only that nonce and the user's id, signed
    with ``salt`` (``django.core.signing``). A signed value is readable by whoever
    holds it (base64 and zlib, not encryption), and plans carry the unmasked text
    of the store (titles, notes, JSONL lines) that a masked user's page hides.
    """
    nonce = secrets.token_urlsafe(18)
    kept = dict(request.session.get(PLANS_SESSION_KEY) or {})
    kept[nonce] = {"salt": salt, "plans": plans}
    while len(kept) > PLANS_KEPT:  # dicts keep insertion order: the oldest first
        kept.pop(next(iter(kept)))
    request.session[PLANS_SESSION_KEY] = kept
    return signing.dumps({"nonce": nonce, "uid": request.user.pk}, salt=salt)


def plans_of(request, salt: str, token: str, max_age: int):
    """The plans :func:`plan_token` kept for ``token``.

    Raises ``signing.SignatureExpired`` (older than ``max_age`` seconds) or its
    :class:`PlanGone`, :class:`PlanTokenMismatch` (issued to another user), or
    ``signing.BadSignature`` (forged, corrupted, or signed for another form).
    """
    data = signing.loads(token or "", salt=salt, max_age=max_age)
    if not isinstance(data, dict) or not isinstance(data.get("nonce"), str):
        raise signing.BadSignature("malformed plan token")
    if data.get("uid") != request.user.pk:
        raise PlanTokenMismatch("the plan was previewed by another user")
    kept = (request.session.get(PLANS_SESSION_KEY) or {}).get(data["nonce"])
    if not isinstance(kept, dict) or kept.get("salt") != salt:
        raise PlanGone("this login session no longer keeps that plan")
    return kept["plans"]


def token_refusal(exc: signing.BadSignature, forged: str) -> str:
    """The audited reason of a refused plan token: ``forged`` unless it was another user's."""
    return str(exc) if isinstance(exc, PlanTokenMismatch) else forged


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
