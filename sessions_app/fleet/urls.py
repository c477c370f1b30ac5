"""Fleet pages (issue 17), under ``fleet/``; 404 when fleet mode is off.

A profile key carries its host (``work@alpha on host-b``, percent-encoded in URLs).
A session id may contain "/", so the bare session route comes last.
"""

from django.urls import path

from . import views, views_export, views_prune, views_remote, views_repair

urlpatterns = [
    path("", views.hosts_page, name="fleet"),
    path("sessions/", views.session_list, name="fleet_sessions"),
    path("sessions/export.csv", views_export.export_csv, name="fleet_sessions_export_csv"),
    path("search/", views_remote.search_page, name="fleet_search"),
    path("trash/", views_remote.trash_page, name="fleet_trash"),
    path("p/<str:profile>/", views.profile_detail, name="fleet_profile"),
    path("p/<str:profile>/heal/", views.heal_profile, name="fleet_heal"),
    path("p/<str:profile>/prune/", views_prune.prune_page, name="fleet_prune"),
    path("p/<str:profile>/migrate/", views_repair.migrate_profile, name="fleet_migrate"),
    path("p/<str:profile>/prune/apply/", views_prune.prune_apply, name="fleet_prune_apply"),
    path("p/<str:profile>/trash/<str:entry_id>/restore/", views_remote.restore_entry, name="fleet_restore"),
    path("p/<str:profile>/s/<path:session_id>/export.<str:fmt>", views_remote.session_export,
         name="fleet_session_export"),
    path("p/<str:profile>/s/<path:session_id>/repair/apply/", views_repair.repair_apply, name="fleet_repair_apply"),
    path("p/<str:profile>/s/<path:session_id>/repair/", views_repair.repair_preview, name="fleet_repair"),
    path("p/<str:profile>/s/<path:session_id>/delete/", views_remote.delete_session, name="fleet_delete"),
    path("p/<str:profile>/s/<path:session_id>/", views.session_detail, name="fleet_session"),
]
