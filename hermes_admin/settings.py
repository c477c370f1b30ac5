"""Settings for hermes-admin, driven by environment variables.

Environment (all optional):

- ``HERMES_ADMIN_DATA``: the dashboard's own data folder (its database, backups,
  trash, logs). Default: ``var/`` in the project.
- ``HERMES_ROOTS``: Hermes roots to browse, separated by ``os.pathsep``. Unset: the
  root of ``HERMES_HOME`` when set, else ``~/.hermes`` when it exists
  (see ``sessions_app.stores.discovery``).
- ``HERMES_ADMIN_SECRET_KEY``: Django secret key. Unset: one is generated once and
  kept in ``<data>/secret_key``.
- ``HERMES_ADMIN_DEBUG``: ``1`` for Django debug mode (development only).
- ``HERMES_ADMIN_HTTPS``: ``1`` in production behind HTTPS (secure cookies, HSTS,
  redirect); ``HERMES_ADMIN_PROXY_SSL_HEADER`` names the proxy's scheme header.
- ``DATABASE_URL``: the dashboard's own database (PostgreSQL); default SQLite in
  the data folder.
- ``HERMES_ADMIN_ALLOWED_HOSTS``: comma-separated host names (default
  ``localhost,127.0.0.1,[::1]``).
- ``HERMES_ADMIN_READ_TIMEOUT``: busy timeout of store reads, seconds (default 5).
- ``HERMES_ADMIN_BUSY_GLANCE`` / ``HERMES_ADMIN_BUSY_MEMORY``: busy timeout of a look
  at a store from another page (overview, lists, other profiles' pages), seconds
  (default 0.25), and how long a store found locked is shown busy there without
  trying again, seconds (default 5).
- ``HERMES_ADMIN_IDLE_SECONDS`` / ``_STALE_SECONDS`` / ``_WAL_OVERSIZED_BYTES``:
  health thresholds (1 hour, 30 days, 64 MiB).
- ``HERMES_ADMIN_JSONL_MAX_LINE_BYTES`` / ``_JSONL_MAX_FILE_BYTES``: size limits of a
  ``sessions/<id>.jsonl`` line and file (8 MiB, 512 MiB);
  ``HERMES_ADMIN_JSON_MAX_BYTES`` / ``_JSON_MAX_DEPTH``: limits of one JSON value
  decoded from a store or file (32 MiB, 64 levels).
"""

import os
import secrets
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    return float(value) if value not in (None, "") else default


DATA_DIR = Path(os.environ.get("HERMES_ADMIN_DATA") or BASE_DIR / "var").resolve()


def _secret_key() -> str:
    key = os.environ.get("HERMES_ADMIN_SECRET_KEY")
    if key:
        return key
    # A generated key kept in the data folder, so sessions survive restarts
    # without asking a first-time user to configure anything.
    path = DATA_DIR / "secret_key"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        DATA_DIR.mkdir(parents=True, exist_ok=True)
        key = secrets.token_urlsafe(50)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # never readable by others
        with os.fdopen(fd, "w") as handle:
            handle.write(key)
        return key


SECRET_KEY = _secret_key()
DEBUG = env_bool("HERMES_ADMIN_DEBUG")
# Behind HTTPS in production: secure cookies, HSTS and the redirect to https.
HTTPS = env_bool("HERMES_ADMIN_HTTPS")
SECURE_SSL_REDIRECT = HTTPS
SESSION_COOKIE_SECURE = HTTPS
CSRF_COOKIE_SECURE = HTTPS
SECURE_HSTS_SECONDS = 31_536_000 if HTTPS else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = HTTPS
SECURE_HSTS_PRELOAD = HTTPS
if os.environ.get("HERMES_ADMIN_PROXY_SSL_HEADER"):  # e.g. "HTTP_X_FORWARDED_PROTO"
    SECURE_PROXY_SSL_HEADER = (os.environ["HERMES_ADMIN_PROXY_SSL_HEADER"], "https")
CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("HERMES_ADMIN_CSRF_TRUSTED_ORIGINS", "").split(",") if o]
ALLOWED_HOSTS = [
    h.strip()
    for h in os.environ.get("HERMES_ADMIN_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",")
    if h.strip()
]

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "sessions_app",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # Every page needs a login unless a view opts out (only the login page does).
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "hermes_admin.urls"
WSGI_APPLICATION = "hermes_admin.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "sessions_app.context_processors.demo_home",
            ],
        },
    },
]

# The dashboard's own database. Hermes stores are never listed here: they are
# registered at run time as read-only aliases by sessions_app.stores.
# SQLite in the data folder by default; PostgreSQL (or any URL dj-database-url
# understands) when DATABASE_URL is set.
if os.environ.get("DATABASE_URL"):
    DATABASES = {"default": dj_database_url.parse(os.environ["DATABASE_URL"], conn_max_age=60)}
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": DATA_DIR / "hermes_admin.sqlite3",
            "OPTIONS": {"init_command": "PRAGMA busy_timeout = 5000;", "transaction_mode": "IMMEDIATE"},
            # A file, not Django's default in-memory test database: background jobs
            # write from other threads, and a shared-cache memory database answers
            # concurrent writers with "table is locked" instead of waiting.
            # One per process, so test runs sharing a data folder never share it.
            "TEST": {"NAME": str(DATA_DIR / f"test-hermes_admin-{os.getpid()}.sqlite3")},
        }
    }
