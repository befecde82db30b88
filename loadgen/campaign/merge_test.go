package campaign

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpulens/gpulens/loadgen/report"
	"github.com/gpulens/gpulens/loadgen/runner"
	"github.com/gpulens/gpulens/loadgen/stats"
)

// synth returns the record request k of the schedule, intended at off
// after the start of the run, would get from a deterministic server:
// latencies depend only on k, every 17th request fails with HTTP 500,
// every 29th with a timeout.
func synth(k int, off time.Duration) report.Record {
	lag := time.Duration(k%5) * 300 * time.Microsecond
	r := report.Record{Index: k, Intended: off, Sent: off + lag, Model: "m", PromptTokens: 100 + k%13,
		PrefixGroup: k%4 + 1, PrefixTokens: 64}
	if k%7 != 0 { // the server said how many were cached, except for these
		r.CachedTokens = new(min(k, 4) * 16)
	}
	r.FirstByte = r.Sent + 2*time.Millisecond
	switch {
	case k%17 == 0:
		r.Status, r.ErrorClass, r.Error = 500, report.ErrHTTP5xx, "HTTP 500: injected"
		r.End = r.FirstByte
		return r
	case k%29 == 0:
		r.ErrorClass, r.Error = report.ErrTimeout, "no complete answer within the request timeout 1s"
		r.End = r.Sent + time.Second
		return r
	}
	r.Status = 200
	ttft := 20*time.Millisecond + time.Duration(k*7919%50)*time.Millisecond + time.Duration(k*31%1000)*time.Microsecond
	r.FirstToken = r.Sent + ttft
	chunks := 3 + k%6
	at := ttft
	for c := 0; c < chunks; c++ {
		if c > 0 {
			at += time.Duration(5+k*c%11) * time.Millisecond
		}
		r.ChunkOffsets = append(r.ChunkOffsets, at)
		r.ChunkTokens = append(r.ChunkTokens, int32(1+c%3))
		r.OutputTokens += 1 + c%3
	}
	r.End = r.Sent + at + time.Millisecond
	r.FirstAnswerToken = r.FirstToken
	if k%3 == 0 {
		// A reasoning model: the first two chunks were reasoning, the
		// first of the third's three tokens too.
		r.ChunkReasoningTokens = make([]int32, chunks)
		r.ChunkReasoningTokens[0], r.ChunkReasoningTokens[1], r.ChunkReasoningTokens[2] = r.ChunkTokens[0], r.ChunkTokens[1], 1
		r.ReasoningTokens = int(r.ChunkTokens[0] + r.ChunkTokens[1] + 1)
		r.FirstAnswerToken = r.Sent + r.ChunkOffsets[2]
	}
	return r
}

