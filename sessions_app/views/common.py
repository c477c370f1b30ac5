"""Helpers shared by the page views: resolving a profile key to a readable store."""

from __future__ import annotations

import sqlite3
from functools import wraps

from django.contrib.auth.decorators import permission_required
from django.db import DatabaseError
from django.http import Http404
from django.shortcuts import render

from ..stores import registry
from ..stores.connection import classify_error
from ..stores.store import Store, StoreStatus, _log_once


def render_store_error(request, store: Store, status: StoreStatus):
    """The store's own error page: what is wrong, why, and what to do (HTTP 503)."""
    if status.status != "missing":
        _log_once(store.path, status.status, status.reason)
    response = render(request, "sessions/store_error.html", {"store": store, "status": status}, status=503)
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
        status = store.readiness()
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
    403 for a logged-in user without it (login itself is enforced by middleware)."""
    return permission_required(f"sessions_app.{codename}", raise_exception=True)
