#!/usr/bin/env bash
# build-torch-shim.sh — compile libsluice_torch.so, the small C++ library
# through which the pytorch backend runs TorchScript models in-process with
# libtorch (package internal/backend/libtorch), against Debian's
# libtorch-dev. Installs into $SLUICE_TORCH_DIR, else
# ${XDG_CACHE_HOME:-~/.cache}/sluice/libtorch-shim, and prints the library's
# path. Does nothing when the library was built from the same sources
# against the same libtorch (a content stamp beside it). Needs g++ and libtorch-dev
# (scripts/setup.sh installs them as root).
set -euo pipefail
cd "$(dirname "$0")/.."

src=internal/backend/libtorch/csrc
dir="${SLUICE_TORCH_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice/libtorch-shim}"
lib="$dir/libsluice_torch.so"
torch_lib=/usr/lib/x86_64-linux-gnu/libtorch_cpu.so
[ -e "$torch_lib" ] || torch_lib="$(ls /usr/lib/*/libtorch_cpu.so 2>/dev/null | head -n1 || true)"

if [ ! -e /usr/include/torch/script.h ] || [ -z "$torch_lib" ]; then
  echo "build-torch-shim: libtorch-dev is not installed (apt-get install libtorch-dev)" >&2
  exit 1
fi
if ! command -v g++ >/dev/null 2>&1; then
  echo "build-torch-shim: g++ is not installed" >&2
  exit 1
fi

# Debian builds libtorch against the generic libblas.so.3, which on a stock
# machine is the reference BLAS: the parcel ETA model's forward() costs about
# 260 µs of CPU there and about 105 µs with OpenBLAS. Choosing OpenBLAS for
# the whole machine (installing libopenblas0-serial) changes every program's
# BLAS, so the shim brings its own: Debian's single-threaded OpenBLAS,
# unpacked (not installed) into $dir/blas and linked ahead of libtorch, so
# that libtorch's libblas.so.3 resolves to it in the server's process only.
# SLUICE_TORCH_BLAS=system keeps the machine's libblas.so.3.
blas="${SLUICE_TORCH_BLAS:-openblas}"
blas_dir="$dir/blas"
blas_pkg=libopenblas0-serial
fetch_openblas() {
  local want have tmp deb sub
  want="$(apt-cache policy "$blas_pkg" 2>/dev/null | sed -n 's/^ *Candidate: //p')"
  if [ -z "$want" ] || [ "$want" = "(none)" ]; then
    echo "build-torch-shim: $blas_pkg is not known to apt here; libtorch keeps the machine's libblas.so.3 (SLUICE_TORCH_BLAS=system to say so)" >&2
    return 1
  fi
  have="$(cat "$blas_dir/.version" 2>/dev/null || true)"
  if [ "$have" = "$want" ] && [ -e "$blas_dir/libblas.so.3" ]; then
    return 0
  fi
  tmp="$(mktemp -d)"
  # apt-get download writes into the current folder, unpacked by dpkg-deb
  # without touching the package database.
  if ! (cd "$tmp" && apt-get download -qq "$blas_pkg=$want" >/dev/null 2>&1); then
    rm -rf "$tmp"
    echo "build-torch-shim: could not download $blas_pkg $want; libtorch keeps the machine's libblas.so.3" >&2
    return 1
  fi
  deb="$(ls "$tmp"/*.deb)"
  dpkg-deb -x "$deb" "$tmp/x"
  sub="$(ls -d "$tmp"/x/usr/lib/*/openblas-serial 2>/dev/null | head -n1)"
  [ -n "$sub" ] && [ -e "$sub/libblas.so.3" ] || { rm -rf "$tmp"; echo "build-torch-shim: $deb has no openblas-serial/libblas.so.3" >&2; return 1; }
  rm -rf "$blas_dir"
  mkdir -p "$blas_dir"
  cp -a "$sub"/. "$blas_dir"/
  echo "$want" >"$blas_dir/.version"
  rm -rf "$tmp"
}
blas_link=()
blas_stamp=system
if [ "$blas" = openblas ]; then
  mkdir -p "$dir"
  if fetch_openblas; then
    # Its libraries first, so that they are the shim's first dependencies
    # and are loaded before libtorch asks for libblas.so.3 and
    # liblapack.so.3 by their sonames; the shim finds them in blas/ beside
    # itself.
    blas_link=("$blas_dir/libblas.so.3" "$blas_dir/liblapack.so.3" "-Wl,-rpath,\$ORIGIN/blas")
    blas_stamp="openblas $(cat "$blas_dir/.version")"
  else
    rm -rf "$blas_dir"
  fi
elif [ "$blas" = system ]; then
  # A blas/ folder left by an earlier build would hand the Python worker's
  # PyTorch models another BLAS than the shim's.
  rm -rf "$blas_dir"
else
  echo "build-torch-shim: SLUICE_TORCH_BLAS is openblas or system, not $blas" >&2
  exit 1
fi

# The library is up to date when it was built from these very sources and
# this script against the same libtorch and BLAS: a stamp of their contents
# (not their times, which every fresh clone renews) beside it says so.
stamp="$(cat "$src/sluice_torch.cc" "$src/sluice_torch.h" "$0" | sha256sum | cut -d' ' -f1) $(stat -L -c '%s %Y' "$torch_lib") $blas_stamp"
if [ -e "$lib" ] && [ "$(cat "$lib.stamp" 2>/dev/null)" = "$stamp" ]; then
  echo "$lib"
  exit 0
fi

mkdir -p "$dir"
tmp="$(mktemp "$dir/.libsluice_torch.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
echo "build-torch-shim: compiling $lib (about a minute)" >&2
g++ -std=c++17 -O2 -fPIC -shared -Wall -Wextra \
  -D_GLIBCXX_USE_CXX11_ABI=1 \
  -I/usr/include/torch/csrc/api/include \
  -o "$tmp" "$src/sluice_torch.cc" \
  -Wl,--no-as-needed "${blas_link[@]}" -ltorch -ltorch_cpu -lc10 -Wl,--as-needed
mv -f "$tmp" "$lib"
trap - EXIT
echo "$stamp" >"$lib.stamp"
echo "$lib"
