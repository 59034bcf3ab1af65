#!/usr/bin/env bash
# setup.sh — install what Sluice's demo and tests need. Idempotent: each
# step checks first and does nothing when its piece is already there.
#   - the ONNX Runtime shared library (scripts/install-onnxruntime.sh)
#   - promtool (Debian package "prometheus"), redis-server and redis-cli
#     (private Redis servers and clusters for the online-store tests),
#     chromium (headless, for the console and diff-report tests) and
#     prometheus-alertmanager (alert delivery test), mmdebstrap, buildah,
#     podman and uidmap (container images), etcd-server (the control plane
#     of the deploy tests), when root
#   - the system Python's numpy and torch (python3-numpy, python3-torch),
#     which the python and pytorch backends' workers run with, when root
#   - libtorch-dev and g++ (when root), and libsluice_torch.so built from
#     them (scripts/build-torch-shim.sh), through which TorchScript models
#     run in-process
#   - helm, kube-apiserver, kube-controller-manager and kubectl built from
#     the Go module proxy, and prometheus-operator's CRDs
#     (scripts/install-kube.sh), for test/deploy
#   - golangci-lint, pinned, built from its Go module
#     (scripts/install-golangci-lint.sh), which make test runs
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "setup: $*" >&2; }

if ! command -v go >/dev/null 2>&1; then
  say "Go is required (1.26 or newer): https://go.dev/doc/install"
  exit 1
fi

scripts/install-onnxruntime.sh >/dev/null

# golangci-lint, which make test runs after go vet, built once from its Go
# module into the user cache. Cold: a few CPU minutes; afterwards it finds
# the binary and returns at once.
scripts/install-golangci-lint.sh >/dev/null

need_apt=()
command -v promtool >/dev/null 2>&1 || need_apt+=(prometheus)
command -v npm >/dev/null 2>&1 || need_apt+=(npm)
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need_apt+=(redis-tools)
# Headless Chromium for the console and report e2e tests; Alertmanager for
# the alert-delivery test.
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v prometheus-alertmanager >/dev/null 2>&1 || [ -x /usr/bin/prometheus-alertmanager ] || need_apt+=(prometheus-alertmanager)
# Container images (scripts/image.sh, make image, the image test): a Debian
# base from mmdebstrap, assembled and run with buildah.
command -v mmdebstrap >/dev/null 2>&1 || need_apt+=(mmdebstrap)
command -v buildah >/dev/null 2>&1 || need_apt+=(buildah)
command -v podman >/dev/null 2>&1 || need_apt+=(podman)
command -v newuidmap >/dev/null 2>&1 || need_apt+=(uidmap)
# etcd for the Kubernetes control plane test/deploy starts.
command -v etcd >/dev/null 2>&1 || need_apt+=(etcd-server)
if [ "${#need_apt[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing Debian packages: ${need_apt[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
  else
    say "missing: ${need_apt[*]} (install them with your package manager; tests that need them will fail loudly)"
  fi
fi

# Python and PyTorch models run in workers started with /usr/bin/python3
# and Debian's numpy and torch; nothing comes from PyPI. python3-torch
# pulls in about a gigabyte of packages, so it has a step of its own.
need_py=()
[ -x /usr/bin/python3 ] || need_py+=(python3)
/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1 || need_py+=(python3-numpy)
/usr/bin/python3 -c 'import torch' >/dev/null 2>&1 || need_py+=(python3-torch)
if [ "${#need_py[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing Debian packages for Python and PyTorch models: ${need_py[*]} (python3-torch is large: a few minutes)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need_py[@]}" >/dev/null
    say "installed ${need_py[*]}"
  else
    say "missing: ${need_py[*]} (Python and PyTorch models need them; their tests will fail loudly)"
  fi
fi

# TorchScript models run in the server's process through libtorch: Debian's
# libtorch-dev (the same libtorch as python3-torch) and a small C++ library
# built against it into the user cache. The build script does nothing when
# the library is up to date.
need_torch=()
[ -e /usr/include/torch/script.h ] || need_torch+=(libtorch-dev)
command -v g++ >/dev/null 2>&1 || need_torch+=(g++)
if [ "${#need_torch[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing Debian packages for in-process TorchScript: ${need_torch[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends "${need_torch[@]}" >/dev/null
  else
    say "missing: ${need_torch[*]} (TorchScript models run in the Python worker without them; the libtorch tests fail loudly)"
  fi
fi
if [ -e /usr/include/torch/script.h ] && command -v g++ >/dev/null 2>&1; then
  scripts/build-torch-shim.sh >/dev/null
fi

# helm for test/deploy, built once from its Go module into the user cache,
# where the tests look for it (test/deploy/main_test.go: helmVersion; they
# build it themselves when it is missing). Cold: 3 CPU minutes, 10-20
# minutes of wall time on a loaded 2-core machine, too long to happen
# inside a test binary's timeout.
helm_version=v3.22.0
helm_dir="${XDG_CACHE_HOME:-$HOME/.cache}/sluice/helm-$helm_version"
if ! "$helm_dir/helm" version --short >/dev/null 2>&1; then
  say "building helm $helm_version from its Go module into $helm_dir (cold: 10-20 minutes on a loaded machine)"
  GOBIN="$helm_dir" GOFLAGS=-mod=mod go install "helm.sh/helm/v3/cmd/helm@$helm_version"
fi

# kube-apiserver, kube-controller-manager and kubectl for test/deploy's
# control plane, built from the Go module proxy into the user cache, with
# prometheus-operator's CRDs. Cold: about 20 minutes on a loaded 2-core
# machine; afterwards it finds them and returns at once.
scripts/install-kube.sh

# Azurite (Azure Blob Storage emulator, from npm) for the as:// model
# repository tests, pinned, into the cache folder the tests look in
# (internal/objstore/objstoretest). The S3 and GCS test servers are Go
# modules and need no install.
AZURITE_VERSION=3.37.0
azurite_dir="${XDG_CACHE_HOME:-$HOME/.cache}/sluice/azurite-$AZURITE_VERSION"
if [ ! -x "$azurite_dir/node_modules/.bin/azurite-blob" ]; then
  if command -v npm >/dev/null 2>&1; then
    say "installing azurite@$AZURITE_VERSION from npm into $azurite_dir"
    mkdir -p "$azurite_dir"
    npm install --silent --no-audit --no-fund --prefix "$azurite_dir" "azurite@$AZURITE_VERSION" >/dev/null 2>&1 ||
      say "npm install azurite@$AZURITE_VERSION failed (the as:// tests will fail loudly)"
  else
    say "missing: npm (Azurite for the as:// tests)"
  fi
fi
