#!/bin/sh
# Prints the version otelcol-postgrescopy is built as (its --version, the
# service.version of its own telemetry, the packages' version):
#   X.Y.Z               HEAD is the release tag vX.Y.Z and no tracked file is changed
#   X.Y.Z+N.gSHA        N commits after the tag vX.Y.Z
#   X.Y.Z+N.gSHA.dirty  the same with tracked files changed
#   0.0.0+gSHA[.dirty]  no release tag yet
# Build metadata (+...) orders a build after its release for dpkg and rpm.
# Outside a git checkout (a source archive): builder-config.yaml's dist.version.
set -eu
cd "$(dirname "$0")/.."
if ! git rev-parse --verify -q HEAD >/dev/null 2>&1; then
  sed -n 's/^  version: *//p' builder-config.yaml
  exit 0
fi
dirty=
git update-index -q --refresh >/dev/null 2>&1 || true
git diff-index --quiet HEAD -- 2>/dev/null || dirty=.dirty
if d=$(git describe --tags --long --match 'v[0-9]*.[0-9]*.[0-9]*' 2>/dev/null); then
  # vX.Y.Z-N-gSHA (the tag itself may hold dashes: v1.2.0-rc.1)
  sha=${d##*-}
  rest=${d%-*}
  n=${rest##*-}
  tag=${rest%-*}
  if [ "$n" = 0 ] && [ -z "$dirty" ]; then
    echo "${tag#v}"
  else
    echo "${tag#v}+$n.$sha$dirty"
  fi
else
  echo "0.0.0+g$(git rev-parse --short=12 HEAD)$dirty"
fi
