#!/usr/bin/env bash
# install-golangci-lint.sh — build the pinned golangci-lint from its Go
# module into the user cache (idempotent: returns at once when it is there)
# and print its path. make deps runs it; make test and make lint run the
# binary with the repository's .golangci.yml. Cold: a few CPU minutes.
set -euo pipefail

version=v2.15.0
dir="${XDG_CACHE_HOME:-$HOME/.cache}/sluice/golangci-lint-$version"
if ! "$dir/golangci-lint" version >/dev/null 2>&1; then
  echo "setup: building golangci-lint $version from its Go module into $dir" >&2
  GOBIN="$dir" GOFLAGS=-mod=mod go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$version"
fi
echo "$dir/golangci-lint"
