package main

import (
	"context"
	"log/slog"
	"math"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpulens/gpulens/internal/sim/simserver"
	"github.com/gpulens/gpulens/internal/testenv"
	"github.com/gpulens/gpulens/loadgen/report"
)

// TestEnergyRepeatsAgreeOnSimulatedFleet (issue 23): repeats of 2 s runs
// read at a 2 s poll interval from an exporter on the simulated fleet
// (scenario minimal: one H100 at a constant 420 W, read every second)
// report energies within 5 % of each other and of 420 W × the run's
// length, where the exporter's last readings at the runs' edges differ
// by one sampler cycle (420 J) from run to run; the aggregate row's energy
// is their mean.
func TestEnergyRepeatsAgreeOnSimulatedFleet(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the exporter")
	}
	exp := testenv.Run(t, testenv.Binary(t, "gpulens-exporter"), "--sim.scenario=minimal", "--web.listen-address=127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addr := exp.MustAddress(ctx, t)
	srv := httptest.NewServer(simHandler(t, simserver.Config{FixedTTFT: 5 * time.Millisecond, FixedITL: 2 * time.Millisecond, TokensPerChunk: 1, Seed: 1}))
	defer srv.Close()
	out := filepath.Join(t.TempDir(), "r.json")
	c := parseLoadCommand(t, sweepCommand, []string{"sweep", "--target", srv.URL + "/v1", "--concurrency", "2", "--repeats", "3", "--duration", "2s",
		"--exporter.url", "http://" + addr + "/metrics", "--exporter.poll-interval", "2s", "--no-server-info", "--output", out})
	if err := c.run(ctx, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	d, err := report.Read(out)
	if err != nil {
		t.Fatal(err)
	}
	var energies, durations []float64
	var agg *report.RunGPU
	for _, r := range d.Runs {
		g := r.GPU
		if g == nil || g.Error != "" || g.EnergyFromPower {
			t.Fatalf("%s: GPU side %+v", r.Name, g)
		}
		if r.Aggregate {
			agg = g
			continue
		}
		want := 420 * g.DurationSeconds
		t.Logf("%s: %.1f J over %.3f s (%.0f%% extrapolated)", r.Name, g.EnergyJoules, g.DurationSeconds, g.EnergyExtrapolatedRatio*100)
		if math.Abs(g.EnergyJoules-want) > 0.05*want || g.DurationSeconds < 1.9 {
			t.Errorf("%s: %.1f J over %.3f s, want 420 W × the run = %.1f J", r.Name, g.EnergyJoules, g.DurationSeconds, want)
		}
		if g.Warning != "" {
			t.Errorf("%s: a 2 s run at a 1 s sampler interval flagged short: %s", r.Name, g.Warning)
		}
		energies = append(energies, g.EnergyJoules)
		durations = append(durations, g.DurationSeconds)
	}
	if len(energies) != 3 || agg == nil {
		t.Fatalf("%d repeats, aggregate %v", len(energies), agg)
	}
	// Within 5 %, beyond what the runs' own lengths differ by (a run
	// drains its last requests after its 2 s: a few tens of ms).
	lo, hi, sum := energies[0], energies[0], 0.0
	dlo, dhi := durations[0], durations[0]
	for i, e := range energies {
		lo, hi, sum = math.Min(lo, e), math.Max(hi, e), sum+e
		dlo, dhi = math.Min(dlo, durations[i]), math.Max(dhi, durations[i])
	}
	if (hi-lo)/lo > 0.05+(dhi-dlo)/dlo {
		t.Errorf("repeats' energies %v differ by %.1f %% over %v s, want within 5 %%", energies, (hi-lo)/lo*100, durations)
	}
	if math.Abs(agg.EnergyJoules-sum/3) > 1e-9*sum {
		t.Errorf("aggregate energy %v, want the mean %v", agg.EnergyJoules, sum/3)
	}
}
