#!/usr/bin/env bash
# install-kube.sh — build the Kubernetes control plane the deploy tests run
# against (kube-apiserver, kube-controller-manager, kubectl) from the Go module
# proxy, and fetch prometheus-operator's CRDs from its Go module.
#
# `go install k8s.io/kubernetes/cmd/...@v` does not work (kubernetes' go.mod
# replaces its staging modules with ./staging/... paths), so we build from a
# throwaway module that requires k8s.io/kubernetes at a pinned version, copies
# its require list and replaces every staging module with its published v0.x
# twin. -ldflags stamp the version: without it the server reports
# v0.0.0-master and kubectl's and helm's version checks fail.
#
# Idempotent: a second run finds the binaries (and the stamp naming the
# version) and does nothing. A cold build takes about 20 minutes on a loaded
# 2-core machine; it runs under nice.
#
# Usage: scripts/install-kube.sh [--print-dir | --check]
#   --print-dir  print the install folder at the end
#   --check      print it if everything is installed, else fail (no build;
#                the tests use this, so a cold build never runs inside one)
#   SLUICE_KUBE_DIR  where to install (default: ${XDG_CACHE_HOME:-~/.cache}/sluice/kube-$KUBE_VERSION)
# Layout: $dir/bin/{kube-apiserver,kube-controller-manager,kubectl},
#         $dir/crds/*.yaml (prometheus-operator), $dir/stamp
set -euo pipefail

KUBE_VERSION=1.37.2
PROMOP_VERSION=v0.85.0

cache_root="${XDG_CACHE_HOME:-$HOME/.cache}"
dest="${SLUICE_KUBE_DIR:-$cache_root/sluice/kube-$KUBE_VERSION}"
stamp_want="kubernetes v$KUBE_VERSION prometheus-operator $PROMOP_VERSION"

say() { echo "install-kube: $*" >&2; }

done_already() {
  [ -f "$dest/stamp" ] && [ "$(cat "$dest/stamp")" = "$stamp_want" ] &&
    [ -x "$dest/bin/kube-apiserver" ] && [ -x "$dest/bin/kube-controller-manager" ] &&
    [ -x "$dest/bin/kubectl" ] && ls "$dest"/crds/*.yaml >/dev/null 2>&1
}

if done_already; then
  case "${1:-}" in --print-dir|--check) echo "$dest" ;; esac
  exit 0
fi
if [ "${1:-}" = "--check" ]; then
  say "not installed in $dest: run scripts/install-kube.sh (make deps; ~20 minutes cold)"
  exit 1
fi

command -v go >/dev/null 2>&1 || { say "Go is required"; exit 1; }
command -v python3 >/dev/null 2>&1 || { say "python3 is required (to read kubernetes' go.mod)"; exit 1; }

# One build at a time: a second make deps waits for the first, then finds
# everything installed.
mkdir -p "$(dirname "$dest")"
exec 9>"$dest.lock"
if command -v flock >/dev/null 2>&1; then
  flock 9
  if done_already; then
    [ "${1:-}" = "--print-dir" ] && echo "$dest"
    exit 0
  fi
fi

mkdir -p "$dest/bin" "$dest/crds"
work="$(mktemp -d "${TMPDIR:-/tmp}/sluice-kube-build.XXXXXX")"
trap 'rm -rf "$work"' EXIT

say "building kube-apiserver, kube-controller-manager and kubectl v$KUBE_VERSION (cold: ~20 min)"
gomod="$(go mod download -json "k8s.io/kubernetes@v$KUBE_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')"
python3 - "$gomod" "$KUBE_VERSION" >"$work/go.mod" <<'PY'
import re, sys
src, ver = open(sys.argv[1]).read(), sys.argv[2]
minor = "v0." + ver.split(".", 1)[1]
req, rep = [], []
def block(name):
    out = []
    for m in re.finditer(r"^" + name + r" \((.*?)^\)", src, re.S | re.M):
        out += [l.split("//")[0].strip() for l in m.group(1).splitlines()]
    for m in re.finditer(r"^" + name + r" ([^(\n].*)$", src, re.M):
        out.append(m.group(1).split("//")[0].strip())
    return [l for l in out if l]
for l in block("require"):
    req.append(l)
for l in block("replace"):
    mod = l.split("=>")[0].split()[0]
    target = l.split("=>")[1].strip()
    if target.startswith("./staging/"):
        rep.append(f"{mod} => {mod} {minor}")
    else:
        rep.append(l)
print("module local/kubebuild\n\ngo 1.26.0\n\ngodebug default=go1.26\n")
print("require (\n\tk8s.io/kubernetes v" + ver)
for l in req: print("\t" + l)
print(")\n\nreplace (")
for l in rep: print("\t" + l)
print(")")
PY
ld=""
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ld="$ld -X $p.gitVersion=v$KUBE_VERSION -X $p.gitMajor=${KUBE_VERSION%%.*}"
  minor="${KUBE_VERSION#*.}"; minor="${minor%%.*}"
  ld="$ld -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=2026-10-27T00:00:00Z"
done
(
  cd "$work"
  export GOFLAGS=-mod=mod
  nice -n 10 go build -p 2 -trimpath -ldflags "-s -w $ld" -o "$dest/bin/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kubectl
)
# grep reads all of kubectl's output: with pipefail, grep -q could exit first and
# kubectl's SIGPIPE would fail the check (it did, on a cold build).
"$dest/bin/kubectl" version --client | grep "v$KUBE_VERSION" >/dev/null || { say "kubectl does not report v$KUBE_VERSION"; exit 1; }

say "fetching prometheus-operator $PROMOP_VERSION CRDs from its Go module"
pdir="$(go mod download -json "github.com/prometheus-operator/prometheus-operator@$PROMOP_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
cp "$pdir"/example/prometheus-operator-crd/*.yaml "$dest/crds/"
chmod u+w "$dest"/crds/*.yaml

echo "$stamp_want" >"$dest/stamp"
say "installed in $dest"
[ "${1:-}" = "--print-dir" ] && echo "$dest"
exit 0
