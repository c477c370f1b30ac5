"""What a fleet worker accepts: its own profiles, inside its own roots, nothing else.

The broker is not trusted with more than it needs (README, "Many hosts: a safe
setup"): every task argument that names a profile, a store or a path is checked
here, on the worker, against the worker's own discovery (``stores.registry``,
whose keys carry ``on <host>``, :func:`with_host_keys`) before anything is read or
written. A refusal raises :class:`Refused` and leaves one audit event (outcome
``refused``, action ``fleet:<task>``) in the central database.
"""

from __future__ import annotations

import os
from dataclasses import replace

from django.conf import settings

from . import fleet_key, split_key, valid_host
from ..stores import registry
from ..stores.discovery import Discovery, within
from ..stores.store import Store


class Refused(Exception):
    """A task argument this worker does not act on; the message says why."""


def with_host_keys(found: Discovery, host: str) -> Discovery:
    """``found`` with every profile key (and ``outside`` key) suffixed ``on <host>``."""
    if not valid_host(host):
        raise ValueError(f"HERMES_ADMIN_HOST is not a valid fleet host name: {host!r}")
    found.profiles = [replace(p, key=fleet_key(p.key, host)) for p in found.profiles]
    found.outside = {fleet_key(k, host): v for k, v in found.outside.items()}
    return found


def own_host() -> str:
    """This worker's host name (``HERMES_ADMIN_HOST``); raises Refused when unset."""
    host = getattr(settings, "HERMES_ADMIN_HOST", "")
    if not valid_host(host):
        raise Refused("this process is not a fleet worker (HERMES_ADMIN_HOST unset or invalid)")
    return host


def own_roots() -> list[str]:
    """This worker's roots as discovered (absolute, resolved)."""
    return [str(r) for r in registry.current().roots]


def refuse(task: str, reason: str, profile: str = "", path: str = "", session_ids=()) -> Refused:
    """Audit a refused task and return the exception to raise."""
    from ..audit import record

    host = getattr(settings, "HERMES_ADMIN_HOST", "") or "?"
    record(actor=None, actor_label=f"fleet worker {host}", action=f"fleet:{task}"[:64],
           profile=str(profile)[:200], store_path=str(path), session_ids=[str(s) for s in session_ids][:50],
           outcome="refused", reason=f"{reason}; nothing was done", plan={"task": task, "host": host})
    return Refused(reason)


def store_for(task: str, key, session_ids=()) -> Store:
    """The store of profile ``key`` if it is one of this worker's, else refuse."""
    host = own_host()
    if not isinstance(key, str):
        raise refuse(task, "the profile key is not a string", session_ids=session_ids)
    parts = split_key(key)
    if parts is None or parts[1] != host:
        raise refuse(task, f"profile {key!r} is not on host {host}", profile=key, session_ids=session_ids)
    store = registry.get(key)
    if store is None:
        raise refuse(task, f"host {host} has no profile {key!r}", profile=key, session_ids=session_ids)
    return store


def path_inside(task: str, path, profile: str = "") -> str:
    """``path`` if it resolves inside one of this worker's roots, else refuse."""
    if not isinstance(path, str) or not path or "\x00" in path or not os.path.isabs(path):
        raise refuse(task, f"{path!r} is not an absolute path", profile=profile, path=str(path))
    if not any(within(path, root) for root in own_roots()):
        raise refuse(task, f"{path} is outside this host's roots ({', '.join(own_roots())})",
                     profile=profile, path=path)
    return path


def session_id_arg(task: str, value, profile: str = "") -> str:
    """A session id argument: a non-empty string of reasonable size, else refuse."""
    if not isinstance(value, str) or not value or len(value) > 1024 or "\x00" in value:
        raise refuse(task, "the session id is not a usable string", profile=profile)
    return value
