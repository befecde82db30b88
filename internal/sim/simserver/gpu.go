package simserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	clientmodel "github.com/prometheus/client_model/go"

	"github.com/gpulens/gpulens/internal/promtext"
	"github.com/gpulens/gpulens/loadgen/option"
)

// MaxSlowdown bounds the slowdown factor (SetSlowdown): ten times slower
// than alone on the GPU.
const MaxSlowdown = 10

// slowdown is a float64 factor shared by the scheduler and SetSlowdown,
// and whether the exporter's probe is part of it (the GPU tie sets it; the
// engine counts the requests a probe slowed).
type slowdown struct {
	bits  atomic.Uint64
	probe atomic.Bool
}

func (s *slowdown) get() float64  { return math.Float64frombits(s.bits.Load()) }
func (s *slowdown) set(f float64) { s.bits.Store(math.Float64bits(f)) }

// SetSlowdown makes the simulated GPU f times slower than alone from its
// next engine step (batching mode) or token delay (fixed mode) on: the
// time other processes on the same GPU take from it. f is clamped to
// [1, MaxSlowdown]; NaN is 1.
func (s *Server) SetSlowdown(f float64) {
	if !(f >= 1) {
		f = 1
	}
	f = min(f, MaxSlowdown)
	s.slowdown.set(f)
	s.metrics.slowdown.Set(f)
}

// Slowdown returns the current slowdown factor (1: alone on the GPU).
func (s *Server) Slowdown() float64 { return s.slowdown.get() }

// GPUTie ties the server's speed to a simulated (or real) GPU as a gpulens
// exporter reports it: every Interval it reads the exporter's /metrics and
// sets the server's slowdown to 1 + the summed SM utilisation
// (gpulens_process_sm_utilization_ratio) of the other processes on that GPU.
// A time-sliced GPU runs one context at a time: a neighbour busy 70 % of
// the time makes each of the server's steps wait for it about 70 % of a
// step, so a neighbour joining shows on the exporter as contention and on
// the load generator as TTFT, ITL and (with a fixed number of users) fewer
// requests per GPU-hour — on one time axis.
//
// Tied to several GPUs (GPU "0,1,2,3": a tensor-parallel model, each step
// running on every GPU and waiting for the slowest), the slowdown is the
// highest of the GPUs' factors.
//
// On a GPU in MIG mode only processes on the server's own GPU instance
// count (MIG instances do not share SMs); the server's instance is that of
// its own process (PID).
//
// The exporter's own probe (--collector.probe) is a neighbour too, though
// the exporter leaves its own PID out of the process metrics: a real GPU
// time-slices the probe's context with the tenant's like any other. The
// probe's kernels run back to back, so while its context is busy it
// demands the whole GPU and the server's steps take one whole step longer
// (slowdown + 1: half the GPU beside a busy server). The tie learns of each
// successful probe run from gpulens_probe_last_success_timestamp_seconds
// (its end) and gpulens_probe_gpu_time_seconds (its busy span), and adds
// the probe for that span: at its own time when the span is still ahead
// (the simulated fleet's probe runs on a virtual clock that can run ahead
// of the wall), else from the read that saw it, for the span's length (so
// late by at most the exporter's sampler cycle plus one Interval, never
// shorter). A run already over at the tie's first read is older than the
// tie and not replayed. Not on a MIG instance: the probe's own instance is
// not in the metrics, and MIG instances do not share SMs.
type GPUTie struct {
	// ExporterURL is the exporter's metrics URL (http://host:9842/metrics).
	ExporterURL string
	// GPU is the GPU's index (the gpu label) or UUID (the uuid label), or
	// several, separated by commas: a tensor-parallel server on each of
	// them, whose steps wait for the slowest.
	GPU string
	// PID is the process on the GPU the server stands for (in a simulated
	// fleet, the tenant whose place it takes): not a neighbour. Several,
	// separated by commas: one per GPU of a tensor-parallel server, none of
	// them a neighbour on any GPU. Empty: every process on the GPU is a
	// neighbour.
	PID string
	// Interval is how often the exporter is read.
	Interval time.Duration
	// StaleAfter is how long the last reading holds while reads fail; then
	// the slowdown goes back to 1.
	StaleAfter time.Duration
	// Client makes the requests (http.DefaultClient when nil); each read
	// also times out after Interval.
	Client *http.Client
}

