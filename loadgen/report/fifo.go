package report

import (
	"errors"
	"fmt"
	"os"
	"time"
)

// ReaderWait is how long Write waits for a reader to open a FIFO before it
// gives up: a FIFO nobody reads never blocks a command without bound.
const ReaderWait = 5 * time.Second

// StallTimeout is how long one write to a FIFO may make no progress (its
// reader stopped reading) before Write gives up.
const StallTimeout = 30 * time.Second

// readerPoll is how often a FIFO is tried again while it has no reader.
const readerPoll = 50 * time.Millisecond

// errNoReader is a FIFO's open failing for want of a reader (ENXIO).
var errNoReader = errors.New("no reader")

// openFIFO opens a FIFO for writing without blocking: while no reader has
// it open, it tries again every readerPoll, for at most wait. The file is
// non-blocking, so its writes take deadlines (deadlineWriter).
func openFIFO(path string, wait time.Duration) (*os.File, error) {
	deadline := time.Now().Add(wait)
	for {
		f, err := openNonblock(path)
		if !errors.Is(err, errNoReader) {
			return f, err
		}
		if !time.Now().Before(deadline) {
			return nil, fmt.Errorf("%s is a FIFO that no reader opened within %v", path, wait)
		}
		time.Sleep(min(readerPoll, time.Until(deadline)))
	}
}

// deadlineWriter writes to a non-blocking file, each write failing after
// stall without progress.
type deadlineWriter struct {
	f     *os.File
	stall time.Duration
}

func (w deadlineWriter) Write(p []byte) (int, error) {
	if err := w.f.SetWriteDeadline(time.Now().Add(w.stall)); err != nil {
		return w.f.Write(p) // not pollable: a plain write
	}
	n, err := w.f.Write(p)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = fmt.Errorf("%s: the reader took nothing for %v", w.f.Name(), w.stall)
	}
	return n, err
}
