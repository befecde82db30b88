package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpulens/gpulens/internal/sim/simserver"
	"github.com/gpulens/gpulens/loadgen/report"
)

// TestSearchFindsTheSimulatorsCapacity searches the largest concurrency
// at which a simulated server meets "goodput ≥ 90 %" (and a p99 TTFT
// bound no run comes near), and checks that the search names a level at
// which the confirming runs meet the objectives and the level one user
// above at which they do not.
//
// The boundary is known from the simulator's settings, not from timing:
// it runs one request at a time (MaxBatch 1) and lets at most MaxQueue = 5
// wait; a request beyond them gets 429 at once. With C ≤ 5 users a new
// request finds at most C − 1 ≤ 4 others not yet running, so none is ever
// refused, however the machine schedules. With C = 6, once the start-up
// burst is over (--warmup: requests sent in the first 150 ms are not
// measured), one request runs and the other users' wait in the queue; the
// simulator admits the next waiting request before it tells the finished
// one's client, so that client's next request finds 4 waiting, not 5:
// none is refused either. Goodput is 100 % up to 6 users. With C ≥ 7 one
// user always finds 1 running and 5 waiting, and retries at once, getting
// 429 after 429 while the running request takes ~19 ms (5 ms + 7 × 2 ms):
// more than 10 % of the measured requests fail unless a 429 round trip on
// loopback took longer than ~170 ms. The TTFT bound (2 s) is 20 times the
// longest wait (5 queued × 19 ms). So the answer is 6 pass, 7 fail on an
// idle or a busy machine: probes 4 (pass), 8 (fail), 6 (pass), 7 (fail),
// then 6 and 7 again; 3 to 5 s, mostly waiting on the simulator.
func TestSearchFindsTheSimulatorsCapacity(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(simHandler(t, simserver.Config{FixedTTFT: 5 * time.Millisecond, FixedITL: 2 * time.Millisecond,
		MaxBatch: 1, MaxQueue: 5, TokensPerChunk: 1, Seed: 1}))
	t.Cleanup(srv.Close)
	out := filepath.Join(t.TempDir(), "search.json")
	c := parseLoadCommand(t, searchCommand, []string{"search", "--target", srv.URL + "/v1", "--input-tokens.calibrate=off",
		"--concurrency", "4", "--requests", "10", "--warmup", "150ms", "--repeats", "2",
		"--slo", "ttft:p99<=2s", "--slo", "goodput>=0.9", "--search.max", "64", "--output", out})
	if err := c.run(context.Background(), slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	d, err := report.Read(out)
	if err != nil {
		t.Fatal(err)
	}
	s := d.Metadata.Search
	if s == nil {
		t.Fatal("no metadata.search in the report")
	}
	var phases []string
	for _, p := range s.Probes {
		phases = append(phases, p.Phase)
	}
	t.Logf("probes %v (phases %v), pass %g, fail %g: %s", s.Probes, phases, s.Pass, s.Fail, s.Confirmation)
	if s.Outcome != report.SearchBracketed || s.Pass != 6 || s.Fail != 7 || !s.Confirmed {
		t.Fatalf("outcome %s, bracket %g–%g, confirmed %v (%s); probes %+v", s.Outcome, s.Pass, s.Fail, s.Confirmed, s.Confirmation, s.Probes)
	}
	// The evidence: the confirming runs at 6 all met both objectives, at
	// least one confirming run at 7 missed goodput; every run is in the
	// document under its name.
	names := map[string]bool{}
	for _, r := range d.Runs {
		names[r.Name] = true
	}
	for _, lv := range s.Levels {
		if lv.Level != s.Pass && lv.Level != s.Fail {
			continue
		}
		confirming, passed := 0, 0
		for _, r := range lv.Runs {
			if !names[r.Name] {
				t.Errorf("run %s is not in the report's runs", r.Name)
			}
			if r.Confirm {
				confirming++
				if r.Passed {
					passed++
				}
			}
		}
		switch {
		case confirming != 2:
			t.Errorf("level %g: %d confirming runs, want 2", lv.Level, confirming)
		case lv.Level == s.Pass && passed != 2:
			t.Errorf("level %g: %d of the confirming runs passed, want both: %+v", lv.Level, passed, lv.Runs)
		case lv.Level == s.Fail && (passed == 2 || lv.Runs[len(lv.Runs)-1].Checks[1].Value >= 0.9 && lv.Runs[len(lv.Runs)-2].Checks[1].Value >= 0.9):
			t.Errorf("level %g: the confirming runs met goodput: %+v", lv.Level, lv.Runs)
		}
	}
	if d.Metadata.Command != "search" || !names["concurrency=6 (mean of 4)"] || d.Metadata.Manifest == nil || d.Metadata.Manifest.SettingsHash == "" {
		t.Errorf("command %q, runs %v, manifest %+v", d.Metadata.Command, names, d.Metadata.Manifest)
	}
}

func TestSearchFlagErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--concurrency", "2"}, "--slo: no objective given"},
		{[]string{"--concurrency", "2", "--slo", "ttft:p99<=fast"}, `--slo "ttft:p99<=fast": "fast" is not a positive duration (e.g. 500ms, 1.5s)`},
		{[]string{"--concurrency", "2", "--slo", "goodput>=0.9", "--search.growth", "1"}, "--search.growth must be above 1, got 1"},
		{[]string{"--concurrency", "2", "--slo", "goodput>=0.9", "--search.max", "1"}, "--search.max (1) must be at least --concurrency or --rate (2)"},
		{[]string{"--rate", "2", "--slo", "goodput>=0.9", "--search.precision", "2"}, "--search.precision must be in (0, 1], got 2"},
		{[]string{"--slo", "goodput>=0.9"}, "set --concurrency N"},
		{[]string{"--rate", "2", "--concurrency", "2", "--slo", "goodput>=0.9"}, "set either --concurrency or --rate, not both"},
		{[]string{"--concurrency", "2", "--slo", "goodput>=0.9", "--shard", "0/2"}, "--shard: a search cannot be sharded"},
	} {
		c := parseLoadCommand(t, searchCommand, append([]string{"search", "--target", "http://127.0.0.1:1/v1", "--requests", "4"}, tc.args...))
		err := c.run(context.Background(), slog.New(slog.DiscardHandler))
		if !errors.As(err, new(usageError)) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want a usage error with %q", tc.args, err, tc.want)
		}
	}
	// run and sweep take per-request thresholds only.
	c := parseLoadCommand(t, runCommand, []string{"run", "--target", "http://127.0.0.1:1/v1", "--requests", "4", "--concurrency", "1",
		"--slo", "ttft=1s", "--slo", "ttft:p99<=1s"})
	err := c.run(context.Background(), slog.New(slog.DiscardHandler))
	if !errors.As(err, new(usageError)) || !strings.Contains(err.Error(), `--slo "ttft:p99<=1s": a level objective`) {
		t.Errorf("run with a level objective: %v", err)
	}
}

// TestSLOFlagRepeats: repeated per-request thresholds add up.
func TestSLOFlagRepeats(t *testing.T) {
	t.Parallel()
	var per string
	var objs []string
	f := &sloFlag{perRequest: &per, objectives: &objs}
	for _, v := range []string{"ttft=1s", "itl:p99<=50ms", "tpot=50ms", "goodput>=0.9"} {
		if err := f.Set(v); err != nil {
			t.Fatal(err)
		}
	}
	if per != "ttft=1s,tpot=50ms" || strings.Join(objs, " ") != "itl:p99<=50ms goodput>=0.9" {
		t.Errorf("per-request %q, objectives %q", per, objs)
	}
}
