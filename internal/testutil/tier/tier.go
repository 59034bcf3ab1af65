// Package tier draws the line between the test tiers. `make test-short`
// (go test -short) is the unit tier: it runs in seconds and builds no
// binary, Helm chart or container image and starts no browser. The
// integration, end-to-end docs, deploy, browser and drill tiers run under
// `make test`, which never passes -short, so every test still runs in CI.
//
// A package that is a tier of its own (test/integration, test/deploy,
// test/docs) calls LeftOut first in its TestMain; a test of another tier in
// a unit-test package (a browser test beside the console's unit tests, a
// drill that runs tens of seconds by design) calls Skip. -short decides
// tiers only: a test that needs a service it cannot reach fails rather
// than skips.
package tier

import (
	"flag"
	"fmt"
	"testing"
)

// LeftOut reports whether the test binary runs under -short, in which
// case the calling TestMain returns 0 without running its tests: the
// package is tier name, which `make test` runs. It prints what it leaves
// out. It parses the test flags (m.Run would parse them anyway).
func LeftOut(name string) bool {
	if !flag.Parsed() {
		flag.Parse()
	}
	if !testing.Short() {
		return false
	}
	fmt.Printf("%s tier: left out under -short (make test-short); make test runs it\n", name)
	return true
}

// Skip skips tb under -short: it is a test of tier name in a package of
// unit tests, which `make test` runs.
func Skip(tb testing.TB, name string) {
	tb.Helper()
	if testing.Short() {
		tb.Skipf("%s tier: left out under -short (make test-short); make test runs it", name)
	}
}
