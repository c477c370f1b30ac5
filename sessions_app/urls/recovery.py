"""Recovery: the copies of a session Hermes left on disk, compared with the store."""

from django.urls import path

from ..views import copies

urlpatterns = [
    path("p/<str:profile>/s/<path:session_id>/copies/", copies.session_copies, name="session_copies"),
]
