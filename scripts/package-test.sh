#!/usr/bin/env bash
# make package-test (as root): the otelcol-postgrescopy .deb on a fresh Debian
# bookworm root, the way an administrator meets it:
#   1. dpkg -i of the package of the built collector (version V): user, files,
#      modes; the collector started as the unit starts it (its EnvironmentFile
#      read by root, its ExecStart line as its User, in its
#      WorkingDirectory; systemd itself does not run in a chroot), spans sent
#      with telemetrygen and found in PostgreSQL;
#   2. dpkg -i of a newer build (a binary built as version V+next): the edited
#      config.yaml and environment file kept byte for byte, the queue
#      directory untouched, the new binary writing again;
#   3. dpkg -i --force-confold of a build whose default config.yaml changed:
#      the edited one kept, the new default beside it as .dpkg-dist;
#   4. dpkg -r, then dpkg -P: binary and unit gone, config files kept until
#      the purge, the user, /var/lib/otelcol-postgrescopy and the rows left.
# The root is a copy of scripts/fresh-machine.sh's debootstrapped base (made
# here the same way when missing, cached in $FRESH_DIR/base). It shares the
# host's network, so the collector in it reaches the PostgreSQL of
# POSTGRESCOPY_ENDPOINT on 127.0.0.1 (make services) and telemetrygen on the
# host reaches it; its ports are free ones. Everything else runs in a mount
# and PID namespace of its own: its mounts and processes end with it. The
# test writes to a schema of its own and drops it at the end. Prints one
# line per step with its time; the log and the root of a failed run stay in
# $WORK (printed).
#
# Needs: _build/otelcol-postgrescopy (make build), NFPM, OCB, TELEMETRYGEN
# (the Makefile passes them), psql, debootstrap (installed when missing).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
FRESH_DIR=${FRESH_DIR:-/var/tmp/postgrescopy-fresh}
MIRROR=${FRESH_MIRROR:-http://deb.debian.org/debian}
PKG=otelcol-postgrescopy

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}'; }
die() { echo "package-test: FAIL: $*" >&2; exit 1; }

# ---- the machine part, inside its own mount and PID namespace --------------

