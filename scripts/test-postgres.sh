#!/usr/bin/env bash
# Run the whole test suite once more with the dashboard's own database on a real
# PostgreSQL server (issue 6). Installs Debian's postgresql when missing, starts a
# throwaway cluster on a private port, runs pytest with DATABASE_URL set, stops it.
# Expects the venv made by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  echo "Installing Debian's postgresql..." >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql >/dev/null
fi
BIN="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)"
PGDATA="$(mktemp -d /tmp/hermes-admin-pg.XXXXXX)"
PORT="${HERMES_ADMIN_PG_PORT:-54329}"
RUN_AS=()
if [ "$(id -u)" -eq 0 ]; then  # PostgreSQL refuses to run as root
  chown postgres: "$PGDATA"
  RUN_AS=(runuser -u postgres --)
fi
"${RUN_AS[@]}" "$BIN/initdb" -D "$PGDATA" -A trust -U postgres >/dev/null
"${RUN_AS[@]}" "$BIN/pg_ctl" -D "$PGDATA" -o "-p $PORT -k $PGDATA -c listen_addresses=127.0.0.1" -l "$PGDATA/log" -w start >/dev/null
DATA="$(mktemp -d)"
trap '"${RUN_AS[@]}" "$BIN/pg_ctl" -D "$PGDATA" -m fast -w stop >/dev/null 2>&1 || true; rm -rf "$PGDATA" "$DATA"' EXIT
"$BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -q -c "CREATE ROLE hermes LOGIN CREATEDB" -c "CREATE DATABASE hermes_admin OWNER hermes"

export DATABASE_URL="postgres://hermes@127.0.0.1:$PORT/hermes_admin"
export HERMES_ADMIN_DATA="$DATA"
unset HERMES_ROOTS HERMES_HOME
bash scripts/run-pytest.sh "$@"
