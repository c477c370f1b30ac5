"""The Celery app of fleet mode (docs/architecture.md §10).

A Hermes host runs ``celery -A hermes_admin worker -Q hermes.<host> -P threads``
with ``HERMES_ADMIN_HOST=<host>``, its own ``HERMES_ROOTS`` and the central
``DATABASE_URL``; the dashboard only sends tasks (``sessions_app.fleet.client``).
Configuration is the ``CELERY_*`` names of ``hermes_admin.settings`` (broker and
result backend from ``CELERY_BROKER_URL`` / ``CELERY_RESULT_BACKEND``, JSON only,
tasks acknowledged late). Nothing imports this module unless fleet mode is used,
so one host without a broker never loads Celery.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hermes_admin.settings")

app = Celery("hermes_admin")
app.config_from_object("django.conf:settings", namespace="CELERY")
# The tasks and the worker's heartbeat (its signal handlers connect on import).
app.conf.include = ["sessions_app.fleet.tasks", "sessions_app.fleet.heartbeat"]
