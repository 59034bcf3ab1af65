#!/usr/bin/env bash
# fuzz.sh [DURATION] — run every native Go fuzz target in the module for
# DURATION (default 3s) each. Crashers land in the package's
# testdata/fuzz/<Target>/ folder; commit them with the fix.
#
# Each package's test binary is built once, with the coverage
# instrumentation `go test -fuzz` adds (`go test -c -fuzz=...`), and run
# once per target from the package's folder, as `go test -fuzz` runs it:
# the seeds in testdata/fuzz/<Target> run first, new crashers are written
# there, and the generated corpus is kept where `go test -fuzz` keeps it
# ($(go env GOCACHE)/fuzz/<import path>/<Target>). `go test -fuzz` would
# compile and link the binary again for every target; most of this
# script's time was that. A binary that reports it was built without
# coverage instrumentation fails the run: fuzzing it would be blind. The
# build skips go test's vet checks (-vet=off): make test runs go vet first.
#
# Minimizing a new input is capped at 1s: with a short -fuzztime, a
# minimization still running when time is up fails the run with "context
# deadline exceeded" (seen with FuzzReadParquet, whose inputs are slow to
# shrink), which says nothing about the code under test. On a loaded
# machine the fuzzer can still stop that way, with no failing input: such a
# run (no "Failing input written") is run once more; a second one fails.
# A real failure always writes its input and fails at once.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
fuzztime="${1:-3s}"
module="$(go list -m)"
cachedir="$(go env GOCACHE)/fuzz"
work="$(mktemp -d "${TMPDIR:-/tmp}/sluice-fuzz.XXXXXX")"
trap 'rm -rf "$work"' EXIT
out="$work/out"
status=0

# fuzz_target DIR IMPORTPATH BINARY NAME runs one target, with the retry
# above.
fuzz_target() {
  local dir="$1" importpath="$2" bin="$3" name="$4" attempt
  echo "fuzz: ./$dir $name ($fuzztime)"
  for attempt in 1 2; do
    if (cd "$root/$dir" && "$bin" -test.run='^$' -test.fuzz="^${name}\$" \
      -test.fuzztime="$fuzztime" -test.fuzzminimizetime=1s -test.timeout=10m \
      -test.paniconexit0 -test.fuzzcachedir="$cachedir/$importpath") >"$out" 2>&1; then
      if grep -q 'not built with coverage instrumentation' "$out"; then
        cat "$out"
        echo "fuzz: $bin has no coverage instrumentation"
        return 1
      fi
      return 0
    fi
    if [ "$attempt" = 1 ] && ! grep -q 'Failing input written' "$out" &&
      grep -q 'context deadline exceeded' "$out"; then
      echo "fuzz: ./$dir $name stopped at its deadline without a failing input (the fuzzer, not the code); running it again"
      continue
    fi
    cat "$out"
    return 1
  done
}

# One line per target: the package's folder, then the target's name.
targets="$(git ls-files -co --exclude-standard '*_test.go' | xargs grep -H '^func Fuzz' | sort |
  awk -F: '{ d = $1; if (!sub(/\/[^\/]*$/, "", d)) d = "."; match($2, /Fuzz[A-Za-z0-9_]*/); print d, substr($2, RSTART, RLENGTH) }')"
for dir in $(cut -d' ' -f1 <<<"$targets" | sort -u); do
  names="$(awk -v d="$dir" '$1 == d { print $2 }' <<<"$targets")"
  importpath="$module"
  [ "$dir" = . ] || importpath="$module/$dir"
  bin="$work/$(tr / _ <<<"$importpath").test"
  if ! go test -c -vet=off -fuzz="^($(paste -sd'|' <<<"$names"))\$" -o "$bin" "./$dir" >"$out" 2>&1; then
    cat "$out"
    echo "fuzz: building ./$dir failed"
    status=1
    continue
  fi
  for name in $names; do
    fuzz_target "$dir" "$importpath" "$bin" "$name" || status=1
  done
  rm -f "$bin"
done
exit $status
