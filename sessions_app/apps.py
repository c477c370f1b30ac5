from pathlib import Path

from django.apps import AppConfig
from django.conf import settings
from django.db.models.signals import post_migrate


def make_data_folders(**kwargs) -> None:
    """Folders of the data folder that things outside the dashboard write into:
    ``logs/`` takes the README's cron lines (``> var/logs/heal-<date>.json``), and a
    shell redirection into a missing folder fails before the command even runs.
    Created by ``migrate`` (the setup step of ``scripts/dashboard.sh`` and of a
    production install)."""
    (Path(settings.DATA_DIR) / "logs").mkdir(parents=True, exist_ok=True)


class SessionsAppConfig(AppConfig):
    name = "sessions_app"
    verbose_name = "Hermes sessions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        post_migrate.connect(make_data_folders, sender=self, dispatch_uid="sessions_app.make_data_folders")
        from . import system_checks  # noqa: F401  (registers the data-folder check)
        from . import login_audit  # noqa: F401  (audits failed logins)
