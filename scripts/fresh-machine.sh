#!/usr/bin/env bash
# Checks that `make test` and `make run` (then the README's send and query
# commands) work the first time on a fresh Debian bookworm, in each state a
# machine can be in. Not part of `make test`: it takes a long while. As root:
#
#   sudo scripts/fresh-machine.sh [STATE...]
#
# States (default: all):
#   host     PostgreSQL and Redis answer on 127.0.0.1 (the host's, shared
#            network); no PostgreSQL package installed in the machine, and a
#            policy-rc.d as Debian's container images ship one
#   absent   nothing installed, nothing answers
#   stopped  packages installed, nothing started (the cluster exists, stopped)
#   systemd  packages installed and started by the package, as systemd does:
#            the cluster runs on 5432 with the package's password-only
#            pg_hba.conf, Redis runs on 6379 from /var/lib/redis
#   taken    packages installed and stopped, then something else takes 5432
#   otherport  something else held 5432 when the packages were installed:
#            the package's cluster is on 5433, stopped
#
# Each state gets a debootstrapped root (cached in $FRESH_DIR/base), the
# running Go toolchain copied in, and a clone of this repository's committed
# HEAD. All but `host` run in a network namespace with only loopback
# (unshare --net), so the host's services cannot answer; apt and the Go
# module proxy are reached through scripts/netproxy on a Unix socket, which
# refuses host-local addresses. Every state runs in its own mount and PID
# namespace: its mounts and processes end with it. The Go module download
# cache is shared by the states; the build cache is too (the first state
# builds cold) unless FRESH_COLD=1. FRESH_REF=commit checks that commit of
# the repository instead of HEAD (the check itself is this script's).
#
# Prints one line per state: pass/fail, the wall time, the time of a cold
# `make test` and the time from `make run` to the first row the README's
# psql query returns. Logs: $FRESH_DIR/logs/STATE/ (a failed state's root
# stays in $FRESH_DIR/STATE, logs in its log/).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
FRESH_DIR=${FRESH_DIR:-/var/tmp/postgrescopy-fresh}
MIRROR=${FRESH_MIRROR:-http://deb.debian.org/debian}
STATES=("$@")
[ ${#STATES[@]} -gt 0 ] || STATES=(host absent stopped systemd taken otherport)

[ "$(id -u)" = 0 ] || { echo "fresh-machine: run as root (debootstrap, chroot, unshare)" >&2; exit 1; }
GOROOT_HOST=$(go env GOROOT)
mkdir -p "$FRESH_DIR"

# ---- the base root, once -------------------------------------------------

if [ ! -e "$FRESH_DIR/base/.complete" ]; then
  command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  rm -rf "$FRESH_DIR/base.tmp"
  echo "fresh-machine: debootstrap bookworm into $FRESH_DIR/base"
  debootstrap --variant=minbase --include=git,make,ca-certificates,procps,iproute2 \
    bookworm "$FRESH_DIR/base.tmp" "$MIRROR" >"$FRESH_DIR/debootstrap.log" 2>&1 ||
    { tail -20 "$FRESH_DIR/debootstrap.log"; exit 1; }
  touch "$FRESH_DIR/base.tmp/.complete"
  rm -rf "$FRESH_DIR/base"
  mv "$FRESH_DIR/base.tmp" "$FRESH_DIR/base"
fi
CGO_ENABLED=0 go build -o "$FRESH_DIR/netproxy" "$REPO/scripts/netproxy"
mkdir -p "$FRESH_DIR/gomod" "$FRESH_DIR/gocache"

# ---- inside the machine --------------------------------------------------

# in_machine is the script a state runs in its chroot. $1 = state.
cat >"$FRESH_DIR/in-machine.sh" <<'INNER'
#!/bin/bash
set -uo pipefail
state=$1
export HOME=/root PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export LANG=C.UTF-8 CI=true
L=/log
fail() { echo "FAIL: $*" | tee -a $L/result; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}'; }

# The state's preparation: what the machine looked like before the user came.
prep() {
  local pkgs="postgresql postgresql-client redis-server pgbouncer"
  case $state in
  host) printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod 755 /usr/sbin/policy-rc.d ;;
  absent) ;;
  stopped|taken|otherport)
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod 755 /usr/sbin/policy-rc.d
    # Something that is not PostgreSQL holds 5432 (and keeps it): a netproxy
    # bridge, whose far end does not exist.
    other() { setsid netproxy bridge 127.0.0.1:5432 /nonexistent >/dev/null 2>&1 & }
    [ $state = otherport ] && other
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $pkgs >$L/prep.log 2>&1 || return 1
    rm -f /usr/sbin/policy-rc.d
    [ $state = taken ] && other
    sleep 0.5 ;;
  systemd)
    # The package's own start, as systemd would run it (no systemd in here).
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $pkgs >$L/prep.log 2>&1 || return 1
    pg_lsclusters -h | grep -q online || pg_ctlcluster --skip-systemctl-redirect 15 main start || return 1
    pgrep -x redis-server >/dev/null || runuser -u redis -- redis-server /etc/redis/redis.conf --daemonize yes || return 1 ;;
  esac
  pg_lsclusters 2>/dev/null >$L/prep-clusters.txt || true
}

