package render

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/gpulens/gpulens/loadgen/report"
	"github.com/gpulens/gpulens/loadgen/stats"
)

// TestAggregateRowsLabelled: with repeats, the summary table says its
// "mean" rows are means but for the counts, which are totals; a run too
// short for its energy figure is a warning at the top.
func TestAggregateRowsLabelled(t *testing.T) {
	mk := func(i int, energy float64, warn string) report.Run {
		return report.Run{Name: "concurrency=1 repeat=" + string(rune('0'+i)), Level: 1, Repeat: i, Settings: report.Settings{Mode: "closed", Concurrency: 1},
			Summary: report.Summary{RequestsCompleted: 10, OutputTokensTotal: 100, DurationSeconds: 2},
			GPU:     &report.RunGPU{EnergyJoules: energy, Samples: 2, Warning: warn}}
	}
	reps := []report.Run{mk(1, 640, ""), mk(2, 660, "run too short for a trustworthy energy figure")}
	agg := stats.Aggregate(reps)
	for _, tc := range []struct {
		runs []report.Run
		want bool
	}{{append(reps, agg), true}, {reps[:1], false}} {
		var b bytes.Buffer
		if err := Render(&b, &report.Document{Metadata: report.Metadata{Model: "m"}, Runs: tc.runs}); err != nil {
			t.Fatal(err)
		}
		html := b.String()
		if got := strings.Contains(html, "except Completed and Failed, which are totals over the repeats"); got != tc.want {
			t.Errorf("%d runs: caption on the means %v, want %v", len(tc.runs), got, tc.want)
		}
		if got := strings.Contains(html, "concurrency=1 repeat=2: energy: run too short"); got != tc.want {
			t.Errorf("%d runs: short-run warning %v, want %v", len(tc.runs), got, tc.want)
		}
	}
}

// TestTokensColumns: the summary table shows each run's p50 lengths asked
// for against the server's, the calibration is in the metadata and a
// difference above 5 % is a warning.
func TestTokensColumns(t *testing.T) {
	r := report.Run{Name: "concurrency=1", Level: 1, Settings: report.Settings{Mode: "closed", Concurrency: 1}, Summary: report.Summary{RequestsCompleted: 3,
		InputTokens: report.Dist{Count: 3, Mean: 118, P50: 117}, InputTokensRequested: &report.Dist{Count: 3, Mean: 32, P50: 32},
		OutputTokens: report.Dist{Count: 3, Mean: 128, P50: 128}, OutputTokensRequested: &report.Dist{Count: 3, Mean: 128, P50: 128}}}
	var b bytes.Buffer
	if err := Render(&b, &report.Document{Metadata: report.Metadata{Model: "m", TokenCalibration: &report.TokenCalibration{Method: "tokenize", TokensPerWord: 1, OverheadTokens: 21,
		Probes: make([]report.TokenProbe, 6)}}, Runs: []report.Run{r}}); err != nil {
		t.Fatal(err)
	}
	html := b.String()
	for _, want := range []string{"Input tokens p50 (asked → server)", "<td class=\"n\">32 → 117</td>", "<td class=\"n\">128 → 128</td>",
		"tokenize: 1.000 tokens per word &#43; 21.0 tokens per request (6 probes, not measured)",
		"concurrency=1: input tokens: the server counted mean 118.0 where 32.0 was asked for"} {
		if !strings.Contains(html, want) {
			t.Errorf("HTML lacks %q", want)
		}
	}
}

// TestAggregateTurnsCharted: the aggregate of multi-turn repeats has its
// turn split (stats.AggregateTurns) and the chart of first against later
// turns draws it beside the repeats'.
func TestAggregateTurnsCharted(t *testing.T) {
	mk := func(i int, first, later float64) report.Run {
		return report.Run{Name: "concurrency=2 repeat=" + string(rune('0'+i)), Level: 2, Repeat: i,
			Settings: report.Settings{Mode: "closed", Concurrency: 2, MultiTurn: report.MultiTurnSettings{Turns: 2}},
			Summary:  report.Summary{RequestsCompleted: 4, DurationSeconds: 1},
			Turns: &report.TurnSummary{Conversations: 2, FirstTurnTTFT: report.Dist{Count: 2, P50: first, P99: first},
				LaterTurnsTTFT: report.Dist{Count: 2, P50: later, P99: later}}}
	}
	reps := []report.Run{mk(1, 0.2, 0.1), mk(2, 0.4, 0.3)}
	var b bytes.Buffer
	if err := Render(&b, &report.Document{Metadata: report.Metadata{Model: "m"}, Runs: append(reps, stats.Aggregate(reps))}); err != nil {
		t.Fatal(err)
	}
	tips := chartTips(b.String(), ChartTurnsTTFT)
	if len(tips) != 12 {
		t.Fatalf("%d bars, want 4 for each repeat and 4 for the mean: %q", len(tips), tips)
	}
	// The mean's bars: the means of the repeats' percentiles.
	for _, want := range []string{"c=2 mean, first turn p50: 300 ms", "c=2 mean, later turns p50: 200 ms",
		"c=2 mean, first turn p99: 300 ms", "c=2 mean, later turns p99: 200 ms"} {
		if !slices.Contains(tips, want) {
			t.Errorf("the chart's bars %q lack %q", tips, want)
		}
	}
}
