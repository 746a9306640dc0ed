#!/usr/bin/env bash
# scripts/package.sh BINARY VERSION RELEASE OUTDIR (make package runs it):
# the otelcol-postgrescopy packages of BINARY, which must be built as
# VERSION (its --version), into OUTDIR:
#   otelcol-postgrescopy_<VERSION>-<RELEASE>_<arch>.deb
#   otelcol-postgrescopy-<VERSION>-<RELEASE>.<arch>.rpm
#   otelcol-postgrescopy_<VERSION>_linux_<arch>.tar.gz   (the binary alone)
# and OUTDIR/sha256sums.txt over every artifact in OUTDIR. NFPM names the
# nfpm binary; PKG_SRC the directory of the packaging files (packaging/);
# PKG_FORMATS the artifacts to build (default "deb rpm tgz").
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# = 4 ] || { echo "usage: $0 BINARY VERSION RELEASE OUTDIR" >&2; exit 2; }
bin=$1 version=$2 release=$3 out=$4
nfpm=${NFPM:-nfpm}
die() { echo "package: $*" >&2; exit 1; }

[ -x "$bin" ] || die "no executable at $bin (make build)"
got=$("$bin" --version)
[ "$got" = "otelcol-postgrescopy version $version" ] ||
  die "$bin says \"$got\", not version $version (make build rebuilds it)"
[[ $release =~ ^[0-9]+$ ]] || die "release $release is not a number"

arch=$(go env GOARCH)
mkdir -p "$out"
export PKG_BINARY=$bin PKG_VERSION=$version PKG_RELEASE=$release PKG_ARCH=$arch
export PKG_SRC=${PKG_SRC:-packaging} PKG_CHANGELOG=CHANGELOG.md
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for p in ${PKG_FORMATS:-deb rpm tgz}; do
  case $p in
  deb | rpm) "$nfpm" package --config packaging/nfpm.yaml --packager "$p" --target "$out/" >/dev/null ;;
  tgz) # the binary alone, as the Collector's releases ship it beside the packages
    cp "$bin" "$tmp/otelcol-postgrescopy"
    tar -C "$tmp" --owner=0 --group=0 --numeric-owner --mtime=@0 \
      -czf "$out/otelcol-postgrescopy_${version}_linux_${arch}.tar.gz" otelcol-postgrescopy
    rm "$tmp/otelcol-postgrescopy" ;;
  *) die "unknown format $p in PKG_FORMATS" ;;
  esac
done

(
  cd "$out"
  find . -maxdepth 1 -type f ! -name sha256sums.txt -printf '%P\n' | LC_ALL=C sort | xargs -r sha256sum >"$tmp/sha256sums.txt"
  mv "$tmp/sha256sums.txt" sha256sums.txt
  sha256sum --check --quiet sha256sums.txt
)
echo "package: $out (version $version, release $release):"
sed 's/^/  /' "$out/sha256sums.txt"
