#!/usr/bin/env bash
# fuzz.sh [DURATION] — run every native Go fuzz target in the module for
# DURATION (default 3s) each. Crashers land in the package's
# testdata/fuzz/<Target>/ folder; commit them with the fix.
# Minimizing a new input is capped at 1s: with a short -fuzztime, a
# minimization still running when time is up fails the run with "context
# deadline exceeded" (seen with FuzzReadParquet, whose inputs are slow to
# shrink), which says nothing about the code under test. On a loaded
# machine the fuzzer can still stop that way, with no failing input: such a
# run (no "Failing input written") is run once more; a second one fails.
# A real failure always writes its input and fails at once.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${1:-3s}"
status=0
while IFS= read -r line; do
  file="${line%%:*}"
  name="$(sed -E 's/^func (Fuzz[A-Za-z0-9_]*).*/\1/' <<<"${line#*:}")"
  pkg="./$(dirname "$file")"
  echo "fuzz: $pkg $name ($fuzztime)"
  for attempt in 1 2; do
    if go test -run='^$' -fuzz="^${name}\$" -fuzztime="$fuzztime" -fuzzminimizetime=1s "$pkg" >/tmp/sluice-fuzz.$$ 2>&1; then
      break
    fi
    if [ "$attempt" = 1 ] && ! grep -q 'Failing input written' /tmp/sluice-fuzz.$$ &&
      grep -q 'context deadline exceeded' /tmp/sluice-fuzz.$$; then
      echo "fuzz: $pkg $name stopped at its deadline without a failing input (the fuzzer, not the code); running it again"
      continue
    fi
    cat /tmp/sluice-fuzz.$$
    status=1
    break
  done
done < <(git ls-files -co --exclude-standard '*_test.go' | xargs grep -H '^func Fuzz' | sort)
rm -f /tmp/sluice-fuzz.$$
exit $status
