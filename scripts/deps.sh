#!/usr/bin/env bash
# Installs what the project needs on a Debian machine and is missing: the
# PostgreSQL server binaries (initdb, pg_ctl, pg_basebackup, pg_ctlcluster),
# the client psql, Redis and PgBouncer. One apt-get run, serialized by a lock
# so that concurrent `make` runs never race for dpkg's lock. As root only;
# otherwise it names the packages to install and stops. Installing starts no
# machine-wide daemon (a policy-rc.d refuses it): scripts/services.sh starts
# what the project uses. Prints nothing when everything is present.
set -euo pipefail

have_pg_server() {
  if [ -n "${POSTGRESCOPY_PG_BIN:-}" ]; then
    [ -x "$POSTGRESCOPY_PG_BIN/pg_ctl" ] && return 0
  fi
  local d
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/pg_ctl" ] && [ -x "$d/initdb" ] && [ -x "$d/pg_basebackup" ] && return 0
  done
  return 1
}

missing() {
  local pkgs=()
  { have_pg_server && command -v pg_ctlcluster >/dev/null; } || pkgs+=(postgresql)
  command -v psql >/dev/null || pkgs+=(postgresql-client)
  command -v redis-server >/dev/null && command -v redis-cli >/dev/null || pkgs+=(redis-server)
  command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ] || pkgs+=(pgbouncer)
  echo "${pkgs[@]}"
}

read -r -a pkgs <<<"$(missing)"
[ ${#pkgs[@]} -eq 0 ] && exit 0

if [ "$(id -u)" != 0 ]; then
  echo "deps: missing ${pkgs[*]}: install them as root and retry:" >&2
  echo "  sudo apt-get install -y ${pkgs[*]}" >&2
  exit 1
fi
command -v apt-get >/dev/null || { echo "deps: missing ${pkgs[*]} and apt-get is not available" >&2; exit 1; }

lock=/var/lock/postgrescopy-deps.lock
[ -d /var/lock/ ] || lock=/tmp/postgrescopy-deps.lock
exec 9>"$lock"
flock 9
# Another run may have installed them while this one waited for the lock.
read -r -a pkgs <<<"$(missing)"
[ ${#pkgs[@]} -eq 0 ] && exit 0

echo "deps: installing ${pkgs[*]} with apt-get"
policy=/usr/sbin/policy-rc.d
own_policy=
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy"
  chmod 755 "$policy"
  own_policy=1
fi
cleanup() { if [ -n "$own_policy" ]; then rm -f "$policy"; fi; }
trap cleanup EXIT

export DEBIAN_FRONTEND=noninteractive
apt=(apt-get -o DPkg::Lock::Timeout=300 -y -qq --no-install-recommends)
log=$(mktemp)
if ! "${apt[@]}" install "${pkgs[@]}" >"$log" 2>&1; then
  # A stale or empty package index is the usual cause: refresh it once.
  if ! "${apt[@]}" update >>"$log" 2>&1 || ! "${apt[@]}" install "${pkgs[@]}" >>"$log" 2>&1; then
    tail -20 "$log" >&2
    rm -f "$log"
    echo "deps: apt-get install ${pkgs[*]} failed" >&2
    exit 1
  fi
fi
rm -f "$log"
read -r -a left <<<"$(missing)"
if [ ${#left[@]} -ne 0 ]; then
  echo "deps: still missing after apt-get: ${left[*]}" >&2
  exit 1
fi
echo "deps: installed ${pkgs[*]}"
