package simserver

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A tensor-parallel server tied to several GPUs runs each step on all of
// them and waits for the slowest: the slowdown is the highest GPU's, and
// the probe counts when it makes that higher than the neighbours alone.
func TestTieStateFactorTensorParallel(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	span := func(from, to int) probeSpan { return probeSpan{from: at(from), to: at(to)} }
	// Eight GPUs probed one after another: 250 ms each, every 300 ms.
	seq := make(tieState, 8)
	seq.alone()
	for i := range seq {
		seq[i].probe = span(300*i, 300*i+250)
	}
	// The same eight probed together.
	together := make(tieState, 8)
	together.alone()
	for i := range together {
		together[i].probe = span(0, 250)
	}
	for _, tc := range []struct {
		name   string
		st     tieState
		at     int
		f      float64
		probe  bool
		nextMS int // -1: no edge ahead
	}{
		{"sequential, GPU 0's span", seq, 100, 2, true, 250},
		{"sequential, between GPU 0 and GPU 1", seq, 275, 1, false, 300},
		{"sequential, GPU 7's span", seq, 2200, 2, true, 2350},
		{"sequential, after the last", seq, 2400, 1, false, -1},
		{"together, inside", together, 100, 2, true, 250},
		{"together, after", together, 260, 1, false, -1},
	} {
		f, probe, next, ok := tc.st.factor(at(tc.at))
		if f != tc.f || probe != tc.probe || ok != (tc.nextMS >= 0) || (ok && !next.Equal(at(tc.nextMS))) {
			t.Errorf("%s: factor %v probe %v next %v (%v); want %v %v %dms", tc.name, f, probe, next.Sub(t0), ok, tc.f, tc.probe, tc.nextMS)
		}
	}
	// How often a tensor-parallel step is slowed over one run: the
	// sequential schedule 8 × 250 ms, together 250 ms.
	slowed := func(st tieState) (n int) {
		for ms := 0; ms < 3000; ms++ {
			if _, probe, _, _ := st.factor(at(ms)); probe {
				n++
			}
		}
		return n
	}
	if got := slowed(seq); got != 2000 {
		t.Errorf("sequential: slowed %d ms of 3 s, want 2000", got)
	}
	if got := slowed(together); got != 250 {
		t.Errorf("together: slowed %d ms of 3 s, want 250", got)
	}

	// Neighbours: GPU 3 at 70 %, GPU 5 at 120 %.
	mixed := make(tieState, 8)
	mixed.alone()
	mixed[3].base, mixed[5].base = 1.7, 2.2
	for _, tc := range []struct {
		name  string
		gpu   int // the GPU the probe holds; -1 none
		f     float64
		probe bool
	}{
		{"no probe: the busiest GPU", -1, 2.2, false},
		{"the probe on an idle GPU, below the busiest", 0, 2.2, false},
		{"the probe beside the 70 % neighbour", 3, 2.7, true},
		{"the probe beside the 120 % neighbour", 5, 3.2, true},
	} {
		st := append(tieState(nil), mixed...)
		if tc.gpu >= 0 {
			st[tc.gpu].probe = span(0, 250)
		}
		if f, probe, _, _ := st.factor(at(100)); abs(f-tc.f) > 1e-12 || probe != tc.probe {
			t.Errorf("%s: factor %v probe %v, want %v %v", tc.name, f, probe, tc.f, tc.probe)
		}
	}
}

