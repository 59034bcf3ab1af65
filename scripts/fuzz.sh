#!/usr/bin/env bash
# fuzz.sh [DURATION] — run every native Go fuzz target in the module for
# DURATION (default 3s) each. Crashers land in the package's
# testdata/fuzz/<Target>/ folder; commit them with the fix.
# Minimizing a new input is capped at 1s: with a short -fuzztime, a
# minimization still running when time is up fails the run with "context
# deadline exceeded" (seen with FuzzReadParquet, whose inputs are slow to
# shrink), which says nothing about the code under test.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${1:-3s}"
status=0
while IFS= read -r line; do
  file="${line%%:*}"
  name="$(sed -E 's/^func (Fuzz[A-Za-z0-9_]*).*/\1/' <<<"${line#*:}")"
  pkg="./$(dirname "$file")"
  echo "fuzz: $pkg $name ($fuzztime)"
  if ! go test -run='^$' -fuzz="^${name}\$" -fuzztime="$fuzztime" -fuzzminimizetime=1s "$pkg" >/tmp/sluice-fuzz.$$ 2>&1; then
    cat /tmp/sluice-fuzz.$$
    status=1
  fi
done < <(git ls-files -co --exclude-standard '*_test.go' | xargs grep -H '^func Fuzz' | sort)
rm -f /tmp/sluice-fuzz.$$
exit $status
