"""``manage.py create_user NAME --role auditor|operator|admin``: a login in a role.

The password comes from ``--password-env VAR`` (the name of an environment
variable) or is asked for on the terminal; it is never taken from the command line,
where other users could read it. Re-running changes the user's role.
"""

import getpass
import os

from django.contrib.auth import get_user_model, password_validation
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

ROLES = {"auditor": "Auditor", "operator": "Operator", "admin": "Admin"}


class Command(BaseCommand):
    help = "Create (or move) a dashboard user in the auditor, operator or admin role."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--role", required=True, choices=sorted(ROLES))
        parser.add_argument("--password-env", metavar="VAR", help="environment variable holding the password")

    def handle(self, *args, username, role, password_env=None, **options):
        User = get_user_model()
        user = User.objects.filter(username=username).first()
        password = None
        if password_env:
            password = os.environ.get(password_env)
            if not password:
                raise CommandError(f"environment variable {password_env} is empty or unset", returncode=2)
        elif user is None:
            password = getpass.getpass(f"Password for {username}: ")
        if user is None:
            user = User(username=username)
        if password is not None:
            try:
                password_validation.validate_password(password, user)
            except ValidationError as exc:
                raise CommandError("; ".join(exc.messages), returncode=2)
            user.set_password(password)
        user.save()
        user.groups.remove(*Group.objects.filter(name__in=ROLES.values()))
        user.groups.add(Group.objects.get(name=ROLES[role]))
        self.stdout.write(f"{username} is now in the {ROLES[role]} role.")