// Validate reports a missing URL or GPU and bad durations, naming the
// options (option.Error).
func (g *GPUTie) Validate() error {
	var errs []error
	if _, err := option.Check(g.ExporterURL); err != nil {
		errs = append(errs, option.Errorf("%s must be an http(s) URL, got %q: %v", option.Name("ExporterURL"), g.ExporterURL, err))
	}
	if g.GPU == "" {
		errs = append(errs, option.Errorf("%s must name the GPU: its index or UUID", option.Name("GPU")))
	} else if _, err := splitList(g.GPU); err != nil {
		errs = append(errs, option.Errorf("%s must list GPUs by index or UUID, separated by commas, each once: %v", option.Name("GPU"), err))
	}
	if g.PID != "" {
		if _, err := splitList(g.PID); err != nil {
			errs = append(errs, option.Errorf("%s must list process ids separated by commas, each once: %v", option.Name("PID"), err))
		}
	}
	if g.Interval < 100*time.Millisecond {
		errs = append(errs, option.Errorf("%s must be at least 100ms, got %s", option.Name("Interval"), g.Interval))
	}
	if g.StaleAfter < g.Interval {
		errs = append(errs, option.Errorf("%s (%s) must be at least %s (%s)", option.Name("StaleAfter"), g.StaleAfter, option.Name("Interval"), g.Interval))
	}
	return errors.Join(errs...)
}

// Run reads the exporter every Interval and sets s's slowdown until ctx is
// cancelled. Failed reads and a GPU the exporter does not show are logged
// (once until the next success) and counted in
// gpulens_sim_gpu_reads_total{result="error"}.
func (g *GPUTie) Run(ctx context.Context, s *Server, logger *slog.Logger) error {
	if err := g.Validate(); err != nil {
		return err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	client := g.Client
	if client == nil {
		client = http.DefaultClient
	}
	gpus, _ := splitList(g.GPU)
	var (
		lastOK time.Time
		state  = make(tieState, len(gpus))
		first  = true // no successful read yet
	)
	state.alone()
	failing := false
	tick := time.NewTicker(g.Interval)
	defer tick.Stop()
	// edge fires at a probe span's next start or end.
	edge := time.NewTimer(time.Hour)
	edge.Stop()
	defer edge.Stop()
	apply := func(now time.Time) {
		f, probe, next, ok := state.factor(now)
		s.slowdown.probe.Store(probe)
		s.SetSlowdown(f)
		edge.Stop()
		if ok {
			edge.Reset(next.Sub(now))
		}
	}
	for {
		rds, err := g.read(ctx, client)
		now := time.Now()
		switch {
		case err == nil:
			s.metrics.gpuReads.WithLabelValues("ok").Inc()
			s.metrics.gpuReadSuccess.Set(float64(now.UnixNano()) / 1e9)
			util := 0.0
			for i, rd := range rds {
				util = max(util, rd.util)
				if state[i].update(rd, first, now) {
					s.metrics.probeSpans.Inc()
				}
			}
			s.metrics.neighbourUtil.Set(util)
			first = false
			apply(now)
			lastOK = now
			if failing {
				logger.Info("reading the tied GPU again", "gpu", g.GPU, "neighbour_sm_utilization", util)
			}
			failing = false
		case ctx.Err() != nil:
			return nil
		default:
			s.metrics.gpuReads.WithLabelValues("error").Inc()
			if !failing {
				logger.Warn("cannot read the tied GPU from the exporter; keeping the last slowdown for a while", "gpu", g.GPU, "url", g.ExporterURL, "err", err, "stale_after", g.StaleAfter)
			}
			failing = true
			if now.Sub(lastOK) > g.StaleAfter && s.Slowdown() != 1 {
				logger.Warn("the tied GPU's reading is stale; running as if alone on the GPU", "gpu", g.GPU)
				s.metrics.neighbourUtil.Set(0)
				state.alone()
				apply(now)
			}
		}
		for waiting := true; waiting; {
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
				waiting = false
			case <-edge.C:
				apply(time.Now())
			}
		}
	}
}

