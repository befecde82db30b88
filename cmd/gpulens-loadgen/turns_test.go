package main

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/gpulens/gpulens/loadgen/report"
)

// TestMultiTurnRepeatsAggregate: a multi-turn sweep with --repeats 2 has
// the turn split on its aggregate too, the mean of its repeats'
// (stats.AggregateTurns), in the JSON report.
func TestMultiTurnRepeatsAggregate(t *testing.T) {
	target := startCachingSim(t)
	out := filepath.Join(t.TempDir(), "r.json")
	// One user, 2 conversations of 3 turns per repeat: prompts of 16, 40
	// and 64 words (TestMultiTurnAgainstSim).
	c := parseLoadCommand(t, sweepCommand, []string{"sweep", "--target", target, "--concurrency", "1", "--repeats", "2", "--turns", "3",
		"--think-time", "10ms", "--requests", "6", "--output", out})
	if err := c.run(context.Background(), slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	d, err := report.Read(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Runs) != 3 || !d.Runs[2].Aggregate {
		t.Fatalf("%d runs, the last aggregate %v; want 2 repeats and their aggregate", len(d.Runs), d.Runs[len(d.Runs)-1].Aggregate)
	}
	for _, r := range d.Runs[:2] {
		if r.Turns == nil || r.Turns.Conversations != 2 {
			t.Fatalf("repeat %s: turns %+v", r.Name, r.Turns)
		}
	}
	a := d.Runs[2].Turns
	if a == nil {
		t.Fatal("the aggregate has no turn split")
	}
	// Counts are the repeats' totals; the prompt lengths, equal in both
	// repeats, their mean; the TTFTs the mean of the repeats' percentiles.
	if a.Conversations != 4 || a.FirstTurnTTFT.Count != 4 || a.LaterTurnsTTFT.Count != 8 || len(a.ByTurn) != 3 || a.ByTurn[2].Count != 4 ||
		a.FirstTurnInputTokens.Mean != 16 || a.LaterTurnsInputTokens.Mean != 52 {
		t.Errorf("aggregate turns %+v", a)
	}
	r1, r2 := d.Runs[0].Turns, d.Runs[1].Turns
	if want := r1.LaterTurnsTTFT.P50/2 + r2.LaterTurnsTTFT.P50/2; a.LaterTurnsTTFT.P50 != want {
		t.Errorf("later turns' TTFT p50 %v, want the repeats' mean %v", a.LaterTurnsTTFT.P50, want)
	}
}
