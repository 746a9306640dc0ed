#!/usr/bin/env bash
# A local Citus cluster of the project's own for `make test`: a coordinator and
# two workers, each a throwaway PostgreSQL (initdb, pg_ctl) on a free loopback
# port with its data under .data/citus/. The machine's own PostgreSQL is never
# touched.
#
#   scripts/citus.sh start   starts it (or finds it running) and writes
#                            .data/citus.env: POSTGRESCOPY_CITUS_URL, the
#                            coordinator's URL, which the Citus tests use.
#                            Without the citus extension in a PostgreSQL here
#                            it starts nothing and writes
#                            POSTGRESCOPY_CITUS_SKIP, the reason the Citus
#                            tests then give for skipping.
#                            A POSTGRESCOPY_CITUS_URL already set is only
#                            checked and passed on.
#   scripts/citus.sh stop    stops the nodes this script started and removes
#                            their data.
#
# As root, initdb and postgres run as the postgres OS user (they refuse root).
# Settings are for tests: fsync off, small shared_buffers, 8 shards per table.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DATA=${POSTGRESCOPY_DATA:-$ROOT/.data}
ENV_FILE=$DATA/citus.env
DIR_FILE=$DATA/citus.dir # where the nodes' data is (see node_root)
NODES="coordinator worker1 worker2"

log() { echo "citus: $*"; }
die() { echo "citus: $*" >&2; exit 1; }

port_busy() { timeout 2 bash -c ">/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

# The PostgreSQL whose lib and extension directories hold Citus: the newest.
pg_with_citus() {
  local v
  for v in $(ls /usr/lib/postgresql 2>/dev/null | sort -rn); do
    if [ -f "/usr/lib/postgresql/$v/lib/citus.so" ] && [ -f "/usr/share/postgresql/$v/extension/citus.control" ] &&
      [ -x "/usr/lib/postgresql/$v/bin/initdb" ]; then
      echo "/usr/lib/postgresql/$v/bin"
      return 0
    fi
  done
  return 1
}

as_owner() { # runs a command as the nodes' owner: postgres when we are root
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

url() { echo "postgres://postgres@127.0.0.1:$1/postgres?sslmode=disable"; }

sql() { # $1 = port, $2 = statement
  PGCONNECT_TIMEOUT=5 psql "$(url "$1")" -XAtq -v ON_ERROR_STOP=1 -c "$2"
}

stop() {
  local root node pid
  root=$(cat "$DIR_FILE" 2>/dev/null || true)
  if [ -n "$root" ] && [ -d "$root" ]; then
    for node in $NODES; do
      [ -f "$root/$node/postmaster.pid" ] || continue
      pid=$(head -1 "$root/$node/postmaster.pid")
      as_owner "$(cat "$root/bin")/pg_ctl" -D "$root/$node" -m immediate -w stop >/dev/null 2>&1 ||
        { kill -0 "$pid" 2>/dev/null && die "could not stop the $node (pid $pid, $root/$node)"; }
      log "stopped the $node (pid $pid)"
    done
    rm -rf "$root"
  fi
  rm -f "$ENV_FILE" "$DIR_FILE"
}

# node_root is the directory for the nodes' data: .data/citus, or a fresh
# directory under /tmp when the postgres user cannot reach .data (a clone
# under /root, say).
node_root() {
  mkdir -p "$DATA/citus"
  if [ "$(id -u)" = 0 ]; then
    chown postgres: "$DATA/citus"
    if ! runuser -u postgres -- test -w "$DATA/citus"; then
      rmdir "$DATA/citus"
      local tmp
      tmp=$(mktemp -d /tmp/postgrescopy-citus.XXXXXX)
      chown postgres: "$tmp"
      echo "$tmp"
      return
    fi
  fi
  echo "$DATA/citus"
}

start_node() { # $1 = name; prints the port it settled on
  local node=$1 dir port tries
  dir=$ROOT_DIR/$node
  as_owner "$BIN/initdb" -D "$dir" -U postgres -A trust -E UTF8 --locale=C.UTF-8 --no-sync >"$ROOT_DIR/$node.initdb.log" 2>&1 ||
    die "initdb of the $node failed: $(tail -3 "$ROOT_DIR/$node.initdb.log")"
  cat >>"$dir/postgresql.conf" <<EOF
# scripts/citus.sh: a test node
shared_preload_libraries = 'citus'
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir'
max_connections = 300
shared_buffers = 32MB
fsync = off
synchronous_commit = off
full_page_writes = off
# 8 shards per table, not Citus's 32: distributing a schema's tables takes a
# quarter of the DDL, and the tests hold no more than a few thousand rows
citus.shard_count = 8
EOF
  for tries in 1 2 3 4 5; do
    port=$((20000 + RANDOM % 20000))
    port_busy "$port" && continue
    # in the file, so that pg_ctl start alone restarts it on its port
    echo "port = $port" >>"$dir/postgresql.conf"
    if as_owner "$BIN/pg_ctl" -D "$dir" -l "$ROOT_DIR/$node.log" -w -t 60 start >/dev/null 2>&1; then
      sql "$port" 'CREATE EXTENSION citus' >/dev/null
      echo "$port"
      return 0
    fi
    # another process took the port between the check and the bind
    grep -q "could not bind\|could not create listen socket" "$ROOT_DIR/$node.log" 2>/dev/null ||
      die "the $node did not start: $(tail -3 "$ROOT_DIR/$node.log")"
  done
  die "the $node found no free port in $tries tries"
}

running() { # the cluster in $DIR_FILE answers with every node
  local root port
  root=$(cat "$DIR_FILE" 2>/dev/null) || return 1
  [ -f "$ENV_FILE" ] || return 1
  for port in $(cat "$root/ports" 2>/dev/null); do
    sql "$port" 'SELECT 1' >/dev/null 2>&1 || return 1
  done
  [ -n "$(cat "$root/ports" 2>/dev/null)" ]
}

case "${1:-}" in
stop)
  stop
  exit 0
  ;;
start) ;;
*) die "usage: scripts/citus.sh start|stop" ;;
esac

