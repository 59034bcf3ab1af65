package batch

import (
	"syscall"
	"time"
)

// prSetTimerSlack is prctl's PR_SET_TIMERSLACK.
const prSetTimerSlack = 29

// preciseThread asks the kernel to wake the calling thread's sleeps at
// most 1 ns late instead of the default 50 µs (the caller has locked its
// goroutine to the thread).
func preciseThread() {
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerSlack, 1, 0) // best effort: the default slack only makes wakes later
}

// preciseSleep blocks the thread in the kernel for d. Go's timers cannot
// do this on an idle process: the scheduler then waits in epoll with
// millisecond resolution, so a 200 µs timer fires about 1 ms late.
func preciseSleep(d time.Duration) {
	ts := syscall.NsecToTimespec(d.Nanoseconds())
	_ = syscall.Nanosleep(&ts, nil) // EINTR only shortens the sleep; the caller rechecks the time
}
