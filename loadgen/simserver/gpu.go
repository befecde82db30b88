package simserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"sync/atomic"
	"time"

	clientmodel "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpulens/gpulens/loadgen/option"
	"github.com/gpulens/gpulens/loadgen/weburl"
)

// MaxSlowdown bounds the slowdown factor (SetSlowdown): ten times slower
// than alone on the GPU.
const MaxSlowdown = 10

// slowdown is a float64 factor shared by the scheduler and SetSlowdown.
type slowdown struct{ bits atomic.Uint64 }

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
// On a GPU in MIG mode only processes on the server's own GPU instance
// count (MIG instances do not share SMs); the server's instance is that of
// its own process (PID).
type GPUTie struct {
	// ExporterURL is the exporter's metrics URL (http://host:9842/metrics).
	ExporterURL string
	// GPU is the GPU's index (the gpu label) or UUID (the uuid label).
	GPU string
	// PID is the process on the GPU the server stands for (in a simulated
	// fleet, the tenant whose place it takes): not a neighbour. Empty: every
	// process on the GPU is a neighbour.
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
	if _, err := weburl.Check(g.ExporterURL); err != nil {
		errs = append(errs, option.Errorf("%s must be an http(s) URL, got %q: %v", option.Name("ExporterURL"), g.ExporterURL, err))
	}
	if g.GPU == "" {
		errs = append(errs, option.Errorf("%s must name the GPU: its index or UUID", option.Name("GPU")))
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
	var lastOK time.Time
	failing := false
	tick := time.NewTicker(g.Interval)
	defer tick.Stop()
	for {
		util, err := g.read(ctx, client)
		now := time.Now()
		switch {
		case err == nil:
			s.metrics.gpuReads.WithLabelValues("ok").Inc()
			s.metrics.gpuReadSuccess.Set(float64(now.UnixNano()) / 1e9)
			s.metrics.neighbourUtil.Set(util)
			s.SetSlowdown(1 + util)
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
				s.SetSlowdown(1)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// read scrapes the exporter once and returns the neighbours' summed SM
// utilisation.
func (g *GPUTie) read(ctx context.Context, client *http.Client) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, g.Interval)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.ExporterURL, nil)
	if err != nil {
		return 0, err
	}
	// The text format: the exporter's cached rendering, cheap to serve.
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return 0, fmt.Errorf("GET %s: %s", g.ExporterURL, resp.Status)
	}
	return NeighbourUtilization(resp.Body, g.GPU, g.PID)
}

// NeighbourUtilization reads an exporter's text exposition and returns the
// summed gpulens_process_sm_utilization_ratio of the processes on gpu (an
// index or a UUID) other than pid, restricted to pid's GPU instance when
// pid runs on one (MIG). It fails when the exposition does not show the GPU
// (gpulens_gpu_info), so that a wrong --sim.gpu is not mistaken for an idle
// neighbourhood.
func NeighbourUtilization(r io.Reader, gpu, pid string) (float64, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return 0, fmt.Errorf("parsing the exporter's metrics: %w", err)
	}
	onGPU := func(m *clientmodel.Metric) bool {
		l := labelMap(m)
		return l["gpu"] == gpu || l["uuid"] == gpu
	}
	found := false
	if f := fams["gpulens_gpu_info"]; f != nil {
		for _, m := range f.GetMetric() {
			found = found || onGPU(m)
		}
	}
	if !found {
		return 0, fmt.Errorf("the exporter shows no GPU %q (gpulens_gpu_info)", gpu)
	}
	procs := fams["gpulens_process_sm_utilization_ratio"].GetMetric()
	instance, self := "", false
	for _, m := range procs {
		if l := labelMap(m); onGPU(m) && pid != "" && l["pid"] == pid {
			instance, self = l["gpu_instance_id"], true
		}
	}
	sum := 0.0
	for _, m := range procs {
		l := labelMap(m)
		if !onGPU(m) || (pid != "" && l["pid"] == pid) || (self && l["gpu_instance_id"] != instance) {
			continue
		}
		if v := m.GetGauge().GetValue(); v > 0 && !math.IsInf(v, 0) {
			sum += v
		}
	}
	return sum, nil
}

func labelMap(m *clientmodel.Metric) map[string]string {
	out := make(map[string]string, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}
