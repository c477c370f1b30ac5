"""Migration pages (issue 4): per-profile plan and apply, a session's JSONL copy,
the copies of a colliding id. Included by ``urls.py`` before its bare session route."""

from django.urls import path

from .views import migrate

urlpatterns = [
    path("p/<str:profile>/migrate/", migrate.migrate_profile, name="migrate_profile"),
    path("p/<str:profile>/s/<path:session_id>/jsonl/", migrate.session_jsonl, name="session_jsonl"),
    path("p/<str:profile>/s/<path:session_id>/collision/", migrate.session_collision, name="session_collision"),
]