// splitList splits a comma-separated list of GPUs or PIDs, refusing empty
// and repeated entries.
func splitList(list string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		switch {
		case f == "":
			return nil, fmt.Errorf("an empty entry in %q", list)
		case seen[f]:
			return nil, fmt.Errorf("%q twice in %q", f, list)
		}
		seen[f] = true
		out = append(out, f)
	}
	return out, nil
}

// gpuState is what the tie knows of one tied GPU.
type gpuState struct {
	base     float64   // 1 + the neighbours' utilisation
	probe    probeSpan // the probe's last span
	probeEnd float64   // the last probe run seen (its end, Unix seconds)
}

// tieState is the state of every tied GPU, in the order of GPUTie.GPU.
type tieState []gpuState

// alone forgets the neighbours (the probe spans stay).
func (st tieState) alone() {
	for i := range st {
		st[i].base = 1
	}
}

// update takes a GPU's new reading at now; it reports whether it brought a
// new probe span (see newProbeSpan; first: the tie's first read).
func (gs *gpuState) update(rd reading, first bool, now time.Time) bool {
	gs.base = 1 + rd.util
	sp, ok := newProbeSpan(rd.probeEnd, rd.probeGPUTime, gs.probeEnd, first, now)
	if ok {
		gs.probe = sp
	}
	if rd.probeEnd > 0 {
		gs.probeEnd = rd.probeEnd
	}
	return ok
}

// factor is the slowdown at now: each GPU's 1 + its neighbours' utilisation,
// + 1 while its probe span covers now, and the highest of them (a step runs
// on every tied GPU and waits for the slowest). probe says the probe made
// it higher than the neighbours alone would. next is the next start or end
// of a probe span after now (ok false: none).
func (st tieState) factor(now time.Time) (f float64, probe bool, next time.Time, ok bool) {
	f, base := 1.0, 1.0
	for _, gs := range st {
		base = max(base, gs.base)
		g := gs.base
		if gs.probe.covers(now) {
			g++
		}
		f = max(f, g)
		for _, t := range []time.Time{gs.probe.from, gs.probe.to} {
			if t.After(now) && (!ok || t.Before(next)) {
				next, ok = t, true
			}
		}
	}
	return f, f > base, next, ok
}

// probeSpan is when the exporter's probe holds the GPU, on the wall clock.
type probeSpan struct{ from, to time.Time }

func (p probeSpan) covers(t time.Time) bool { return !t.Before(p.from) && t.Before(p.to) }

// newProbeSpan turns a probe run the exporter reports (end: its
// gpulens_probe_last_success_timestamp_seconds, gpuTime: its
// gpulens_probe_gpu_time_seconds) into the span the tie adds it for, read
// at now: ok is false when there is no run, it is the one seen before
// (seen), or, at the tie's first read (first), it is over (a run older than
// the tie). A run the exporter published late (it renders its exposition
// once per sampler cycle) still counts. A span still ahead keeps its time;
// one that has begun or passed is replayed from now for its whole length.
func newProbeSpan(end, gpuTime, seen float64, first bool, now time.Time) (probeSpan, bool) {
	if !(end > 0) || !(gpuTime > 0) || end == seen || math.IsInf(end, 0) || math.IsInf(gpuTime, 0) {
		return probeSpan{}, false
	}
	to := time.Unix(0, int64(end*1e9))
	if first && !to.After(now) {
		return probeSpan{}, false
	}
	length := time.Duration(gpuTime * 1e9)
	from := to.Add(-length)
	if from.Before(now) {
		from = now
	}
	return probeSpan{from: from, to: from.Add(length)}, true
}

// reading is what one read of the exporter says about a tied GPU.
type reading struct {
	util         float64 // the neighbours' summed SM utilisation
	probeEnd     float64 // the last successful probe's end, Unix seconds (0: none)
	probeGPUTime float64 // its GPU time, seconds
}

