package report

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestWriteReadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "r.json")
	started := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	d := &Document{
		Metadata: Metadata{Tool: "gpulens-loadgen", Version: "1.2.3", Command: "run", RunID: "abc", Started: started,
			Target: "http://127.0.0.1:1/v1", Model: "m", Seed: 7},
		Runs: []Run{{
			Name: "c=4", Level: 4, Repeat: 1,
			Settings: Settings{Mode: "closed", Concurrency: 4, Seed: 7},
			Summary: Summary{
				RequestsCompleted: 10, RequestsFailed: 2,
				Errors: map[string]int{ErrHTTP429: 2},
				TTFT:   Dist{Count: 10, Mean: 0.05, P50: 0.05, P99: 0.06, Max: 0.07},
				ITL:    Dist{Mean: math.NaN()},
				Cost:   Cost{PerRequestUSD: 0.0002, TotalUSD: math.Inf(1)},
			},
		}},
	}
	if err := d.Write(path); err != nil {
		t.Fatal(err)
	}
	got, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Metadata.SchemaVersion != SchemaVersion || got.Metadata.RunID != "abc" || !got.Metadata.Started.Equal(started) {
		t.Errorf("metadata = %+v", got.Metadata)
	}
	r := got.Runs[0]
	if r.Summary.TTFT.P99 != 0.06 || r.Summary.Errors[ErrHTTP429] != 2 || r.Summary.RequestsFailed != 2 {
		t.Errorf("summary = %+v", r.Summary)
	}
	if r.Summary.ITL.Mean != 0 || r.Summary.Cost.TotalUSD != 0 {
		t.Errorf("non-finite values not zeroed: %+v %+v", r.Summary.ITL, r.Summary.Cost)
	}
	// The original document is not modified by sanitising.
	if !math.IsNaN(d.Runs[0].Summary.ITL.Mean) {
		t.Errorf("Write modified its receiver")
	}
	raw, _ := os.ReadFile(path)
	for _, key := range []string{`"metadata"`, `"runs"`, `"requests_completed"`, `"ttft_seconds"`, `"itl_seconds"`, `"tpot_seconds"`,
		`"e2e_seconds"`, `"goodput_per_second"`, `"achieved_rate_per_second"`, `"schedule_lag_seconds"`, `"tokens_estimated"`,
		`"per_1k_requests_usd"`, `"per_million_output_tokens_usd"`, `"p95"`, `"stddev"`} {
		if !strings.Contains(string(raw), key) {
			t.Errorf("report lacks key %s", key)
		}
	}
}

func TestReadErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, body, want string }{
		{"syntax", "{\n\"metadata\": {,\n}", "line 2"},
		{"newer", `{"metadata":{"schema_version":99}}`, "schema_version 99"},
		{"type", `{"runs":"x"}`, "cannot unmarshal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name+".json")
			if err := os.WriteFile(p, []byte(tc.body), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Read(p)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want containing %q", err, tc.want)
			}
		})
	}
	if _, err := Read(filepath.Join(dir, "missing.json")); err == nil {
		t.Fatal("missing file: no error")
	}
}
