package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/gpulens/gpulens/loadgen/report"
)

// outFile is one file a run writes, named by its flag.
type outFile struct {
	flag, path string
	write      func(io.Writer) error
}

// checkOutputs rejects, before any request is sent, an output that could
// not be written at the end (missing or unwritable folder, a directory, a
// socket) and two outputs on one path.
func checkOutputs(outs []outFile) error {
	seen := map[string]string{}
	for _, o := range outs {
		if o.path == "" {
			continue
		}
		if err := report.Check(o.path); err != nil {
			return fmt.Errorf("%s %s: %w", o.flag, o.path, err)
		}
		key := o.path
		if abs, err := filepath.Abs(o.path); err == nil {
			key = abs
		}
		if prev, dup := seen[key]; dup {
			return fmt.Errorf("%s and %s both write %s", prev, o.flag, o.path)
		}
		seen[key] = o.flag
	}
	return nil
}

// writeOutput writes o; when that fails it saves the same content to a
// new file in the temporary folder, so that nothing measured is lost, and
// says where in the error.
func writeOutput(o outFile) error {
	err := report.Write(o.path, o.write)
	if err == nil {
		return nil
	}
	f, terr := os.CreateTemp("", "gpulens-loadgen-*"+filepath.Ext(o.path))
	if terr != nil {
		return fmt.Errorf("%s: writing %s: %w (and no copy could be saved: %v)", o.flag, o.path, err, terr)
	}
	werr := report.Write(f.Name(), o.write)
	f.Close()
	if werr != nil {
		os.Remove(f.Name())
		return fmt.Errorf("%s: writing %s: %w (and no copy could be saved: %v)", o.flag, o.path, err, werr)
	}
	return fmt.Errorf("%s: writing %s: %w; saved to %s instead", o.flag, o.path, err, f.Name())
}
