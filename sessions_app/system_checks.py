"""Django system checks of the dashboard's own setup (run by every ``manage.py``
command, and logged once at start by the WSGI/ASGI entry points).

- ``hermes_admin.W001``: the data folder itself is accessible by its group or by
  others (it holds session keys, password hashes, backups and the trash);
- ``hermes_admin.W002``: folders or files inside it are (e.g. created before the
  dashboard set its umask, or copied in by hand).

Both name the paths and the fix. Silence them with ``SILENCED_SYSTEM_CHECKS``
only on a host where no other account exists.
"""

from __future__ import annotations

import logging
from pathlib import Path

from django.conf import settings
from django.core import checks

from hermes_admin.private import loose_paths

TAG = "data_folder"
SHOWN = 5  # paths named in one warning
log = logging.getLogger("sessions_app.security")


@checks.register(checks.Tags.security, TAG)
def data_folder_private(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    data = Path(settings.DATA_DIR)
    top, inside, truncated = loose_paths(data)
    found = []
    if top is not None:
        found.append(checks.Warning(
            f"The data folder {data} is accessible by other users (mode {top.mode:04o}). It holds session keys, "
            "password hashes, the secret key, store backups and deleted transcripts.",
            hint=f"chmod 700 {data}  (and run the dashboard as its own user)",
            id="hermes_admin.W001",
        ))
    if inside:
        named = "; ".join(str(entry) for entry in inside[:SHOWN])
        more = f" and {len(inside) - SHOWN} more" if len(inside) > SHOWN else ""
        found.append(checks.Warning(
            f"{len(inside)}{'+' if truncated else ''} folder(s) or file(s) in the data folder {data} are accessible "
            f"by other users: {named}{more}.",
            hint=f"chmod -R go-rwx {data}",
            id="hermes_admin.W002",
        ))
    return found


def log_data_folder_warnings() -> None:
    """Log the data-folder warnings once (the web server runs no system checks)."""
    try:
        for message in data_folder_private():
            log.warning("%s: %s Fix: %s", message.id, message.msg, message.hint)
    except Exception:  # a start-up warning must never keep the dashboard from starting
        log.exception("could not check the data folder's permissions")


MIN_TOKEN_CHARS = 16


@checks.register("notifications")
def watch_settings(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """Settings of metrics and notifications that cannot work as given (issue 18):
    ``hermes_admin.W012`` an unknown webhook format; ``W010`` a webhook URL that is not
    http(s); ``W011`` a metrics token short enough to guess."""
    found = []
    fmt = getattr(settings, "HERMES_NOTIFY_WEBHOOK_FORMAT", "slack")
    if fmt not in ("slack", "generic"):
        found.append(checks.Warning(
            f"HERMES_ADMIN_NOTIFY_WEBHOOK_FORMAT is {fmt!r}: webhooks would be sent in the slack shape.",
            hint="set it to 'slack' ({\"text\": ...}, Slack and Mattermost) or 'generic'", id="hermes_admin.W012"))
    for url in getattr(settings, "HERMES_NOTIFY_WEBHOOK_URLS", []) or []:
        if not url.lower().startswith(("https://", "http://")):
            from .notify.channels import redact

            found.append(checks.Warning(
                f"HERMES_ADMIN_NOTIFY_WEBHOOK_URL has an entry that is not an http(s) URL ({redact(url)}): "
                "deliveries to it fail and are recorded as failed.",
                hint="give the incoming webhook's full https:// address", id="hermes_admin.W010"))
    token = getattr(settings, "HERMES_METRICS_TOKEN", "") or ""
    if token and len(token) < MIN_TOKEN_CHARS:
        found.append(checks.Warning(
            f"HERMES_ADMIN_METRICS_TOKEN has {len(token)} characters: short enough to guess.",
            hint="use a random secret, e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))'",
            id="hermes_admin.W011"))
    return found
