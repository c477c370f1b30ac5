from django.urls import path

from .views import profiles, sessions

urlpatterns = [
    path("", profiles.overview, name="overview"),
    path("sessions/", sessions.session_list, name="session_list"),
    path("p/<str:profile>/", profiles.profile_detail, name="profile"),
    path("p/<str:profile>/s/<str:session_id>/", sessions.session_detail, name="session"),
    path("p/<str:profile>/s/<str:session_id>/m/<int:message_id>/", sessions.message_raw, name="message_raw"),
    path(
        "p/<str:profile>/s/<str:session_id>/export.<str:fmt>",
        sessions.session_export,
        name="session_export",
    ),
]
