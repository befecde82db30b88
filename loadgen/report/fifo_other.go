//go:build !unix

package report

import "os"

// openNonblock opens path write-only (no FIFOs to wait for here).
func openNonblock(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
}
