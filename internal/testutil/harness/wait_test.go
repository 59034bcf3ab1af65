package harness

import (
	"fmt"
	"net"
	"testing"
	"time"
)

func TestWaitForReturnsWhenDone(t *testing.T) {
	n := 0
	WaitFor(t, time.Minute, time.Millisecond, "three calls", func() (bool, string) {
		n++
		return n == 3, fmt.Sprint(n)
	})
	if n != 3 {
		t.Fatalf("cond called %d times, want 3", n)
	}
}

// fatalRecorder is a testing.TB that records Fatalf instead of ending the
// goroutine's test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(f)
}

func TestWaitForFailsWithTheLastState(t *testing.T) {
	rec := &fatalRecorder{TB: t}
	func() {
		defer func() {
			if r := recover(); r != rec {
				panic(r)
			}
		}()
		WaitFor(rec, 20*time.Millisecond, time.Millisecond, "never", func() (bool, string) { return false, "still no" })
	}()
	if want := "never: not within 20ms; last state: still no"; rec.msg != want {
		t.Fatalf("Fatalf message %q, want %q", rec.msg, want)
	}
}

func TestFreePortBelowEphemeralAndNeverTwice(t *testing.T) {
	lo, hi := belowEphemeral()
	seen := map[int]bool{}
	for range 50 {
		p := FreePort(t)
		if seen[p] {
			t.Fatalf("port %d returned twice", p)
		}
		seen[p] = true
		if hi > lo && (p < lo || p >= hi) {
			t.Errorf("port %d outside [%d, %d), below the ephemeral range", p, lo, hi)
		}
		ln, err := new(net.ListenConfig).Listen(t.Context(), "tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Fatalf("port %d from FreePort: %v", p, err)
		}
		_ = ln.Close()
	}
}