cd /src/postgrescopy
prep || fail "$state: preparing the state: $(tail -3 $L/prep.log 2>/dev/null)"

# 1. make test, cold.
t=$(now)
make test >$L/make-test.log 2>&1; rc=$?
echo "make_test_seconds=$(since $t)" >>$L/result
[ $rc = 0 ] || fail "make test exited $rc: $(grep -E '^(--- FAIL|FAIL|make:|services:|deps:)' $L/make-test.log | head -5 | tr '\n' ' ')"
# Without -short a test that lacks a server or binary fails rather than
# skips (pgtest.Unavailable), so passing means none was skipped for that.
. .data/services.env

# 2. services twice: the second run changes nothing.
make services >$L/services-2.log 2>&1 || fail "second make services: $(tail -2 $L/services-2.log)"
if grep -E 'started|created|added|moves|reloaded|installing' $L/services-2.log; then
  fail "second make services changed something: $(tr '\n' ' ' <$L/services-2.log)"
fi

# 3. make run, the README's send and query.
query() {
  local p=
  [ "$PGPORT" = 5432 ] || p="-p $PGPORT"
  psql -h 127.0.0.1 $p -U postgres -c 'SELECT service_name, span_name, duration_ns FROM otel.spans ORDER BY start_time DESC LIMIT 10'
}
count() { # telemetrygen's spans since the run began
  psql -h 127.0.0.1 -p "$PGPORT" -U postgres -XAtc "SELECT count(*), count(DISTINCT span_id) FROM otel.spans WHERE service_name = 'telemetrygen' AND start_time >= to_timestamp($1)" 2>/dev/null
}
# accepted is the spans the running collector's OTLP receiver acknowledged
# (its own metrics on 127.0.0.1:8888): what must be stored. telemetrygen
# can lose its last export to its own shutdown (the gRPC call cancelled),
# which the collector never acknowledged, so telemetrygen's intent is not
# the expectation.
accepted() {
  local n
  exec 3<>/dev/tcp/127.0.0.1/8888 || return 1
  printf 'GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
  n=$(awk '/^otelcol_receiver_accepted_spans(_total)?\{/ && /receiver="otlp"/ {s += $NF} END {printf "%d", s}' <&3)
  exec 3>&-
  echo "$n"
}
start_run() {
  setsid make run >>$L/make-run.log 2>&1 &
  echo $! >/tmp/make-run.pid
}
stop_run() {
  local pid; pid=$(cat /tmp/make-run.pid)
  kill -"${1:-TERM}" -- -"$pid" 2>/dev/null
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
}
wait_port() { for _ in $(seq 1 "$2"); do bash -c ">/dev/tcp/127.0.0.1/$1" 2>/dev/null && return 0; sleep 0.5; done; return 1; }

send() { .bin/telemetrygen traces --otlp-insecure --otlp-endpoint 127.0.0.1:4317 --traces 100 --child-spans 3 --rate 100 >>$L/telemetrygen.log 2>&1; }

since0=$(date +%s)
t=$(now)
start_run
wait_port 4317 240 || fail "make run: nothing on 4317: $(tail -5 $L/make-run.log | tr '\n' ' ')"
grep -q -- '--traces 100 --child-spans 3 --rate 100' $L/make-run.log || fail "make run's banner lacks the README's telemetrygen command"
send || fail "telemetrygen: $(tail -3 $L/telemetrygen.log)"
first=
for _ in $(seq 1 120); do
  if query >$L/query.txt 2>&1 && grep -q telemetrygen $L/query.txt; then first=$(since $t); break; fi
  sleep 0.25
done
[ -n "$first" ] || fail "README query shows no row: $(tail -3 $L/query.txt)"
echo "run_to_first_row_seconds=$first" >>$L/result
acc1=$(accepted) || fail "the collector's metrics on 127.0.0.1:8888 do not answer"
[ "$acc1" -gt 0 ] || fail "the collector accepted no span of telemetrygen's 400"
[ "$acc1" = 400 ] || echo "note: telemetrygen sent $acc1 of its 400 spans" | tee -a $L/result
for _ in $(seq 1 60); do [ "$(count $since0)" = "$acc1|$acc1" ] && break; sleep 0.5; done
[ "$(count $since0)" = "$acc1|$acc1" ] || fail "expected the $acc1 spans accepted, distinct, got $(count $since0)"

