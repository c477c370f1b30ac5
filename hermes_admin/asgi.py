"""ASGI entry point.

The settings set the private umask (``hermes_admin.private``); the server runs no
system checks, so the data folder's permissions are checked and logged here.
"""
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hermes_admin.settings")
application = get_asgi_application()

from sessions_app.system_checks import log_data_folder_warnings  # noqa: E402  (needs the app registry)

log_data_folder_warnings()
