"""Deletion: one session or a selection, the trash and restore."""

from django.urls import path

from ..views import delete

urlpatterns = [
    path("sessions/delete/", delete.bulk_confirm, name="bulk_delete_confirm"),
    path("sessions/delete/apply/", delete.bulk_apply, name="bulk_delete_apply"),
    path("trash/", delete.trash_list, name="trash"),
    path("trash/<str:entry_id>/", delete.trash_entry, name="trash_entry"),
    path("trash/<str:entry_id>/restore/", delete.trash_restore, name="trash_restore"),
    path("p/<str:profile>/s/<path:session_id>/delete/", delete.delete_confirm, name="delete_confirm"),
    path("p/<str:profile>/s/<path:session_id>/delete/apply/", delete.delete_apply, name="delete_apply"),
]
