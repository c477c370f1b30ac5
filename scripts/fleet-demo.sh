#!/usr/bin/env bash
# A two-host fleet on one machine (issue 17): Redis (password, loopback) and
# PostgreSQL in a private folder, two Celery workers (host-alpha, host-beta) each on
# its own demo Hermes home, and the dashboard on http://127.0.0.1:${PORT:-8000}/.
# Ctrl-C stops everything; FLEET_DEMO_DIR (default var/fleet-demo) keeps the homes.
# Installs Debian's redis-server and postgresql when missing (as scripts/test-fleet.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements.txt

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
if [ "${#missing[@]}" -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

umask 077  # worker logs and data folders private, as the dashboard's data-folder check wants
DEMO="$(realpath -m "${FLEET_DEMO_DIR:-var/fleet-demo}")"
mkdir -p "$DEMO"
chmod 755 "$DEMO"
RUN="$(mktemp -d /tmp/hermes-admin-fleet-demo.XXXXXX)"
chmod 755 "$RUN"
BIN="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)"
PG_PORT="${FLEET_DEMO_PG_PORT:-54349}"
REDIS_PORT="${FLEET_DEMO_REDIS_PORT:-63793}"
REDIS_PASSWORD="$(head -c 18 /dev/urandom | base64 | tr -d '/+=')"
RUN_AS=()
mkdir "$RUN/pg" "$RUN/redis"
if [ "$(id -u)" -eq 0 ]; then
  chown postgres: "$RUN/pg"
  RUN_AS=(runuser -u postgres --)
fi
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
  redis-cli -p "$REDIS_PORT" -a "$REDIS_PASSWORD" --no-auth-warning shutdown nosave >/dev/null 2>&1 || true
  "${RUN_AS[@]}" "$BIN/pg_ctl" -D "$RUN/pg" -m fast -w stop >/dev/null 2>&1 || true
  rm -rf "$RUN"
}
trap cleanup EXIT

"${RUN_AS[@]}" "$BIN/initdb" -D "$RUN/pg" -A trust -U postgres >/dev/null
"${RUN_AS[@]}" "$BIN/pg_ctl" -D "$RUN/pg" -o "-p $PG_PORT -k $RUN/pg -c listen_addresses=127.0.0.1" -l "$RUN/pg/log" -w start >/dev/null
"$BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -q -c "CREATE ROLE hermes LOGIN CREATEDB" -c "CREATE DATABASE hermes_admin OWNER hermes"
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --protected-mode yes --dir "$RUN/redis" \
  --save '' --appendonly no --requirepass "$REDIS_PASSWORD" --daemonize yes --logfile "$RUN/redis/log"

export DATABASE_URL="postgres://hermes@127.0.0.1:$PG_PORT/hermes_admin"
export CELERY_BROKER_URL="redis://:$REDIS_PASSWORD@127.0.0.1:$REDIS_PORT/0"
export HERMES_ADMIN_DATA="$DEMO/dashboard"
unset HERMES_ROOTS HERMES_HOME HERMES_ADMIN_HOST
mkdir -p -m 700 "$HERMES_ADMIN_DATA"
.venv/bin/python manage.py migrate --verbosity 0

for host in alpha beta; do
  data="$DEMO/worker-$host"
  mkdir -p -m 700 "$data"
  # Built under the worker's host name: its first check run is keyed "<profile> on host-<name>".
  existed=0; [ -d "$DEMO/home-$host" ] && existed=1
  home="$(HERMES_ADMIN_DATA="$data" HERMES_ADMIN_HOST="host-$host" .venv/bin/python manage.py make_demo_home --dest "$DEMO/home-$host")"
  if [ "$existed" = 1 ]; then  # a kept home, a new database: check it again (read-only) for the overview
    HERMES_ADMIN_DATA="$data" HERMES_ADMIN_HOST="host-$host" .venv/bin/python manage.py heal_sessions \
      --root "$home" --all-profiles --json >/dev/null 2>&1 || true  # exit 1/2: the demo's findings
  fi
  echo "host-$host: demo home $home, worker log $data/worker.log" >&2
  HERMES_ADMIN_DATA="$data" HERMES_ROOTS="$home" HERMES_ADMIN_HOST="host-$host" setsid \
    .venv/bin/celery -A hermes_admin worker -Q "hermes.host-$host" -P threads -c 4 -n "host-$host@%h" \
    --without-gossip --without-mingle -l info >"$data/worker.log" 2>&1 &
  PIDS+=($!)
done

.venv/bin/python manage.py ensure_admin
echo "Fleet demo: two hosts (host-alpha, host-beta) on http://127.0.0.1:${PORT:-8000}/ (Ctrl-C stops it)" >&2
setsid .venv/bin/gunicorn --config gunicorn.conf.py --bind "127.0.0.1:${PORT:-8000}" &
PIDS+=($!)
wait "${PIDS[-1]}"
