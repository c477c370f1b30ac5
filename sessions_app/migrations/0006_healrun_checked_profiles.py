"""HealRun.checked_profiles: the profiles a whole pass checked, so the health chart
no longer decodes every stored report. Passes recorded before it are filled in from
their reports, one report in memory at a time."""

from django.db import migrations, models


def fill(apps, schema_editor):
    HealRun = apps.get_model("sessions_app", "HealRun")
    db = schema_editor.connection.alias
    ids = list(HealRun.objects.using(db).filter(status="done", report__isnull=False).values_list("pk", flat=True))
    for pk in ids:
        report = HealRun.objects.using(db).filter(pk=pk).values_list("report", flat=True).first()
        # As runs.checked_profiles (kept here: a migration must not follow later code).
        entries = report.get("profiles", []) if isinstance(report, dict) else []
        keys = [p["profile"] for p in entries if isinstance(p, dict) and p.get("status") == "ok" and p.get("profile")]
        if keys:
            HealRun.objects.using(db).filter(pk=pk).update(checked_profiles=keys)


class Migration(migrations.Migration):

    dependencies = [
        ('sessions_app', '0005_fleet_hosts'),
    ]

    operations = [
        migrations.AddField(
            model_name='healrun',
            name='checked_profiles',
            field=models.JSONField(default=list),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
    ]
