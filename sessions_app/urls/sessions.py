"""Browsing: the overview, profiles, the sessions list, search, a session's raw
message and exports (the bare session page is routed last, in ``__init__``)."""

from django.urls import path

from ..views import profiles, search, sessions

urlpatterns = [
    path("", profiles.overview, name="overview"),
    path("sessions/", sessions.session_list, name="session_list"),
    path("p/<str:profile>/", profiles.profile_detail, name="profile"),
    path("p/<str:profile>/search/", search.profile_search, name="profile_search"),
    path("p/<str:profile>/s/<path:session_id>/m/<rowid:message_id>/", sessions.message_raw, name="message_raw"),
    path("p/<str:profile>/s/<path:session_id>/export.<str:fmt>", sessions.session_export, name="session_export"),
]
