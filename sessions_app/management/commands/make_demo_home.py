"""Build the demo Hermes home from the committed fixture stores.

The fixtures (``tests/fixtures/hermes_home``) were written by the real hermes-agent
releases through their own ``SessionDB`` (``scripts/make_fixtures.py``). They are
copied, never browsed in place, so nothing the dashboard does can change them.
Prints the demo root's path on stdout. The copy is private like the rest of the
data folder (folders 0700, files 0600): ``copytree`` would keep the checkout's modes.
"""

import os
import shutil
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

FIXTURE_HOME = Path(settings.BASE_DIR) / "tests" / "fixtures" / "hermes_home"


class Command(BaseCommand):
    help = "Copy the fixture Hermes home (several profiles, real releases) to the data folder."

    def add_arguments(self, parser):
        parser.add_argument("--dest", type=Path, default=None, help="target folder (default: <data>/demo-home)")
        parser.add_argument("--force", action="store_true", help="replace an existing demo home")

    def handle(self, *args, dest=None, force=False, **options):
        dest = (dest or settings.DATA_DIR / "demo-home").resolve()
        if not FIXTURE_HOME.is_dir():
            raise CommandError(f"fixture home missing: {FIXTURE_HOME} (run scripts/make_fixtures.py)")
        if dest.exists() and force:
            shutil.rmtree(dest)
        if not dest.exists():
            shutil.copytree(FIXTURE_HOME, dest, ignore=shutil.ignore_patterns("*-wal", "*-shm"))
            _make_private(dest)
        self.stdout.write(str(dest))


def _make_private(root: Path) -> None:
    """Folders 0700, files 0600 (a fresh copy: no process has its stores open yet)."""
    os.chmod(root, 0o700)
    for folder, dirs, files in os.walk(root):
        for name in dirs:
            os.chmod(os.path.join(folder, name), 0o700)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o600)
