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
  the data folder. ``HERMES_ADMIN_CONN_MAX_AGE``: seconds a worker keeps its
  connection to it between requests (default 600; ``0``: one per request).
- ``HERMES_ADMIN_ALLOWED_HOSTS``: comma-separated host names (default
  ``localhost,127.0.0.1,[::1]``).
- ``HERMES_ADMIN_READ_TIMEOUT``: busy timeout of store reads, seconds (default 5).
- ``HERMES_ADMIN_SCAN_ROWS`` / ``HERMES_ADMIN_SCAN_SECONDS``: budgets of one bounded
  scan of the rows a full-text index misses (default 200,000 message ids, 3 s).
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
- ``HERMES_ADMIN_LOGIN_FAILURES``: failed logins (per user name and address) before
  a lockout (default 5); ``HERMES_ADMIN_LOCKOUT_MINUTES``: how long it lasts
  (default 15; ``0``: until ``manage.py axes_reset``).
- ``HERMES_ADMIN_METRICS_TOKEN``: bearer token of ``/metrics`` (unset: no such page);
  ``HERMES_ADMIN_METRICS_PROBE_SECONDS``: how long a scrape reuses counts (60).
- ``HERMES_ADMIN_NOTIFY_WEBHOOK_URL`` (several: separated by spaces or commas),
  ``_NOTIFY_WEBHOOK_FORMAT`` (``slack`` | ``generic``), ``_NOTIFY_EMAIL_TO``
  (comma-separated), ``_NOTIFY_TIMEOUT`` / ``_NOTIFY_ATTEMPTS`` / ``_NOTIFY_BACKOFF``
  / ``_NOTIFY_BUDGET``, ``_STUCK_SECONDS``, ``HERMES_ADMIN_BASE_URL``; mail through
  ``HERMES_ADMIN_EMAIL_HOST`` / ``_PORT`` / ``_USER`` / ``_PASSWORD`` / ``_USE_TLS`` /
  ``_USE_SSL`` / ``_FROM`` (README, *Notifications*).
- ``HERMES_ADMIN_WATCH_INTERVAL_SECONDS`` / ``_WATCH_IDLE_SECONDS``: defaults of
  ``manage.py watch_stores`` (300, 600).
- ``HERMES_ADMIN_LOG_FILE``: the log file (default ``<data>/logs/hermes-admin.log``;
  empty: standard error only).

Fleet mode (docs/architecture.md §10; README "Many hosts"): off unless
``CELERY_BROKER_URL`` is set.

- ``CELERY_BROKER_URL`` / ``CELERY_RESULT_BACKEND``: Redis URLs (the result
  backend defaults to the broker).
- ``HERMES_ADMIN_HOST``: set on a Hermes host's worker only: its fleet name
  (``[a-z0-9][a-z0-9.-]{0,62}``); its queue is ``hermes.<host>`` and its profile
  keys read ``<profile>[@<root>] on <host>``.
- ``HERMES_ADMIN_FLEET_TIMEOUT``: seconds the dashboard waits for a remote read
  (default 5); ``HERMES_ADMIN_FLEET_HEARTBEAT``: seconds between a worker's
  heartbeats (default 15); ``HERMES_ADMIN_FLEET_UNREACHABLE``: a host not heard
  from for this many seconds is shown unreachable (default 60);
  ``HERMES_ADMIN_FLEET_REDELIVER``: seconds after which a task a dead worker had
  taken is handed out again (Redis ``visibility_timeout``, default 3600);
  ``HERMES_ADMIN_FLEET_EXPORT_CHUNK``: bytes of one chunk of a remote export
  (default 1 MiB; one read task per chunk); ``HERMES_ADMIN_FLEET_HOSTS_TTL``:
  seconds a dashboard process reuses its read of the heartbeat rows (default 2).

Importing these settings sets the process umask to ``077`` (``hermes_admin.private``):
everything the dashboard creates in its data folder is private to its user.

