package simserver

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpulens/gpulens/internal/testenv"
)

// exposition is an exporter's text exposition (the series the tie reads)
// with GPU 0 shared by pids 4242 and 5151 (at util0 and util1), GPU 1
// alone, and GPU 4 in MIG mode with a process on each of two instances.
func exposition(util0, util1 float64) string {
	var b strings.Builder
	b.WriteString("# HELP gpulens_gpu_info GPU.\n# TYPE gpulens_gpu_info gauge\n")
	for _, g := range []string{"0", "1", "4"} {
		fmt.Fprintf(&b, "gpulens_gpu_info{gpu=%q,uuid=\"GPU-%s\"} 1\n", g, g)
	}
	b.WriteString("# HELP gpulens_process_sm_utilization_ratio SM.\n# TYPE gpulens_process_sm_utilization_ratio gauge\n")
	for _, p := range []struct {
		gpu, pid, gi string
		util         float64
	}{
		{"0", "4242", "", util0}, {"0", "5151", "", util1}, {"1", "7000", "", 0.31},
		{"4", "6161", "1", 0.2}, {"4", "6262", "2", 0.8}, {"4", "6363", "1", 0.1},
	} {
		fmt.Fprintf(&b, "gpulens_process_sm_utilization_ratio{compute_instance_id=\"\",gpu=%q,gpu_instance_id=%q,pid=%q,uuid=\"GPU-%s\"} %g\n", p.gpu, p.gi, p.pid, p.gpu, p.util)
	}
	return b.String()
}

func TestNeighbourUtilization(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		gpu, pid string
		want     float64
		err      string
	}{
		{"0", "4242", 0.7, ""},             // the neighbour only
		{"GPU-0", "4242", 0.7, ""},         // by UUID
		{"0", "", 1.05, ""},                // every process a neighbour
		{"0", "5151", 0.35, ""},            // standing for the other one
		{"1", "7000", 0, ""},               // alone
		{"4", "6161", 0.1, ""},             // MIG: only its own instance
		{"4", "", 1.1, ""},                 // MIG, no own process: every process
		{"7", "", 0, "shows no GPU \"7\""}, // a GPU the exporter does not have
	} {
		got, err := NeighbourUtilization(strings.NewReader(exposition(0.35, 0.7)), tc.gpu, tc.pid)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("GPU %s pid %s: err %v, want %q", tc.gpu, tc.pid, err, tc.err)
			}
			continue
		}
		if err != nil || abs(got-tc.want) > 1e-12 {
			t.Errorf("GPU %s pid %s: %v, %v; want %v", tc.gpu, tc.pid, got, err, tc.want)
		}
	}
	if _, err := NeighbourUtilization(strings.NewReader("not { an exposition"), "0", ""); err == nil {
		t.Error("a broken exposition parsed")
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

func TestSetSlowdownClamps(t *testing.T) {
	t.Parallel()
	s, err := New(Config{FixedTTFT: time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ in, want float64 }{{1.7, 1.7}, {0.5, 1}, {-3, 1}, {1e9, MaxSlowdown}} {
		s.SetSlowdown(tc.in)
		if got := s.Slowdown(); got != tc.want {
			t.Errorf("SetSlowdown(%v): %v, want %v", tc.in, got, tc.want)
		}
		if got := testutil.ToFloat64(s.metrics.slowdown); got != tc.want {
			t.Errorf("SetSlowdown(%v): gpulens_sim_slowdown_ratio %v, want %v", tc.in, got, tc.want)
		}
	}
}

// A slowdown stretches every engine step (batching) and every token delay
// (fixed mode) from the next one on.
func TestSlowdownStretchesSchedule(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		name string
		cfg  Config
		f    float64
		want []time.Duration
	}{
		{"batching alone", Config{DecodeBase: 10 * time.Millisecond}, 1, ms(10, 20, 30)},
		{"batching, a neighbour at 70 %", Config{DecodeBase: 10 * time.Millisecond}, 1.7, ms(17, 34, 51)},
		{"fixed, a neighbour at 100 %", Config{FixedTTFT: 20 * time.Millisecond, FixedITL: 5 * time.Millisecond}, 2, ms(40, 50, 60)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			var queued atomic.Int64
			e := newEngine(&cfg, newMetrics(cfg.Model), &queued)
			e.slowdown = &slowdown{}
			e.slowdown.set(tc.f)
			r := testRequest(0, 1, 3, -1, t0)
			queued.Add(1)
			e.enqueue(r)
			if got := drive(t, e, t0, []*request{r}); !reflect.DeepEqual(got[0], tc.want) {
				t.Errorf("token times %v, want %v", got[0], tc.want)
			}
		})
	}
}

