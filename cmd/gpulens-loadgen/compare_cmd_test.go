package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpulens/gpulens/loadgen/report"
	"github.com/gpulens/gpulens/loadgen/stats"
)

// writeSweep writes a closed-loop report with three repeats at c=1 and c=4
// whose throughputs are base, base+1, base+2 (× the level).
func writeSweep(t *testing.T, dir, name string, base float64, maxTokens int) string {
	t.Helper()
	d := &report.Document{Metadata: report.Metadata{Model: "m", Command: "sweep"}}
	for _, l := range []float64{1, 4} {
		var reps []report.Run
		for i := range 3 {
			reps = append(reps, report.Run{Name: "r", Level: l, Repeat: i + 1,
				Settings: report.Settings{Mode: "closed", Concurrency: int(l), MaxTokens: maxTokens},
				Summary:  report.Summary{RequestsCompleted: 10, RequestThroughput: l * (base + float64(i)), TTFT: report.Dist{Count: 10, P50: 0.1, P99: 0.2}}})
		}
		d.Runs = append(d.Runs, reps...)
		d.Runs = append(d.Runs, stats.Aggregate(reps))
	}
	p := filepath.Join(dir, name)
	if err := d.Write(p); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCompareCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a := writeSweep(t, dir, "a.json", 10, 128)
	b := writeSweep(t, dir, "b.json", 20, 128)
	html := filepath.Join(dir, "c.html")
	logger := slog.New(slog.DiscardHandler)
	var buf bytes.Buffer
	if err := compareReports([]string{a, b}, html, "text", &buf, logger); err != nil {
		t.Fatal(err)
	}
	// c=1: {10, 11, 12} vs {20, 21, 22}: t = 10/sqrt(2/3) = 12.25.
	for _, w := range []string{"c=1", "c=4", "11 [8.52, 13.5]", "21 [18.5, 23.5]", "B better: larger than the noise (Welch t=12.25, df=4.0, |t| > 2.776)"} {
		if !strings.Contains(buf.String(), w) {
			t.Errorf("text lacks %q:\n%s", w, buf.String())
		}
	}
	page, err := os.ReadFile(html)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), `data-chart="compare-1-request_throughput_per_second"`) {
		t.Errorf("HTML has no throughput chart")
	}

	buf.Reset()
	if err := compareReports([]string{a, b}, "", "json", &buf, logger); err != nil {
		t.Fatal(err)
	}
	var res struct {
		Pairs []struct {
			Levels []struct {
				Label   string
				Metrics []struct{ Key, Verdict, Winner string }
			}
		} `json:"comparisons"`
	}
	if err := json.Unmarshal(buf.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if m := res.Pairs[0].Levels[0].Metrics[0]; m.Key != "request_throughput_per_second" || m.Verdict != "larger_than_noise" || m.Winner != b {
		t.Errorf("JSON first metric %+v", m)
	}
}

func TestCompareCommandErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a := writeSweep(t, dir, "a.json", 10, 128)
	empty := filepath.Join(dir, "empty.json")
	if err := (&report.Document{}).Write(empty); err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name  string
		paths []string
		html  string
		want  string
		usage bool
	}{
		{"one report", []string{a}, "", "compare needs at least two reports, got 1", true},
		{"missing", []string{a, filepath.Join(dir, "nope.json")}, "", "nope.json: reading report", true},
		{"no runs", []string{a, empty}, "", "has no runs: nothing to compare", true},
		{"unwritable HTML", []string{a, a}, filepath.Join(dir, "no", "x.html"), "--html: writing HTML comparison", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := compareReports(tc.paths, tc.html, "text", &bytes.Buffer{}, logger)
			var ue usageError
			if err == nil || !strings.Contains(err.Error(), tc.want) || errors.As(err, &ue) != tc.usage {
				t.Errorf("err = %v (usage %v), want one containing %q (usage %v)", err, errors.As(err, &ue), tc.want, tc.usage)
			}
		})
	}
	// Differing settings are a warning on the log, not an error.
	b := writeSweep(t, dir, "b.json", 10, 256)
	var logBuf bytes.Buffer
	if err := compareReports([]string{a, b}, "", "text", &bytes.Buffer{}, slog.New(slog.NewTextHandler(&logBuf, nil))); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logBuf.String(), "max_tokens 128 vs 256") {
		t.Errorf("log: %s", logBuf.String())
	}
}
