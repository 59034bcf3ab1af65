#!/usr/bin/env bash
# image.sh — build Sluice's container image here, from nothing but the
# Debian mirror this machine's apt uses and the repository: no image
# registry, no Dockerfile.
#
#   base    mmdebstrap makes a minimal Debian root filesystem (minbase,
#           plus ca-certificates; the python variant adds python3-numpy and
#           python3-torch for the Python and PyTorch backends). It is
#           cached by suite, package list and SOURCE_DATE_EPOCH.
#   layer   the sluice binary (cgo, -trimpath, no build id) at
#           /usr/local/bin/sluice, ONNX Runtime's libonnxruntime.so.1 at
#           /usr/local/lib/sluice (scripts/install-onnxruntime.sh fetches
#           and checks it), a non-root user sluice (65532:65532) whose home
#           /var/lib/sluice is the only folder it owns.
#   commit  buildah commits one layer with every timestamp set to
#           SOURCE_DATE_EPOCH and no history, so the same inputs give the
#           same image id.
#
# The image is tagged NAME:<variant>-<input hash> and NAME:<variant>
# (latest of that variant). When an image with the same input hash exists
# the script does nothing but print its tag: inputs unchanged, nothing to
# build.
#
# Usage: scripts/image.sh [--variant default|python] [--oci-archive FILE] [--print-tag]
#   SLUICE_IMAGE       image name (localhost/sluice)
#   SOURCE_DATE_EPOCH  timestamp of every file and of the image (1767225600,
#                      2026-01-01T00:00:00Z)
#   DEBIAN_SUITE       bookworm
#   DEBIAN_MIRROR      a mirror URL for mmdebstrap; empty: mmdebstrap's default
#   SLUICE_IMAGE_CACHE where base root filesystems are cached
#                      (${XDG_CACHE_HOME:-~/.cache}/sluice/image)
# Needs root (or a user buildah and mmdebstrap work for), mmdebstrap,
# buildah and Go; scripts/setup.sh installs them on Debian.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "image: $*" >&2; }

variant=default
oci_archive=""
print_tag=false
while [ $# -gt 0 ]; do
  case "$1" in
    --variant) variant="$2"; shift 2 ;;
    --variant=*) variant="${1#*=}"; shift ;;
    --oci-archive) oci_archive="$2"; shift 2 ;;
    --oci-archive=*) oci_archive="${1#*=}"; shift ;;
    --print-tag) print_tag=true; shift ;;
    *) say "unknown argument $1"; exit 2 ;;
  esac
done

name="${SLUICE_IMAGE:-localhost/sluice}"
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-1767225600}"
suite="${DEBIAN_SUITE:-bookworm}"
cache="${SLUICE_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice/image}"

packages="ca-certificates"
case "$variant" in
  default) ;;
  python) packages="$packages,python3,python3-numpy,python3-torch" ;;
  *) say "unknown variant $variant (default or python)"; exit 2 ;;
esac

for tool in mmdebstrap buildah go sha256sum; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    say "$tool not found: run scripts/setup.sh as root (Debian packages mmdebstrap buildah uidmap)"
    exit 1
  fi
done

