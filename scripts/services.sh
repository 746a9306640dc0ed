#!/usr/bin/env bash
# Makes PostgreSQL and Redis answer for `make run` / `make test` and writes
# where they are to .data/services.env (POSTGRESCOPY_TEST_URL,
# POSTGRESCOPY_ENDPOINT, POSTGRESCOPY_TEST_REDIS, POSTGRESCOPY_REDIS, PGPORT),
# which the Makefile's recipes source. Idempotent: a second run finds what the
# first one started and changes nothing.
#
# PostgreSQL: a URL set in POSTGRESCOPY_TEST_URL / POSTGRESCOPY_ENDPOINT is
# only checked. Otherwise a server on 127.0.0.1:5432 that lets user postgres in
# without a password is used; failing that, the machine's Debian cluster
# (pg_lsclusters, created when there is none) on whatever port it has: its
# pg_hba.conf gets the loopback trust rule (and a reload), and it is started
# when stopped, on a port of its own when something else holds its port.
#
# Redis: POSTGRESCOPY_TEST_REDIS / POSTGRESCOPY_REDIS when set (checked only),
# else the one on 127.0.0.1:6379, else a Redis of the project's own with an
# append-only file under .data/redis (a restart loses nothing acknowledged),
# on 6379 or, when something else holds it, another port.
#
# `services.sh stop` stops what this script started (pid files in .data/) and
# nothing else.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DATA=${POSTGRESCOPY_DATA:-$ROOT/.data}
mkdir -p "$DATA"
ENV_FILE=$DATA/services.env
PG_STARTED=$DATA/postgres.started # "version cluster postmaster-pid" of a cluster this script started
REDIS_PID=$DATA/redis/redis.pid
REDIS_PORT_FILE=$DATA/redis/port
HBA_ADDED=$DATA/pg_hba.added # "version cluster hba-path" of a pg_hba.conf this script added the trust rule to
HBA_MARK='# postgrescopy (scripts/services.sh): loopback trust for make run / make test'

log() { echo "services: $*"; }
die() { echo "services: $*" >&2; exit 1; }

