"""Migration: a profile's transcript migration plan, a session's JSONL copy, the
copies of a colliding id."""

from django.urls import path

from ..views import migration

urlpatterns = [
    path("p/<str:profile>/migrate/", migration.migrate_profile, name="migrate_profile"),
    path("p/<str:profile>/s/<path:session_id>/jsonl/", migration.session_jsonl, name="session_jsonl"),
    path("p/<str:profile>/s/<path:session_id>/collision/", migration.session_collision, name="session_collision"),
]
