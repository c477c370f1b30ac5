"""Retention and flags: the Prune pages, and renaming, archiving, pinning, hiding sessions."""

from django.urls import path

from ..views import flags, prune

urlpatterns = [
    path("prune/", prune.prune_all, name="prune"),
    path("prune/apply/", prune.prune_apply, name="prune_apply"),
    path("p/<str:profile>/prune/", prune.prune_profile, name="profile_prune"),
    path("sessions/flags/", flags.bulk_flags, name="bulk_flags"),
    path("p/<str:profile>/s/<path:session_id>/flags/", flags.set_flag, name="session_flags"),
    path("p/<str:profile>/s/<path:session_id>/rename/", flags.rename, name="session_rename"),
]