DATABASE_ROUTERS = ["sessions_app.routers.StoreRouter"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "overview"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"  # every page labels its times UTC, like the stores' epoch seconds
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "static"
try:  # whitenoise warns about a missing STATIC_ROOT; an unwritable data folder is reported later
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)
except OSError:
    pass
# Serve straight from the finders so a fresh checkout needs no collectstatic.
WHITENOISE_USE_FINDERS = True

# Hermes roots: parsed here, resolved (HERMES_HOME, ~/.hermes) at discovery time.
HERMES_ROOTS = [p for p in os.environ.get("HERMES_ROOTS", "").split(os.pathsep) if p.strip()]
# Busy timeout (seconds) for read-only store connections; reference 2.8 uses 5 s.
HERMES_READ_TIMEOUT = env_float("HERMES_ADMIN_READ_TIMEOUT", 5.0)
# A store looked at from another page (overview, lists, other profiles' pages) gets
# this busy timeout instead, and one found locked is shown busy there for
# HERMES_BUSY_MEMORY seconds without a new try (docs/store.md, Locks).
HERMES_BUSY_GLANCE = env_float("HERMES_ADMIN_BUSY_GLANCE", 0.25)
HERMES_BUSY_MEMORY = env_float("HERMES_ADMIN_BUSY_MEMORY", 5.0)
# Wall-clock budget (seconds) for one overview probe query before it is reported partial.
HERMES_QUERY_BUDGET = env_float("HERMES_ADMIN_QUERY_BUDGET", 3.0)

# Health thresholds (design section 3, issue 3): a session is idle after an hour
# without activity and stale after 30 days; a WAL past 64 MiB is oversized.
HERMES_IDLE_SECONDS = env_float("HERMES_ADMIN_IDLE_SECONDS", 3600)
HERMES_STALE_SECONDS = env_float("HERMES_ADMIN_STALE_SECONDS", 30 * 86400)
HERMES_WAL_OVERSIZED_BYTES = int(env_float("HERMES_ADMIN_WAL_OVERSIZED_BYTES", 64 * 1024 * 1024))
# Seconds the structural check (PRAGMA quick_check) may run in a full pass.
HERMES_QUICK_CHECK_BUDGET = env_float("HERMES_ADMIN_QUICK_CHECK_BUDGET", 60)
# Mask API keys, tokens and passwords in displayed and exported transcripts for
# everyone (users without the transcript permission always get masked text).
HERMES_ADMIN_MASK_SECRETS = env_bool("HERMES_ADMIN_MASK_SECRETS")
# Days a deleted session stays in the trash (restorable) before `manage.py purge_trash` removes it.
HERMES_TRASH_RETENTION_DAYS = env_float("HERMES_ADMIN_TRASH_RETENTION_DAYS", 30)
# Store backups older than this many days are removed by `manage.py purge_backups`,
# except the newest HERMES_BACKUP_KEEP of each store, whatever their age.
HERMES_BACKUP_RETENTION_DAYS = env_float("HERMES_ADMIN_BACKUP_RETENTION_DAYS", 30)
HERMES_BACKUP_KEEP = int(env_float("HERMES_ADMIN_BACKUP_KEEP", 3))
# After a verified JSONL import, move sessions/<id>.jsonl into <data>/archive/jsonl/
# (issue 4). Off by default: the file then stays where Hermes left it, untouched.
HERMES_ARCHIVE_IMPORTED_JSONL = env_bool("HERMES_ADMIN_ARCHIVE_IMPORTED_JSONL")
# Size limits on what is read from files beside the stores and decoded from them
# (issue 13; docs/store.md, Files beside the store). A sessions/<id>.jsonl line
# longer than HERMES_JSONL_MAX_LINE_BYTES is reported by number and never imported
# (nor read into memory); a file past HERMES_JSONL_MAX_FILE_BYTES is reported and
# not imported. JSON values (tool_calls, structured content, model_config,
# manifests...) past HERMES_JSON_MAX_BYTES or nested deeper than
# HERMES_JSON_MAX_DEPTH show as "undecodable" instead of being parsed.
HERMES_JSONL_MAX_LINE_BYTES = int(env_float("HERMES_ADMIN_JSONL_MAX_LINE_BYTES", 8 * 1024 * 1024))
HERMES_JSONL_MAX_FILE_BYTES = int(env_float("HERMES_ADMIN_JSONL_MAX_FILE_BYTES", 512 * 1024 * 1024))
HERMES_JSON_MAX_BYTES = int(env_float("HERMES_ADMIN_JSON_MAX_BYTES", 32 * 1024 * 1024))
HERMES_JSON_MAX_DEPTH = int(env_float("HERMES_ADMIN_JSON_MAX_DEPTH", 64))
# How browser-started heal jobs run: "process" (a detached manage.py run_job) or "thread".
HERMES_ADMIN_JOB_RUNNER = os.environ.get("HERMES_ADMIN_JOB_RUNNER", "process")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {"sessions_app": {"handlers": ["console"], "level": "INFO"}},
}
