package main

import (
	"io"
	"testing"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpulens/gpulens/internal/cliflag/cliflagtest"
)

// Every duration, byte-size and GPU-hour price flag of the exporter reads
// its values by cliflag's one rule, as gpulens-verify's and the load
// generator's do, and rejects a bad value naming the flag.
func TestFlagRules(t *testing.T) {
	t.Parallel()
	found := cliflagtest.Check(t, func() *kingpin.Application {
		app, _ := newApp(io.Discard)
		return app
	})
	// The flags known today (--sampler.*, --collector.probe.*,
	// --kubernetes.pod-resources-timeout; --collector.probe.max-memory;
	// --cost.gpu-hourly-usd): a flag added later is checked too.
	if found[cliflagtest.Duration] < 6 || found[cliflagtest.Bytes] < 1 || found[cliflagtest.Price] < 1 {
		t.Errorf("found %v, want at least 6 durations, 1 byte size and 1 price", found)
	}
}
