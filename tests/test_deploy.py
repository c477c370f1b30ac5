"""Production settings: ``manage.py check --deploy`` is clean with the documented variables."""

import os
import secrets
import subprocess
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]


def test_check_deploy_is_clean_with_the_production_environment(tmp_path):
    env = dict(os.environ, HERMES_ADMIN_SECRET_KEY=secrets.token_urlsafe(60), HERMES_ADMIN_HTTPS="1",
               HERMES_ADMIN_ALLOWED_HOSTS="admin.example.org", HERMES_ADMIN_DATA=str(tmp_path))
    # Set by the browser tests' conftest for Playwright; never in production.
    for name in ("HERMES_ADMIN_DEBUG", "DJANGO_ALLOW_ASYNC_UNSAFE"):
        env.pop(name, None)
    out = subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
                         cwd=PROJECT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "no issues" in out.stdout


def test_check_deploy_warns_without_them(tmp_path):
    env = dict(os.environ, HERMES_ADMIN_DATA=str(tmp_path))
    for name in ("HERMES_ADMIN_SECRET_KEY", "HERMES_ADMIN_HTTPS"):
        env.pop(name, None)
    out = subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
                         cwd=PROJECT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "SECURE_HSTS_SECONDS" in out.stderr + out.stdout