work="$(mktemp -d)"
ctr=""
cleanup() {
  if [ -n "$ctr" ]; then
    buildah umount "$ctr" >/dev/null 2>&1 || true
    buildah rm "$ctr" >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# 1. The base root filesystem, cached.
mkdir -p "$cache"
base_key="$(printf '%s\n' "$suite" "$packages" "$SOURCE_DATE_EPOCH" "${DEBIAN_MIRROR:-}" "minbase-1" | sha256sum | cut -c1-16)"
base="$cache/base-$variant-$base_key.tar"
if [ ! -s "$base" ]; then
  say "building the $suite base ($packages) with mmdebstrap; cached as $base"
  mirror=()
  [ -n "${DEBIAN_MIRROR:-}" ] && mirror=("$DEBIAN_MIRROR")
  # Leave no apt lists or caches in the image; dpkg's log carries times.
  mmdebstrap --quiet --variant=minbase --include="$packages" \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/* "$1"/var/cache/ldconfig/aux-cache' \
    "$suite" "$work/base.tar" "${mirror[@]}"
  mv -f "$work/base.tar" "$base"
fi

# 2. The binary and the ONNX Runtime library.
say "building the sluice binary"
CGO_ENABLED=1 go build -trimpath -buildvcs=false -ldflags='-s -w -buildid=' -o "$work/sluice" ./cmd/sluice
ort="$(scripts/install-onnxruntime.sh --print-path)"

# 3. Nothing to do when an image of these inputs exists.
key="$( { sha256sum "$base" | cut -d' ' -f1
          sha256sum "$work/sluice" | cut -d' ' -f1
          sha256sum "$ort" | cut -d' ' -f1
          sha256sum "$0" | cut -d' ' -f1
          echo "$variant $SOURCE_DATE_EPOCH"; } | sha256sum | cut -c1-16)"
tag="$name:$variant-$key"
if buildah inspect --type image "$tag" >/dev/null 2>&1; then
  say "$tag is up to date (inputs unchanged)"
else
  say "assembling $tag"
  ctr="$(buildah from --quiet scratch)"
  mnt="$(buildah mount "$ctr")"
  tar -xf "$base" -C "$mnt" --numeric-owner
  install -D -m 0755 "$work/sluice" "$mnt/usr/local/bin/sluice"
  install -D -m 0644 "$ort" "$mnt/usr/local/lib/sluice/libonnxruntime.so.1"
  echo 'sluice:x:65532:65532:sluice:/var/lib/sluice:/usr/sbin/nologin' >>"$mnt/etc/passwd"
  echo 'sluice:x:65532:' >>"$mnt/etc/group"
  echo 'sluice:!*:0::::::' >>"$mnt/etc/shadow"
  install -d -m 0750 -o 65532 -g 65532 "$mnt/var/lib/sluice"
  buildah umount "$ctr" >/dev/null
  buildah config \
    --user 65532:65532 \
    --workingdir /var/lib/sluice \
    --env HOME=/var/lib/sluice \
    --env SLUICE_ONNXRUNTIME_LIB=/usr/local/lib/sluice/libonnxruntime.so.1 \
    --entrypoint '["/usr/local/bin/sluice"]' \
    --cmd '["--help"]' \
    --port 8000 --port 8001 --port 8002 --port 8080 --port 9901 --port 6566 \
    --label org.opencontainers.image.title=sluice \
    --label org.opencontainers.image.description="Sluice inference platform ($variant)" \
    --label "org.opencontainers.image.created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)" \
    "$ctr"
  buildah commit --quiet --omit-history --timestamp "$SOURCE_DATE_EPOCH" --rm "$ctr" "$tag" >/dev/null
  ctr=""
fi
buildah tag "$tag" "$name:$variant"
# Earlier builds of this variant are superseded: drop their tags (and the
# images, unless something else holds them), so storage does not grow with
# every source change.
re_name="$(printf '%s' "$name" | sed 's/[.[\*^$]/\\&/g')"
buildah images --format '{{.Name}}:{{.Tag}}' 2>/dev/null |
  grep -E "^$re_name:$variant-[0-9a-f]{16}\$" | grep -vxF "$tag" |
  while read -r old; do buildah rmi "$old" >/dev/null 2>&1 || true; done || true # grep finds none: nothing to drop
say "image $tag ($(buildah inspect --type image --format '{{.FromImageID}}' "$tag" | cut -c1-12))"

if [ -n "$oci_archive" ]; then
  rm -f "$oci_archive"
  buildah push --quiet "$tag" "oci-archive:$oci_archive:$name:$variant"
  say "wrote $oci_archive"
fi
if $print_tag; then
  echo "$tag"
fi