// The tie reads every GPU of a list, each with its own neighbours (the
// PIDs the server stands for left out on every GPU) and its own probe run.
func TestGPUTieReadsEveryGPU(t *testing.T) {
	t.Parallel()
	exp := &fakeExporter{status: http.StatusOK, util: 0.7}
	end := time.Unix(1_700_000_000, 0)
	exp.setProbe(end, 250*time.Millisecond)
	srv := httptest.NewServer(exp)
	defer srv.Close()
	tie := &GPUTie{ExporterURL: srv.URL + "/metrics", GPU: "0, GPU-1", PID: "4242,7000", Interval: time.Second, StaleAfter: time.Second}
	if err := tie.Validate(); err != nil {
		t.Fatal(err)
	}
	rds, err := tie.read(context.Background(), srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	want := []reading{
		{util: 0.7, probeEnd: float64(end.UnixNano()) / 1e9, probeGPUTime: 0.25}, // GPU 0: 5151 is the neighbour
		{util: 0}, // GPU 1: 7000 is the server's
	}
	if len(rds) != len(want) {
		t.Fatalf("readings %+v, want %+v", rds, want)
	}
	for i := range want {
		if abs(rds[i].util-want[i].util) > 1e-12 || abs(rds[i].probeEnd-want[i].probeEnd) > 1e-6 || rds[i].probeGPUTime != want[i].probeGPUTime {
			t.Errorf("GPU %d: %+v, want %+v", i, rds[i], want[i])
		}
	}
	// A GPU of the list the exporter does not show fails the read.
	bad := *tie
	bad.GPU = "0,7"
	if _, err := bad.read(context.Background(), srv.Client()); err == nil || !strings.Contains(err.Error(), `shows no GPU "7"`) {
		t.Errorf("a missing GPU of the list: err %v", err)
	}
}

func TestGPUTieValidateLists(t *testing.T) {
	t.Parallel()
	good := GPUTie{ExporterURL: "http://127.0.0.1:9842/metrics", GPU: "0,1,2,3,4,5,6,7", PID: "4200,4201", Interval: time.Second, StaleAfter: 5 * time.Second}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		gpu, pid, want string
	}{
		{"0,,1", "", `GPU must list GPUs by index or UUID, separated by commas, each once: an empty entry in "0,,1"`},
		{"0,1,0", "", `GPU must list GPUs by index or UUID, separated by commas, each once: "0" twice in "0,1,0"`},
		{"0", "42,42", `PID must list process ids separated by commas, each once: "42" twice in "42,42"`},
	} {
		g := good
		g.GPU, g.PID = tc.gpu, tc.pid
		if err := g.Validate(); err == nil || err.Error() != tc.want {
			t.Errorf("GPU %q PID %q: err %v, want %q", tc.gpu, tc.pid, err, tc.want)
		}
	}
}

// The engine counts the requests the probe slowed: those alive when a step
// began under the probe (arrived during one included), at their first token
// and at their end; not those that arrived after it.
func TestEngineCountsProbeSlowedRequests(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	cfg := Config{DecodeBase: 10 * time.Millisecond}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	var queued atomic.Int64
	m := newMetrics(cfg.Model)
	e := newEngine(&cfg, m, &queued)
	e.slowdown = &slowdown{}
	e.slowdown.set(1)
	add := func(r *request) {
		queued.Add(1)
		e.enqueue(r)
	}
	a := testRequest(0, 1, 5, -1, at(0))
	add(a)
	e.advance(at(0)) // step [0, 10): alone
	e.slowdown.set(2)
	e.slowdown.probe.Store(true)
	e.advance(at(10)) // a's first token; step [10, 30): under the probe
	e.slowdown.set(1)
	e.slowdown.probe.Store(false)
	c := testRequest(1, 1, 2, -1, at(15)) // arrives during the probe's step
	add(c)
	e.advance(at(15))
	b := testRequest(2, 1, 2, -1, at(30)) // arrives after it
	add(b)
	drive(t, e, at(30), []*request{a, b, c})
	if got := e.probeSteps; got != 1 {
		t.Errorf("steps under the probe %d, want 1", got)
	}
	for until, want := range map[string]float64{"first_token": 1, "end": 2} {
		if got := testutil.ToFloat64(m.probeRequests.WithLabelValues(until)); got != want {
			t.Errorf("gpulens_sim_probe_slowed_requests_total{until=%q} %v, want %v", until, got, want)
		}
	}

	// Fixed mode: a token delay stretched by the probe counts.
	fcfg := Config{FixedTTFT: 20 * time.Millisecond, FixedITL: 5 * time.Millisecond}
	if err := fcfg.Validate(); err != nil {
		t.Fatal(err)
	}
	fm := newMetrics(fcfg.Model)
	fe := newEngine(&fcfg, fm, &queued)
	fe.slowdown = &slowdown{}
	fe.slowdown.set(2)
	fe.slowdown.probe.Store(true)
	r := testRequest(0, 1, 2, -1, at(0))
	queued.Add(1)
	fe.enqueue(r)
	drive(t, fe, at(0), []*request{r})
	for until, want := range map[string]float64{"first_token": 1, "end": 1} {
		if got := testutil.ToFloat64(fm.probeRequests.WithLabelValues(until)); got != want {
			t.Errorf("fixed mode: gpulens_sim_probe_slowed_requests_total{until=%q} %v, want %v", until, got, want)
		}
	}
}
