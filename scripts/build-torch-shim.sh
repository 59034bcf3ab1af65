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

# The library is up to date when it was built from these very sources and
# this script against the same libtorch: a stamp of their contents (not
# their times, which every fresh clone renews) beside it says so.
stamp="$(cat "$src/sluice_torch.cc" "$src/sluice_torch.h" "$0" | sha256sum | cut -d' ' -f1) $(stat -L -c '%s %Y' "$torch_lib")"
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
  -Wl,--no-as-needed -ltorch -ltorch_cpu -lc10 -Wl,--as-needed
mv -f "$tmp" "$lib"
trap - EXIT
echo "$stamp" >"$lib.stamp"
echo "$lib"
