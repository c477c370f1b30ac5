#!/usr/bin/env bash
# Set up and run the whole test suite (the README's second command; .ci/run calls it).
# Creates .venv with Python 3.11, installs requirements-dev.txt, installs Debian's
# chromium for the browser tests when it is missing (never `playwright install`),
# then runs pytest. pytest's exit status 5 ("no tests ran") is turned into a failure.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3

if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt

if [ -z "${HERMES_ADMIN_CHROMIUM:-}" ] && ! command -v chromium >/dev/null 2>&1; then
  echo "Installing Debian's chromium for the browser tests..." >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi

# Tests get their own data folder; the developer's var/ is never touched.
if [ -n "${HERMES_ADMIN_TEST_DATA:-}" ]; then
  export HERMES_ADMIN_DATA="$HERMES_ADMIN_TEST_DATA"
else
  HERMES_ADMIN_DATA="$(mktemp -d)"
  export HERMES_ADMIN_DATA
  trap 'rm -rf "$HERMES_ADMIN_DATA"' EXIT
fi
unset HERMES_ROOTS HERMES_HOME

bash scripts/run-pytest.sh "$@"
