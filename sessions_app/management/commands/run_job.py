"""``manage.py run_job ID``: run one background job started from the browser."""

from django.core.management.base import BaseCommand, CommandError

from ...jobs import execute
from ...models import HealRun


class Command(BaseCommand):
    help = "Run a queued heal job (started by the dashboard; not for cron)."

    def add_arguments(self, parser):
        parser.add_argument("run_id", type=int)

    def handle(self, *args, run_id, **options):
        if not HealRun.objects.filter(pk=run_id, status=HealRun.Status.QUEUED).exists():
            raise CommandError(f"no queued run #{run_id}", returncode=2)
        run = execute(run_id)
        if run.status != HealRun.Status.DONE:
            raise CommandError(run.error or "the run failed", returncode=2)
