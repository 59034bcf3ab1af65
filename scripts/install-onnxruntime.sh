#!/usr/bin/env bash
# install-onnxruntime.sh — put ONNX Runtime's shared library where Sluice finds it.
#
# The linux-x64 libonnxruntime.so.1 ships inside the npm package
# onnxruntime-node. We fetch that exact version with `npm pack`, check both
# the tarball and the library against pinned sha256 sums, and copy the
# library into a cache folder. Running it again is a no-op once the library
# is in place and its checksum matches.
#
# Usage: scripts/install-onnxruntime.sh [--print-path]
#   SLUICE_ORT_DIR  where to install (default: ${XDG_CACHE_HOME:-~/.cache}/sluice/onnxruntime-1.30.0)
set -euo pipefail

ORT_VERSION=1.30.0
TARBALL_SHA256=6e3390d6b783e7be946fad629292799da28d0b42f84856e50d2c1b0383291e75
LIB_SHA256=ffb75a925ba05e47b235bb66e3e3911714a80b328a9c9425539feb204aa32a23
LIB_IN_TARBALL=package/bin/napi-v6/linux/x64/libonnxruntime.so.1

cache_root="${XDG_CACHE_HOME:-$HOME/.cache}"
dest="${SLUICE_ORT_DIR:-$cache_root/sluice/onnxruntime-$ORT_VERSION}"
lib="$dest/libonnxruntime.so.1"

say() { [ "${1:-}" = "" ] || echo "install-onnxruntime: $*" >&2; }

sha_ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }

if sha_ok "$lib" "$LIB_SHA256"; then
  [ "${1:-}" = "--print-path" ] && echo "$lib"
  exit 0
fi

case "$(uname -s)/$(uname -m)" in
  Linux/x86_64) ;;
  *) say "only linux/x86_64 is supported by this script (got $(uname -s)/$(uname -m))"; exit 1 ;;
esac

if ! command -v npm >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "npm not found; installing it from Debian"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null
  else
    say "npm is needed to fetch onnxruntime-node@$ORT_VERSION; install Node.js/npm and retry"
    exit 1
  fi
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

say "fetching onnxruntime-node@$ORT_VERSION (about 110 MB)"
(cd "$work" && npm pack --silent "onnxruntime-node@$ORT_VERSION" >/dev/null)
tgz="$work/onnxruntime-node-$ORT_VERSION.tgz"
if ! sha_ok "$tgz" "$TARBALL_SHA256"; then
  say "checksum mismatch for $(basename "$tgz"): got $(sha256sum "$tgz" | cut -d' ' -f1), want $TARBALL_SHA256"
  exit 1
fi
tar -xzf "$tgz" -C "$work" "$LIB_IN_TARBALL"
if ! sha_ok "$work/$LIB_IN_TARBALL" "$LIB_SHA256"; then
  say "checksum mismatch for libonnxruntime.so.1 inside the tarball"
  exit 1
fi
mkdir -p "$dest"
# Copy then rename, so a concurrent reader never sees a half-written library.
cp "$work/$LIB_IN_TARBALL" "$lib.tmp.$$"
mv -f "$lib.tmp.$$" "$lib"
say "installed $lib"
[ "${1:-}" = "--print-path" ] && echo "$lib"
exit 0
