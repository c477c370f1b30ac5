"""gunicorn settings for hermes-admin, read from the project folder.

``scripts/dashboard.sh`` serves with it, and so does ``.venv/bin/gunicorn`` run in
the project folder (gunicorn loads ``./gunicorn.conf.py`` by itself). Static files
are served by WhiteNoise inside the application, as in production.

Environment (all optional):

- ``HERMES_ADMIN_BIND``: address to listen on (default ``127.0.0.1:8000``;
  ``scripts/dashboard.sh`` passes ``127.0.0.1:$PORT``);
- ``HERMES_ADMIN_WORKERS``: worker processes (default 3; sync workers, so a page
  waiting on a busy store holds one worker only);
- ``HERMES_ADMIN_TIMEOUT``: seconds a request may take before its worker is
  restarted (default 120: streamed exports of long sessions take a while; heals
  never run inside a request);
- ``HERMES_ADMIN_RELOAD=1``: development only. Workers restart when a Python file,
  template or static file of the project changes (gunicorn ``reload``).
"""

import gc
import os
from pathlib import Path

from hermes_admin.private import apply_umask

# Files gunicorn itself writes (logs, if pointed into the data folder) are private
# too; the application sets the same umask again when it loads its settings.
apply_umask()

wsgi_app = "hermes_admin.wsgi:application"
bind = [os.environ.get("HERMES_ADMIN_BIND", "127.0.0.1:8000")]
workers = int(os.environ.get("HERMES_ADMIN_WORKERS", "3"))
timeout = int(os.environ.get("HERMES_ADMIN_TIMEOUT", "120"))
graceful_timeout = 30
# gunicorn 25.1+ opens a control socket for ``gunicornc`` by default, at
# $XDG_RUNTIME_DIR/gunicorn.ctl or ~/.gunicorn/gunicorn.ctl: one path for every
# instance of the user (a second dashboard, a test server) and left behind after a
# crash. Nothing here uses gunicornc (restarts go through systemd or a signal), so
# it is off (gunicorn's ``control_socket_disable``, ``--no-control-socket``).
control_socket_disable = True
accesslog = "-"  # one line per request on stdout, as the development server printed
errorlog = "-"


def post_worker_init(worker):
    """Once the worker has loaded the application: import the URL conf (every view
    module) now rather than on the first request, collect what setting up left
    behind, then move everything still alive out of the cyclic garbage collector's
    reach (``gc.freeze``). Those are modules, classes, functions and settings that
    live as long as the process; every full collection walked them again, ~40 ms of
    a new worker's first page (docs/architecture.md §11). A URL conf that fails to
    import is left to fail on each request as it did (its traceback in the log),
    not to stop the worker booting: a development server with reload keeps running."""
    from django.urls import get_resolver

    try:
        get_resolver().url_patterns  # noqa: B018 (imports the URL conf and its views)
    except Exception:
        worker.log.exception("the URL conf failed to import; requests will show the error")
        return
    gc.collect()
    gc.freeze()


reload = os.environ.get("HERMES_ADMIN_RELOAD", "").strip().lower() in {"1", "true", "yes", "on"}
if reload:
    _project = Path(__file__).resolve().parent
    # Python files are watched anyway; templates and static files are not.
    reload_extra_files = sorted(str(p) for folder in ("templates", "static") for p in (_project / folder).rglob("*")
                                if p.is_file())
