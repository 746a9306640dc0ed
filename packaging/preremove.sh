#!/bin/sh
# Before the package's files go (deb prerm "remove", rpm %preun 0 = erase):
# the service stopped and disabled where systemd runs. An upgrade (deb
# "upgrade", rpm 1) keeps it running until postinstall restarts it. The user,
# /var/lib/otelcol-postgrescopy (a queue may still hold acknowledged
# requests) and everything in PostgreSQL stay.
set -e

case "$1" in
remove|deconfigure|0) ;;
*) exit 0 ;;
esac

if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  systemctl stop otelcol-postgrescopy.service || true
  systemctl disable otelcol-postgrescopy.service || true
fi
exit 0
