//go:build !linux

package batch

import "time"

// preciseThread does nothing where the timer slack cannot be set.
func preciseThread() {}

// preciseSleep sleeps with Go's timer, which is as precise as this
// platform allows.
func preciseSleep(d time.Duration) { time.Sleep(d) }