// TestShardsMergeToOneProcess splits one seeded Poisson schedule of 1,000
// requests over 4 shards (each starting at its own moment), writes each
// shard's report to disk, merges them, and checks that the merged summary
// is exactly the one a single process gets for the whole schedule.
func TestShardsMergeToOneProcess(t *testing.T) {
	t.Parallel()
	const (
		n      = 1000
		shards = 4
		rate   = 40.0
	)
	sc := runner.ScheduleConfig{Rate: rate, Arrival: runner.Poisson, Seed: 42}
	offsets := runner.Generate(sc, n, 0)
	settings := report.Settings{Mode: report.ModeOpen, Rate: rate, Arrival: runner.Poisson, Requests: n / shards, TimeoutSeconds: 1,
		Endpoint: "chat", Model: "m", Seed: 42, SLO: report.SLO{TTFTSeconds: 0.05, TPOTSeconds: 0.012},
		Cost: report.CostSettings{GPUHourlyUSD: 2.5, GPUs: 2}}
	sumCfg := stats.SummaryConfig{SLO: settings.SLO, Prices: report.CostSettings{GPUHourlyUSD: 2.5, GPUs: 2}, TargetRate: rate}

	// One process.
	start := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	var all []report.Record
	for k, off := range offsets {
		all = append(all, synth(k, off))
	}
	want := stats.Summarize(all, sumCfg)

	// Four shards, each with its own start and report file.
	dir := t.TempDir()
	var in []Input
	for i := 0; i < shards; i++ {
		sh := runner.Shard{Index: i, Count: shards}
		st := start.Add(time.Duration(i)*137*time.Millisecond + 3*time.Hour)
		// Each shard's record times count from its own start.
		var res []report.Record
		for k, off := range offsets {
			if sh.Owns(k) {
				res = append(res, synth(k, off))
			}
		}
		set := settings
		set.Shard = sh.String()
		run := report.Run{Name: fmt.Sprintf("rate=%g", rate), Settings: set, Summary: stats.Summarize(res, sumCfg), Level: rate, Repeat: 1,
			Requests: res}
		run.Summary.MaxInFlight = 3
		doc := &report.Document{Metadata: report.Metadata{Command: "run", Model: "m", Endpoint: "chat", Seed: 42, Started: st,
			Finished: st.Add(time.Minute), Shards: []string{sh.String()}}, Runs: []report.Run{run}}
		path := filepath.Join(dir, fmt.Sprintf("shard%d.json", i))
		if err := doc.Write(path); err != nil {
			t.Fatal(err)
		}
		d, err := report.Read(path)
		if err != nil {
			t.Fatal(err)
		}
		in = append(in, Input{Name: path, Doc: d})
	}
	// Input order does not matter.
	in[0], in[3] = in[3], in[0]
	got, err := Merge(in, MergeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Runs) != 1 {
		t.Fatalf("%d runs, want 1", len(got.Runs))
	}
	m := got.Runs[0]
	if m.Summary.RequestsCompleted+m.Summary.RequestsFailed != n || m.Summary.RequestsCompleted != want.RequestsCompleted {
		t.Fatalf("merged %d completed %d failed, want %d %d", m.Summary.RequestsCompleted, m.Summary.RequestsFailed, want.RequestsCompleted, want.RequestsFailed)
	}
	if m.Summary.TTFT.P99 != want.TTFT.P99 || m.Summary.ITL.P50 != want.ITL.P50 || m.Summary.E2E.P90 != want.E2E.P90 {
		t.Errorf("merged TTFT p99 %v ITL p50 %v E2E p90 %v, want %v %v %v", m.Summary.TTFT.P99, m.Summary.ITL.P50, m.Summary.E2E.P90,
			want.TTFT.P99, want.ITL.P50, want.E2E.P90)
	}
	want.MaxInFlight = shards * 3 // an upper bound: the sum of the shards' maxima
	// The prefix cache, recomputed from the union of the records.
	if wp := stats.PrefixCache(all); m.PrefixCache == nil || !reflect.DeepEqual(m.PrefixCache, wp) || wp.Groups != 4 || wp.Reported == wp.Requests {
		t.Errorf("merged prefix cache %+v, want %+v", m.PrefixCache, wp)
	}
	if !reflect.DeepEqual(m.Summary, want) {
		t.Errorf("merged summary differs from one process:\n got %+v\nwant %+v", m.Summary, want)
	}
	if m.Settings.Shard != "" || m.Settings.Rate != rate || m.Name != "rate=40" || m.Requests != nil {
		t.Errorf("merged run %q settings %+v, %d records", m.Name, m.Settings, len(m.Requests))
	}
	md := got.Metadata
	if md.Command != "merge" || strings.Join(md.Shards, ",") != "0/4,1/4,2/4,3/4" || !md.Started.Equal(start.Add(3*time.Hour)) ||
		!md.Finished.Equal(start.Add(3*time.Hour+3*137*time.Millisecond+time.Minute)) || len(md.Warnings) != 0 {
		t.Errorf("metadata = %+v", md)
	}
	// Sanity of the synthetic data: failures of both classes are in it.
	if want.Errors[report.ErrHTTP5xx] == 0 || want.Errors[report.ErrTimeout] == 0 || want.ITL.Count == 0 || want.GoodRequests == 0 ||
		want.Reasoning == nil || want.Reasoning.AnswerITL.Count == 0 || want.Reasoning.AnswerTTFT.P99 <= want.TTFT.P99 {
		t.Fatalf("synthetic schedule too easy: %+v", want)
	}

	// Three of four shards: merged with a warning naming the missing one.
	part, err := Merge(in[:3], MergeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if w := part.Metadata.Warnings; len(w) != 1 || !strings.Contains(w[0], "shards [0] missing") {
		t.Errorf("warnings = %q", w)
	}
}

func TestMergeRejects(t *testing.T) {
	t.Parallel()
	run := func(shard string, recs []report.Record, seed int64) *report.Document {
		return &report.Document{Metadata: report.Metadata{Command: "run", Seed: seed, Model: "m"}, Runs: []report.Run{{
			Name: "rate=1", Level: 1, Repeat: 1, Settings: report.Settings{Mode: report.ModeOpen, Rate: 1, Shard: shard, Seed: seed},
			Summary: report.Summary{RequestsCompleted: len(recs)}, Requests: recs}}}
	}
	rec := []report.Record{{Index: 0, Sent: 1, End: 2}}
	noRecs := run("0/2", nil, 1)
	noRecs.Runs[0].Summary.RequestsCompleted = 5
	mergedNoRecs := run("", nil, 1)
	mergedNoRecs.Metadata.Command, mergedNoRecs.Metadata.Shards = "merge", []string{"0/2", "1/2"}
	mergedNoRecs.Runs[0].Summary.RequestsCompleted = 5
	for _, tc := range []struct {
		name string
		in   []Input
		want string
	}{
		{"none", nil, "no input reports"},
		{"no records", []Input{{Name: "a.json", Doc: noRecs}}, "a.json: run \"rate=1\" has no per-request records (run the shards with Shard, or EmbedRequests)"},
		{"duplicate shard", []Input{{Name: "a.json", Doc: run("0/2", rec, 1)}, {Name: "b.json", Doc: run("0/2", rec, 1)}}, "b.json: shard 0/2 also in a.json"},
		{"shard counts", []Input{{Name: "a.json", Doc: run("0/2", rec, 1)}, {Name: "b.json", Doc: run("1/3", rec, 1)}}, "b.json: shard 1/3, but a.json has 2 shards"},
		{"seeds", []Input{{Name: "a.json", Doc: run("0/2", rec, 1)}, {Name: "b.json", Doc: run("1/2", rec, 2)}}, "b.json: seed 2"},
		{"no runs", []Input{{Name: "a.json", Doc: &report.Document{Metadata: report.Metadata{Command: "run"}}}}, "a.json: no runs to merge"},
		{"merged without shards", []Input{{Name: "a.json", Doc: &report.Document{Metadata: report.Metadata{Command: "merge"}}}}, "a.json: merged report without metadata.shards"},
		{"merged without records", []Input{{Name: "a.json", Doc: mergedNoRecs}}, "a.json: run \"rate=1\" has no per-request records: a report merged without EmbedRequests cannot be merged again (merge the workers' reports, or merge them with EmbedRequests)"},
		{"foreign record", []Input{{Name: "a.json", Doc: run("1/2", rec, 1)}}, "a.json: run \"rate=1\": request 0 is not in shards [1/2]"},
	} {
		if _, err := Merge(tc.in, MergeOptions{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
	a, b := run("0/2", rec, 1), run("1/2", []report.Record{{Index: 1, Sent: 1, End: 2}}, 1)
	if _, err := Merge([]Input{{Name: "a.json", Doc: a}, {Name: "b.json", Doc: b}}, MergeOptions{}); err != nil {
		t.Fatalf("valid shards: %v", err)
	}
	b.Runs[0].Settings.Rate = 2
	if _, err := Merge([]Input{{Name: "a.json", Doc: a}, {Name: "b.json", Doc: b}}, MergeOptions{}); err == nil || !strings.Contains(err.Error(), "settings differ") {
		t.Errorf("different rates: %v", err)
	}
}

// TestMergeSweepRepeats merges a closed-loop sweep (levels 2 and 4 users
// per worker, 2 repeats) from two workers: users add up, every repeat is
// merged and each level gets its aggregate.
func TestMergeSweepRepeats(t *testing.T) {
	t.Parallel()
	worker := func(shard int) Input {
		d := &report.Document{Metadata: report.Metadata{Command: "sweep", Model: "m", Seed: 3}}
		for _, level := range []float64{2, 4} {
			for rep := 1; rep <= 2; rep++ {
				var res []report.Record
				for k := shard; k < 40; k += 2 {
					r := synth(k+rep, time.Duration(k)*10*time.Millisecond)
					r.Index = k // a repeat runs the schedule from index 0 again
					res = append(res, r)
				}
				run := report.Run{Name: fmt.Sprintf("concurrency=%d repeat=%d", int(level), rep), Level: level, Repeat: rep,
					Settings: report.Settings{Mode: report.ModeClosed, Concurrency: int(level), Shard: fmt.Sprintf("%d/2", shard), Seed: 3},
					Summary:  stats.Summarize(res, stats.SummaryConfig{}), Requests: res}
				d.Runs = append(d.Runs, run)
			}
			d.Runs = append(d.Runs, report.Run{Name: fmt.Sprintf("concurrency=%d (mean of 2)", int(level)), Level: level, Aggregate: true})
		}
		return Input{Name: fmt.Sprintf("w%d.json", shard), Doc: d}
	}
	got, err := Merge([]Input{worker(0), worker(1)}, MergeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range got.Runs {
		names = append(names, r.Name)
		if !r.Aggregate && (r.Summary.RequestsCompleted+r.Summary.RequestsFailed != 40 || r.Settings.Concurrency != int(r.Level)) {
			t.Errorf("%s: %d requests, concurrency %d", r.Name, r.Summary.RequestsCompleted+r.Summary.RequestsFailed, r.Settings.Concurrency)
		}
		if r.Aggregate && (r.Summary.RequestsCompleted+r.Summary.RequestsFailed != 80 || r.Summary.Stats["ttft_seconds.p99"].N != 2) {
			t.Errorf("%s: %d requests, stats %+v", r.Name, r.Summary.RequestsCompleted+r.Summary.RequestsFailed, r.Summary.Stats["ttft_seconds.p99"])
		}
	}
	want := "concurrency=4 repeat=1,concurrency=4 repeat=2,concurrency=4 (mean of 2),concurrency=8 repeat=1,concurrency=8 repeat=2,concurrency=8 (mean of 2)"
	if strings.Join(names, ",") != want {
		t.Errorf("runs = %s\nwant   %s", strings.Join(names, ","), want)
	}
}

// TestMergeMultiTurnShards: a multi-turn worker owns whole conversations
// (conversation c on shard c mod N), so a record's request index does not
// say which shard sent it; merge checks the conversation instead, rejects a
// conversation from the wrong shard, and recomputes the turn summary over
// the union.
func TestMergeMultiTurnShards(t *testing.T) {
	t.Parallel()
	ms := func(d float64) time.Duration { return time.Duration(d * float64(time.Millisecond)) }
	run := func(shard string, recs []report.Record) *report.Document {
		return &report.Document{Metadata: report.Metadata{Command: "run", Seed: 1, Model: "m"}, Runs: []report.Run{{
			Name: "concurrency=1", Level: 1, Repeat: 1, Settings: report.Settings{Mode: report.ModeClosed, Concurrency: 1, Shard: shard, Seed: 1},
			Summary: report.Summary{RequestsCompleted: len(recs)}, Requests: recs}}}
	}
	// Two turns per conversation: conversation 0 (requests 0, 1) on shard
	// 0/2, conversation 1 (requests 2, 3) on shard 1/2. Request 1 has an odd
	// index but belongs to shard 0.
	turn := func(idx, conv, turn int, ttftMS float64) report.Record {
		return report.Record{Index: idx, Conversation: conv, Turn: turn, Intended: 0, Sent: 0,
			FirstByte: ms(ttftMS), FirstToken: ms(ttftMS), End: ms(ttftMS + 10), OutputTokens: 2,
			ChunkOffsets: []time.Duration{ms(ttftMS), ms(ttftMS + 10)}, ChunkTokens: []int32{1, 1}}
	}
	a := run("0/2", []report.Record{turn(0, 0, 1, 100), turn(1, 0, 2, 40)})
	b := run("1/2", []report.Record{turn(2, 1, 1, 300), turn(3, 1, 2, 60)})
	doc, err := Merge([]Input{{Name: "a.json", Doc: a}, {Name: "b.json", Doc: b}}, MergeOptions{})
	if err != nil {
		t.Fatalf("multi-turn shards: %v", err)
	}
	tu := doc.Runs[0].Turns
	if tu == nil {
		t.Fatal("merged run has no turn summary")
	}
	if tu.Conversations != 2 || tu.FirstTurnTTFT.Count != 2 || tu.LaterTurnsTTFT.Count != 2 {
		t.Errorf("turns = %+v, want 2 conversations, 2 first and 2 later turns", tu)
	}
	if got := tu.FirstTurnTTFT.Mean; got < 0.1999 || got > 0.2001 {
		t.Errorf("first-turn TTFT mean = %v s, want 0.2 (100 and 300 ms)", got)
	}
	if got := tu.LaterTurnsTTFT.Mean; got < 0.0499 || got > 0.0501 {
		t.Errorf("later-turn TTFT mean = %v s, want 0.05 (40 and 60 ms)", got)
	}
	// Conversation 1 claimed by shard 0/2: rejected.
	bad := run("0/2", []report.Record{turn(2, 1, 1, 300)})
	if _, err := Merge([]Input{{Name: "a.json", Doc: bad}}, MergeOptions{}); err == nil || !strings.Contains(err.Error(), "request 2 is not in shards [0/2]") {
		t.Errorf("foreign conversation: err = %v", err)
	}
}