// fakeExporter serves exposition(…) at /metrics; its neighbour's
// utilisation and its status can change.
type fakeExporter struct {
	mu     sync.Mutex
	util   float64
	status int
	// probeEnd and probeGPUTime (when probeEnd > 0) are the last probe run
	// of GPUs 0 and 4, as the exporter's probe reports it.
	probeEnd, probeGPUTime float64
}

func (f *fakeExporter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.status != http.StatusOK {
		w.WriteHeader(f.status)
		return
	}
	if !strings.HasPrefix(r.Header.Get("Accept"), "text/plain") {
		w.WriteHeader(http.StatusNotAcceptable)
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	fmt.Fprint(w, exposition(0.35, f.util))
	if f.probeEnd > 0 {
		fmt.Fprint(w, "# HELP gpulens_probe_last_success_timestamp_seconds End.\n# TYPE gpulens_probe_last_success_timestamp_seconds gauge\n")
		for _, g := range []string{"0", "4"} {
			fmt.Fprintf(w, "gpulens_probe_last_success_timestamp_seconds{gpu=%q,uuid=\"GPU-%s\"} %.9f\n", g, g, f.probeEnd)
		}
		fmt.Fprint(w, "# HELP gpulens_probe_gpu_time_seconds GPU time.\n# TYPE gpulens_probe_gpu_time_seconds gauge\n")
		for _, g := range []string{"0", "4"} {
			fmt.Fprintf(w, "gpulens_probe_gpu_time_seconds{gpu=%q,uuid=\"GPU-%s\"} %g\n", g, g, f.probeGPUTime)
		}
	}
}

func (f *fakeExporter) setProbe(end time.Time, gpuTime time.Duration) {
	f.mu.Lock()
	f.probeEnd, f.probeGPUTime = float64(end.UnixNano())/1e9, gpuTime.Seconds()
	f.mu.Unlock()
}

func (f *fakeExporter) set(util float64, status int) {
	f.mu.Lock()
	f.util, f.status = util, status
	f.mu.Unlock()
}

// The tie follows the exporter: a neighbour joining slows the server, its
// leaving speeds it up, and when the exporter cannot be read the last
// reading holds for StaleAfter, then the server runs as if alone.
func TestGPUTieFollowsExporter(t *testing.T) {
	// Serial: it times the tie's reads and staleness on the wall clock.
	exp := &fakeExporter{status: http.StatusOK}
	srv := httptest.NewServer(exp)
	defer srv.Close()
	s, err := New(Config{FixedTTFT: time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tie := &GPUTie{ExporterURL: srv.URL + "/metrics", GPU: "0", PID: "4242", Interval: 100 * time.Millisecond, StaleAfter: 2 * time.Second}
	runTie(t, tie, s)
	waitSlowdown(t, s, "alone", 1)
	exp.set(0.7, http.StatusOK)
	waitSlowdown(t, s, "a neighbour at 70 %", 1.7)
	if got := testutil.ToFloat64(s.metrics.neighbourUtil); abs(got-0.7) > 1e-12 {
		t.Errorf("gpulens_sim_gpu_neighbour_sm_utilization_ratio %v, want 0.7", got)
	}
	exp.set(0.7, http.StatusServiceUnavailable)
	failed := time.Now()
	// Not a wait for a condition: the slowdown must hold through these
	// reads of the failing exporter, until StaleAfter after the last good
	// read. A loaded machine may oversleep into that: the reading is then
	// allowed to be gone (the last good read came at most an interval
	// before the failure; give the tie's loop 10 of them, as below).
	time.Sleep(300 * time.Millisecond)
	got := s.Slowdown()
	if since := time.Since(failed); got != 1.7 && since < tie.StaleAfter-10*tie.Interval {
		t.Errorf("%s after the exporter failed: slowdown %v, want the last reading 1.7", since, got)
	}
	// The last good read came at most an interval before the failure
	// (give a loaded machine 10 of them).
	if stale := waitSlowdown(t, s, "stale", 1); stale.Sub(failed) < tie.StaleAfter-10*tie.Interval {
		t.Errorf("the last reading was dropped %s after the exporter failed; want about StaleAfter (%s)", stale.Sub(failed), tie.StaleAfter)
	}
	if got := testutil.ToFloat64(s.metrics.gpuReads.WithLabelValues("error")); got < 2 {
		t.Errorf("failed reads counted %v, want several", got)
	}
	exp.set(0.2, http.StatusOK)
	waitSlowdown(t, s, "back, the neighbour at 20 %", 1.2)
}

func TestGPUTieValidate(t *testing.T) {
	t.Parallel()
	good := GPUTie{ExporterURL: "http://127.0.0.1:9842/metrics", GPU: "0", Interval: time.Second, StaleAfter: 5 * time.Second}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mod  func(g *GPUTie)
		want string
	}{
		{func(g *GPUTie) { g.ExporterURL = "127.0.0.1:9842" }, `ExporterURL must be an http(s) URL, got "127.0.0.1:9842": first path segment in URL cannot contain colon`},
		{func(g *GPUTie) { g.GPU = "" }, "GPU must name the GPU: its index or UUID"},
		{func(g *GPUTie) { g.Interval = time.Millisecond }, "Interval must be at least 100ms, got 1ms"},
		{func(g *GPUTie) { g.StaleAfter = 500 * time.Millisecond }, "StaleAfter (500ms) must be at least Interval (1s)"},
	} {
		g := good
		tc.mod(&g)
		if err := g.Validate(); err == nil || err.Error() != tc.want {
			t.Errorf("err %v, want %q", err, tc.want)
		}
	}
}

func TestNewProbeSpan(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	unix := func(d time.Duration) float64 { return float64(now.Add(d).UnixNano()) / 1e9 }
	for _, tc := range []struct {
		name           string
		end, gpu, seen float64
		first          bool
		ok             bool
		from, to       time.Duration // from now
	}{
		{"no probe run", 0, 0, 0, false, false, 0, 0},
		{"no GPU time", unix(-100 * time.Millisecond), 0, 0, false, false, 0, 0},
		{"the run seen before", unix(-100 * time.Millisecond), 0.25, unix(-100 * time.Millisecond), false, false, 0, 0},
		{"a run over at the first read", unix(-100 * time.Millisecond), 0.25, 0, true, false, 0, 0},
		{"a run ahead at the first read keeps its time", unix(time.Second), 0.25, 0, true, true, 750 * time.Millisecond, time.Second},
		{"a run ahead keeps its time", unix(time.Second), 0.25, unix(-30 * time.Second), false, true, 750 * time.Millisecond, time.Second},
		{"a run begun is replayed from now in full", unix(100 * time.Millisecond), 0.25, 0, false, true, 0, 250 * time.Millisecond},
		{"a run published late, replayed from now", unix(-1500 * time.Millisecond), 0.25, unix(-30 * time.Second), false, true, 0, 250 * time.Millisecond},
		{"NaN GPU time", unix(-100 * time.Millisecond), math.NaN(), 0, false, false, 0, 0},
	} {
		got, ok := newProbeSpan(tc.end, tc.gpu, tc.seen, tc.first, now)
		if ok != tc.ok {
			t.Errorf("%s: ok %v, want %v", tc.name, ok, tc.ok)
			continue
		}
		if !ok {
			continue
		}
		// The end is a float of Unix seconds: microseconds are exact enough.
		if d := got.from.Sub(now.Add(tc.from)); d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("%s: from %s, want %s", tc.name, got.from.Sub(now), tc.from)
		}
		if d := got.to.Sub(now.Add(tc.to)); d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("%s: to %s, want %s", tc.name, got.to.Sub(now), tc.to)
		}
	}
}

