"""Audit: the trail of every change, one event, exports, a profile's history."""

from django.urls import path

from ..views import audit

urlpatterns = [
    path("audit/", audit.event_list, name="audit"),
    path("audit/<int:pk>/", audit.event_detail, name="audit_event"),
    path("audit/export.<str:fmt>", audit.event_export, name="audit_export"),
    path("p/<str:profile>/history/", audit.profile_history, name="profile_history"),
]
