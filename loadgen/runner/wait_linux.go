package runner

import (
	"syscall"
	"time"
)

// shortWait blocks the calling thread for d (at most a few milliseconds)
// with nanosleep, which the kernel's high-resolution timers end within
// tens of microseconds, without spinning a CPU: the runtime hands the
// goroutine's P to other goroutines while the thread sleeps.
func shortWait(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	_ = syscall.Nanosleep(&ts, nil) // EINTR: the caller re-checks the time
}
