"""Make sure someone can log in to a fresh install.

Creates the superuser ``admin`` when no superuser exists yet, with the password from
``HERMES_ADMIN_PASSWORD`` or a generated one kept in ``<data>/admin-password``
(mode 0600), and prints how to log in. Does nothing else when a superuser exists.
"""

import os
import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from hermes_admin.private import make_private_dir, write_private


class Command(BaseCommand):
    help = "Create the first admin login if none exists, and print how to log in."

    def handle(self, *args, **options):
        User = get_user_model()
        path = settings.DATA_DIR / "admin-password"
        if User.objects.filter(is_superuser=True).exists():
            if path.exists() and User.objects.filter(username="admin").exists():
                user = User.objects.get(username="admin")
                password = path.read_text().strip()
                if user.check_password(password):
                    self.stdout.write(f"Log in as admin / {password}  (kept in {path})")
            return
        password = os.environ.get("HERMES_ADMIN_PASSWORD") or secrets.token_urlsafe(12)
        User.objects.create_superuser("admin", email="", password=password)
        if not os.environ.get("HERMES_ADMIN_PASSWORD"):
            make_private_dir(settings.DATA_DIR)
            path.unlink(missing_ok=True)  # one left from an earlier database
            write_private(path, password + "\n")  # 0600 from the first byte
        self.stdout.write(f"Created the superuser admin. Log in as admin / {password}")