// read scrapes the exporter once: a reading per tied GPU, in the order of
// g.GPU.
func (g *GPUTie) read(ctx context.Context, client *http.Client) ([]reading, error) {
	ctx, cancel := context.WithTimeout(ctx, g.Interval)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.ExporterURL, nil)
	if err != nil {
		return nil, err
	}
	// The text format: the exporter's cached rendering, cheap to serve.
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil, fmt.Errorf("GET %s: %s", g.ExporterURL, resp.Status)
	}
	fams, err := promtext.Parse(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parsing the exporter's metrics: %w", err)
	}
	gpus, err := splitList(g.GPU)
	if err != nil {
		return nil, err
	}
	out := make([]reading, 0, len(gpus))
	for _, gpu := range gpus {
		util, onMIG, err := neighbourUtilization(fams, gpu, g.PID)
		if err != nil {
			return nil, err
		}
		rd := reading{util: util}
		if !onMIG {
			rd.probeEnd = gpuGauge(fams, "gpulens_probe_last_success_timestamp_seconds", gpu)
			rd.probeGPUTime = gpuGauge(fams, "gpulens_probe_gpu_time_seconds", gpu)
		}
		out = append(out, rd)
	}
	return out, nil
}

// gpuGauge is the value of the gauge name for gpu (index or UUID), 0 when
// the exposition has none.
func gpuGauge(fams map[string]*clientmodel.MetricFamily, name, gpu string) float64 {
	for _, m := range fams[name].GetMetric() {
		if l := promtext.Labels(m); l["gpu"] == gpu || l["uuid"] == gpu {
			v, _ := promtext.Value(m) // NaN: none
			return v
		}
	}
	return 0
}

// NeighbourUtilization reads an exporter's text exposition and returns the
// summed gpulens_process_sm_utilization_ratio of the processes on gpu (an
// index or a UUID) other than pid (one, or several separated by commas),
// restricted to pid's GPU instance when pid runs on one (MIG). It fails when the exposition does not show the GPU
// (gpulens_gpu_info), so that a wrong --sim.gpu is not mistaken for an idle
// neighbourhood.
func NeighbourUtilization(r io.Reader, gpu, pid string) (float64, error) {
	fams, err := promtext.Parse(r)
	if err != nil {
		return 0, fmt.Errorf("parsing the exporter's metrics: %w", err)
	}
	util, _, err := neighbourUtilization(fams, gpu, pid)
	return util, err
}

// neighbourUtilization is NeighbourUtilization on parsed families; onMIG
// says pid runs on a GPU instance.
func neighbourUtilization(fams map[string]*clientmodel.MetricFamily, gpu, pid string) (util float64, onMIG bool, err error) {
	onGPU := func(m *clientmodel.Metric) bool {
		l := promtext.Labels(m)
		return l["gpu"] == gpu || l["uuid"] == gpu
	}
	found := false
	if f := fams["gpulens_gpu_info"]; f != nil {
		for _, m := range f.GetMetric() {
			found = found || onGPU(m)
		}
	}
	if !found {
		return 0, false, fmt.Errorf("the exporter shows no GPU %q (gpulens_gpu_info)", gpu)
	}
	own := map[string]bool{}
	for _, p := range strings.Split(pid, ",") {
		if p = strings.TrimSpace(p); p != "" {
			own[p] = true
		}
	}
	procs := fams["gpulens_process_sm_utilization_ratio"].GetMetric()
	instance, self := "", false
	for _, m := range procs {
		if l := promtext.Labels(m); onGPU(m) && own[l["pid"]] {
			instance, self = l["gpu_instance_id"], true
		}
	}
	sum := 0.0
	for _, m := range procs {
		l := promtext.Labels(m)
		if !onGPU(m) || own[l["pid"]] || (self && l["gpu_instance_id"] != instance) {
			continue
		}
		if v, ok := promtext.Value(m); ok && v > 0 {
			sum += v
		}
	}
	return sum, self && instance != "", nil
}
