"""Deletion: one session or a selection, the trash and restore."""

from django.urls import path

from ..views import deletion

urlpatterns = [
    path("sessions/delete/", deletion.bulk_confirm, name="bulk_delete_confirm"),
    path("sessions/delete/apply/", deletion.bulk_apply, name="bulk_delete_apply"),
    path("trash/", deletion.trash_list, name="trash"),
    path("trash/<str:entry_id>/", deletion.trash_entry, name="trash_entry"),
    path("trash/<str:entry_id>/restore/", deletion.trash_restore, name="trash_restore"),
    path("p/<str:profile>/s/<path:session_id>/delete/", deletion.delete_confirm, name="delete_confirm"),
    path("p/<str:profile>/s/<path:session_id>/delete/apply/", deletion.delete_apply, name="delete_apply"),
]
