package main

import (
	"testing"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpulens/gpulens/internal/cliflag/cliflagtest"
)

// Every duration, byte-size and GPU-hour price flag of every command of
// the load generator reads its values by cliflag's one rule, as the
// exporter's and gpulens-verify's do, and rejects a bad value naming the
// flag: a flag declared with kingpin's own Duration, or a price read as a
// plain float, fails here.
func TestFlagRules(t *testing.T) {
	t.Parallel()
	found := cliflagtest.Check(t, func() *kingpin.Application {
		app, _, _ := newApp()
		return app
	})
	// The flags known today: 31 durations over run, sweep, sim and cost
	// (21 declarations: run's and sweep's shared ones count in each), the
	// prices of run, sweep and cost (with cost's deprecated spelling).
	if found[cliflagtest.Duration] < 31 || found[cliflagtest.Price] < 4 {
		t.Errorf("found %v, want at least 31 durations and 4 prices", found)
	}
}