if [ "${1:-}" = --inside ]; then
  WORK=$2
  . "$WORK/env"
  root=$WORK/root
  mount --make-rprivate /
  mount -t proc proc /proc # this PID namespace's, for ps and kill
  mount -t proc proc "$root/proc"
  mount --rbind /dev "$root/dev"
  mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
  mount -t tmpfs tmpfs "$root/run"
  in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 "$@"; }
  step_t=
  step() { [ -z "$step_t" ] || echo "  ok ($(since "$step_t")s)"; step_t=$(now); echo "== $*"; }
  psqlq() { psql "$POSTGRESCOPY_ENDPOINT" -XAtq -v ON_ERROR_STOP=1 -c "$1"; }
  conf=/etc/$PKG/$PKG.conf
  cfg=/etc/$PKG/config.yaml
  unit=/usr/lib/systemd/system/$PKG.service

  # start_as_unit runs the collector as the unit would: systemd reads the
  # EnvironmentFile as root (KEY=value lines, quotes removed), expands
  # $VAR in ExecStart split at whitespace (as the shell does unquoted), and
  # execs it as User/Group with only that environment, in WorkingDirectory.
  start_as_unit() {
    local u g ef ex wd line k v
    u=$(sed -n 's/^User=//p' "$root$unit")
    g=$(sed -n 's/^Group=//p' "$root$unit")
    ef=$(sed -n 's/^EnvironmentFile=-\{0,1\}//p' "$root$unit")
    ex=$(sed -n 's/^ExecStart=//p' "$root$unit")
    wd=$(sed -n 's/^WorkingDirectory=//p' "$root$unit")
    [ -n "$u" ] && [ -n "$g" ] && [ -n "$ef" ] && [ -n "$ex" ] || die "the unit lacks User, Group, EnvironmentFile or ExecStart"
    local vars=()
    while IFS= read -r line || [ -n "$line" ]; do
      case $line in '' | '#'*) continue ;; esac
      k=${line%%=*} v=${line#*=}
      v=${v#\"} v=${v%\"}
      vars+=("$k=$v")
    done <"$root$ef"
    echo "   as $u:$g in ${wd:-/}: $ex (environment from $ef: ${vars[*]%%=*})"
    chroot "$root" /usr/bin/setpriv --reuid="$u" --regid="$g" --init-groups \
      /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin USER="$u" LOGNAME="$u" HOME="$wd" "${vars[@]}" \
      /bin/bash -c "cd ${wd:-/} && exec $ex" >>"$WORK/collector.log" 2>&1 &
    col_pid=$!
    local _
    for _ in $(seq 1 600); do
      if curl -fsS -o /dev/null "http://127.0.0.1:$P_HEALTH/" 2>/dev/null; then return 0; fi
      kill -0 "$col_pid" 2>/dev/null || die "the collector exited: $(tail -5 "$WORK/collector.log")"
      sleep 0.1
    done
    die "the collector is not healthy on 127.0.0.1:$P_HEALTH after 60s: $(tail -5 "$WORK/collector.log")"
  }
  stop_unit() { # KillMode=mixed: SIGTERM to the main process, then its exit
    kill -TERM "$col_pid"
    local rc=0
    wait "$col_pid" || rc=$?
    [ "$rc" = 0 ] || die "the collector exited $rc after SIGTERM: $(tail -5 "$WORK/collector.log")"
  }
  send_and_find() { # $1 = service name: 50 traces of 4 spans, each found once
    "$TELEMETRYGEN" traces --otlp-insecure --otlp-endpoint "127.0.0.1:$P_GRPC" --service "$1" \
      --traces 50 --child-spans 3 --rate 0 >>"$WORK/telemetrygen.log" 2>&1 || die "telemetrygen: $(tail -3 "$WORK/telemetrygen.log")"
    local got='' _
    for _ in $(seq 1 240); do
      got=$(psqlq "SELECT count(*) || '/' || count(DISTINCT span_id) FROM \"$SCHEMA\".spans WHERE service_name = '$1'" 2>/dev/null || true)
      [ "$got" = 200/200 ] && break
      sleep 0.25
    done
    [ "$got" = 200/200 ] || die "spans of $1 in PostgreSQL: $got (rows/distinct), want 200/200"
    echo "   200 spans of service $1 in $SCHEMA.spans"
  }
  sums() { (cd "$root" && sha256sum ".$cfg" ".$conf"); }

  step "install $(basename "$DEB_A") with dpkg -i"
  in_root dpkg -i "/pkgs/$(basename "$DEB_A")" >"$WORK/dpkg-install.log" 2>&1 || die "dpkg -i: $(tail -5 "$WORK/dpkg-install.log")"
  [ "$(in_root dpkg-query -W -f '${Status} ${Version}' $PKG)" = "install ok installed $VERSION_A-1" ] || die "dpkg says: $(in_root dpkg-query -W -f '${Status} ${Version}' $PKG)"
  in_root getent passwd $PKG | grep -q ":/var/lib/$PKG:/usr/sbin/nologin\$" || die "the user: $(in_root getent passwd $PKG)"
  uid=$(in_root id -u $PKG)
  [ "$uid" -lt 1000 ] || die "the user is not a system user (uid $uid)"
  [ "$(in_root stat -c '%U:%G %a' "/var/lib/$PKG")" = "$PKG:$PKG 750" ] || die "/var/lib/$PKG: $(in_root stat -c '%U:%G %a' "/var/lib/$PKG")"
  [ "$(in_root stat -c '%U:%G %a' "$conf")" = "root:root 600" ] || die "$conf: $(in_root stat -c '%U:%G %a' "$conf")"
  [ "$(in_root stat -c '%a' "$cfg")" = 644 ] || die "$cfg: $(in_root stat -c '%a' "$cfg")"
  [ "$(in_root dpkg-query -W -f '${Conffiles}' $PKG | awk 'NF {print $1}' | sort | tr '\n' ' ')" = "$cfg $conf " ] ||
    die "conffiles: $(in_root dpkg-query -W -f '${Conffiles}' $PKG)"
  [ "$(in_root /usr/bin/$PKG --version)" = "$PKG version $VERSION_A" ] || die "--version: $(in_root /usr/bin/$PKG --version)"
  echo "   $(in_root dpkg-query -W -f '${Package} ${Version}' $PKG); user $(in_root id $PKG)"

  step "edit $cfg (ports, schema) and $conf (endpoint)"
  sed -i -e "s/127.0.0.1:4317/127.0.0.1:$P_GRPC/; s/127.0.0.1:4318/127.0.0.1:$P_HTTP/; s/127.0.0.1:13133/127.0.0.1:$P_HEALTH/" \
    -e "s/port: 8888/port: $P_METRICS/; s/^    schema: otel\$/    schema: $SCHEMA/" "$root$cfg"
  echo "# edited by make package-test" >>"$root$cfg"
  grep -q "schema: $SCHEMA" "$root$cfg" && grep -q "127.0.0.1:$P_GRPC" "$root$cfg" || die "the config edit did not apply"
  sed -i "s|^POSTGRESCOPY_ENDPOINT=.*|POSTGRESCOPY_ENDPOINT=\"$POSTGRESCOPY_ENDPOINT\"|" "$root$conf"
  sums >"$WORK/edited.sha256"

  step "start as the unit does, send spans, find them"
  start_as_unit
  [ "$(in_root ps -o user:32=,args= -p "$col_pid" | awk '{print $1, $2}')" = "$PKG /usr/bin/$PKG" ] ||
    die "the collector runs as: $(in_root ps -o user:32=,args= -p "$col_pid")"
  echo "   pid $col_pid: $(in_root ps -o user:32=,args= -p "$col_pid")"
  if chroot "$root" /usr/bin/setpriv --reuid=$PKG --regid=$PKG --init-groups cat "$conf" >/dev/null 2>&1; then
    die "the service user can read $conf (the password)"
  fi
  send_and_find pkgtest-a
  stop_unit
  queue_before=$(cd "$root/var/lib/$PKG" && find . -type f | sort | xargs -r sha256sum)
  [ -n "$queue_before" ] || die "file_storage left nothing in /var/lib/$PKG"

  step "upgrade to $(basename "$DEB_B") with dpkg -i"
  in_root dpkg -i "/pkgs/$(basename "$DEB_B")" >"$WORK/dpkg-upgrade.log" 2>&1 || die "dpkg -i (upgrade): $(tail -5 "$WORK/dpkg-upgrade.log")"
  [ "$(in_root dpkg-query -W -f '${Version}' $PKG)" = "$VERSION_B-1" ] || die "version after the upgrade: $(in_root dpkg-query -W -f '${Version}' $PKG)"
  [ "$(in_root /usr/bin/$PKG --version)" = "$PKG version $VERSION_B" ] || die "--version after the upgrade: $(in_root /usr/bin/$PKG --version)"
  sums | cmp -s - "$WORK/edited.sha256" || die "the upgrade changed the edited config files: $(sums)"
  if compgen -G "$root/etc/$PKG/*.dpkg-*" >/dev/null; then die "the upgrade left dpkg files beside the config"; fi
  [ "$(in_root id -u $PKG)" = "$uid" ] || die "the user's uid changed"
  [ "$(cd "$root/var/lib/$PKG" && find . -type f | sort | xargs -r sha256sum)" = "$queue_before" ] || die "the upgrade touched /var/lib/$PKG"
  echo "   $(in_root dpkg-query -W -f '${Package} ${Version}' $PKG); config.yaml and $PKG.conf as edited"

  step "start the upgraded collector, send spans, find them"
  start_as_unit
  send_and_find pkgtest-b
  stop_unit

  step "upgrade to $(basename "$DEB_C") (its default config.yaml changed) with dpkg -i --force-confold"
  in_root dpkg -i --force-confold "/pkgs/$(basename "$DEB_C")" >"$WORK/dpkg-upgrade2.log" 2>&1 || die "dpkg -i --force-confold: $(tail -5 "$WORK/dpkg-upgrade2.log")"
  [ "$(in_root dpkg-query -W -f '${Version}' $PKG)" = "$VERSION_B-2" ] || die "version: $(in_root dpkg-query -W -f '${Version}' $PKG)"
  sums | cmp -s - "$WORK/edited.sha256" || die "--force-confold changed the edited config files: $(sums)"
  grep -q "^$NEW_DEFAULT_LINE\$" "$root$cfg.dpkg-dist" 2>/dev/null || die "no $cfg.dpkg-dist with the new default"
  grep "Configuration file '$cfg'" -A3 "$WORK/dpkg-upgrade2.log" | sed 's/^/   dpkg: /' || true
  start_as_unit
  send_and_find pkgtest-c
  stop_unit
  queue_last=$(cd "$root/var/lib/$PKG" && find . -type f | sort | xargs -r sha256sum)

  step "remove with dpkg -r, then purge with dpkg -P"
  in_root dpkg -r $PKG >"$WORK/dpkg-remove.log" 2>&1 || die "dpkg -r: $(tail -5 "$WORK/dpkg-remove.log")"
  [ "$(in_root dpkg-query -W -f '${Status}' $PKG)" = "deinstall ok config-files" ] || die "status after -r: $(in_root dpkg-query -W -f '${Status}' $PKG)"
  [ ! -e "$root/usr/bin/$PKG" ] && [ ! -e "$root$unit" ] || die "dpkg -r left the binary or the unit"
  sums | cmp -s - "$WORK/edited.sha256" || die "dpkg -r changed the config files"
  in_root dpkg -P $PKG >>"$WORK/dpkg-remove.log" 2>&1 || die "dpkg -P: $(tail -5 "$WORK/dpkg-remove.log")"
  [ ! -e "$root$cfg" ] && [ ! -e "$root$conf" ] || die "dpkg -P left the config files"
  in_root dpkg-query -W $PKG >/dev/null 2>&1 && die "dpkg still knows $PKG after the purge"
  in_root getent passwd $PKG >/dev/null || die "the removal deleted the user"
  [ "$(cd "$root/var/lib/$PKG" && find . -type f | sort | xargs -r sha256sum)" = "$queue_last" ] ||
    die "the removal touched /var/lib/$PKG: $(ls -la "$root/var/lib/$PKG")"
  got=$(psqlq "SELECT count(*) FROM \"$SCHEMA\".spans")
  [ "$got" = 600 ] || die "rows after the removal: $got, want 600"
  echo "   binary, unit and config files gone; user $PKG, /var/lib/$PKG ($(echo "$queue_last" | wc -l) files, unchanged) and 600 rows left"
  echo "  ok ($(since "$step_t")s)"
  exit 0
fi

# ---- the host part ----------------------------------------------------------

[ "$(id -u)" = 0 ] || die "run as root (debootstrap, chroot, unshare, dpkg in the root)"
: "${NFPM:?}" "${OCB:?}" "${TELEMETRYGEN:?}" "${POSTGRESCOPY_ENDPOINT:?make services sets it}"
command -v psql >/dev/null || die "psql is missing (make deps)"
t0=$(now)
COLLECTOR=$REPO/_build/$PKG
VERSION_A=${DIST_VERSION:-$("$REPO/scripts/version.sh")}
[ "$("$COLLECTOR" --version)" = "$PKG version $VERSION_A" ] || die "$COLLECTOR is not version $VERSION_A: make build"
case $VERSION_A in *+*) VERSION_B=$VERSION_A.next ;; *) VERSION_B=$VERSION_A+next ;; esac
dpkg --compare-versions "$VERSION_B-1" gt "$VERSION_A-1" || die "$VERSION_B does not sort after $VERSION_A"

