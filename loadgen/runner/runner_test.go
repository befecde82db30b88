package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpulens/gpulens/loadgen/client"
	"github.com/gpulens/gpulens/loadgen/report"
	"github.com/gpulens/gpulens/loadgen/stats"
	"github.com/gpulens/gpulens/loadgen/workload"
)

// fakeServer streams `chunks` content chunks of `perChunk` tokens each:
// the first after ttft, the rest itl×perChunk apart, with usage, unless
// the request number (1-based) is in fail (HTTP 500). While stall is set,
// requests wait that long before answering.
type fakeServer struct {
	ttft, itl        time.Duration
	chunks, perChunk int
	fail             map[int64]bool
	stall            atomic.Int64
	n                atomic.Int64
	mu               sync.Mutex
	prompts          []string
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := f.n.Add(1)
	var body struct {
		Messages []struct{ Content string } `json:"messages"`
	}
	b, _ := io.ReadAll(r.Body)
	json.Unmarshal(b, &body)
	f.mu.Lock()
	f.prompts = append(f.prompts, body.Messages[0].Content)
	f.mu.Unlock()
	if d := time.Duration(f.stall.Load()); d > 0 {
		time.Sleep(d) // not a wait: a stalled server, as injected
	}
	if f.fail[n] {
		http.Error(w, `{"error":{"message":"injected"}}`, 500)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	arrival := time.Now().UnixNano()
	io.WriteString(w, `data: {"choices":[{"delta":{"role":"assistant","content":""}}]}`+"\n\n")
	fl.Flush()
	time.Sleep(f.ttft) // not a wait (nor below): the fake server's paced answer
	var times []int64
	for c := 0; c < f.chunks; c++ {
		if c > 0 {
			time.Sleep(f.itl * time.Duration(f.perChunk))
		}
		times = append(times, time.Now().UnixNano())
		text := ""
		for k := 0; k < f.perChunk; k++ {
			text += " tok"
		}
		fmt.Fprintf(w, `data: {"model":"fake","choices":[{"delta":{"content":%q}}]}`+"\n\n", text)
		fl.Flush()
	}
	sim, _ := json.Marshal(report.SimTimestamps{ArrivalUnixNano: arrival, FirstTokenUnixNano: times[0], TokenUnixNanos: times})
	fmt.Fprintf(w, `data: {"choices":[],"usage":{"prompt_tokens":8,"completion_tokens":%d},"gpulens_sim":%s}`+"\n\ndata: [DONE]\n\n", f.chunks*f.perChunk, sim)
	fl.Flush()
}

func setup(t *testing.T, f *fakeServer, timeout time.Duration) (*client.Client, *workload.Workload) {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	cl, err := client.New(client.Config{BaseURL: srv.URL + "/v1", Endpoint: "chat", Model: "m", Timeout: timeout, MaxConns: 64})
	if err != nil {
		t.Fatal(err)
	}
	in, _ := workload.ParseLength("in", "fixed:8")
	out, _ := workload.ParseLength("out", "fixed:16")
	return cl, workload.New(workload.Config{Seed: 3, Input: in, Output: out})
}

func within(t *testing.T, name string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol {
		t.Errorf("%s = %.6f, want %.6f ± %.6f", name, got, want, tol)
	}
}

func TestClosedLoopKnownDelays(t *testing.T) {
	// TTFT 40 ms, 4 chunks of 3 tokens, 5 ms per token → 15 ms per chunk.
	f := &fakeServer{ttft: 40 * time.Millisecond, itl: 5 * time.Millisecond, chunks: 4, perChunk: 3, fail: map[int64]bool{2: true}}
	cl, wl := setup(t, f, time.Minute)
	out, err := Run(context.Background(), Config{Mode: report.ModeClosed, Concurrency: 4, Requests: 20}, cl, wl, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The TTFT SLO is the slowest TTFT measured, so that every success
	// meets it whatever the speed of the machine.
	var slowest float64
	for _, r := range out.Results {
		if r.OK() {
			slowest = max(slowest, (r.FirstToken - r.Intended).Seconds())
		}
	}
	s := stats.Summarize(out.Results, stats.SummaryConfig{SLO: report.SLO{TTFTSeconds: slowest}, Prices: report.CostSettings{GPUHourlyUSD: 3.6, GPUs: 1}})
	if s.RequestsCompleted != 19 || s.RequestsFailed != 1 || s.Errors[report.ErrHTTP5xx] != 1 {
		t.Fatalf("completed %d failed %d errors %v", s.RequestsCompleted, s.RequestsFailed, s.Errors)
	}
	// Against the server's own timestamps, without timing assumptions about
	// the machine. Causality bounds the client from below: it sent before
	// the server received and saw each chunk after the server wrote it
	// (1 ms allows for the wall clock, server, vs the monotonic clock,
	// client). From above only structure: the first token before the end.
	// Precision is measured by the benchmarks in loadgen/acceptance, not
	// asserted here.
	const clocks = time.Millisecond
	unix := func(d time.Duration) int64 { return out.Start.Add(d).UnixNano() } // a record's time on the wall clock
	for _, r := range out.Results {
		if !r.OK() {
			continue
		}
		if r.Sim == nil || len(r.Sim.TokenUnixNanos) != len(r.ChunkOffsets) || len(r.ChunkOffsets) != f.chunks {
			t.Fatalf("request %d: server timestamps %+v for %d chunks", r.Index, r.Sim, len(r.ChunkOffsets))
		}
		srvTTFT := time.Duration(r.Sim.FirstTokenUnixNano - r.Sim.ArrivalUnixNano)
		cliTTFT := r.FirstToken - r.Sent
		if srvTTFT < f.ttft {
			t.Fatalf("request %d: server TTFT %v below the injected %v", r.Index, srvTTFT, f.ttft)
		}
		if cliTTFT < srvTTFT-clocks || unix(r.Sent) > r.Sim.ArrivalUnixNano+int64(clocks) {
			t.Errorf("request %d: client TTFT %v, server TTFT %v: the client cannot see the token sooner", r.Index, cliTTFT, srvTTFT)
		}
		if r.FirstToken != r.Sent+r.ChunkOffsets[0] || r.End < r.FirstToken {
			t.Errorf("request %d: first token %v, first chunk at %v, end %v", r.Index, cliTTFT, r.ChunkOffsets[0], r.End-r.Sent)
		}
		for i, off := range r.ChunkOffsets {
			if seen := unix(r.Sent + off); seen < r.Sim.TokenUnixNanos[i]-int64(clocks) {
				t.Errorf("request %d: chunk %d seen %v before the server wrote it", r.Index, i, time.Duration(r.Sim.TokenUnixNanos[i]-seen))
			}
			if i > 0 && off < r.ChunkOffsets[i-1] {
				t.Errorf("request %d: chunk offsets not monotonic: %v", r.Index, r.ChunkOffsets)
			}
		}
	}
	// TTFT (closed loop: from the actual send) is at least the injected
	// 40 ms and comes before the end of the stream.
	if s.TTFT.P50 < 0.040 || s.TTFT.P50 >= s.E2E.P50 {
		t.Errorf("TTFT p50 = %v, want ≥ 40 ms and < the E2E p50 %v", s.TTFT.P50, s.E2E.P50)
	}
	// Token-level ITL: a ≥ 15 ms chunk gap / 3 tokens ≈ 5 ms per token, never
	// 0 (a chunk seen late shortens the gap after it, not the median); no
	// gap is longer than the longest stream.
	if s.ITL.P50 < 0.004 || s.ITL.P50 > s.E2E.Max {
		t.Errorf("ITL p50 = %v, want ≈ 5 ms", s.ITL.P50)
	}
	// 3 values per later chunk, less the tokens of chunks a delayed first
	// read delivered together with the first (covered by TTFT).
	wantITL := 0
	for _, r := range out.Results {
		for i, off := range r.ChunkOffsets {
			if off != r.ChunkOffsets[0] {
				wantITL += int(r.ChunkTokens[i])
			}
		}
	}
	if s.ITL.Count != wantITL || wantITL < 19*3*2 {
		t.Errorf("ITL count = %d, want %d (≈ %d: 3 per later chunk)", s.ITL.Count, wantITL, 19*9)
	}
	// TPOT = (E2E − TTFT)/(12 − 1) ≥ 45 ms/11 ≈ 4.1 ms, and less than E2E.
	if s.TPOT.P50 < 0.044/11 || s.TPOT.P50 >= s.E2E.P50 {
		t.Errorf("TPOT p50 = %v, want ≈ %v", s.TPOT.P50, 0.045/11)
	}
	if s.OutputTokensTotal != 19*12 || s.InputTokensTotal != 19*8 || s.TokensEstimated {
		t.Errorf("tokens out %d in %d est %v", s.OutputTokensTotal, s.InputTokensTotal, s.TokensEstimated)
	}
	// Goodput: all 19 successes meet the TTFT SLO (their slowest), the
	// failure counts in the denominator.
	if s.GoodRequests != 19 || math.Abs(s.GoodputRatio-19.0/20) > 1e-12 {
		t.Errorf("good %d ratio %v", s.GoodRequests, s.GoodputRatio)
	}
	wantCost := 3.6 * s.DurationSeconds / 3600
	within(t, "cost total", s.Cost.TotalUSD, wantCost, 1e-12)
	within(t, "cost per request", s.Cost.PerRequestUSD, wantCost/19, 1e-12)
	// A TTFT SLO below the injected TTFT makes every request bad.
	s2 := stats.Summarize(out.Results, stats.SummaryConfig{SLO: report.SLO{TTFTSeconds: 0.010}})
	if s2.GoodRequests != 0 || s2.GoodputPerSecond != 0 {
		t.Errorf("tight SLO: good %d", s2.GoodRequests)
	}
}

func TestOpenLoopStallCorrected(t *testing.T) {
	// Constant 50 req/s with at most 1 in flight; the server stalls 100 ms
	// per request, so sends fall behind the schedule: latency from the
	// intended send time grows, latency from the actual send does not.
	f := &fakeServer{ttft: 5 * time.Millisecond, itl: time.Millisecond, chunks: 2, perChunk: 1}
	f.stall.Store(int64(100 * time.Millisecond))
	cl, wl := setup(t, f, time.Minute)
	cfg := Config{Mode: report.ModeOpen, Schedule: ScheduleConfig{Rate: 50, Arrival: Constant}, MaxConcurrency: 1, Requests: 6}
	out, err := Run(context.Background(), cfg, cl, wl, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := stats.Summarize(out.Results, stats.SummaryConfig{TargetRate: 50})
	if s.RequestsCompleted != 6 {
		t.Fatalf("completed %d", s.RequestsCompleted)
	}
	// Sleeps only overrun, so these lower bounds hold on any machine: each
	// request takes ≥ 105 ms (100 ms stall + 5 ms TTFT) and one runs at a
	// time, so request k (intended at 20k ms) is sent ≥ 105k ms in, i.e.
	// ≥ 85k ms late; the last (k = 5) ≥ 425 ms.
	const eps = 1e-3
	if s.ScheduleLag.Max < 0.425-eps {
		t.Errorf("schedule lag max %v, want ≥ 0.425 s: the stall is hidden", s.ScheduleLag.Max)
	}
	if s.TTFT.Max < 0.425+0.105-eps {
		t.Errorf("corrected TTFT max %v, want ≥ 0.53 s (lag + service)", s.TTFT.Max)
	}
	// From the actual send, every TTFT is the 105 ms service time plus
	// scheduling noise: it does not grow with the lag. Structurally: the
	// summary's TTFT from send is that of the records, each measured from
	// a send that came only after the previous request ended (one in
	// flight), to a first token seen after the server wrote it and before
	// the end of its own stream.
	results := slices.Clone(out.Results)
	slices.SortFunc(results, func(a, b report.Record) int { return a.Index - b.Index })
	var fromSends []float64
	for i, r := range results {
		corrected, fromSend, lag := r.FirstToken-r.Intended, r.FirstToken-r.Sent, r.Sent-r.Intended
		fromSends = append(fromSends, fromSend.Seconds())
		if corrected != fromSend+lag {
			t.Errorf("request %d: corrected TTFT %v ≠ from-send %v + lag %v", r.Index, corrected, fromSend, lag)
		}
		if min := time.Duration(r.Index) * 85 * time.Millisecond; lag < min-time.Millisecond {
			t.Errorf("request %d: lag %v, want ≥ %v", r.Index, lag, min)
		}
		if r.Index != i || (i > 0 && r.Sent < results[i-1].End) {
			t.Errorf("request %d sent at %v, before request %d ended at %v", r.Index, r.Sent, i-1, results[max(i-1, 0)].End)
		}
		if r.Sim == nil || out.Start.Add(r.FirstToken).UnixNano() < r.Sim.FirstTokenUnixNano-int64(time.Millisecond) || r.End < r.FirstToken {
			t.Errorf("request %d: first token %v from send, end %v; server timestamps %+v", r.Index, fromSend, r.End-r.Sent, r.Sim)
		}
	}
	if want := stats.Dist(fromSends); s.TTFTFromSend.P50 != want.P50 || s.TTFTFromSend.Max != want.Max || s.TTFTFromSend.P50 < 0.105-eps {
		t.Errorf("TTFT from send p50 %v max %v, want the records' %v and %v (≥ 0.105 s)", s.TTFTFromSend.P50, s.TTFTFromSend.Max, want.P50, want.Max)
	}
	// At most 6 requests in ≥ 5×105 ms: achieved ≤ 9.6/s, scheduled 50/s.
	if !s.RateNotAchieved || s.AchievedRatePerSecond > 5/0.525+eps {
		t.Errorf("rate_not_achieved %v achieved %v", s.RateNotAchieved, s.AchievedRatePerSecond)
	}
}

func TestSeededRunRepeats(t *testing.T) {
	var schedules [][]time.Duration
	var prompts [][]string
	for i := 0; i < 2; i++ {
		f := &fakeServer{ttft: time.Millisecond, itl: time.Millisecond, chunks: 1, perChunk: 1}
		cl, wl := setup(t, f, time.Minute)
		cfg := Config{Mode: report.ModeOpen, Schedule: ScheduleConfig{Rate: 200, Arrival: Poisson, Seed: 11}, MaxConcurrency: 1, Requests: 15}
		out, err := Run(context.Background(), cfg, cl, wl, nil)
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(out.Results, func(a, b report.Record) int { return a.Index - b.Index })
		var sched []time.Duration
		for _, r := range out.Results {
			sched = append(sched, r.Intended)
		}
		schedules = append(schedules, sched)
		prompts = append(prompts, f.prompts)
	}
	if !slices.Equal(schedules[0], schedules[1]) || len(schedules[0]) != 15 {
		t.Fatalf("schedules differ:\n%v\n%v", schedules[0], schedules[1])
	}
	if !slices.Equal(prompts[0], prompts[1]) {
		t.Fatal("prompts differ between seeded runs")
	}
}

func TestCancelKeepsMeasured(t *testing.T) {
	f := &fakeServer{ttft: 2 * time.Millisecond, itl: time.Millisecond, chunks: 2, perChunk: 1}
	cl, wl := setup(t, f, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Stop (as Ctrl-C would) once 5 requests finished, whatever the load on
	// the machine.
	obs := &cancelAfter{n: 5, cancel: cancel}
	out, err := Run(ctx, Config{Mode: report.ModeClosed, Concurrency: 2, Duration: time.Minute}, cl, wl, obs)
	if err != nil {
		t.Fatal(err)
	}
	if !out.Interrupted || len(out.Results) < 5 {
		t.Fatalf("interrupted %v with %d results", out.Interrupted, len(out.Results))
	}
	if got := len(out.Results) + out.Canceled; int64(got) != obs.done.Load() {
		t.Errorf("%d results + %d cancelled, observer saw %d", len(out.Results), out.Canceled, obs.done.Load())
	}
	for _, r := range out.Results {
		if !r.OK() {
			t.Fatalf("a cancelled request was kept as a result: %+v", r)
		}
	}
	// A hang guard: the closed loop would otherwise run its full minute.
	if d := out.End.Sub(obs.at); d > 10*time.Second {
		t.Fatalf("run took %v after cancel", d)
	}
}

// cancelAfter cancels the run when n requests have finished.
type cancelAfter struct {
	n      int64
	cancel context.CancelFunc
	done   atomic.Int64
	once   sync.Once
	at     time.Time
}

func (c *cancelAfter) Started() {}

func (c *cancelAfter) Finished(*report.Record, bool) {
	if c.done.Add(1) == c.n {
		c.once.Do(func() {
			c.at = time.Now()
			c.cancel()
		})
	}
}

func TestWarmupExcluded(t *testing.T) {
	f := &fakeServer{ttft: time.Millisecond, itl: time.Millisecond, chunks: 1, perChunk: 1}
	cl, wl := setup(t, f, time.Minute)
	cfg := Config{Mode: report.ModeOpen, Schedule: ScheduleConfig{Rate: 100, Arrival: Constant}, Warmup: 100 * time.Millisecond, Requests: 10}
	out, err := Run(context.Background(), cfg, cl, wl, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out.Warmup != 10 || len(out.Results) != 10 {
		t.Fatalf("warmup %d measured %d, want 10 and 10", out.Warmup, len(out.Results))
	}
	for _, r := range out.Results {
		if r.Index < 10 {
			t.Fatalf("warmup request %d measured", r.Index)
		}
	}
}
