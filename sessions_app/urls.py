from django.urls import include, path, register_converter

from .converters import RowIdConverter
from .views import audit, health, profiles, sessions

register_converter(RowIdConverter, "rowid")

urlpatterns = [
    path("", profiles.overview, name="overview"),
    path("sessions/", sessions.session_list, name="session_list"),
    path("checks/run/", health.start_check, name="start_check"),
    path("runs/", health.run_list, name="runs"),
    path("runs/<int:pk>/", health.run_detail, name="run"),
    path("audit/", audit.event_list, name="audit"),
    path("audit/<int:pk>/", audit.event_detail, name="audit_event"),
    path("audit/export.<str:fmt>", audit.event_export, name="audit_export"),
    path("p/<str:profile>/history/", audit.profile_history, name="profile_history"),
    path("p/<str:profile>/", profiles.profile_detail, name="profile"),
    path("p/<str:profile>/health/", health.profile_health, name="profile_health"),
    path("p/<str:profile>/heal/", health.heal_profile, name="heal_profile"),
    path("p/<str:profile>/s/<path:session_id>/repair/", health.repair_preview, name="repair_preview"),
    path("p/<str:profile>/s/<path:session_id>/repair/apply/", health.repair_apply, name="repair_apply"),
    path("p/<str:profile>/s/<path:session_id>/m/<rowid:message_id>/", sessions.message_raw, name="message_raw"),
    path(
        "p/<str:profile>/s/<path:session_id>/export.<str:fmt>",
        sessions.session_export,
        name="session_export",
    ),
    path("", include("sessions_app.urls_delete")),  # deletion, trash, restore (issue 5)
    path("", include("sessions_app.urls_migrate")),  # migration page, JSONL copy, id collisions (issue 4)
    path("", include("sessions_app.urls_search")),  # full-text search in a profile (issue 7)
    # Last: a session id may contain "/" (ids come from the store, not from us), so
    # the bare session route must not shadow the longer routes above.
    path("p/<str:profile>/s/<path:session_id>/", sessions.session_detail, name="session"),
]