# 4. Where Redis is the project's own: kill -9 it with acknowledged requests
# in it (a SHARE lock on otel.spans_rows holds their COPY back; reads go on), then
# make run again: every one arrives, exactly once.
if [ -f .data/redis/redis.pid ]; then
  psql -h 127.0.0.1 -p "$PGPORT" -U postgres -Xq -c "SET application_name = 'fresh-lock'" \
    -c 'BEGIN' -c 'LOCK TABLE otel.spans_rows IN SHARE MODE' -c 'SELECT pg_sleep(600)' >/dev/null 2>&1 &
  sleep 1
  send || fail "telemetrygen while PostgreSQL is locked: $(tail -3 $L/telemetrygen.log)"
  acc=$(accepted) || fail "the collector's metrics on 127.0.0.1:8888 do not answer"
  [ "$acc" -gt "$acc1" ] || fail "the collector accepted none of the second 400 spans"
  [ "$acc" = 800 ] || echo "note: telemetrygen sent $((acc - acc1)) of its second 400 spans" | tee -a $L/result
  kill -9 "$(cat .data/redis/redis.pid)"
  stop_run KILL
  # The second 400 were acknowledged but are in no table: only Redis's file has them.
  [ "$(count $since0)" = "$acc1|$acc1" ] || fail "PostgreSQL's lock did not hold the second batch back: $(count $since0)"
  psql -h 127.0.0.1 -p "$PGPORT" -U postgres -XAtqc "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'fresh-lock'" >/dev/null
  start_run
  # The dead collector's entries are claimed after claim_after (60s).
  for _ in $(seq 1 240); do [ "$(count $since0)" = "$acc|$acc" ] && break; sleep 0.5; done
  [ "$(count $since0)" = "$acc|$acc" ] || fail "after kill -9 of Redis: expected the $acc spans accepted, distinct, exactly once, got $(count $since0)"
  sleep 2
  [ "$(count $since0)" = "$acc|$acc" ] || fail "after kill -9 of Redis: $(count $since0) (duplicates?)"
  echo "redis_kill9=$acc of $acc accepted exactly once" >>$L/result
fi
stop_run TERM

# 5. make stop stops what make started and nothing else.
started_pg=; [ -f .data/postgres.started ] && started_pg=1
make stop >$L/stop.log 2>&1 || fail "make stop: $(tail -2 $L/stop.log)"
case $state in
host)
  psql -h 127.0.0.1 -U postgres -XAtqc 'SELECT 1' >/dev/null || fail "make stop stopped the host's PostgreSQL" ;;
systemd)
  [ -z "$started_pg" ] || fail "services.sh claims to have started the package's cluster"
  pg_lsclusters -h | grep -q online || fail "make stop stopped the package-started cluster" ;;
*)
  [ -n "$started_pg" ] || fail "services.sh did not record the cluster it started"
  pg_lsclusters -h | grep -q online && fail "make stop left the cluster it started running"
  [ -f .data/redis/redis.pid ] && fail "make stop left its Redis pid file"
  pgrep -f "redis-server 127.0.0.1:6379" >/dev/null && fail "make stop left its Redis running" ;;
esac
case $state in taken|otherport)
  pgrep -f 'netproxy bridge 127.0.0.1:5432' >/dev/null || fail "make stop stopped the other server on 5432" ;;
esac
echo PASS >>$L/result
INNER
chmod 755 "$FRESH_DIR/in-machine.sh"

# ---- the states, one after the other ---------------------------------------

