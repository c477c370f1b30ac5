"""The dashboard's record of the fleet's hosts (central database, managed)."""

from __future__ import annotations

from django.db import models


class FleetHost(models.Model):
    """One Hermes host's worker as its latest heartbeat described it.

    ``roots`` are the worker's Hermes roots (absolute paths on that host);
    ``profiles`` one dict per profile it serves: ``{"key", "name", "root", "status",
    "reason", "sessions", "messages", "last_activity", "file_size", "schema_version"}``
    (sizes bytes, ``last_activity`` epoch seconds, ``status`` as the overview's);
    ``ignored`` ``[path, reason]`` pairs discovery skipped. ``last_seen`` is the
    latest heartbeat; ``stopped_at`` is set when the worker shut down cleanly.
    A host whose ``last_seen`` is older than ``HERMES_FLEET_UNREACHABLE`` seconds is
    shown unreachable with its last known profiles, never as empty.
    """

    name = models.CharField(max_length=63, unique=True)
    roots = models.JSONField(default=list)
    profiles = models.JSONField(default=list)
    ignored = models.JSONField(default=list)
    started_at = models.DateTimeField(null=True)
    last_seen = models.DateTimeField()
    stopped_at = models.DateTimeField(null=True)
    pid = models.IntegerField(null=True)
    node = models.CharField(max_length=255, blank=True)  # the machine's own host name

    class Meta:
        app_label = "sessions_app"
        ordering = ["name"]

    def __str__(self):
        return f"fleet host {self.name}"
