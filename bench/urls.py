"""The product's URLs plus the floor views under ``/bench-floor/`` (``bench/floor.py``)."""

from django.urls import include, path

urlpatterns = [
    path("", include("bench.floor")),
    path("", include("hermes_admin.urls")),
]

handler403 = "sessions_app.views.common.permission_denied"
