package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpulens/gpulens/internal/sim/simserver"
	"github.com/gpulens/gpulens/loadgen/report"
)

// TestShardsAgainstSimMergeAndReport is the CLI path end to end: four
// workers run --shard i/4 of one open-loop schedule against an in-process
// fixed-delay simulator, their reports match the injected delays, `merge`
// combines them, and `report --html` renders the merged report.
func TestShardsAgainstSimMergeAndReport(t *testing.T) {
	t.Parallel()
	const (
		ttft   = 30 * time.Millisecond
		itl    = 4 * time.Millisecond
		shards = 4
		perRun = 10
	)
	logger := slog.New(slog.DiscardHandler)
	ctx := context.Background()
	srv := httptest.NewServer(simHandler(t, simserver.Config{FixedTTFT: ttft, FixedITL: itl, TokensPerChunk: 1, RoleChunk: true, Seed: 1}))
	defer srv.Close()

	dir := t.TempDir()
	paths := make([]string, shards)
	errs := make([]error, shards)
	var wg sync.WaitGroup
	for i := 0; i < shards; i++ {
		paths[i] = filepath.Join(dir, fmt.Sprintf("shard%d.json", i))
		app := kingpin.New("t", "")
		c := runCommand(app)
		_, err := app.Parse([]string{"run", "--web.listen-address=127.0.0.1:0", "--target", srv.URL + "/v1", "--model", simserver.DefaultModel,
			"--rate", "50", "--arrival", "constant", "--requests", fmt.Sprint(perRun), "--shard", fmt.Sprintf("%d/%d", i, shards),
			"--input-tokens", "fixed:16", "--output-tokens", "fixed:8", "--ignore-eos", "--seed", "9", "--cost.gpu-hourly-usd", "3.6",
			"--output", paths[i], "--no-progress"})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.run(ctx, logger)
		}()
	}
	wg.Wait()
	var maxTTFT float64
	totalITL := 0
	for i, p := range paths {
		if errs[i] != nil {
			t.Fatalf("shard %d: %v", i, errs[i])
		}
		d, err := report.Read(p)
		if err != nil {
			t.Fatal(err)
		}
		r := d.Runs[0]
		s := r.Summary
		if s.RequestsCompleted != perRun || s.RequestsFailed != 0 || len(r.Requests) != perRun || r.Settings.Shard != fmt.Sprintf("%d/%d", i, shards) {
			t.Fatalf("shard %d: completed %d failed %d, %d records, shard %q", i, s.RequestsCompleted, s.RequestsFailed, len(r.Requests), r.Settings.Shard)
		}
		// 7 ITL values per request (8 tokens, one per chunk), less the
		// tokens a delayed first read delivered with the first (TTFT).
		wantITL := 0
		for _, rec := range r.Requests {
			if rec.Index%shards != i {
				t.Errorf("shard %d ran request %d", i, rec.Index)
			}
			for j, off := range rec.ChunkOffsets {
				if off != rec.ChunkOffsets[0] {
					wantITL += int(rec.ChunkTokens[j])
				}
			}
		}
		totalITL += wantITL
		// The simulator's delays, without timing assumptions about the
		// machine: TTFT from the actual send is at least the injected
		// 30 ms (causal) and ends before the stream does; ITL per token is
		// at least half the injected 4 ms (coalesced reads spread their
		// gap, they never report zeros) and the gaps fit in the stream
		// after the first token; 8 tokens each, counted by the server.
		// How many tokens a late first read coalesces with the first is
		// the machine's doing (a loaded one coalesces more): some gaps
		// must remain, or the ITL checks would check nothing.
		if s.TTFTFromSend.P50 < ttft.Seconds() || s.TTFTFromSend.P50 >= s.E2EFromSend.P50 {
			t.Errorf("shard %d: TTFT p50 %v, want ≥ %v and < the E2E p50 %v", i, s.TTFTFromSend.P50, ttft, s.E2EFromSend.P50)
		}
		if s.ITL.P50 < (itl/2).Seconds() || s.ITL.P50 > s.E2EFromSend.Max || s.ITL.Count != wantITL || wantITL == 0 {
			t.Errorf("shard %d: ITL p50 %v over %d gaps, want ≈ %v over %d (≈ %d)", i, s.ITL.P50, s.ITL.Count, itl, wantITL, perRun*7)
		}
		if s.OutputTokensTotal != perRun*8 || s.TokensEstimated {
			t.Errorf("shard %d: %d output tokens (estimated %v), want %d", i, s.OutputTokensTotal, s.TokensEstimated, perRun*8)
		}
		if s.TargetRatePerSecond != 50.0/shards || r.Settings.Rate != 50 {
			t.Errorf("shard %d: target rate %v, settings rate %v, want 12.5 and 50", i, s.TargetRatePerSecond, r.Settings.Rate)
		}
		maxTTFT = max(maxTTFT, s.TTFT.Max)
	}

	merged := filepath.Join(dir, "merged.json")
	if err := runMerge(merged, paths, filepath.Join(dir, "merged.csv"), logger); err != nil {
		t.Fatal(err)
	}
	d, err := report.Read(merged)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Runs) != 1 || d.Metadata.Command != "merge" || strings.Join(d.Metadata.Shards, ",") != "0/4,1/4,2/4,3/4" {
		t.Fatalf("merged: %d runs, metadata %+v", len(d.Runs), d.Metadata)
	}
	s := d.Runs[0].Summary
	// The maximum of the union is the maximum of the parts: exact.
	if s.RequestsCompleted != shards*perRun || s.TTFT.Max != maxTTFT || s.ITL.Count != totalITL || s.Cost.TotalUSD <= 0 ||
		s.TargetRatePerSecond != 50 {
		t.Errorf("merged: completed %d TTFT max %v (want %v) ITL count %d cost %v target %v", s.RequestsCompleted, s.TTFT.Max, maxTTFT,
			s.ITL.Count, s.Cost.TotalUSD, s.TargetRatePerSecond)
	}
	if err := runMerge(merged, []string{merged}, "", logger); err == nil || !strings.Contains(err.Error(), "also an input") {
		t.Errorf("merging into an input: %v", err)
	}

	html := filepath.Join(dir, "merged.html")
	app := kingpin.New("t", "")
	c := reportCommand(app)
	if _, err := app.Parse([]string{"report", merged, "--html", html}); err != nil {
		t.Fatal(err)
	}
	if err := c.run(ctx, logger); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(html)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "<title>gpulens load report: "+simserver.DefaultModel+"</title>") || !strings.Contains(string(b), `data-chart="latency-ttft"`) {
		t.Errorf("HTML report:\n%.600s", b)
	}
}
