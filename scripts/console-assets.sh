#!/usr/bin/env bash
# console-assets.sh — vendor the web console's front-end library into the tree.
#
# The console (internal/console) draws its charts with uPlot, a small, fast
# time-series chart library from npm. Its files are committed under
# internal/console/assets/vendor/uplot/ and embedded into the binary, so the
# build and the console work offline; this script is how they got there and
# how to upgrade them. It fetches the pinned version with `npm pack`, checks
# the tarball and each file it copies against pinned sha256 sums, and writes
# the files. Running it again rewrites the same bytes.
#
# Usage: scripts/console-assets.sh [--check]
#   --check  only verify the committed files against the pinned sums (no network)
set -euo pipefail
cd "$(dirname "$0")/.."

UPLOT_VERSION=1.6.32
TARBALL_SHA256=4b8a8191e425658e3ea8c8c1314b0fc679c861ee3a1af2b20c7b16ba50b5133d
# file in the tarball -> sha256
declare -A FILES=(
  [dist/uPlot.iife.min.js]=19c8d4c6ad88929a79f4ae49d6f7161566dfd0ba3d15cc495e974f787eb78f1f
  [dist/uPlot.min.css]=df630c6a8d6f8eeaff264b50f73ce5b114f646ffd9a0bb74f049b0a00135fa04
  [LICENSE]=8f989229699b4fe2f1a0432d0e9edc338a8a911e250e2d1b01ecd770a5f5b1bd
)
dest=internal/console/assets/vendor/uplot

say() { echo "console-assets: $*" >&2; }
sha() { sha256sum "$1" | cut -d' ' -f1; }

if [ "${1:-}" = "--check" ]; then
  bad=0
  for f in "${!FILES[@]}"; do
    out="$dest/$(basename "$f")"
    if [ ! -f "$out" ] || [ "$(sha "$out")" != "${FILES[$f]}" ]; then
      say "$out does not match uplot@$UPLOT_VERSION's $f"
      bad=1
    fi
  done
  [ "$bad" = 0 ] && say "vendored uplot@$UPLOT_VERSION is intact"
  exit "$bad"
fi

command -v npm >/dev/null || { say "npm is needed (Debian: apt-get install -y npm)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "uplot@$UPLOT_VERSION" >/dev/null)
tgz="$tmp/uplot-$UPLOT_VERSION.tgz"
[ "$(sha "$tgz")" = "$TARBALL_SHA256" ] || { say "uplot-$UPLOT_VERSION.tgz: sha256 mismatch"; exit 1; }
tar -xzf "$tgz" -C "$tmp"
mkdir -p "$dest"
for f in "${!FILES[@]}"; do
  src="$tmp/package/$f"
  [ "$(sha "$src")" = "${FILES[$f]}" ] || { say "$f: sha256 mismatch"; exit 1; }
  cp "$src" "$dest/$(basename "$f")"
done
printf 'uplot %s (npm), vendored by scripts/console-assets.sh\n' "$UPLOT_VERSION" >"$dest/VERSION"
say "vendored uplot@$UPLOT_VERSION into $dest"
