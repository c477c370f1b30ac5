"""URLs of the dashboard, one module per subject; the order of inclusion matters.

A session id may contain "/" (ids come from the store, not from us), so the bare
session route comes last: no longer ``p/<profile>/s/<id>/…`` route may be shadowed.
"""

from django.conf import settings
from django.urls import include, path, register_converter

from ..converters import RowIdConverter
from ..views import sessions as session_views
from ..views.metrics import metrics_view

register_converter(RowIdConverter, "rowid")  # a message id SQLite can hold (64-bit), else 404

urlpatterns = [
    # Prometheus' default metrics_path; a bearer token, not the login (views/metrics.py).
    path("metrics", metrics_view, name="metrics"),
    path("", include("sessions_app.urls.sessions")),
    path("", include("sessions_app.urls.health")),
    path("", include("sessions_app.urls.deletion")),
    path("", include("sessions_app.urls.migration")),
    path("", include("sessions_app.urls.recovery")),
    path("", include("sessions_app.urls.audit")),
    path("", include("sessions_app.urls.retention")),
    path("", include("sessions_app.urls.usage")),
    path("", include("sessions_app.urls.search")),
    path("", include("sessions_app.urls.export")),
    path("p/<str:profile>/s/<path:session_id>/", session_views.session_detail, name="session"),
]
if settings.FLEET:  # fleet mode (issue 17): its pages exist only with a broker configured
    urlpatterns.insert(-1, path("fleet/", include("sessions_app.fleet.urls")))