mkdir -p "$DATA"
if [ -n "${POSTGRESCOPY_CITUS_URL:-}" ]; then
  # a coordinator of the user's: only checked
  PGCONNECT_TIMEOUT=5 psql "$POSTGRESCOPY_CITUS_URL" -XAtqc "SELECT citus_version()" >/dev/null ||
    die "the Citus coordinator at POSTGRESCOPY_CITUS_URL does not answer, or has no citus extension"
  printf "POSTGRESCOPY_CITUS_URL='%s'\n" "$POSTGRESCOPY_CITUS_URL" >"$ENV_FILE"
  chmod 600 "$ENV_FILE" # a URL of the user's may hold a password
  log "using the coordinator at POSTGRESCOPY_CITUS_URL"
  exit 0
fi
if ! BIN=$(pg_with_citus); then
  reason="the citus extension is not installed in any PostgreSQL here (no /usr/lib/postgresql/*/lib/citus.so): no Citus cluster, the Citus tests skip (docs/citus.md says how to install it; or set POSTGRESCOPY_CITUS_URL to a coordinator)"
  printf "POSTGRESCOPY_CITUS_SKIP='%s'\n" "$reason" >"$ENV_FILE"
  log "$reason"
  exit 0
fi
if running; then
  log "the cluster is running: $(cat "$ENV_FILE")"
  exit 0
fi
stop # what is left of an earlier cluster
command -v psql >/dev/null || die "psql is missing: run scripts/deps.sh as root (make deps)"

begin=$SECONDS
ROOT_DIR=$(node_root)
echo "$ROOT_DIR" >"$DIR_FILE"
echo "$BIN" >"$ROOT_DIR/bin"
# The three nodes are made, started and given the extension side by side.
pids=()
for node in $NODES; do
  start_node "$node" >"$ROOT_DIR/$node.port" &
  pids+=($!)
done
failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
ports=()
for node in $NODES; do ports+=("$(cat "$ROOT_DIR/$node.port")"); done
echo "${ports[*]}" >"$ROOT_DIR/ports"
[ "$failed" = 0 ] || die "a node did not start (logs in $ROOT_DIR); scripts/citus.sh stop removes what did"
sql "${ports[0]}" "SELECT citus_set_coordinator_host('127.0.0.1', ${ports[0]})" >/dev/null
for port in "${ports[@]:1}"; do sql "${ports[0]}" "SELECT citus_add_node('127.0.0.1', $port)" >/dev/null; done
workers=$(sql "${ports[0]}" 'SELECT count(*) FROM citus_get_active_worker_nodes()')
[ "$workers" = 2 ] || die "the coordinator sees $workers active workers, not 2"
printf "POSTGRESCOPY_CITUS_URL='%s'\n" "$(url "${ports[0]}")" >"$ENV_FILE"
log "$(sql "${ports[0]}" "SELECT (regexp_match(citus_version(), '^Citus \S+'))[1]") coordinator on 127.0.0.1:${ports[0]}, workers on ${ports[1]} and ${ports[2]}, data in $ROOT_DIR (started in $((SECONDS - begin))s; scripts/citus.sh stop stops it)"
