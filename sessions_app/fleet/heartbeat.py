"""A worker's heartbeat: its host, roots and profiles, written into ``FleetHost``.

On ``worker_ready`` a daemon thread of the worker's main process writes the row
at once and then every ``HERMES_FLEET_HEARTBEAT`` seconds; ``worker_shutdown``
stamps ``stopped_at``. The dashboard shows a host whose ``last_seen`` is older
than ``HERMES_FLEET_UNREACHABLE`` (or that stopped) as unreachable, with the
profiles it last announced (:func:`sessions_app.fleet.client.hosts`).

Each profile is probed at a glance (``Store.glance().probe()``: short busy
timeout, read-only), so a locked store shows busy without delaying the beat.
Connected only in a process with ``HERMES_ADMIN_HOST`` set (a worker).
"""

from __future__ import annotations

import logging
import os
import socket
import threading

from celery import signals
from django.conf import settings

log = logging.getLogger("sessions_app.fleet")
_stop = threading.Event()


def snapshot() -> dict:
    """This worker's announcement: ``{"roots", "profiles", "ignored"}`` (see FleetHost)."""
    from ..stores import registry

    found = registry.scan()
    profiles = []
    for store in registry.glances():
        status = store.probe()
        profiles.append({
            "key": store.key, "name": store.profile.name, "root": str(store.profile.root),
            "status": status.status, "reason": status.reason, "sessions": status.sessions,
            "messages": status.messages, "last_activity": status.last_activity,
            "file_size": status.file_size, "schema_version": status.schema_version,
        })
    return {"roots": [str(r) for r in found.roots], "profiles": profiles,
            "ignored": [list(pair) for pair in found.ignored]}


def beat(started: bool = False) -> None:
    """Write this worker's ``FleetHost`` row now (``started``: a fresh start)."""
    from django.db import close_old_connections
    from django.utils import timezone

    from .models import FleetHost
    from .worker import own_host

    close_old_connections()  # a connection PostgreSQL dropped since the last beat
    data = snapshot()
    now = timezone.now()
    fields = dict(data, last_seen=now, stopped_at=None, pid=os.getpid(), node=socket.gethostname()[:255])
    if started:
        fields["started_at"] = now
    FleetHost.objects.update_or_create(name=own_host(), defaults=fields)


def _loop() -> None:
    interval = max(1.0, float(settings.HERMES_FLEET_HEARTBEAT))
    while not _stop.wait(interval):
        try:
            beat()
        except Exception:  # the database or a store away for a moment: beat again later
            log.exception("fleet heartbeat failed")


def on_ready(**_kwargs) -> None:
    beat(started=True)
    threading.Thread(target=_loop, daemon=True, name="fleet-heartbeat").start()
    log.info("fleet worker %s ready", settings.HERMES_ADMIN_HOST)


def on_shutdown(**_kwargs) -> None:
    _stop.set()
    try:
        from django.utils import timezone

        from .models import FleetHost

        FleetHost.objects.filter(name=settings.HERMES_ADMIN_HOST).update(stopped_at=timezone.now())
    except Exception:
        log.exception("could not record the worker's shutdown")


if getattr(settings, "HERMES_ADMIN_HOST", ""):
    signals.worker_ready.connect(on_ready, weak=False)
    signals.worker_shutdown.connect(on_shutdown, weak=False)