// The exporter's probe slows the server by one step per step for its GPU
// time, once per run, although its PID is in no process metric; not on a
// MIG instance.
func TestGPUTieAddsProbe(t *testing.T) {
	// Serial: it times the probe's span on the wall clock.
	exp := &fakeExporter{status: http.StatusOK, util: 0.5}
	srv := httptest.NewServer(exp)
	defer srv.Close()

	mig := &GPUTie{ExporterURL: srv.URL + "/metrics", GPU: "4", PID: "6161", Interval: 100 * time.Millisecond, StaleAfter: time.Second}
	exp.setProbe(time.Now().Add(time.Second), 300*time.Millisecond)
	rds, err := mig.read(context.Background(), srv.Client())
	if err != nil || len(rds) != 1 || rds[0].probeEnd != 0 || abs(rds[0].util-0.1) > 1e-12 {
		t.Errorf("on a MIG instance: %+v, %v; want the neighbours' 0.1 and no probe", rds, err)
	}

	s, err := New(Config{FixedTTFT: time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tie := &GPUTie{ExporterURL: srv.URL + "/metrics", GPU: "0", PID: "4242", Interval: 100 * time.Millisecond, StaleAfter: 2 * time.Second}
	// A run that ended long before the tie started is not replayed.
	exp.setProbe(time.Now().Add(-time.Minute), 250*time.Millisecond)
	runTie(t, tie, s)
	waitSlowdown(t, s, "the neighbour at 50 %", 1.5)
	// Not a wait for a condition: the old run must stay unapplied through
	// these reads.
	time.Sleep(300 * time.Millisecond)
	if got := testutil.ToFloat64(s.metrics.probeSpans); got != 0 {
		t.Fatalf("a probe run a minute before the tie started: gpulens_sim_gpu_probe_runs_total %v, want 0", got)
	}
	// A run whose busy span lies 1.5 s to 2.5 s ahead (a virtual clock).
	const span = time.Second
	exp.setProbe(time.Now().Add(1500*time.Millisecond+span), span)
	// The test sees both edges late by its polling (more on a loaded
	// machine), so the span's length is checked loosely: a span never
	// applied, or cut short to a read interval, fails.
	began := waitSlowdown(t, s, "during the probe's span", 2.5)
	ended := waitSlowdown(t, s, "after the probe's span", 1.5)
	if got := ended.Sub(began); got < span/2 || got > span+time.Second {
		t.Errorf("the probe slowed the server for %s, want its GPU time %s", got, span)
	}
	time.Sleep(500 * time.Millisecond) // not a wait: several reads of the same run must not apply it again
	if abs(s.Slowdown()-1.5) > 1e-12 {
		t.Errorf("the same run read again: slowdown %v, want 1.5", s.Slowdown())
	}
	if got := testutil.ToFloat64(s.metrics.probeSpans); got != 1 {
		t.Errorf("gpulens_sim_gpu_probe_runs_total %v, want 1", got)
	}
	// A run the exporter publishes a sampler cycle after it ended is
	// replayed from the read that sees it, for its whole span.
	exp.setProbe(time.Now().Add(-1500*time.Millisecond), span)
	began = waitSlowdown(t, s, "a run published late", 2.5)
	ended = waitSlowdown(t, s, "after the late run's span", 1.5)
	if got := ended.Sub(began); got < span/2 || got > span+time.Second {
		t.Errorf("the late run slowed the server for %s, want its GPU time %s", got, span)
	}
	if got := testutil.ToFloat64(s.metrics.probeSpans); got != 2 {
		t.Errorf("gpulens_sim_gpu_probe_runs_total %v, want 2", got)
	}
}

// runTie runs tie against s until the test ends.
func runTie(t *testing.T, tie *GPUTie, s *Server) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tie.Run(ctx, s, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// waitSlowdown waits up to 10 s for s's slowdown to be want, polling every
// 5 ms, and returns when it saw it.
func waitSlowdown(t *testing.T, s *Server, what string, want float64) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !testenv.Poll(ctx, 5*time.Millisecond, func() bool { return abs(s.Slowdown()-want) < 1e-12 }) {
		t.Fatalf("%s: slowdown %v, want %v", what, s.Slowdown(), want)
	}
	return time.Now()
}
