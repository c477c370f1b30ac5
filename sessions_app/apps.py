from django.apps import AppConfig


class SessionsAppConfig(AppConfig):
    name = "sessions_app"
    verbose_name = "Hermes sessions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from . import system_checks  # noqa: F401  (registers the data-folder check)
        from . import login_audit  # noqa: F401  (audits failed logins)
