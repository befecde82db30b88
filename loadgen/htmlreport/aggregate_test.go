package htmlreport

import (
	"bytes"
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
	agg.GPU = report.AggregateGPU(reps)
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
