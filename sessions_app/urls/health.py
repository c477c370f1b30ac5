"""Health: check passes, heal runs and their pages, a profile's findings, repairs."""

from django.urls import path

from ..views import health

urlpatterns = [
    path("checks/run/", health.start_check, name="start_check"),
    path("runs/", health.run_list, name="runs"),
    path("runs/<int:pk>/", health.run_detail, name="run"),
    path("p/<str:profile>/health/", health.profile_health, name="profile_health"),
    path("p/<str:profile>/heal/", health.heal_profile, name="heal_profile"),
    path("p/<str:profile>/repair-all/<str:check>/", health.repair_all, name="repair_all"),
    path("p/<str:profile>/repair-all/<str:check>/apply/", health.repair_all_apply, name="repair_all_apply"),
    path("p/<str:profile>/s/<path:session_id>/repair/", health.repair_preview, name="repair_preview"),
    path("p/<str:profile>/s/<path:session_id>/repair/apply/", health.repair_apply, name="repair_apply"),
]
