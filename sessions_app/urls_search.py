"""Full-text search across a profile's messages (issue 7)."""

from django.urls import path

from .views import search

urlpatterns = [
    path("p/<str:profile>/search/", search.profile_search, name="profile_search"),
]