Longer than most modules on purpose: every setting reads its environment variable here,
in one place, with its default and unit.
"""

import os
import secrets
from datetime import timedelta
from pathlib import Path

import dj_database_url

from hermes_admin.private import apply_umask, make_private_dir, write_private

# First of all, before anything creates a file: every entry point (manage.py,
# WSGI/ASGI, gunicorn, background jobs) imports these settings.
apply_umask()

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
try:  # 0700; an existing looser folder is reported by the data_folder system check
    make_private_dir(DATA_DIR)
except OSError:
    pass  # an unwritable data folder is reported by the commands that need it


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
        make_private_dir(DATA_DIR)
        key = secrets.token_urlsafe(50)
        try:
            write_private(path, key)  # 0600 from the first byte
        except FileExistsError:  # another process started at the same moment
            return path.read_text().strip()
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
    "django.contrib.humanize",  # naturaltime, intcomma: the pages' human numbers and times
    "django_htmx",
    "template_partials",
    "axes",
    "csp",
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
    "csp.middleware.CSPMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, as django-axes asks: turns a locked-out login into the lockout page.
    "axes.middleware.AxesMiddleware",
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
                "sessions_app.context_processors.fleet",
            ],
        },
    },
]

# The dashboard's own database. Hermes stores are never listed here: they are
# registered at run time as read-only aliases by sessions_app.stores.
# SQLite in the data folder by default; PostgreSQL (or any URL dj-database-url
# understands) when DATABASE_URL is set.
# Persistent connections to the dashboard's own database only (a new SQLite
# connection and its init command on every request, docs/benchmarks.md); the
# stores' aliases keep CONN_MAX_AGE 0, so no worker holds a read snapshot of a
# store between requests (stores/connection.py).
CONN_MAX_AGE = int(env_float("HERMES_ADMIN_CONN_MAX_AGE", 600))
if os.environ.get("DATABASE_URL"):
    DATABASES = {"default": dj_database_url.parse(os.environ["DATABASE_URL"], conn_max_age=CONN_MAX_AGE)}
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": DATA_DIR / "hermes_admin.sqlite3",
            "OPTIONS": {"init_command": "PRAGMA busy_timeout = 5000;", "transaction_mode": "IMMEDIATE"},
            "CONN_MAX_AGE": CONN_MAX_AGE,
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
# django-axes first: it refuses a locked-out user name/address before any
# password is checked (issue 13: 200 wrong passwords were all checked).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = max(1, int(env_float("HERMES_ADMIN_LOGIN_FAILURES", 5)))
# Per user name *and* address: a stranger cannot lock an admin out from elsewhere,
# and behind a proxy (one address for everyone) other users keep logging in.
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
_LOCKOUT_MINUTES = env_float("HERMES_ADMIN_LOCKOUT_MINUTES", 15)
AXES_COOLOFF_TIME = timedelta(minutes=_LOCKOUT_MINUTES) if _LOCKOUT_MINUTES > 0 else None
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "sessions_app.views.login.locked_out"
AXES_VERBOSE = False  # lockouts are audit events and log lines of our own
AXES_USERNAME_CALLABLE = "sessions_app.login_audit.axes_username"  # an over-long name fits on PostgreSQL too

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
# Files Django's storages write (collectstatic into <data>/static) stay private
# too: Django's default would be 0644 whatever the umask.
FILE_UPLOAD_PERMISSIONS = 0o600
FILE_UPLOAD_DIRECTORY_PERMISSIONS = 0o700

# Content-Security-Policy (django-csp): scripts, styles, requests and forms from
# this origin only; no inline script or style anywhere (htmx is a static file and
# its indicator style is in app.css, see _base.html), no framing.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "font-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    },
}

# Hermes roots: parsed here, resolved (HERMES_HOME, ~/.hermes) at discovery time.
HERMES_ROOTS = [p for p in os.environ.get("HERMES_ROOTS", "").split(os.pathsep) if p.strip()]
# Busy timeout (seconds) for read-only store connections; docs/store.md §5.1 uses 5 s.
HERMES_READ_TIMEOUT = env_float("HERMES_ADMIN_READ_TIMEOUT", 5.0)
# A store looked at from another page (overview, lists, other profiles' pages) gets
# this busy timeout instead, and one found locked is shown busy there for
# HERMES_BUSY_MEMORY seconds without a new try (docs/store.md, Locks).
HERMES_BUSY_GLANCE = env_float("HERMES_ADMIN_BUSY_GLANCE", 0.25)
HERMES_BUSY_MEMORY = env_float("HERMES_ADMIN_BUSY_MEMORY", 5.0)
# Wall-clock budget (seconds) for one overview probe query before it is reported partial.
HERMES_QUERY_BUDGET = env_float("HERMES_ADMIN_QUERY_BUDGET", 3.0)
# The bounded LIKE scan of rows a store's full-text index misses (search across
# profiles): message ids and seconds one request may look at.
HERMES_SCAN_ROWS = int(env_float("HERMES_ADMIN_SCAN_ROWS", 200_000))
HERMES_SCAN_SECONDS = env_float("HERMES_ADMIN_SCAN_SECONDS", 3.0)

# Health thresholds (docs/architecture.md §4, issue 3): a session is idle after an hour
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
# (issue 13; docs/store.md §12.2). A sessions/<id>.jsonl line
# longer than HERMES_JSONL_MAX_LINE_BYTES is reported by number and never imported
# (nor read into memory); a file past HERMES_JSONL_MAX_FILE_BYTES is reported and
# not imported. JSON values (tool_calls, structured content, model_config,
# manifests...) past HERMES_JSON_MAX_BYTES or nested deeper than
# HERMES_JSON_MAX_DEPTH show as "undecodable" instead of being parsed.
HERMES_JSONL_MAX_LINE_BYTES = int(env_float("HERMES_ADMIN_JSONL_MAX_LINE_BYTES", 8 * 1024 * 1024))
HERMES_JSONL_MAX_FILE_BYTES = int(env_float("HERMES_ADMIN_JSONL_MAX_FILE_BYTES", 512 * 1024 * 1024))
HERMES_JSON_MAX_BYTES = int(env_float("HERMES_ADMIN_JSON_MAX_BYTES", 32 * 1024 * 1024))
HERMES_JSON_MAX_DEPTH = int(env_float("HERMES_ADMIN_JSON_MAX_DEPTH", 64))
# Prometheus scrapes (issue 18): /metrics answers only with this bearer token; unset,
# it answers 404. Counts, live sessions, trash and backups are re-read at most every
# HERMES_METRICS_PROBE_SECONDS per process (sizes and file status on every scrape).
HERMES_METRICS_TOKEN = os.environ.get("HERMES_ADMIN_METRICS_TOKEN", "").strip()
HERMES_METRICS_PROBE_SECONDS = env_float("HERMES_ADMIN_METRICS_PROBE_SECONDS", 60)
# Notifications (issue 18): webhooks (Slack/Mattermost {"text": ...} or the generic
# shape) and/or e-mail through the EMAIL_* settings below. Each attempt times out
# after HERMES_NOTIFY_TIMEOUT s, up to HERMES_NOTIFY_ATTEMPTS with a backoff starting
# at HERMES_NOTIFY_BACKOFF s; a run spends at most HERMES_NOTIFY_BUDGET s on them.
HERMES_NOTIFY_WEBHOOK_URLS = os.environ.get("HERMES_ADMIN_NOTIFY_WEBHOOK_URL", "").replace(",", " ").split()
HERMES_NOTIFY_WEBHOOK_FORMAT = os.environ.get("HERMES_ADMIN_NOTIFY_WEBHOOK_FORMAT", "slack").strip() or "slack"
HERMES_NOTIFY_EMAIL_TO = [a.strip() for a in os.environ.get("HERMES_ADMIN_NOTIFY_EMAIL_TO", "").split(",") if a.strip()]
HERMES_NOTIFY_TIMEOUT = env_float("HERMES_ADMIN_NOTIFY_TIMEOUT", 3)
HERMES_NOTIFY_ATTEMPTS = int(env_float("HERMES_ADMIN_NOTIFY_ATTEMPTS", 3))
HERMES_NOTIFY_BACKOFF = env_float("HERMES_ADMIN_NOTIFY_BACKOFF", 0.5)
HERMES_NOTIFY_BUDGET = env_float("HERMES_ADMIN_NOTIFY_BUDGET", 10)
# A run still running after this many seconds is reported stuck (by watch_stores).
HERMES_STUCK_SECONDS = env_float("HERMES_ADMIN_STUCK_SECONDS", 7200)
# Where the dashboard is reached from outside, for the links in notifications.
HERMES_ADMIN_BASE_URL = os.environ.get("HERMES_ADMIN_BASE_URL", "").strip().rstrip("/")
EMAIL_HOST = os.environ.get("HERMES_ADMIN_EMAIL_HOST", "localhost")
EMAIL_PORT = int(env_float("HERMES_ADMIN_EMAIL_PORT", 25))
EMAIL_HOST_USER = os.environ.get("HERMES_ADMIN_EMAIL_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("HERMES_ADMIN_EMAIL_PASSWORD", "")
EMAIL_USE_TLS = env_bool("HERMES_ADMIN_EMAIL_USE_TLS")
EMAIL_USE_SSL = env_bool("HERMES_ADMIN_EMAIL_USE_SSL")
EMAIL_TIMEOUT = HERMES_NOTIFY_TIMEOUT
DEFAULT_FROM_EMAIL = SERVER_EMAIL = os.environ.get("HERMES_ADMIN_EMAIL_FROM", "hermes-admin@localhost")
# manage.py watch_stores: light probes every interval; a full pass of a store that
# changed once it has been idle (no write) for the idle window.
HERMES_WATCH_INTERVAL_SECONDS = env_float("HERMES_ADMIN_WATCH_INTERVAL_SECONDS", 300)
HERMES_WATCH_IDLE_SECONDS = env_float("HERMES_ADMIN_WATCH_IDLE_SECONDS", 600)
# How browser-started heal jobs run: "process" (a detached manage.py run_job) or "thread".
HERMES_ADMIN_JOB_RUNNER = os.environ.get("HERMES_ADMIN_JOB_RUNNER", "process")

# Logging: standard error (gunicorn's error log, the journal, the terminal) and,
# unless HERMES_ADMIN_LOG_FILE is empty, a private file in the data folder. With
# DEBUG off Django itself logs nothing by default: server errors (the 500 page
# says "the error was logged") go to django.request, configured here.
LOG_FILE = os.environ.get("HERMES_ADMIN_LOG_FILE", str(DATA_DIR / "logs" / "hermes-admin.log")).strip()
_HANDLERS = ["console", "file"] if LOG_FILE else ["console"]
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain"},
        **({"file": {"class": "hermes_admin.logfile.PrivateFileHandler", "filename": LOG_FILE,
                     "formatter": "plain"}} if LOG_FILE else {}),
    },
    "loggers": {
        # (The root logger has no handler: propagating adds nothing but lets tests see records.)
        "sessions_app": {"handlers": _HANDLERS, "level": "INFO"},
        # 5xx with their tracebacks; 4xx stay out of the log (every 404 would be a line).
        # Not propagated: "django" below would write them a second time.
        "django.request": {"handlers": _HANDLERS, "level": "ERROR", "propagate": False},
        # Suspicious requests (bad Host header, CSRF failures), failed system checks.
        "django": {"handlers": _HANDLERS, "level": "WARNING"},
        "axes": {"handlers": _HANDLERS, "level": "ERROR"},  # failed logins: our own lines
        "django.server": {"handlers": ["console"], "level": "INFO", "propagate": False},  # runserver's request lines
    },
}


# --- Fleet mode (issue 17; docs/architecture.md §10) ----------------------
# Off unless a broker is configured: one host then runs exactly as without it.
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "").strip() or None
CELERY_RESULT_BACKEND = os.environ.get("CELERY_RESULT_BACKEND", "").strip() or CELERY_BROKER_URL
FLEET = CELERY_BROKER_URL is not None
HERMES_ADMIN_HOST = os.environ.get("HERMES_ADMIN_HOST", "").strip()
HERMES_FLEET_TIMEOUT = env_float("HERMES_ADMIN_FLEET_TIMEOUT", 5.0)
HERMES_FLEET_HEARTBEAT = env_float("HERMES_ADMIN_FLEET_HEARTBEAT", 15.0)
HERMES_FLEET_UNREACHABLE = env_float("HERMES_ADMIN_FLEET_UNREACHABLE", 60.0)
# Seconds a dashboard process reuses its read of the hosts' heartbeat rows.
HERMES_FLEET_HOSTS_TTL = env_float("HERMES_ADMIN_FLEET_HOSTS_TTL", 2.0)
# Bytes of one chunk of a remote export (one read task each).
HERMES_FLEET_EXPORT_CHUNK = int(env_float("HERMES_ADMIN_FLEET_EXPORT_CHUNK", 1024 * 1024))
# JSON only: a pickled payload from the broker would run code (Celery, Security).
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
# Writes are acknowledged after they ran, and handed out again when the worker
# died running them (their runs and guards make a second delivery harmless).
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
_REDELIVER = env_float("HERMES_ADMIN_FLEET_REDELIVER", 3600)
# Redis hands a task out again once it was unacknowledged for visibility_timeout
# seconds; workers look for such tasks every unacked_restore_interval seconds.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": _REDELIVER,
                                   "unacked_restore_interval": max(1, min(10, int(_REDELIVER // 2))),
                                   "unacked_restore_throttle": 1}
# Only reads store results (run_job ignores its own: the run row is the record), and
# the dashboard waits at most HERMES_FLEET_TIMEOUT for one, so a result is dead
# weight in Redis after that (export chunks are up to a MiB each).
CELERY_RESULT_EXPIRES = int(max(60, 4 * HERMES_FLEET_TIMEOUT))
CELERY_TASK_DEFAULT_QUEUE = "hermes.dashboard"  # never consumed: every task names its host's queue
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
