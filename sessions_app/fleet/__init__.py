"""Fleet mode: many Hermes hosts under one dashboard, on Celery (docs/architecture.md §10).

Off unless ``CELERY_BROKER_URL`` is set (``settings.FLEET``); one host without a
broker runs exactly as without this package, which it then never imports.

Shape:

- a **worker** per Hermes host (``celery -A hermes_admin worker -Q hermes.<host>``,
  ``HERMES_ADMIN_HOST=<host>``, its own ``HERMES_ROOTS``, the central
  ``DATABASE_URL``) runs the tasks of :mod:`.tasks` with the same engine as one
  host does (``actions/heal.py``, ``actions/engine.Applier``, ``actions/deletion``),
  so run records, audit events and findings land in the central database while
  stores, backups and trash contents stay on the host;
- it announces itself by a heartbeat (:mod:`.heartbeat`) written into a
  :class:`~.models.FleetHost` row;
- the **dashboard** sends tasks to ``hermes.<host>`` (:mod:`.client`) and shows
  remote profiles on the fleet pages (:mod:`.views`).

Profile keys (stable, documented in the README): a worker's profiles are keyed
``<local key> on <host>``, where the local key is what one host would show
(``work``, or ``work@alpha`` with several roots), e.g. ``work@alpha on host-b``.
Run records, audit events and the trash index carry that key.
"""

from __future__ import annotations

import re

HOST_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{0,62}$")
SEPARATOR = " on "
QUEUE_PREFIX = "hermes."


def valid_host(name: str) -> bool:
    """Whether ``name`` is a usable host name (lower-case letters, digits, ``.-``)."""
    return bool(HOST_RE.match(name or ""))


def fleet_key(local_key: str, host: str) -> str:
    """``work@alpha`` on host ``host-b`` -> ``work@alpha on host-b``."""
    return f"{local_key}{SEPARATOR}{host}"


def split_key(key: str) -> tuple[str, str] | None:
    """``(local key, host)`` of a fleet key, or None for a key without a valid host."""
    local, sep, host = (key or "").rpartition(SEPARATOR)
    if not sep or not local or not valid_host(host):
        return None
    return local, host


def queue(host: str) -> str:
    """The Celery queue a host's worker consumes: ``hermes.<host>``."""
    if not valid_host(host):
        raise ValueError(f"not a valid fleet host name: {host!r}")
    return QUEUE_PREFIX + host
