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
	"github.com/gpulens/gpulens/loadgen/cost"
	"github.com/gpulens/gpulens/loadgen/report"
	"github.com/gpulens/gpulens/loadgen/schedule"
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
		time.Sleep(d)
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
	time.Sleep(f.ttft)
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
	sim, _ := json.Marshal(client.SimTimestamps{ArrivalUnixNano: arrival, FirstTokenUnixNano: times[0], TokenUnixNanos: times})
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
	cl, wl := setup(t, f, 5*time.Second)
	out, err := Run(context.Background(), Config{Mode: Closed, Concurrency: 4, Requests: 20}, cl, wl, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := Summarize(out.Results, SummaryConfig{SLO: report.SLO{TTFTSeconds: 1}, Prices: cost.Prices{GPUHourlyUSD: 3.6, GPUs: 1}, MeasureStart: out.MeasureStart})
	if s.RequestsCompleted != 19 || s.RequestsFailed != 1 || s.Errors[report.ErrHTTP5xx] != 1 {
		t.Fatalf("completed %d failed %d errors %v", s.RequestsCompleted, s.RequestsFailed, s.Errors)
	}
	// Against the server's own timestamps (sleeps overrun on a busy
	// machine): TTFT and every chunk gap match within a few ms.
	var ttftErr, gapErr []float64
	for _, r := range out.Results {
		if !r.OK() {
			continue
		}
		srvTTFT := float64(r.Sim.FirstTokenUnixNano-r.Sim.ArrivalUnixNano) / 1e9
		ttftErr = append(ttftErr, math.Abs(r.FirstToken.Sub(r.Sent).Seconds()-srvTTFT))
		for i := 1; i < len(r.ChunkOffsets); i++ {
			cg := float64(r.ChunkOffsets[i]-r.ChunkOffsets[i-1]) / 1e9
			sg := float64(r.Sim.TokenUnixNanos[i]-r.Sim.TokenUnixNanos[i-1]) / 1e9
			gapErr = append(gapErr, math.Abs(cg-sg))
		}
	}
	slices.Sort(ttftErr)
	slices.Sort(gapErr)
	if ttftErr[len(ttftErr)/2] > 0.003 || gapErr[len(gapErr)/2] > 0.002 {
		t.Errorf("median error vs server: TTFT %v, chunk gap %v", ttftErr[len(ttftErr)/2], gapErr[len(gapErr)/2])
	}
	if s.TTFT.P50 < 0.040 || s.TTFT.P50 > 0.080 {
		t.Errorf("TTFT p50 = %v, want ≥ 40 ms", s.TTFT.P50)
	}
	// Token-level ITL: a 15 ms chunk gap / 3 tokens ≈ 5 ms per token, never 0.
	if s.ITL.P50 < 0.005 || s.ITL.P50 > 0.010 {
		t.Errorf("ITL p50 = %v, want ≈ 5 ms", s.ITL.P50)
	}
	if s.ITL.Count != 19*3*3 {
		t.Errorf("ITL count = %d, want %d (3 gaps per later chunk)", s.ITL.Count, 19*9)
	}
	// TPOT = (E2E − TTFT)/(12 − 1) ≥ 45 ms/11.
	if s.TPOT.P50 < 0.045/11 || s.TPOT.P50 > 0.010 {
		t.Errorf("TPOT p50 = %v, want ≈ %v", s.TPOT.P50, 0.045/11)
	}
	if s.OutputTokensTotal != 19*12 || s.InputTokensTotal != 19*8 || s.TokensEstimated {
		t.Errorf("tokens out %d in %d est %v", s.OutputTokensTotal, s.InputTokensTotal, s.TokensEstimated)
	}
	// Goodput: all 19 successes meet the 1 s TTFT SLO, the failure counts in
	// the denominator.
	if s.GoodRequests != 19 || math.Abs(s.GoodputRatio-19.0/20) > 1e-12 {
		t.Errorf("good %d ratio %v", s.GoodRequests, s.GoodputRatio)
	}
	wantCost := 3.6 * s.DurationSeconds / 3600
	within(t, "cost total", s.Cost.TotalUSD, wantCost, 1e-12)
	within(t, "cost per request", s.Cost.PerRequestUSD, wantCost/19, 1e-12)
	// A TTFT SLO below the real TTFT makes every request bad.
	s2 := Summarize(out.Results, SummaryConfig{SLO: report.SLO{TTFTSeconds: 0.010}})
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
	cl, wl := setup(t, f, 5*time.Second)
	cfg := Config{Mode: Open, Schedule: schedule.Config{Rate: 50, Arrival: schedule.Constant}, MaxConcurrency: 1, Requests: 6}
	out, err := Run(context.Background(), cfg, cl, wl, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := Summarize(out.Results, SummaryConfig{TargetRate: 50, MeasureStart: out.MeasureStart})
	if s.RequestsCompleted != 6 {
		t.Fatalf("completed %d", s.RequestsCompleted)
	}
	if s.TTFTFromSend.Max > 0.150 {
		t.Errorf("TTFT from send max %v, want ≈0.105", s.TTFTFromSend.Max)
	}
	// Request k is intended at 20k ms but sent at ≈106k ms: corrected TTFT
	// of the last is ≈ 5×86 + 105 ms.
	if s.TTFT.Max < 0.45 || s.ScheduleLag.Max < 0.35 {
		t.Errorf("corrected TTFT max %v, lag max %v: the stall is hidden", s.TTFT.Max, s.ScheduleLag.Max)
	}
	if !s.RateNotAchieved || s.AchievedRatePerSecond > 15 {
		t.Errorf("rate_not_achieved %v achieved %v", s.RateNotAchieved, s.AchievedRatePerSecond)
	}
}

func TestSeededRunRepeats(t *testing.T) {
	var schedules [][]time.Duration
	var prompts [][]string
	for i := 0; i < 2; i++ {
		f := &fakeServer{ttft: time.Millisecond, itl: time.Millisecond, chunks: 1, perChunk: 1}
		cl, wl := setup(t, f, 5*time.Second)
		cfg := Config{Mode: Open, Schedule: schedule.Config{Rate: 200, Arrival: schedule.Poisson, Seed: 11}, MaxConcurrency: 1, Requests: 15}
		out, err := Run(context.Background(), cfg, cl, wl, nil)
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(out.Results, func(a, b client.Result) int { return a.Index - b.Index })
		var sched []time.Duration
		for _, r := range out.Results {
			sched = append(sched, r.Intended.Sub(out.Start))
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
	cl, wl := setup(t, f, 5*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(150*time.Millisecond, cancel)
	out, err := Run(ctx, Config{Mode: Closed, Concurrency: 2, Duration: time.Minute}, cl, wl, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !out.Interrupted || len(out.Results) < 5 {
		t.Fatalf("interrupted %v with %d results", out.Interrupted, len(out.Results))
	}
	for _, r := range out.Results {
		if !r.OK() {
			t.Fatalf("a cancelled request was kept as a result: %+v", r)
		}
	}
	if out.End.Sub(out.Start) > time.Second {
		t.Fatalf("run took %v after cancel", out.End.Sub(out.Start))
	}
}

func TestWarmupExcluded(t *testing.T) {
	f := &fakeServer{ttft: time.Millisecond, itl: time.Millisecond, chunks: 1, perChunk: 1}
	cl, wl := setup(t, f, 5*time.Second)
	cfg := Config{Mode: Open, Schedule: schedule.Config{Rate: 100, Arrival: schedule.Constant}, Warmup: 100 * time.Millisecond, Requests: 10}
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

func TestITLTokenLevel(t *testing.T) {
	r := &client.Result{ChunkOffsets: []int64{10e6, 16e6, 16e6, 40e6}, ChunkTokens: []int32{1, 3, 0, 2}}
	got := ITL(r)
	want := []float64{0.002, 0.002, 0.002, 0.012, 0.012}
	if len(got) != len(want) {
		t.Fatalf("ITL = %v", got)
	}
	for i := range want {
		within(t, "gap", got[i], want[i], 1e-12)
	}
}
