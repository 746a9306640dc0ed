#!/usr/bin/env bash
# make release VERSION=vX.Y.Z: tags HEAD as release vX.Y.Z of the module
# (github.com/postgrescopy/postgrescopy) and of otelcol-postgrescopy, after
# checking, in this order, that
#   - VERSION is vMAJOR.MINOR.PATCH (optionally -PRERELEASE) and not yet a tag,
#   - the tree is clean (no changed, staged or untracked file),
#   - CHANGELOG.md has a "## [X.Y.Z] - YYYY-MM-DD" section and no entries
#     left under "## [Unreleased]",
#   - builder-config.yaml's dist.version is X.Y.Z,
#   - the tests pass ($RELEASE_TEST, `make test` by default), and leave the
#     tree clean.
# The tag is local and annotated; nothing is pushed.
set -euo pipefail
cd "$(dirname "$0")/.."

v=${1:-}
die() { echo "release: $*" >&2; exit 1; }
[ -n "$v" ] || die "usage: make release VERSION=vX.Y.Z"
[[ $v =~ ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]] ||
  die "VERSION=$v is not vMAJOR.MINOR.PATCH[-PRERELEASE] (a Go module version)"
x=${v#v}
if git rev-parse -q --verify "refs/tags/$v" >/dev/null; then die "tag $v exists already"; fi

clean() {
  local st
  st=$(git status --porcelain) || die "git status failed"
  [ -z "$st" ] || die "the tree is not clean $1:"$'\n'"$st"
}
clean "(commit or remove these first)"

xre=${x//./\\.}
grep -Eq "^## \[$xre\] - [0-9]{4}-[0-9]{2}-[0-9]{2}\$" CHANGELOG.md ||
  die "CHANGELOG.md has no \"## [$x] - YYYY-MM-DD\" section (move the Unreleased entries under it)"
left=$(awk '/^## \[Unreleased\]/ {u=1; next} /^## \[/ {u=0} u && /^[-*] /' CHANGELOG.md)
[ -z "$left" ] || die "CHANGELOG.md still has entries under [Unreleased]; move them under [$x]:"$'\n'"$left"
dv=$(sed -n 's/^  version: *//p' builder-config.yaml)
[ "$dv" = "$x" ] || die "builder-config.yaml has dist.version $dv, not $x"

echo "release: $v: tree clean, CHANGELOG.md and builder-config.yaml name $x; running: ${RELEASE_TEST:-make test}"
bash -c "${RELEASE_TEST:-make test}" || die "the tests failed; nothing tagged"
clean "after the tests (they changed or left files)"

git tag -a "$v" -m "postgrescopy $x"
echo "release: tagged $v at $(git rev-parse --short HEAD). Next: make package (packages of $x in dist/);"
echo "release: git push origin $v publishes it (the module proxy then serves github.com/postgrescopy/postgrescopy@$v)."
