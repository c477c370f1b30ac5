"""Build the demo Hermes home (``scripts/demo_home.py``) in the data folder.

Seven profiles whose stores were written by the real hermes-agent releases 0.13.0 to
0.19.0 (and one of the newest upstream shape), with weeks of history and the damage
the dashboard finds and repairs; a marker file ``<home>/.hermes-admin-demo`` says it
is a demo (the pages show a banner). An existing demo home of the current version is
kept (repairs made in it survive a restart); an older one is rebuilt; ``--force``
rebuilds it anyway. A folder that is not a demo home is never replaced. A freshly
built demo is checked once (a ``heal_sessions --all-profiles`` check run, recorded
like any other), so the overview shows its findings from the first page on. Prints
the demo root's path on stdout.
"""

import importlib.util
import json
import sys
from io import StringIO
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

SCRIPT = Path(settings.BASE_DIR) / "scripts" / "demo_home.py"


def demo_builder():
    """``scripts/demo_home.py`` as a module (scripts/ is not a package)."""
    sys.dont_write_bytecode = True
    spec = importlib.util.spec_from_file_location("demo_home", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _is_old_demo(dest: Path) -> bool:
    """A demo home of an earlier version: the committed fixture copied as it was."""
    try:
        manifest = json.loads((dest / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("generated_by") == "scripts/make_fixtures.py"


class Command(BaseCommand):
    help = "Build the demo Hermes home (real releases' stores with field damage) in the data folder."

    def add_arguments(self, parser):
        parser.add_argument("--dest", type=Path, default=None, help="target folder (default: <data>/demo-home)")
        parser.add_argument("--force", action="store_true", help="rebuild an existing demo home")
        parser.add_argument("--no-check", action="store_true",
                            help="skip the first check pass (scripts/dashboard.sh runs it once the demo agent holds its lock)")

    def handle(self, *args, dest=None, force=False, no_check=False, **options):
        builder = demo_builder()
        dest = (dest or settings.DATA_DIR / "demo-home").resolve()
        if dest.exists():
            marker = builder.read_marker(dest)
            if marker is None and not _is_old_demo(dest) and any(dest.iterdir()):
                raise CommandError(f"{dest} exists and is not a demo home; choose another --dest")
            if marker is not None and marker.get("version") == builder.DEMO_VERSION and not force:
                self.stdout.write(str(dest))
                return
        try:
            builder.build(dest)
        except RuntimeError as exc:
            raise CommandError(f"the demo home could not be built: {exc}") from exc
        if not no_check:
            self.first_check(dest)
        self.stdout.write(str(dest))

    def first_check(self, dest: Path) -> None:
        """One check pass over the new demo (nothing is written to its stores)."""
        try:
            call_command("heal_sessions", "--root", str(dest), "--all-profiles", "--json",
                         stdout=StringIO(), stderr=StringIO())
        except SystemExit:
            pass  # findings remain (1) or a store is damaged (2): that is what the demo shows
        except CommandError as exc:  # e.g. another run holds the lock: the pages offer "Check now"
            self.stderr.write(f"the demo home was built, but its first check did not run: {exc}")
