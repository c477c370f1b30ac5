#!/usr/bin/env bash
# Run pytest from the project's venv; pytest's exit status 5 ("no tests ran") becomes
# a failure, so a broken collection never passes silently. Used by test.sh and
# test-postgres.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pytest "$@"
status=$?
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: failing loudly (exit 5 is not a pass)." >&2
  exit 1
fi
exit "$status"
