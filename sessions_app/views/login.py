"""The login page and its lockout (django-axes).

After ``AXES_FAILURE_LIMIT`` failed logins in a row for one user name from one
address (``AXES_LOCKOUT_PARAMETERS``), django-axes refuses further attempts for
that pair before any password is checked, for ``AXES_COOLOFF_TIME`` (or until an
admin runs ``manage.py axes_reset``). The page says so before and when it happens;
every failed login is an audit event (``sessions_app.login_audit``).
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.shortcuts import render


def _minutes(delta) -> int | None:
    return None if delta is None else max(1, round(delta.total_seconds() / 60))


def lockout_context() -> dict:
    """``{"failure_limit": int, "lockout_minutes": int | None}`` (None: until reset)."""
    return {"failure_limit": settings.AXES_FAILURE_LIMIT, "lockout_minutes": _minutes(settings.AXES_COOLOFF_TIME)}


class LoginView(auth_views.LoginView):
    """Django's login view, with the lockout rule on the page."""

    def get_context_data(self, **kwargs):
        return {**super().get_context_data(**kwargs), **lockout_context()}


def locked_out(request, original_response=None, credentials=None):
    """``AXES_LOCKOUT_CALLABLE``: the login page saying who is locked out, for how
    long and who can lift it (HTTP 429, nothing about whether the password was right)."""
    username = str((credentials or {}).get("username") or request.POST.get("username") or "")[:150]
    context = {
        "form": AuthenticationForm(request, initial={"username": username}),
        "locked_out": True, "locked_username": username,
        "next": request.POST.get("next") or request.GET.get("next") or "",
        **lockout_context(),
    }
    return render(request, "registration/login.html", context, status=429)