# Each state runs in-machine.sh in its chroot, in fresh mount and PID
# namespaces (and a network one unless the state is host).
# Interrupted: SIGKILL to unshare ends the state's PID namespace (--kill-child),
# and with it every process and mount the state made.
ns_pid= proxy_pid=
trap 'kill -9 $ns_pid $proxy_pid 2>/dev/null; exit 130' INT TERM
printf '%-9s %-4s %8s %10s %14s  %s\n' state res wall make_test run_to_row note
overall=0
for state in "${STATES[@]}"; do
  t0=$(date +%s.%N)
  root=$FRESH_DIR/$state
  (
    set -e
    rm -rf "$root"
    cp -a "$FRESH_DIR/base" "$root"
  )
  mkdir -p "$root/usr/local" "$root/log" "$root/src" "$root/root/go/pkg/mod" "$root/root/.cache/go-build"
  cp -a "$GOROOT_HOST" "$root/usr/local/go"
  git clone -q "$REPO" "$root/src/postgrescopy"
  if [ -n "${FRESH_REF:-}" ]; then git -C "$root/src/postgrescopy" checkout -q "$FRESH_REF"; fi
  cp "$FRESH_DIR/netproxy" "$root/usr/local/bin/netproxy"
  cp "$FRESH_DIR/in-machine.sh" "$root/in-machine.sh"
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  # The host's own CAs (say, of an egress proxy) are the network's: trust them.
  if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
    chroot "$root" update-ca-certificates >/dev/null 2>&1
  fi
  printf '127.0.0.1 localhost\n::1 localhost ip6-localhost\n' >"$root/etc/hosts"
  if [ "${FRESH_COLD:-}" = 1 ]; then rm -rf "$FRESH_DIR/gocache"; mkdir -p "$FRESH_DIR/gocache"; fi

  net=() envs=()
  proxy_pid=
  if [ "$state" != host ]; then
    net=(--net)
    envs=(http_proxy=http://127.0.0.1:3128 https_proxy=http://127.0.0.1:3128
      HTTP_PROXY=http://127.0.0.1:3128 HTTPS_PROXY=http://127.0.0.1:3128
      NO_PROXY=127.0.0.1,localhost,::1 no_proxy=127.0.0.1,localhost,::1)
    # The proxy's serving side stays in the host's network namespace.
    mkdir -p "$root/var/lib/netproxy"
    "$FRESH_DIR/netproxy" serve "$root/var/lib/netproxy/sock" 2>"$root/log/netproxy.log" &
    proxy_pid=$!
  fi
  rc=0
  unshare --mount --pid --fork --kill-child "${net[@]}" -- \
    env ROOT="$root" FRESH_DIR="$FRESH_DIR" STATE="$state" BRIDGE="${net[*]}" bash -c '
      set -e
      mount --make-rprivate /
      mount -t proc proc "$ROOT/proc"
      mount --rbind /dev "$ROOT/dev"
      mount -t tmpfs -o mode=1777 shm "$ROOT/dev/shm"
      mount -t tmpfs tmpfs "$ROOT/run"
      mkdir -m 1777 "$ROOT/run/lock"
      mount -t tmpfs -o mode=1777 tmpfs "$ROOT/tmp"
      mount --bind "$FRESH_DIR/gomod" "$ROOT/root/go/pkg/mod"
      mount --bind "$FRESH_DIR/gocache" "$ROOT/root/.cache/go-build"
      if [ -n "$BRIDGE" ]; then
        ip link set lo up
        chroot "$ROOT" /usr/local/bin/netproxy bridge 127.0.0.1:3128 /var/lib/netproxy/sock 2>>"$ROOT/log/netproxy.log" &
      fi
      chroot "$ROOT" /usr/bin/env "$@" /bin/bash /in-machine.sh "$STATE"
    ' _ "${envs[@]}" >"$root/log/in-machine.log" 2>&1 &
  ns_pid=$!
  wait "$ns_pid" || rc=$?
  ns_pid=
  [ -n "$proxy_pid" ] && { kill "$proxy_pid" 2>/dev/null; wait "$proxy_pid" 2>/dev/null || true; proxy_pid=; }
  wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.0fs", b-a}')
  mt=$(sed -n 's/^make_test_seconds=//p' "$root/log/result" 2>/dev/null | head -1)
  fr=$(sed -n 's/^run_to_first_row_seconds=//p' "$root/log/result" 2>/dev/null | head -1)
  note=$(grep -E '^(FAIL|redis_kill9|note)' "$root/log/result" 2>/dev/null | tr '\n' ' ' || true)
  if [ $rc = 0 ] && grep -qx PASS "$root/log/result" 2>/dev/null; then res=pass; else res=fail; overall=1
    [ -n "$note" ] || note="exited $rc: $(tail -2 "$root/log/in-machine.log" | tr '\n' ' ')"; fi
  printf '%-9s %-4s %8s %10s %14s  %s\n' "$state" "$res" "$wall" "${mt:+${mt}s}" "${fr:+${fr}s}" "$note"
  # A passed state's root (~1.3 GB) goes; its logs stay. FRESH_KEEP=1 keeps it.
  if [ $res = pass ] && [ "${FRESH_KEEP:-}" != 1 ]; then
    rm -rf "$FRESH_DIR/logs/$state"; mkdir -p "$FRESH_DIR/logs"
    mv "$root/log" "$FRESH_DIR/logs/$state" && rm -rf "$root"
  fi
done
# Nothing is left mounted: every mount was made inside a state's own mount
# namespace, which ended with it.
exit $overall
