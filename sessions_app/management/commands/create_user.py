"""``manage.py create_user NAME --role auditor|operator|admin``: a login in a role.

The password comes from ``--password-env VAR`` (the name of an environment
variable) or is asked for on the terminal; it is never taken from the command line,
where other users could read it. Without a terminal (cron, a pipe, CI) and without
``--password-env`` a new user is refused, with the reason. Re-running changes the
user's role (no password needed).

The user name must be what Django's own user model accepts (at most 150
characters of letters, digits and ``@.+-_``): an empty, overlong or HTML-ish
name is refused. Every refusal is one line on stderr and exit status 2.
"""

import getpass
import os
import sys

from django.contrib.auth import get_user_model, password_validation
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

ROLES = {"auditor": "Auditor", "operator": "Operator", "admin": "Admin"}


def _fail(message: str):
    raise CommandError(message, returncode=2)


def _shown(username: str) -> str:
    return repr(username if len(username) <= 40 else username[:40] + "…")


class Command(BaseCommand):
    help = "Create (or move) a dashboard user in the auditor, operator or admin role."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--role", required=True, choices=sorted(ROLES))
        parser.add_argument("--password-env", metavar="VAR", help="environment variable holding the password")

    def handle(self, *args, username, role, password_env=None, **options):
        User = get_user_model()
        try:  # the model field's own rules: not blank, max_length, the username validator
            User._meta.get_field(User.USERNAME_FIELD).clean(username, None)
        except ValidationError as exc:
            _fail(f"user name {_shown(username)} refused: {' '.join(exc.messages)}")
        user = User.objects.filter(username=username).first()
        password = None
        if password_env:
            password = os.environ.get(password_env)
            if not password:
                _fail(f"environment variable {password_env} is empty or unset")
        elif user is None:
            password = self._ask(username)
        if user is None:
            user = User(username=username)
        if password is not None:
            try:
                password_validation.validate_password(password, user)
            except ValidationError as exc:
                _fail("; ".join(exc.messages))
            user.set_password(password)
        user.save()
        user.groups.remove(*Group.objects.filter(name__in=ROLES.values()))
        user.groups.add(Group.objects.get(name=ROLES[role]))
        self.stdout.write(f"{username} is now in the {ROLES[role]} role.")

    @staticmethod
    def _ask(username: str) -> str:
        if not sys.stdin.isatty():
            _fail("no terminal to ask for the password on: pass --password-env VAR (the name of an environment "
                  "variable holding it)")
        try:
            password = getpass.getpass(f"Password for {username}: ")
        except (EOFError, KeyboardInterrupt):
            _fail("no password given; nothing was created")
        if not password:
            _fail("no password given; nothing was created")
        return password
