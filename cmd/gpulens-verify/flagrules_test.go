package main

import (
	"io"
	"testing"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpulens/gpulens/internal/cliflag/cliflagtest"
)

// Every duration, byte-size and GPU-hour price flag of gpulens-verify, burn
// and compare reads its values by cliflag's one rule, as the exporter's and
// the load generator's do, and rejects a bad value naming the flag.
func TestFlagRules(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		newApp func() *kingpin.Application
		// The flags known today; one added later is checked too.
		durations, sizes int
	}{
		{"gpulens-verify", func() *kingpin.Application { app, _, _ := newApp(io.Discard); return app }, 3, 3},
		{"burn", func() *kingpin.Application { app, _ := newBurnApp(io.Discard); return app }, 2, 1},
		{"compare", func() *kingpin.Application { app, _ := newCompareApp(io.Discard); return app }, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			found := cliflagtest.Check(t, tc.newApp)
			if found[cliflagtest.Duration] < tc.durations || found[cliflagtest.Bytes] < tc.sizes {
				t.Errorf("found %v, want at least %d durations and %d byte sizes", found, tc.durations, tc.sizes)
			}
		})
	}
}
