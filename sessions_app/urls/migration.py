"""Migration: a profile's transcript migration plan, a session's JSONL copy, the
copies of a colliding id."""

from django.urls import path

from ..views import migrate

urlpatterns = [
    path("p/<str:profile>/migrate/", migrate.migrate_profile, name="migrate_profile"),
    path("p/<str:profile>/s/<path:session_id>/jsonl/", migrate.session_jsonl, name="session_jsonl"),
    path("p/<str:profile>/s/<path:session_id>/collision/", migrate.session_collision, name="session_collision"),
]
