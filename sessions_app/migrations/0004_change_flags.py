"""The ``change_flags`` permission (rename, archive, pin, hide sessions; issue 14),
given to the Operator and Admin roles."""

from django.db import migrations

ROLES = ("Operator", "Admin")


def grant(apps, schema_editor):
    from django.contrib.auth.management import create_permissions

    # Permissions are normally created after migrations; the roles need this one now.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    perm = Permission.objects.get(content_type__app_label="sessions_app", codename="change_flags")
    for name in ROLES:
        group, _ = Group.objects.get_or_create(name=name)
        group.permissions.add(perm)


def revoke(apps, schema_editor):
    Permission = apps.get_model("auth", "Permission")
    Permission.objects.filter(content_type__app_label="sessions_app", codename="change_flags").delete()


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0003_roles"),
    ]
    operations = [
        migrations.AlterModelOptions(
            name="auditevent",
            options={"ordering": ["-created_at", "-id"], "permissions": [
                ("view_dashboard", "Can browse profiles, sessions metadata, health and history"),
                ("view_transcripts", "Can read transcript content and export it"),
                ("run_heal", "Can run checks, repairs and transcript migrations"),
                ("delete_sessions", "Can delete, restore and move sessions"),
                ("override_live", "Can override a maybe-live verdict when every holder is provably dead"),
                ("change_flags", "Can rename, archive, pin and hide sessions"),
            ]},
        ),
        migrations.RunPython(grant, revoke),
    ]