port_busy() { timeout 2 bash -c ">/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

free_port() { # the first port from $1 up that nothing listens on
  local p=$1
  while port_busy "$p"; do p=$((p + 1)); done
  echo "$p"
}

pg_url() { echo "postgres://postgres@127.0.0.1:$1/postgres?sslmode=disable"; }

pg_ok() { PGCONNECT_TIMEOUT=3 psql "$1" -XAtqc 'SELECT 1' >/dev/null 2>&1; }

# A Redis endpoint is host:port or a redis:// / rediss:// URL that may carry
# a user name, a password (percent-encoded) and a database. redis_args
# turns one into redis-cli's options, the password passed through
# REDISCLI_AUTH so that it is in no process's arguments; redacted names it
# without the password, for messages.
redis_args() { # $1 = endpoint; sets RARGS (array) and RAUTH
  local e=$1 rest userinfo hostport db
  RARGS=() RAUTH=
  case $e in
    redis://* | rediss://*)
      [ "${e%%://*}" = rediss ] && RARGS+=(--tls)
      rest=${e#*://}
      rest=${rest%%\?*}
      if [ "${rest#*@}" != "$rest" ]; then
        userinfo=${rest%@*}
        rest=${rest##*@}
        if [ "${userinfo#*:}" != "$userinfo" ]; then
          [ -n "${userinfo%%:*}" ] && RARGS+=(--user "$(urldecode "${userinfo%%:*}")")
          RAUTH=$(urldecode "${userinfo#*:}")
        else
          RAUTH=$(urldecode "$userinfo")
        fi
      fi
      hostport=${rest%%/*}
      db=${rest#"$hostport"}
      db=${db#/}
      [ -n "$db" ] && RARGS+=(-n "$db")
      ;;
    *) hostport=$e ;;
  esac
  case $hostport in *:*) ;; *) hostport=$hostport:6379 ;; esac
  RARGS+=(-h "${hostport%:*}" -p "${hostport##*:}")
}

urldecode() { local s=${1//+/ }; printf '%b' "${s//%/\\x}"; }

redacted() { # the endpoint without its password
  case $1 in
    redis://*@* | rediss://*@*)
      local scheme=${1%%://*} rest=${1#*://} userinfo
      userinfo=${rest%@*}
      case $userinfo in *:*) userinfo="${userinfo%%:*}:***" ;; *) userinfo="***" ;; esac
      echo "$scheme://$userinfo@${rest##*@}" ;;
    *) echo "$1" ;;
  esac
}

redis_ping() { # $1 = endpoint; prints the reply (PONG, or the error)
  local RARGS RAUTH
  redis_args "$1"
  local out
  if [ -n "$RAUTH" ]; then
    out=$(REDISCLI_AUTH=$RAUTH timeout 3 redis-cli --no-auth-warning "${RARGS[@]}" PING 2>&1) || true
  else
    out=$(timeout 3 redis-cli "${RARGS[@]}" PING 2>&1) || true
  fi
  printf '%s\n' "${out%%$'\n'*}"
}

redis_ok() { [ "$(redis_ping "$1")" = PONG ]; }

alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }

need() { command -v "$1" >/dev/null || die "$1 is missing: run scripts/deps.sh as root (make deps)"; }

# ---- stop -----------------------------------------------------------------

stop() {
  if [ -f "$REDIS_PID" ]; then
    pid=$(cat "$REDIS_PID")
    if alive "$pid" && grep -q redis-server "/proc/$pid/cmdline" 2>/dev/null; then
      kill "$pid" # SIGTERM: Redis flushes its append-only file and exits
      for _ in $(seq 1 100); do alive "$pid" || break; sleep 0.1; done
      alive "$pid" && die "Redis (pid $pid) did not stop within 10s"
      log "stopped Redis (pid $pid)"
    fi
    rm -f "$REDIS_PID"
  fi
  if [ -f "$PG_STARTED" ]; then
    read -r ver name pid <"$PG_STARTED"
    data=$(pg_lsclusters -h 2>/dev/null | awk -v v="$ver" -v c="$name" '$1==v && $2==c {print $6}')
    now=$(head -1 "$data/postmaster.pid" 2>/dev/null || true)
    if [ -n "$now" ] && [ "$now" = "$pid" ]; then
      pg_ctlcluster --skip-systemctl-redirect "$ver" "$name" stop
      log "stopped PostgreSQL $ver/$name (pid $pid)"
    else
      log "PostgreSQL $ver/$name is not the server this script started (pid $pid); left alone"
    fi
    rm -f "$PG_STARTED"
  fi
  if [ -f "$HBA_ADDED" ]; then
    read -r ver name hba <"$HBA_ADDED"
    if [ -f "$hba" ] && grep -qxF "$HBA_MARK" "$hba"; then
      # The mark and the two rules after it, as hba_trust wrote them.
      sed -i "/^$(printf '%s' "$HBA_MARK" | sed 's/[][\/.*^$]/\\&/g')\$/{N;N;d}" "$hba"
      pg_ctlcluster --skip-systemctl-redirect "$ver" "$name" reload 2>/dev/null || true
      log "removed the loopback trust rule this script added to $hba"
    fi
    rm -f "$HBA_ADDED"
  fi
  rm -f "$ENV_FILE"
}

if [ "${1:-}" = stop ]; then
  stop
  exit 0
fi

# ---- PostgreSQL -----------------------------------------------------------

need psql

# hba_trust adds the loopback trust rule to a cluster's pg_hba.conf when it is
# missing; it returns 0 when it changed the file.
hba_trust() { # $1 = hba file, $2 $3 = version and cluster
  local hba=$1
  grep -qE '^host[[:space:]]+all[[:space:]]+all[[:space:]]+127\.0\.0\.1/32[[:space:]]+trust' "$hba" && return 1
  sed -i "1i $HBA_MARK\\nhost all all 127.0.0.1/32 trust\\nhost all all ::1/128 trust" "$hba"
  echo "$2 $3 $hba" >"$HBA_ADDED" # make stop takes it back
  return 0
}

local_cluster() {
  need pg_lsclusters
  [ "$(id -u)" = 0 ] || die "no PostgreSQL lets user postgres in on 127.0.0.1:5432; run make as root to set up the local cluster, or set POSTGRESCOPY_TEST_URL"
  local line ver name port status data hba
  # The cluster this script started before, else the newest version's main, else any.
  line=
  if [ -f "$PG_STARTED" ]; then
    read -r ver name _ <"$PG_STARTED"
    line=$(pg_lsclusters -h | awk -v v="$ver" -v c="$name" '$1==v && $2==c')
  fi
  [ -n "$line" ] || line=$(pg_lsclusters -h | sort -k1,1n -k2,2 | awk '$2=="main"' | tail -1)
  [ -n "$line" ] || line=$(pg_lsclusters -h | sort -k1,1n | tail -1)
  if [ -z "$line" ]; then
    ver=$(ls /usr/lib/postgresql | sort -n | tail -1)
    [ -n "$ver" ] || die "no PostgreSQL server installed: run scripts/deps.sh as root (make deps)"
    pg_createcluster -p "$(free_port 5432)" "$ver" main >/dev/null
    log "created PostgreSQL cluster $ver/main"
    line=$(pg_lsclusters -h | awk -v v="$ver" '$1==v && $2=="main"')
  fi
  read -r ver name port status _ data _ <<<"$line"
  hba=$(pg_conftool -s "$ver" "$name" show hba_file 2>/dev/null || echo "/etc/postgresql/$ver/$name/pg_hba.conf")
  if [ "${status%%,*}" = online ]; then
    if hba_trust "$hba" "$ver" "$name"; then
      pg_ctlcluster --skip-systemctl-redirect "$ver" "$name" reload
      log "added the loopback trust rule to $hba and reloaded $ver/$name"
    fi
  else
    hba_trust "$hba" "$ver" "$name" && log "added the loopback trust rule to $hba"
    if port_busy "$port"; then
      local newport
      newport=$(free_port $((port + 1)))
      pg_conftool "$ver" "$name" set port "$newport"
      log "port $port is taken by another server: cluster $ver/$name moves to $newport"
      port=$newport
    fi
    pg_ctlcluster --skip-systemctl-redirect "$ver" "$name" start
    echo "$ver $name $(head -1 "$data/postmaster.pid")" >"$PG_STARTED"
    log "started PostgreSQL $ver/$name on 127.0.0.1:$port (make stop stops it)"
  fi
  PG_URL=$(pg_url "$port")
  for _ in $(seq 1 60); do pg_ok "$PG_URL" && break; sleep 0.5; done
  pg_ok "$PG_URL" || die "PostgreSQL $ver/$name on port $port does not let user postgres in: $(psql "$PG_URL" -XAtqc 'SELECT 1' 2>&1 | head -1)"
  log "PostgreSQL $ver/$name answers on 127.0.0.1:$port"
  PGPORT=$port
}

if [ -n "${POSTGRESCOPY_TEST_URL:-${POSTGRESCOPY_ENDPOINT:-}}" ]; then
  PG_URL=${POSTGRESCOPY_TEST_URL:-$POSTGRESCOPY_ENDPOINT}
  pg_ok "$PG_URL" || die "PostgreSQL at POSTGRESCOPY_TEST_URL / POSTGRESCOPY_ENDPOINT does not answer: $(psql "$PG_URL" -XAtqc 'SELECT 1' 2>&1 | head -1)"
  log "PostgreSQL answers at the configured URL"
  PGPORT=$(psql "$PG_URL" -XAtqc 'SHOW port')
elif [ ! -f "$PG_STARTED" ] && pg_ok "$(pg_url 5432)"; then
  PG_URL=$(pg_url 5432)
  PGPORT=5432
  log "PostgreSQL answers on 127.0.0.1:5432"
else
  local_cluster
fi

# ---- Redis ----------------------------------------------------------------

local_redis=
command -v redis-cli >/dev/null && local_redis=$(redis_ping 127.0.0.1:6379)
if [ -n "${POSTGRESCOPY_TEST_REDIS:-${POSTGRESCOPY_REDIS:-}}" ]; then
  REDIS_ADDR=${POSTGRESCOPY_TEST_REDIS:-$POSTGRESCOPY_REDIS}
  need redis-cli
  reply=$(redis_ping "$REDIS_ADDR")
  case $reply in
    PONG) ;;
    NOAUTH* | *"WRONGPASS"* | *"invalid password"* | *"invalid username-password"*)
      die "Redis at $(redacted "$REDIS_ADDR") refuses these credentials ($reply): give its password as redis://:PASSWORD@host:port (or redis://USER:PASSWORD@host:port), percent-encoding reserved characters" ;;
    *) die "Redis at POSTGRESCOPY_TEST_REDIS / POSTGRESCOPY_REDIS ($(redacted "$REDIS_ADDR")) does not answer PING: ${reply:-no reply}" ;;
  esac
  log "Redis answers at $(redacted "$REDIS_ADDR")"
elif [ -f "$REDIS_PID" ] && alive "$(cat "$REDIS_PID")" && redis_ok "127.0.0.1:$(cat "$REDIS_PORT_FILE")"; then
  REDIS_ADDR=127.0.0.1:$(cat "$REDIS_PORT_FILE")
  log "Redis (this project's, pid $(cat "$REDIS_PID")) answers on $REDIS_ADDR"
elif [ "$local_redis" = PONG ]; then
  REDIS_ADDR=127.0.0.1:6379
  log "Redis answers on $REDIS_ADDR"
else
  case $local_redis in
    NOAUTH*)
      log "the Redis on 127.0.0.1:6379 requires a password (NOAUTH): to use it, set POSTGRESCOPY_REDIS=redis://:PASSWORD@127.0.0.1:6379 (and POSTGRESCOPY_TEST_REDIS for make test); starting one of this project's instead" ;;
    "" | *"Connection refused"*) ;;
    *) log "the Redis on 127.0.0.1:6379 answers PING with: $local_redis; starting one of this project's instead" ;;
  esac
  need redis-server
  need redis-cli
  port=$(free_port 6379)
  mkdir -p "$DATA/redis"
  # appendfsync everysec: a write reaches the file before its reply unless a
  # slow fsync holds it back (up to 2 s), so a killed Redis loses at most
  # what was held back, and a power cut about a second.
  redis-server --daemonize yes --bind 127.0.0.1 --port "$port" --dir "$DATA/redis" \
    --appendonly yes --appendfsync everysec --save "" \
    --pidfile "$REDIS_PID" --logfile "$DATA/redis/redis.log"
  echo "$port" >"$REDIS_PORT_FILE"
  REDIS_ADDR=127.0.0.1:$port
  for _ in $(seq 1 60); do redis_ok "$REDIS_ADDR" && break; sleep 0.2; done
  redis_ok "$REDIS_ADDR" || die "Redis did not come up on $REDIS_ADDR: $(tail -3 "$DATA/redis/redis.log")"
  log "started Redis on $REDIS_ADDR, data in $DATA/redis (make stop stops it)"
fi

cat >"$ENV_FILE.tmp" <<EOF
POSTGRESCOPY_TEST_URL='$PG_URL'
POSTGRESCOPY_ENDPOINT='$PG_URL'
POSTGRESCOPY_TEST_REDIS='$REDIS_ADDR'
POSTGRESCOPY_REDIS='$REDIS_ADDR'
PGPORT='$PGPORT'
EOF
chmod 600 "$ENV_FILE.tmp" # a URL of the user's may hold a password
mv "$ENV_FILE.tmp" "$ENV_FILE"
