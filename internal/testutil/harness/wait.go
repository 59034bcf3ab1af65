package harness

import (
	"testing"
	"time"
)

// WaitFor calls cond every poll until it reports done and returns how
// long that took. When timeout passes first it fails the test, naming
// what it waited for and the state cond last reported. cond runs on the
// test's goroutine, so it may fail the test itself.
func WaitFor(tb testing.TB, timeout, poll time.Duration, what string, cond func() (done bool, state string)) time.Duration {
	tb.Helper()
	begin := time.Now()
	for {
		done, state := cond()
		if done {
			return time.Since(begin)
		}
		if time.Since(begin) > timeout {
			tb.Fatalf("%s: not within %v; last state: %s", what, timeout, state)
		}
		time.Sleep(poll)
	}
}
