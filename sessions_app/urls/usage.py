"""Usage and cost across profiles, and its CSV."""

from django.urls import path

from ..views import usage

urlpatterns = [
    path("usage/", usage.usage_page, name="usage"),
    path("usage/export.csv", usage.usage_export, name="usage_export"),
]
