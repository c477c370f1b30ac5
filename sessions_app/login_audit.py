"""Failed logins are audit events (issue 13: none was recorded).

Django sends ``user_login_failed`` for every refused login, including those
django-axes refuses during a lockout (its backend raises ``PermissionDenied``
inside ``authenticate``); axes' own receiver runs first (its app comes first in
``INSTALLED_APPS``) and marks the request ``axes_locked_out`` when this attempt
locked the pair or it was locked already. One event per attempt: action
``login_failed`` or ``login_locked_out``, outcome ``refused``, the typed user name
(at most 150 characters; the password never) and the address.
"""

from __future__ import annotations

import logging

from django.contrib.auth.signals import user_login_failed
from django.dispatch import receiver

from .audit import record

log = logging.getLogger("sessions_app.security")
USERNAME_MAX = 150  # Django's own limit for a user name


@receiver(user_login_failed, dispatch_uid="sessions_app.audit_failed_login")
def audit_failed_login(sender, credentials=None, request=None, **kwargs) -> None:
    typed = str((credentials or {}).get("username") or "")[:USERNAME_MAX]
    # Only a name that is a user's is recorded: what was typed may be a password
    # entered into the wrong field, which must reach neither the audit trail nor the log.
    from django.contrib.auth import get_user_model

    known = bool(typed) and get_user_model().objects.filter(username=typed).exists()
    username = typed if known else f"<an unknown user name of {len(typed)} characters>"
    address = request.META.get("REMOTE_ADDR") if request is not None else None
    locked = bool(getattr(request, "axes_locked_out", False))
    failures = getattr(request, "axes_failures_since_start", None)
    if locked:
        reason = f"login as {username!r} refused: locked out after too many failed logins from {address}"
    else:
        reason = f"failed login as {username!r} from {address}"
    record(
        actor=None, actor_label="anonymous", action="login_locked_out" if locked else "login_failed",
        profile="", store_path="", session_ids=[], outcome="refused", reason=reason,
        plan={"username": username, "locked_out": locked, "failures": failures, "path": getattr(request, "path", "")},
        request_address=address,
    )
    (log.warning if locked else log.info)("%s", reason)


def axes_username(request, credentials) -> str:
    """The user name django-axes keys its attempts on (``AXES_USERNAME_CALLABLE``): what
    was typed, cut to Django's own limit for a user name, so an over-long name fits
    axes' own column on every database (PostgreSQL enforces its length)."""
    typed = (credentials or {}).get("username")
    if typed is None and request is not None:
        typed = request.POST.get("username", "")
    return str(typed or "")[:USERNAME_MAX]
