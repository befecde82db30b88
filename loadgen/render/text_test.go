package render

import (
	"bytes"
	"encoding/csv"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpulens/gpulens/loadgen/report"
	"github.com/gpulens/gpulens/loadgen/stats"
)

func rep(i int, tps, ttftP99, ttftMax float64, errs map[string]int) report.Run {
	return report.Run{Name: "rate=5 repeat=" + string(rune('0'+i)), Level: 5, Repeat: i,
		Settings: report.Settings{Mode: "open", Rate: 5, Cost: report.CostSettings{GPUHourlyUSD: 2}},
		Summary: report.Summary{
			RequestsCompleted: 10 * i, RequestsFailed: i - 1, Errors: errs, OutputTokensTotal: int64(100 * i),
			OutputTokensPerSecond: tps, TTFT: report.Dist{Count: 10 * i, P50: ttftP99 / 2, P99: ttftP99, Max: ttftMax},
			Cost: report.Cost{TotalUSD: 0.01 * float64(i)}, TargetRatePerSecond: 5, MaxInFlight: 3 * i,
		}}
}

func TestWriteCSV(t *testing.T) {
	doc := &report.Document{Runs: []report.Run{
		rep(1, 10, 0.1, 0.15, map[string]int{report.ErrHTTP429: 4}),
		{Name: `odd, "name"`, Level: 2.5, Aggregate: true},
	}}
	doc.Runs[0].GPU = &report.RunGPU{PeakMemoryUsedBytes: 37e9, MeanUtilizationRatio: 0.5, MeanPowerWatts: 210,
		EnergyJoules: 2100, OutputTokensPerJoule: 2, EnergyPerRequestJoules: 100}
	var buf bytes.Buffer
	if err := WriteCSV(&buf, doc); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatalf("output is not CSV: %v\n%s", err, buf.String())
	}
	if len(rows) != 3 {
		t.Fatalf("%d rows, want header + 2", len(rows))
	}
	head := rows[0]
	want := 4 + len(report.SummaryFigures) + len(report.ErrorClasses) + len(report.GPUFigures) + len(report.TokenFigures) + len(report.PromptFigures) + len(report.ReasoningFigures)
	if len(head) != want || len(rows[1]) != want || len(rows[2]) != want {
		t.Fatalf("columns: header %d, rows %d %d, want %d", len(head), len(rows[1]), len(rows[2]), want)
	}
	col := func(name string) int {
		for i, h := range head {
			if h == name {
				return i
			}
		}
		t.Fatalf("no column %q in %v", name, head)
		return -1
	}
	// The prompt columns (prefix cache, images), then the reasoning ones,
	// last.
	if strings.Join(head[:6], ",") != "name,level,repeat,aggregate,requests_completed,requests_failed" ||
		head[len(head)-len(report.ReasoningFigures)-1] != "images.per_request.mean" || head[len(head)-len(report.ReasoningFigures)] != "reasoning.answer_ttft_seconds.mean" ||
		head[len(head)-1] != "reasoning.answer_tokens.p99" {
		t.Errorf("header = %v", head)
	}
	for _, c := range []struct {
		row  int
		col  string
		want string
	}{
		{1, "name", "rate=5 repeat=1"}, {1, "level", "5"}, {1, "repeat", "1"}, {1, "aggregate", "false"},
		{1, "requests_completed", "10"}, {1, "output_tokens_per_second", "10"}, {1, "ttft_seconds.p99", "0.1"},
		{1, "ttft_seconds.p50", "0.05"}, {1, "ttft_seconds.max", "0.15"}, {1, "cost.total_usd", "0.01"},
		{1, "errors.http_429", "4"}, {1, "errors.timeout", "0"},
		{2, "name", `odd, "name"`}, {2, "level", "2.5"}, {2, "aggregate", "true"}, {2, "e2e_seconds.p99", "0"},
		{1, "errors.parse", "0"}, {1, "gpu.peak_memory_used_bytes", "3.7e+10"}, {1, "gpu.mean_utilization_ratio", "0.5"},
		{1, "gpu.mean_power_watts", "210"}, {1, "gpu.energy_joules", "2100"}, {1, "gpu.output_tokens_per_joule", "2"},
		{1, "gpu.energy_per_request_joules", "100"}, {2, "gpu.energy_joules", ""}, {2, "gpu.output_tokens_per_joule", ""},
	} {
		if got := rows[c.row][col(c.col)]; got != c.want {
			t.Errorf("row %d %s = %q, want %q", c.row, c.col, got, c.want)
		}
	}

	path := filepath.Join(t.TempDir(), "r.csv")
	if err := WriteCSVFile(path, doc); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var again bytes.Buffer
	WriteCSV(&again, doc)
	if !bytes.Equal(b, again.Bytes()) || !bytes.Contains(b, []byte("\n\"odd, \"\"name\"\"\",2.5,0,true,")) {
		t.Errorf("file differs or name not quoted:\n%s", b)
	}
	if err := WriteCSVFile(filepath.Join(t.TempDir(), "missing", "r.csv"), doc); err == nil || !strings.Contains(err.Error(), "writing CSV") {
		t.Errorf("unwritable path: %v", err)
	}
}

func TestWriteTable(t *testing.T) {
	doc := &report.Document{Metadata: report.Metadata{Warnings: []string{"rate=5: target rate NOT achieved"}},
		Runs: []report.Run{{Name: "c=1", Summary: report.Summary{RequestsCompleted: 3, TTFT: report.Dist{P50: 0.0125}, TokensEstimated: true}}}}
	var buf bytes.Buffer
	WriteTable(&buf, doc)
	out := buf.String()
	for _, want := range []string{"TTFT p50 ms", " 12.5 ", "WARNING: rate=5: target rate NOT achieved", "NOTE: c=1: the server sent no usage"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// TestInterruptedCounted: requests in flight at an interrupt are summed
// across repeats and named in the table, apart from ok and failed.
func TestInterruptedCounted(t *testing.T) {
	reps := []report.Run{
		{Name: "concurrency=2 repeat=1", Repeat: 1, Summary: report.Summary{RequestsCompleted: 5, RequestsInterrupted: 0}},
		{Name: "concurrency=2 repeat=2", Repeat: 2, Summary: report.Summary{RequestsCompleted: 3, RequestsFailed: 1, RequestsInterrupted: 2}},
	}
	agg := stats.Aggregate(reps)
	if s := agg.Summary; s.RequestsInterrupted != 2 || s.RequestsFailed != 1 || s.RequestsCompleted != 8 {
		t.Errorf("aggregate interrupted %d failed %d completed %d, want 2, 1, 8", s.RequestsInterrupted, s.RequestsFailed, s.RequestsCompleted)
	}
	var buf bytes.Buffer
	WriteTable(&buf, &report.Document{Runs: append(reps, agg)})
	want := "NOTE: concurrency=2 repeat=2: 2 requests in flight when the run was interrupted are in requests_interrupted, not in ok or failed\n"
	if got := buf.String(); strings.Count(got, "requests_interrupted") != 1 || !strings.Contains(got, want) {
		t.Errorf("table:\n%s\nwant once: %s", got, want)
	}
}