WORK=$(mktemp -d /var/tmp/postgrescopy-pkgtest.XXXXXX)
echo "package-test: work directory $WORK"
ok=
trap 'rc=$?; psql "$POSTGRESCOPY_ENDPOINT" -XAtq -c "DROP SCHEMA IF EXISTS \"$SCHEMA\" CASCADE" >/dev/null 2>&1 || true
  if [ -n "$ok" ]; then rm -rf "$WORK"; else echo "package-test: logs and root kept in $WORK" >&2; fi; exit $rc' EXIT
SCHEMA=pkgtest_$(echo "${WORK##*.}" | tr 'A-Z' 'a-z')

# Free loopback ports for the collector in the root (it shares our network).
ports=()
while [ ${#ports[@]} -lt 4 ]; do
  p=$((20000 + RANDOM % 20000))
  [[ " ${ports[*]} " == *" $p "* ]] && continue
  [ -z "$(ss -Htan "sport = :$p")" ] && ports+=("$p")
done

echo "== build the packages: $VERSION_A (this build), $VERSION_B (a newer binary), $VERSION_B-2 (a changed default config)"
t=$(now)
PKG_FORMATS=deb NFPM=$NFPM "$REPO/scripts/package.sh" "$COLLECTOR" "$VERSION_A" 1 "$WORK/a" >"$WORK/package.log"
# The newer binary: the same manifest built as VERSION_B in $WORK/next.
sed -e "s|^  output_path: .*|  output_path: $WORK/next|" -e "s|^  version: .*|  version: $VERSION_B|" \
  -e "s|^  - github.com/postgrescopy/postgrescopy => .*|  - github.com/postgrescopy/postgrescopy => $REPO|" \
  "$REPO/builder-config.yaml" >"$WORK/builder-config.yaml"
(cd "$WORK" && "$OCB" --config builder-config.yaml) >"$WORK/ocb.log" 2>&1 || die "ocb: $(tail -5 "$WORK/ocb.log")"
PKG_FORMATS=deb NFPM=$NFPM "$REPO/scripts/package.sh" "$WORK/next/$PKG" "$VERSION_B" 1 "$WORK/b" >>"$WORK/package.log"
cp -r "$REPO/packaging" "$WORK/packaging-c"
NEW_DEFAULT_LINE="# a default changed by a later release"
echo "$NEW_DEFAULT_LINE" >>"$WORK/packaging-c/config.yaml"
PKG_SRC=$WORK/packaging-c PKG_FORMATS=deb NFPM=$NFPM "$REPO/scripts/package.sh" "$WORK/next/$PKG" "$VERSION_B" 2 "$WORK/c" >>"$WORK/package.log"
DEB_A=$(ls "$WORK"/a/*.deb) DEB_B=$(ls "$WORK"/b/*.deb) DEB_C=$(ls "$WORK"/c/*.deb)
echo "  ok ($(since "$t")s): $(basename "$DEB_A") $(basename "$DEB_B") $(basename "$DEB_C")"

echo "== a fresh Debian bookworm root"
t=$(now)
if [ ! -e "$FRESH_DIR/base/.complete" ]; then
  # As scripts/fresh-machine.sh makes it, so that both share the cache.
  command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  mkdir -p "$FRESH_DIR"
  rm -rf "$FRESH_DIR/base.tmp"
  debootstrap --variant=minbase --include=git,make,ca-certificates,procps,iproute2 \
    bookworm "$FRESH_DIR/base.tmp" "$MIRROR" >"$FRESH_DIR/debootstrap.log" 2>&1 ||
    { tail -20 "$FRESH_DIR/debootstrap.log"; exit 1; }
  touch "$FRESH_DIR/base.tmp/.complete"
  rm -rf "$FRESH_DIR/base"
  mv "$FRESH_DIR/base.tmp" "$FRESH_DIR/base"
fi
cp -a "$FRESH_DIR/base" "$WORK/root"
mkdir -p "$WORK/root/pkgs"
cp "$DEB_A" "$DEB_B" "$DEB_C" "$WORK/root/pkgs/"
in_base() { chroot "$WORK/root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@"; }
in_base dpkg-query -W $PKG >/dev/null 2>&1 && die "the base root already has $PKG"
in_base getent passwd $PKG >/dev/null && die "the base root already has the user $PKG"
echo "  ok ($(since "$t")s): $(. "$WORK/root/etc/os-release" && echo "$PRETTY_NAME"), $(in_base dpkg-query -W -f '.\n' | wc -l) packages"

cat >"$WORK/env" <<EOF
PKG=$PKG
VERSION_A='$VERSION_A'
VERSION_B='$VERSION_B'
DEB_A='$DEB_A'
DEB_B='$DEB_B'
DEB_C='$DEB_C'
SCHEMA='$SCHEMA'
NEW_DEFAULT_LINE='$NEW_DEFAULT_LINE'
P_GRPC=${ports[0]} P_HTTP=${ports[1]} P_HEALTH=${ports[2]} P_METRICS=${ports[3]}
TELEMETRYGEN='$TELEMETRYGEN'
POSTGRESCOPY_ENDPOINT='$POSTGRESCOPY_ENDPOINT'
EOF
unshare --mount --pid --fork --kill-child -- bash "$0" --inside "$WORK" 2>&1 | tee "$WORK/steps.log"
[ "${PIPESTATUS[0]}" = 0 ] || exit 1
ok=1
echo "package-test: PASS in $(since "$t0")s"
