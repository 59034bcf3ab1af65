package harness

import (
	"fmt"
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
