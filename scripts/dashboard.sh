#!/usr/bin/env bash
# Set up and run the dashboard (the README's first command).
# Creates .venv with Python 3.11, installs requirements.txt, migrates the dashboard's
# own database, makes sure a login exists, and serves on http://127.0.0.1:${PORT:-8000}/.
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
exec .venv/bin/python manage.py runserver --noreload "127.0.0.1:${PORT:-8000}"
