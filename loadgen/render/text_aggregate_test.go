package render

import (
	"bytes"
	"encoding/csv"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/gpulens/gpulens/loadgen/report"
	"github.com/gpulens/gpulens/loadgen/stats"
)

// aggregatedDoc is two repeats with different GPU sides and their
// aggregate, built as a sweep builds it.
func aggregatedDoc() *report.Document {
	r1, r2 := rep(1, 10, 0.1, 0.15, nil), rep(2, 20, 0.2, 0.25, nil)
	r1.GPU = &report.RunGPU{GPUs: []report.RunGPUDevice{{GPU: "0", EnergyJoules: 640}}, PeakMemoryUsedBytes: 10e9, MeanUtilizationRatio: 0.4,
		MeanPowerWatts: 300, EnergyJoules: 640, OutputTokensPerJoule: 100.0 / 640, EnergyPerRequestJoules: 64, Samples: 2,
		DurationSeconds: 1.89, EnergyExtrapolatedRatio: 0.2}
	r2.GPU = &report.RunGPU{GPUs: []report.RunGPUDevice{{GPU: "0", EnergyJoules: 1289}}, PeakMemoryUsedBytes: 12e9, MeanUtilizationRatio: 0.6,
		MeanPowerWatts: 500, EnergyJoules: 1289, OutputTokensPerJoule: 200.0 / 1289, EnergyPerRequestJoules: 64.45, Samples: 2,
		DurationSeconds: 1.79, EnergyExtrapolatedRatio: 0.6, Warning: "run too short for a trustworthy energy figure"}
	r1.Summary.InputTokens = report.Dist{Count: 10, Mean: 250, P50: 251, P99: 270}
	r2.Summary.InputTokens = report.Dist{Count: 20, Mean: 262, P50: 259, P99: 290}
	r1.Summary.OutputTokens = report.Dist{Count: 10, Mean: 120, P50: 128, P99: 128}
	r2.Summary.OutputTokens = report.Dist{Count: 20, Mean: 124, P50: 128, P99: 128}
	r1.Summary.InputTokensRequested = &report.Dist{Count: 10, Mean: 256, P50: 256, P99: 256}
	r2.Summary.InputTokensRequested = &report.Dist{Count: 20, Mean: 256, P50: 256, P99: 256}
	r1.Summary.OutputTokensRequested = &report.Dist{Count: 10, Mean: 128, P50: 128, P99: 128}
	r2.Summary.OutputTokensRequested = &report.Dist{Count: 20, Mean: 128, P50: 128, P99: 128}
	side := func(k float64) *report.ReasoningSummary {
		d := func(v float64) report.Dist {
			return report.Dist{Count: 10, Mean: v, Stddev: v / 10, P50: v, P90: 1.1 * v, P95: 1.2 * v, P99: 1.3 * v, Max: 1.5 * v}
		}
		return &report.ReasoningSummary{Requests: 10, ReasoningTokens: d(200 * k), AnswerTokens: d(90 * k), AnswerTTFT: d(2 * k), AnswerITL: d(0.01 * k), AnswerTPOT: d(0.011 * k)}
	}
	r1.Summary.Reasoning, r2.Summary.Reasoning = side(1), side(1.5)
	r1.PrefixCache = &report.PrefixCacheSummary{Requests: 10, Reported: 10, PromptTokens: 2500, CachedTokens: 1000, HitRatio: new(0.4),
		ExpectedHitRatio: new(0.5), CachedTokensPerRequest: report.Dist{Count: 10, Mean: 100, P50: 96, P99: 128, Max: 128}}
	r2.PrefixCache = &report.PrefixCacheSummary{Requests: 20, Reported: 20, PromptTokens: 5200, CachedTokens: 2600, HitRatio: new(0.5),
		ExpectedHitRatio: new(0.55), CachedTokensPerRequest: report.Dist{Count: 20, Mean: 130, P50: 128, P99: 144, Max: 144}}
	r1.Images = &report.ImageSummary{Requests: 10, Images: 10, PerRequest: report.Dist{Count: 10, Mean: 1, Max: 1}}
	r2.Images = &report.ImageSummary{Requests: 20, Images: 40, PerRequest: report.Dist{Count: 20, Mean: 2, Max: 2}}
	reps := []report.Run{r1, r2}
	agg := stats.Aggregate(reps)
	return &report.Document{Runs: []report.Run{r1, r2, agg}}
}

// TestAggregateColumnsAreMeans: in the CSV, every GPU column of the
// aggregate row is the mean of the repeats' (the energy was their sum),
// and every summary column is the mean except the counts, which are
// totals (documented); the console says so under the table.
func TestAggregateColumnsAreMeans(t *testing.T) {
	d := aggregatedDoc()
	var buf bytes.Buffer
	if err := WriteCSV(&buf, d); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	head := rows[0]
	totals := map[string]bool{"requests_completed": true, "requests_failed": true}
	for i, name := range head {
		if i < 4 || strings.HasPrefix(name, "errors.") {
			continue
		}
		v := func(row int) float64 {
			f, err := strconv.ParseFloat(rows[row][i], 64)
			if err != nil {
				t.Fatalf("%s row %d: %q", name, row, rows[row][i])
			}
			return f
		}
		a, b, agg := v(1), v(2), v(3)
		want := (a + b) / 2
		if totals[name] {
			want = a + b
		}
		// Distribution maxima are the largest of the repeats'.
		if strings.HasSuffix(name, ".max") {
			want = math.Max(a, b)
		}
		if math.Abs(agg-want) > 1e-9*math.Max(1, math.Abs(want)) {
			t.Errorf("column %s: aggregate %v, want %v (repeats %v, %v)", name, agg, want, a, b)
		}
	}
	var con bytes.Buffer
	WriteTable(&con, d)
	out := con.String()
	for _, want := range []string{
		`rows "(mean of N)" show the mean of the level's N repeats in every column, except ok and failed: totals`,
		"964.5", // the aggregate's energy: (640 + 1289) / 2, not 1929
		"WARNING: rate=5 repeat=2: energy: run too short",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("console lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "1929") {
		t.Errorf("console shows the summed energy:\n%s", out)
	}
}
