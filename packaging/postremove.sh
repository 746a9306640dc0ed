#!/bin/sh
# After the package's files are gone (deb postrm, rpm %postun): systemd
# forgets the unit. Purge removes the two config files (dpkg does that);
# the user and /var/lib/otelcol-postgrescopy are left: remove them by hand
# (userdel otelcol-postgrescopy; rm -r /var/lib/otelcol-postgrescopy) once
# the queue there is of no use.
set -e
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  systemctl daemon-reload || true
fi
exit 0
