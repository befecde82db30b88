package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpulens/gpulens/loadgen/report"
)

func TestRenderReport(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in := filepath.Join(dir, "in.json")
	doc := &report.Document{Metadata: report.Metadata{Model: "m<1>", Command: "run"}, Runs: []report.Run{{Name: "c=1", Level: 1,
		Summary: report.Summary{RequestsCompleted: 3, TTFT: report.Dist{P50: 0.05, P99: 0.09}}}}}
	if err := doc.Write(in); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.html")
	logger := slog.New(slog.DiscardHandler)
	if err := renderReport(in, out, logger); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "<title>gpulens load report: m&lt;1&gt;</title>") || !strings.Contains(string(b), `data-chart="latency-ttft"`) {
		t.Errorf("unexpected page:\n%.400s", b)
	}

	for _, tc := range []struct{ in, out, want string }{
		{filepath.Join(dir, "missing.json"), out, "reading report"},
		{in, filepath.Join(dir, "no-such-dir", "x.html"), "--html: writing HTML report"},
	} {
		if err := renderReport(tc.in, tc.out, logger); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("renderReport(%s, %s) = %v, want an error containing %q", tc.in, tc.out, err, tc.want)
		}
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte("{\n\"runs\": [}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := renderReport(bad, out, logger); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("bad JSON: %v, want the line number", err)
	}
}
