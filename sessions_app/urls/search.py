"""Search across profiles, and the bounded scan of what one profile's index misses."""

from django.urls import path

from ..views import search_all

urlpatterns = [
    path("search/", search_all.search_everywhere_page, name="search_everywhere"),
    path("p/<str:profile>/search/scan/", search_all.profile_scan, name="profile_scan"),
]
