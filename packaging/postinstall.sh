#!/bin/sh
# After the package's files are in place (deb postinst "configure", rpm %post
# 1 = install, 2 = upgrade): the service user and its state directory, then
# the unit enabled (a first install) or restarted if it was running (an
# upgrade), where systemd runs. Nothing the administrator or the collector
# wrote is changed: the edited config files are dpkg's and rpm's to keep, the
# queue in /var/lib/otelcol-postgrescopy stays as it is.
set -e

case "$1" in
configure) first=; [ -n "${2:-}" ] || first=1 ;;
1) first=1 ;;
2) first= ;;
*) exit 0 ;; # deb abort-upgrade, abort-remove...
esac

user=otelcol-postgrescopy
state=/var/lib/otelcol-postgrescopy

if ! getent group "$user" >/dev/null; then
  groupadd --system "$user"
fi
if ! getent passwd "$user" >/dev/null; then
  nologin=$(command -v nologin || echo /bin/false)
  useradd --system --gid "$user" --home-dir "$state" --no-create-home \
    --shell "$nologin" --comment "OpenTelemetry Collector with postgrescopy" "$user"
fi
# Created once; an existing directory (and the queue in it) is left alone.
if [ ! -d "$state" ]; then
  install -d -m 0750 -o "$user" -g "$user" "$state"
fi

if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  systemctl daemon-reload || true
  if [ -n "$first" ]; then
    systemctl enable otelcol-postgrescopy.service || true
    echo "otelcol-postgrescopy: set POSTGRESCOPY_ENDPOINT (and POSTGRESCOPY_PASSWORD) in" \
      "/etc/otelcol-postgrescopy/otelcol-postgrescopy.conf, then: systemctl start otelcol-postgrescopy"
  else
    systemctl try-restart otelcol-postgrescopy.service ||
      echo "otelcol-postgrescopy: the restart failed; see journalctl -u otelcol-postgrescopy" >&2
  fi
fi
exit 0
