#!/usr/bin/env bash
# Set up and run the dashboard (the README's first command).
# Creates .venv with Python 3.11, installs requirements.txt, migrates the dashboard's
# own database, makes sure a login exists, and serves on http://127.0.0.1:${PORT:-8000}/
# with gunicorn (HERMES_ADMIN_RELOAD=1: reload on code changes, development only).
# Browses HERMES_ROOTS, else HERMES_HOME's root, else ~/.hermes; with none of them it
# builds a demo Hermes home (stores written by real hermes-agent releases, with
# damage to find and repair) in the data folder and browses that, with a live demo
# agent (scripts/demo_agent.py) running beside the server.
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
  HERMES_ROOTS="$(.venv/bin/python manage.py make_demo_home --no-check)"
  export HERMES_ROOTS
  echo "No ~/.hermes here: browsing the demo Hermes home at $HERMES_ROOTS" >&2
  # A Hermes process holding one demo session's compression lock (that session is
  # live). The trap stops it if this script fails before serving; once `exec`
  # below has replaced this shell, it exits by itself with the server (its parent).
  DEMO_AGENT_OUT="$(mktemp)"
  .venv/bin/python scripts/demo_agent.py "$HERMES_ROOTS" >"$DEMO_AGENT_OUT" &
  DEMO_AGENT=$!
  trap 'kill "$DEMO_AGENT" 2>/dev/null || true' EXIT
  # Taking the lock is a write: check the demo once it is held, so the first pages
  # do not say "store changed after this check" about the agent's own start.
  for _ in $(seq 150); do
    grep -q '^READY' "$DEMO_AGENT_OUT" && break
    kill -0 "$DEMO_AGENT" 2>/dev/null || break
    sleep 0.2
  done
  cat "$DEMO_AGENT_OUT" >&2
  rm -f "$DEMO_AGENT_OUT"
  .venv/bin/python manage.py heal_sessions --root "$HERMES_ROOTS" --all-profiles --json >/dev/null 2>&1 || true
fi
.venv/bin/python manage.py ensure_admin
# Served by gunicorn (settings in gunicorn.conf.py), static files by WhiteNoise, as
# in production. HERMES_ADMIN_RELOAD=1 (development only) restarts the workers
# when the code, a template or a static file changes.
echo "Serving on http://127.0.0.1:${PORT:-8000}/" >&2
exec .venv/bin/gunicorn --config gunicorn.conf.py --bind "127.0.0.1:${PORT:-8000}"
