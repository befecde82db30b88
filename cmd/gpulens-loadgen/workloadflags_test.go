package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpulens/gpulens/internal/sim/simserver"
	"github.com/gpulens/gpulens/loadgen/report"
)

// startCachingSim serves a fixed-delay simulator with a prefix cache of
// 16-token blocks and returns its /v1 URL.
func startCachingSim(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(simHandler(t, simserver.Config{FixedTTFT: 5 * time.Millisecond, FixedITL: time.Millisecond, Seed: 1,
		PrefixCacheTokens: 100_000, PrefixBlockTokens: 16}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1"
}

// runLoad runs a load command and returns its report and its records,
// in index order.
func runLoad(t *testing.T, args ...string) (*report.Document, []report.Record) {
	t.Helper()
	dir := t.TempDir()
	out, recs := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.jsonl")
	c := parseLoadCommand(t, runCommand, append(args, "--output", out, "--save-requests", recs))
	if err := c.run(context.Background(), slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if s := c.status(); s != exitOK {
		t.Fatalf("exit status %d", s)
	}
	d, err := report.Read(out)
	if err != nil {
		t.Fatal(err)
	}
	rs := readRecords(t, recs)
	slices.SortFunc(rs, func(a, b report.Record) int { return a.Index - b.Index })
	return d, rs
}

func TestTraceReplayAgainstSim(t *testing.T) {
	t.Parallel()
	target := startCachingSim(t)
	trace := filepath.Join("..", "..", "loadgen", "workload", "testdata", "mooncake.jsonl")
	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)

	// At the trace's times, 4 times as fast: its mean rate of 3/s
	// becomes the run's level, 12/s.
	d, recs := runLoad(t, "run", "--target", target, "--trace", trace, "--trace.speedup", "4", "--server-metrics", "--server-metrics.interval", "1h")
	if d.Metadata.Dataset != "mooncake.jsonl" || d.Metadata.DatasetSHA256 != hex.EncodeToString(sum[:]) || len(d.Runs) != 1 {
		t.Fatalf("metadata %+v, %d runs", d.Metadata, len(d.Runs))
	}
	run := d.Runs[0]
	want := report.TraceSettings{File: "mooncake.jsonl", Format: "mooncake", Speedup: 4, Requests: 4, ArrivalTimes: true}
	if run.Name != "rate=12" || run.Settings.Arrival != "trace" || run.Settings.Trace != want || run.Settings.Requests != 4 {
		t.Fatalf("run %q, arrival %q, trace %+v, requests %d", run.Name, run.Settings.Arrival, run.Settings.Trace, run.Settings.Requests)
	}
	ms := time.Millisecond
	wantIntended := []time.Duration{0, 0, 62500 * time.Microsecond, 250 * ms}
	wantIn, wantOut := []int{1100, 700, 1500, 300}, []int{12, 8, 20, 5}
	if len(recs) != 4 {
		t.Fatalf("%d records", len(recs))
	}
	for i, r := range recs {
		if r.Index != i || r.Intended != wantIntended[i] || r.PromptTokens != wantIn[i] || r.OutputTokens != wantOut[i] || !r.OK() {
			t.Errorf("record %d: intended %v, %d prompt and %d output tokens, error %q; want %v, %d, %d",
				r.Index, r.Intended, r.PromptTokens, r.OutputTokens, r.Error, wantIntended[i], wantIn[i], wantOut[i])
		}
	}
	// The server's own counters over the run: requests sharing hash ids
	// share prompt blocks. Of 3600 prompt tokens, request 1 finds the tag
	// and block 0 (513 words: 32 blocks of 16) cached and request 2 the
	// tag and blocks 0 and 1 (1025 words: 64 blocks): 1536 tokens.
	sm := run.ServerMetrics
	if sm == nil || sm.Flavor != "vllm" || sm.Samples != 2 || sm.Error != "" || !strings.HasSuffix(sm.URL, "/metrics") || strings.HasSuffix(sm.URL, "/v1/metrics") {
		t.Fatalf("server metrics %+v", sm)
	}
	if got := sm.Series["prefix_cache_hit_ratio"].Mean; math.Abs(got-1536.0/3600) > 1e-12 {
		t.Errorf("prefix-cache hit ratio %v, want 1536/3600", got)
	}
	if s := sm.Series["requests_running"]; s.Source != "vllm:num_requests_running" || s.Last != 0 {
		t.Errorf("requests running %+v", s)
	}

	// Closed loop: the trace's lengths only, cycling through its rows.
	az := filepath.Join("..", "..", "loadgen", "workload", "testdata", "azure.csv")
	d, recs = runLoad(t, "run", "--target", target, "--trace", az, "--concurrency", "1", "--requests", "5")
	if tr := d.Runs[0].Settings.Trace; tr.ArrivalTimes || tr.Skipped != 1 || tr.Format != "azure" || d.Runs[0].ServerMetrics != nil {
		t.Fatalf("settings %+v, server metrics %+v", tr, d.Runs[0].ServerMetrics)
	}
	var in []int
	for _, r := range recs {
		in = append(in, r.PromptTokens)
	}
	if !slices.Equal(in, []int{374, 396, 879, 91, 374}) {
		t.Errorf("prompt tokens %v", in)
	}
}

func TestMultiTurnAgainstSim(t *testing.T) {
	t.Parallel()
	target := startCachingSim(t)
	// One user, 2 conversations of 3 turns: prompts of 16 words, answers
	// of 8 (the shared flags), so turns send 16, 16+8+16 = 40 and 64
	// words.
	d, recs := runLoad(t, "run", "--target", target, "--concurrency", "1", "--turns", "3", "--think-time", "10ms", "--requests", "6",
		"--server-metrics", "--server-metrics.interval", "1h")
	run := d.Runs[0]
	if mt := run.Settings.MultiTurn; mt.Turns != 3 || mt.ThinkTimeSeconds != 0.01 {
		t.Fatalf("settings %+v", mt)
	}
	if len(recs) != 6 {
		t.Fatalf("%d records", len(recs))
	}
	for i, r := range recs {
		conv, turn := i/3, i%3+1
		if r.Conversation != conv || r.Turn != turn || r.PromptTokens != []int{16, 40, 64}[turn-1] || !r.OK() {
			t.Errorf("record %d: conversation %d turn %d, %d prompt tokens, error %q", i, r.Conversation, r.Turn, r.PromptTokens, r.Error)
		}
		if turn > 1 && r.Intended != recs[i-1].End+10*time.Millisecond {
			t.Errorf("record %d intended %v, want the previous end %v + 10ms", i, r.Intended, recs[i-1].End)
		}
	}
	ts := run.Turns
	if ts == nil || ts.Conversations != 2 || ts.FirstTurnTTFT.Count != 2 || ts.LaterTurnsTTFT.Count != 4 || ts.LaterTurnsInputTokens.Mean != 52 || len(ts.ByTurn) != 3 {
		t.Fatalf("turn summary %+v", ts)
	}
	// Per conversation 120 prompt tokens: turn 2 finds turn 1's block
	// cached (16), turn 3 turn 2's two blocks (32).
	if got := run.ServerMetrics.Series["prefix_cache_hit_ratio"].Mean; math.Abs(got-96.0/240) > 1e-12 {
		t.Errorf("prefix-cache hit ratio %v, want 0.4", got)
	}

	// Two workers own whole conversations: conversation c goes to worker
	// c mod 2.
	for i, want := range [][]string{{"0:c0t1", "1:c0t2", "4:c2t1", "5:c2t2"}, {"2:c1t1", "3:c1t2", "6:c3t1", "7:c3t2"}} {
		_, recs := runLoad(t, "run", "--target", target, "--concurrency", "1", "--turns", "2", "--requests", "4", "--shard", fmt.Sprintf("%d/2", i))
		var got []string
		for _, r := range recs {
			got = append(got, fmt.Sprintf("%d:c%dt%d", r.Index, r.Conversation, r.Turn))
		}
		if !slices.Equal(got, want) {
			t.Errorf("worker %d/2 sent %v, want %v", i, got, want)
		}
	}

	// A server whose metrics cannot be read: the run goes on, the report
	// says why.
	d, _ = runLoad(t, "run", "--target", target, "--concurrency", "1", "--requests", "2", "--server-metrics.url", "http://127.0.0.1:1/metrics", "--server-metrics.interval", "1h")
	if sm := d.Runs[0].ServerMetrics; sm == nil || sm.Samples != 0 || !strings.HasPrefix(sm.Error, "2 of 2 scrapes failed; last: GET http://127.0.0.1:1/metrics") || d.Runs[0].Summary.RequestsCompleted != 2 {
		t.Errorf("server metrics %+v", sm)
	}
}

func TestWorkloadFlagErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(bad, []byte("{\"timestamp\": 0, \"input_length\": 3, \"output_length\": 2}\n{\"timestamp\": 1, \"input_length\": 3}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ds := filepath.Join(dir, "d.jsonl")
	if err := os.WriteFile(ds, []byte(`{"prompt": "a b"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	trace := filepath.Join("..", "..", "loadgen", "workload", "testdata", "azure.csv")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--trace", filepath.Join(dir, "missing.csv")}, "--trace: reading trace: open " + filepath.Join(dir, "missing.csv")},
		{[]string{"--trace", bad}, "--trace: trace " + bad + `: line 2: no "output_length" field`},
		{[]string{"--trace", trace, "--trace.speedup=-1"}, "--trace.speedup must be a positive number, got -1"},
		{[]string{"--trace", trace, "--trace.max-requests=-1"}, "--trace.max-requests must not be negative, got -1"},
		{[]string{"--trace", trace, "--dataset", ds, "--concurrency", "1"}, "--dataset and --trace cannot be combined"},
		{[]string{"--turns", "2", "--dataset", ds, "--concurrency", "1"}, "--dataset and --turns cannot be combined"},
		{[]string{"--turns", "0", "--concurrency", "1"}, "--turns must be at least 1, got 0"},
		{[]string{"--think-time", "1s", "--concurrency", "1"}, "--think-time needs --turns above 1"},
		{[]string{"--turns", "2", "--think-time=-1s", "--concurrency", "1"}, "--think-time must not be negative"},
		{[]string{"--server-metrics.url", "ftp://h/metrics", "--concurrency", "1"}, `--server-metrics.url "ftp://h/metrics": must be an http:// or https:// URL`},
		{[]string{"--server-metrics", "--server-metrics.interval", "1ms", "--concurrency", "1"}, "--server-metrics.interval must be at least 100ms, got 1ms"},
		{nil, "set --concurrency N (closed loop), --rate R (open loop) or --trace FILE"},
	} {
		app := kingpin.New("t", "")
		c := runCommand(app)
		args := append([]string{"run", "--web.listen-address=127.0.0.1:0", "--target", "http://127.0.0.1:1/v1", "--model", "m", "--requests", "1"}, tc.args...)
		if _, err := app.Parse(args); err != nil {
			t.Fatal(err)
		}
		err := c.run(context.Background(), slog.New(slog.DiscardHandler))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want %q", tc.args, err, tc.want)
			continue
		}
		if s := exitStatus(c, err, slog.New(slog.DiscardHandler)); s != exitUsage {
			t.Errorf("%v: exit status %d, want %d", tc.args, s, exitUsage)
		}
	}
}
