"""Fleet pages (issue 17), under ``fleet/``; 404 when fleet mode is off.

A profile key carries its host (``work@alpha on host-b``, percent-encoded in URLs).
"""

from django.urls import path

from . import views

urlpatterns = [
    path("", views.hosts_page, name="fleet"),
    path("sessions/", views.session_list, name="fleet_sessions"),
    path("p/<str:profile>/", views.profile_detail, name="fleet_profile"),
    path("p/<str:profile>/heal/", views.heal_profile, name="fleet_heal"),
    path("p/<str:profile>/s/<path:session_id>/", views.session_detail, name="fleet_session"),
]
