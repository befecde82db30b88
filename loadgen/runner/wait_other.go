//go:build !linux

package runner

import (
	"runtime"
	"time"
)

// shortWait yields the processor once; the caller re-checks the time, so
// the last stretch before a send spins.
func shortWait(time.Duration) { runtime.Gosched() }
