"""The session page's flags box: title, archived, pinned, hidden, and their controls."""

from __future__ import annotations

import sqlite3

from django import template

from ..actions import flags

register = template.Library()


@register.inclusion_tag("sessions/_flags.html", takes_context=True)
def flags_box(context, store, session_id, session=None):
    """Current flags and, for users with ``change_flags``, the controls; a control
    whose column the store lacks is absent and the box says why."""
    perms = context.get("perms")
    result = {"store": store, "session_id": session_id, "perms": perms, "state": None, "error": "",
              "request": context.get("request"), "csrf_token": context.get("csrf_token")}
    if not session:
        return result
    try:
        result["state"] = flags.flag_state(store, session_id)
    except sqlite3.Error as exc:
        result["error"] = f"flags could not be read: {exc}"
    return result
