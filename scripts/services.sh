#!/usr/bin/env bash
# Makes sure PostgreSQL and Redis answer on the addresses the project uses,
# starting local ones (installing them with apt-get when missing and root)
# only when nothing answers. Idempotent; prints what it did.
set -euo pipefail

PGHOST=${PGHOST:-127.0.0.1}
PGPORT=${PGPORT:-5432}
REDIS_HOST=${REDIS_HOST:-127.0.0.1}
REDIS_PORT=${REDIS_PORT:-6379}

reachable() { timeout 2 bash -c ">/dev/tcp/$1/$2" 2>/dev/null; }

apt_install() {
  if [ "$(id -u)" != 0 ]; then
    echo "services: $* missing and not root: install it (apt-get install $*) and retry" >&2
    exit 1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

wait_for() {
  for _ in $(seq 1 60); do reachable "$1" "$2" && return 0; sleep 0.5; done
  echo "services: $3 did not come up on $1:$2" >&2
  exit 1
}

if reachable "$PGHOST" "$PGPORT"; then
  echo "services: PostgreSQL answers on $PGHOST:$PGPORT"
else
  command -v pg_ctlcluster >/dev/null || apt_install postgresql postgresql-contrib
  ver=$(ls /etc/postgresql | sort -n | tail -1)
  if ! pg_lsclusters -h | awk '{print $2}' | grep -qx main; then
    pg_createcluster "$ver" main >/dev/null
  fi
  # Trust auth on loopback, as the tests and config.yaml expect of a local server.
  hba=/etc/postgresql/$ver/main/pg_hba.conf
  if ! grep -q '^host all all 127.0.0.1/32 trust' "$hba"; then
    sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\nlocal all all trust' "$hba"
  fi
  pg_ctlcluster --skip-systemctl-redirect "$ver" main start
  wait_for "$PGHOST" "$PGPORT" PostgreSQL
  echo "services: started PostgreSQL $ver on $PGHOST:$PGPORT"
fi

if reachable "$REDIS_HOST" "$REDIS_PORT"; then
  echo "services: Redis answers on $REDIS_HOST:$REDIS_PORT"
else
  command -v redis-server >/dev/null || apt_install redis-server
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port "$REDIS_PORT" --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  wait_for "$REDIS_HOST" "$REDIS_PORT" Redis
  echo "services: started Redis on $REDIS_HOST:$REDIS_PORT"
fi
