#!/usr/bin/env bash
# Set up and run the dashboard (the README's first command).
# Creates .venv with Python 3.11, installs requirements.txt, migrates the dashboard's
# own database, makes sure a login exists, and serves on http://127.0.0.1:${PORT:-8000}/
# with gunicorn (HERMES_ADMIN_RELOAD=1: reload on code changes, development only).
# Browses HERMES_ROOTS, else HERMES_HOME's root, else ~/.hermes; with none of them it
# builds a demo Hermes home (stores written by real hermes-agent releases) in the
# data folder and browses that.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements.txt

.venv/bin/python manage.py migrate --verbosity 0
if [ -z "${HERMES_ROOTS:-}" ] && [ -z "${HERMES_HOME:-}" ] && [ ! -d "$HOME/.hermes" ]; then
  HERMES_ROOTS="$(.venv/bin/python manage.py make_demo_home)"
  export HERMES_ROOTS
  echo "No ~/.hermes here: browsing the demo Hermes home at $HERMES_ROOTS" >&2
fi
.venv/bin/python manage.py ensure_admin
# Served by gunicorn (settings in gunicorn.conf.py), static files by WhiteNoise, as
# in production. HERMES_ADMIN_RELOAD=1 (development only) restarts the workers
# when the code, a template or a static file changes.
echo "Serving on http://127.0.0.1:${PORT:-8000}/" >&2
exec .venv/bin/gunicorn --config gunicorn.conf.py --bind "127.0.0.1:${PORT:-8000}"
