#!/usr/bin/env bash
# The fleet suite (issue 17): Debian's redis-server and PostgreSQL, installed when
# missing and started privately (loopback, temp folders, a password on Redis),
# then tests/fleet, which starts real Celery workers with different roots.
# Expects the venv made by scripts/test.sh. A missing service fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "Installing Debian's ${missing[*]}..." >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

WORK="$(mktemp -d /tmp/hermes-admin-fleet.XXXXXX)"
chmod 755 "$WORK"
PGDATA="$WORK/pg"
mkdir "$PGDATA"
BIN="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)"
PG_PORT="${HERMES_ADMIN_FLEET_PG_PORT:-54339}"
REDIS_PORT="${HERMES_ADMIN_FLEET_REDIS_PORT:-63791}"
REDIS_PASSWORD="$(head -c 18 /dev/urandom | base64 | tr -d '/+=')"
RUN_AS=()
if [ "$(id -u)" -eq 0 ]; then  # PostgreSQL refuses to run as root
  chown postgres: "$PGDATA"
  RUN_AS=(runuser -u postgres --)
fi
cleanup() {
  redis-cli -p "$REDIS_PORT" -a "$REDIS_PASSWORD" --no-auth-warning shutdown nosave >/dev/null 2>&1 || true
  "${RUN_AS[@]}" "$BIN/pg_ctl" -D "$PGDATA" -m fast -w stop >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

"${RUN_AS[@]}" "$BIN/initdb" -D "$PGDATA" -A trust -U postgres >/dev/null
"${RUN_AS[@]}" "$BIN/pg_ctl" -D "$PGDATA" -o "-p $PG_PORT -k $PGDATA -c listen_addresses=127.0.0.1" -l "$PGDATA/log" -w start >/dev/null
"$BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -q -c "CREATE ROLE hermes LOGIN CREATEDB" -c "CREATE DATABASE hermes_admin OWNER hermes"

mkdir "$WORK/redis"
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --protected-mode yes --dir "$WORK/redis" \
  --save '' --appendonly no --requirepass "$REDIS_PASSWORD" --daemonize yes --logfile "$WORK/redis/log"
for _ in $(seq 50); do
  redis-cli -p "$REDIS_PORT" -a "$REDIS_PASSWORD" --no-auth-warning ping 2>/dev/null | grep -q PONG && break
  sleep 0.1
done

export DATABASE_URL="postgres://hermes@127.0.0.1:$PG_PORT/hermes_admin"
export CELERY_BROKER_URL="redis://:$REDIS_PASSWORD@127.0.0.1:$REDIS_PORT/0"
export HERMES_ADMIN_FLEET_TESTS=1
export HERMES_ADMIN_FLEET_UNREACHABLE=4   # the tests' workers beat every second
export HERMES_ADMIN_FLEET_REDELIVER=5     # a killed worker's task comes back after 5 s
export HERMES_ADMIN_FLEET_TIMEOUT=10
export HERMES_ADMIN_DATA="$WORK/data"
export HERMES_ADMIN_LOG_FILE=""
mkdir -m 700 "$HERMES_ADMIN_DATA"
unset HERMES_ROOTS HERMES_HOME HERMES_ADMIN_HOST
bash scripts/run-pytest.sh tests/fleet -p no:cacheprovider "$@"
