"""WSGI entry point (gunicorn: ``gunicorn hermes_admin.wsgi``).

The settings set the private umask (``hermes_admin.private``); the web server runs
no system checks, so the data folder's permissions are checked and logged here.
"""
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hermes_admin.settings")
application = get_wsgi_application()

from sessions_app.system_checks import log_data_folder_warnings  # noqa: E402  (needs the app registry)

log_data_folder_warnings()
