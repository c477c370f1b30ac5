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
