"""Bulk export of the sessions list's filtered sessions."""

from django.urls import path

from ..views import export

urlpatterns = [
    path("sessions/export.zip", export.export_zip, name="sessions_export_zip"),
    path("sessions/export.csv", export.export_csv, name="sessions_export_csv"),
]
