//go:build unix

package report

import (
	"errors"
	"os"
	"syscall"
)

// openNonblock opens path write-only and non-blocking; errNoReader when it
// is a FIFO with no reader.
func openNonblock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ENXIO) {
		return nil, errNoReader
	}
	return f, err
}
