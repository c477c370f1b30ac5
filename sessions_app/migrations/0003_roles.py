"""The dashboard's roles as groups (issue 6): Auditor, Operator, Admin."""

from django.db import migrations

ROLES = {
    "Auditor": ["view_dashboard", "view_auditevent", "view_healrun", "view_findingsnapshot"],
    "Operator": ["view_dashboard", "view_auditevent", "view_healrun", "view_findingsnapshot",
                 "view_transcripts", "run_heal"],
    "Admin": ["view_dashboard", "view_auditevent", "view_healrun", "view_findingsnapshot",
              "view_transcripts", "run_heal", "delete_sessions", "override_live"],
}


def create_roles(apps, schema_editor):
    from django.contrib.auth.management import create_permissions

    # Permissions are normally created after migrations; the groups need them now.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for name, codenames in ROLES.items():
        group, _ = Group.objects.get_or_create(name=name)
        perms = Permission.objects.filter(content_type__app_label="sessions_app", codename__in=codenames)
        missing = set(codenames) - set(perms.values_list("codename", flat=True))
        if missing:
            raise RuntimeError(f"permissions missing for role {name}: {sorted(missing)}")
        group.permissions.set(perms)


def remove_roles(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=ROLES).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0002_permissions"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]
    operations = [migrations.RunPython(create_roles, remove_roles)]
