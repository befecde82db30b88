// Package gpuinfo polls a gpulens exporter's /metrics during a campaign
// and records the GPUs serving the model: their facts (model, driver, CUDA,
// MIG profile) for the report's metadata (Info), and, per run, a window of
// samples (Begin … End) summarised as the run's GPU side: peak memory per
// GPU and summed, mean utilisation and power, and the energy the GPUs used
// (the increase of their energy counters over the window).
package gpuinfo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpulens/gpulens/loadgen/report"
)

// The exporter's metric families read (docs/metrics.md).
const (
	metricInfo   = "gpulens_gpu_info"
	metricMIG    = "gpulens_mig_instance_info"
	metricMemory = "gpulens_gpu_memory_used_bytes"
	metricUtil   = "gpulens_gpu_utilization_ratio"
	metricPower  = "gpulens_gpu_power_watts"
	metricEnergy = "gpulens_gpu_energy_joules_total"
)

// DefaultInterval is Config.Interval when it is zero.
const DefaultInterval = 2 * time.Second

// defaultTimeout is Config.Timeout when it is zero.
const defaultTimeout = 5 * time.Second

// Config configures a Poller.
type Config struct {
	// URL is the exporter's metrics URL (http://host:9842/metrics).
	URL string
	// Interval is how often Run polls (DefaultInterval when zero). Begin
	// and End poll once more each, so a run's window always has its
	// first and last sample at the run's edges.
	Interval time.Duration
	// GPUs restricts the GPUs serving to these, each named by its index
	// (the gpu label) or its UUID (the uuid label); empty: every GPU the
	// exporter reports.
	GPUs []string
	// Timeout bounds one scrape (5 s when zero).
	Timeout time.Duration
	// Now is the clock samples are stamped with; time.Now when nil.
	Now    func() time.Time
	Logger *slog.Logger // nil: discard
}

// Poller scrapes the exporter. It is safe for concurrent use.
type Poller struct {
	cfg  Config
	http *http.Client
	now  func() time.Time
	log  *slog.Logger
	keep map[string]bool // GPUs serving, by index or UUID; nil: all

	mu      sync.Mutex
	info    report.GPUInfo
	utilSum float64
	utilN   int
	windows map[*Window]struct{}
}

// New returns a poller for cfg.
func New(cfg Config) *Poller {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = defaultTimeout
	}
	p := &Poller{cfg: cfg, http: &http.Client{Timeout: cfg.Timeout}, now: cfg.Now, log: cfg.Logger,
		info: report.GPUInfo{ExporterURL: cfg.URL}, windows: map[*Window]struct{}{}}
	if p.now == nil {
		p.now = time.Now
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if len(cfg.GPUs) > 0 {
		p.keep = map[string]bool{}
		for _, g := range cfg.GPUs {
			p.keep[g] = true
		}
	}
	return p
}

// NewPoller returns a poller for the exporter metrics URL that polls every
// interval.
func NewPoller(url string, interval time.Duration, logger *slog.Logger) *Poller {
	return New(Config{URL: url, Interval: interval, Logger: logger})
}

// Run polls every interval until ctx ends; the first poll is one interval
// after the start (Begin polls at once).
func (p *Poller) Run(ctx context.Context) {
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := p.Poll(ctx); err != nil && ctx.Err() == nil {
			p.log.Warn("polling gpulens exporter", "url", p.cfg.URL, "err", err)
		}
	}
}

// Poll scrapes once.
func (p *Poller) Poll(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.cfg.URL, nil)
	if err != nil {
		return p.fail(fmt.Errorf("exporter %q: %w", p.cfg.URL, err))
	}
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := p.http.Do(req)
	if err != nil {
		return p.fail(fmt.Errorf("scraping %s: %w", p.cfg.URL, err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return p.fail(fmt.Errorf("scraping %s: HTTP %d", p.cfg.URL, resp.StatusCode))
	}
	return p.Ingest(resp.Body)
}

// gpuSample is one GPU's readings in one scrape.
type gpuSample struct {
	gpu, uuid, name                string
	mem, util, power, energy       float64
	hasMem, hasUtil, hasPow, hasEn bool
}

// sample is one scrape: the GPUs serving, in exporter order.
type sample struct {
	at   time.Time
	gpus []gpuSample
}

// Ingest parses one scrape in the text format.
func (p *Poller) Ingest(r io.Reader) error {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return p.fail(fmt.Errorf("parsing metrics from %s: %w", p.cfg.URL, err))
	}
	s := p.sample(fams)
	p.mu.Lock()
	defer p.mu.Unlock()
	s.at = p.now()
	p.info.Error = ""
	p.info.Samples++
	if f := fams[metricInfo]; f != nil {
		p.info.GPUs = p.info.GPUs[:0]
		for _, m := range f.GetMetric() {
			l := labels(m)
			if !p.serving(l["gpu"], l["uuid"]) {
				continue
			}
			p.info.GPUs = append(p.info.GPUs, report.GPU{GPU: l["gpu"], UUID: l["uuid"], Name: l["name"], PCIBusID: l["pci_bus_id"],
				Serial: l["serial"], DriverVersion: l["driver_version"], CUDADriverVersion: l["cuda_driver_version"], VBIOSVersion: l["vbios_version"]})
		}
	}
	if f := fams[metricMIG]; f != nil {
		p.info.MIG = p.info.MIG[:0]
		for _, m := range f.GetMetric() {
			l := labels(m)
			if !p.serving(l["gpu"], l["uuid"]) {
				continue
			}
			p.info.MIG = append(p.info.MIG, report.MIGInstance{GPU: l["gpu"], Profile: l["profile"], Labels: l})
		}
	}
	for _, g := range s.gpus {
		if g.hasMem {
			p.info.PeakMemoryUsedBytes = max(p.info.PeakMemoryUsedBytes, g.mem)
		}
		if g.hasUtil {
			p.utilSum += g.util
			p.utilN++
		}
	}
	if p.utilN > 0 {
		p.info.MeanUtilizationRatio = p.utilSum / float64(p.utilN)
	}
	for w := range p.windows {
		w.samples = append(w.samples, s)
	}
	return nil
}

// sample collects the readings of the GPUs serving from one scrape, in
// the order of gpulens_gpu_info (then of any GPU only the other families
// name).
func (p *Poller) sample(fams map[string]*dto.MetricFamily) sample {
	var s sample
	at := map[[2]string]int{}
	get := func(l map[string]string) *gpuSample {
		k := [2]string{l["gpu"], l["uuid"]}
		i, ok := at[k]
		if !ok {
			i = len(s.gpus)
			at[k] = i
			s.gpus = append(s.gpus, gpuSample{gpu: k[0], uuid: k[1]})
		}
		return &s.gpus[i]
	}
	for _, name := range []string{metricInfo, metricMemory, metricUtil, metricPower, metricEnergy} {
		f := fams[name]
		if f == nil {
			continue
		}
		for _, m := range f.GetMetric() {
			l := labels(m)
			if !p.serving(l["gpu"], l["uuid"]) {
				continue
			}
			g, v := get(l), value(m)
			if name != metricInfo && (math.IsNaN(v) || math.IsInf(v, 0)) {
				continue // no reading: JSON cannot carry it
			}
			switch name {
			case metricInfo:
				g.name = l["name"]
			case metricMemory:
				g.mem, g.hasMem = v, true
			case metricUtil:
				g.util, g.hasUtil = v, true
			case metricPower:
				g.power, g.hasPow = v, true
			case metricEnergy:
				g.energy, g.hasEn = v, true
			}
		}
	}
	return s
}

// serving reports whether the GPU of these labels serves the model.
func (p *Poller) serving(gpu, uuid string) bool {
	return p.keep == nil || p.keep[gpu] || (uuid != "" && p.keep[uuid])
}

func (p *Poller) fail(err error) error {
	p.mu.Lock()
	p.info.Error = err.Error()
	for w := range p.windows {
		w.err = err.Error()
	}
	p.mu.Unlock()
	return err
}

// Info returns what was seen so far.
func (p *Poller) Info() *report.GPUInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.info
	c.GPUs = append([]report.GPU(nil), p.info.GPUs...)
	c.MIG = append([]report.MIGInstance(nil), p.info.MIG...)
	return &c
}

// Window collects the samples of one run: every successful scrape from
// Begin to End (Restart drops those before it).
type Window struct {
	p       *Poller
	samples []sample // guarded by p.mu
	err     string   // the last failed scrape's error; guarded by p.mu
}

// Begin opens a window and polls once: its first sample.
func (p *Poller) Begin(ctx context.Context) *Window {
	w := &Window{p: p}
	p.mu.Lock()
	p.windows[w] = struct{}{}
	p.mu.Unlock()
	if err := p.Poll(ctx); err != nil {
		p.log.Warn("polling gpulens exporter", "url", p.cfg.URL, "err", err)
	}
	return w
}

// Restart drops what the window collected so far and polls once: the
// window then starts now (at the end of a run's warmup).
func (w *Window) Restart(ctx context.Context) {
	w.p.mu.Lock()
	w.samples, w.err = nil, ""
	w.p.mu.Unlock()
	if err := w.p.Poll(ctx); err != nil {
		w.p.log.Warn("polling gpulens exporter", "url", w.p.cfg.URL, "err", err)
	}
}

// End polls once more, closes the window and summarises it (see
// Summarize). The per-work figures (tokens per joule, energy per request)
// are left to the caller (report.RunGPU.SetWork).
func (w *Window) End(ctx context.Context) *report.RunGPU {
	if err := w.p.Poll(ctx); err != nil {
		w.p.log.Warn("polling gpulens exporter", "url", w.p.cfg.URL, "err", err)
	}
	w.p.mu.Lock()
	delete(w.p.windows, w)
	samples, errText := w.samples, w.err
	w.p.mu.Unlock()
	g := summarize(samples)
	if errText != "" {
		g.Error = errText
	}
	return g
}

// errNoSample is the window's error when no scrape succeeded.
var errNoSample = errors.New("no successful scrape of the exporter during the run")

// summarize is the GPU side of a window's samples, in time order. Per
// GPU: the peak of its memory used, the mean of its utilisation and power
// over the samples that carried them, and its energy: the increase of
// its energy counter from the first sample to the last (a counter that
// went down was reset: its new value counts, as Prometheus's increase()
// does), or, with fewer than two counter readings, its mean power × the
// window's span (EnergyFromPower). Summed: the peak over the samples of
// the memory used by all the GPUs, the mean of the summed power, the
// mean utilisation over GPUs and samples, the energies added.
func summarize(samples []sample) *report.RunGPU {
	g := &report.RunGPU{Samples: len(samples), GPUs: []report.RunGPUDevice{}}
	if len(samples) == 0 {
		g.Error = errNoSample.Error()
		return g
	}
	type acc struct {
		dev              report.RunGPUDevice
		utilSum, powSum  float64
		utilN, powN, enN int
		lastEn, increase float64
	}
	var accs []*acc
	at := map[[2]string]*acc{}
	var utilSum, powSum float64
	var utilN, powN int
	for _, s := range samples {
		mem, pow, anyMem, anyPow := 0.0, 0.0, false, false
		for _, gs := range s.gpus {
			k := [2]string{gs.gpu, gs.uuid}
			a := at[k]
			if a == nil {
				a = &acc{dev: report.RunGPUDevice{GPU: gs.gpu, UUID: gs.uuid}}
				at[k] = a
				accs = append(accs, a)
			}
			if gs.name != "" {
				a.dev.Name = gs.name
			}
			if gs.hasMem {
				a.dev.PeakMemoryUsedBytes = max(a.dev.PeakMemoryUsedBytes, gs.mem)
				mem += gs.mem
				anyMem = true
			}
			if gs.hasUtil {
				a.utilSum += gs.util
				a.utilN++
				utilSum += gs.util
				utilN++
			}
			if gs.hasPow {
				a.powSum += gs.power
				a.powN++
				pow += gs.power
				anyPow = true
			}
			if gs.hasEn {
				if a.enN > 0 {
					if gs.energy >= a.lastEn {
						a.increase += gs.energy - a.lastEn
					} else {
						a.increase += gs.energy // reset
					}
				}
				a.lastEn = gs.energy
				a.enN++
			}
		}
		if anyMem {
			g.PeakMemoryUsedBytes = max(g.PeakMemoryUsedBytes, mem)
		}
		if anyPow {
			powSum += pow
			powN++
		}
	}
	span := samples[len(samples)-1].at.Sub(samples[0].at).Seconds()
	for _, a := range accs {
		if a.utilN > 0 {
			a.dev.MeanUtilizationRatio = a.utilSum / float64(a.utilN)
		}
		if a.powN > 0 {
			a.dev.MeanPowerWatts = a.powSum / float64(a.powN)
		}
		if a.enN >= 2 {
			a.dev.EnergyJoules = a.increase
		} else {
			a.dev.EnergyJoules = a.dev.MeanPowerWatts * span
			g.EnergyFromPower = true
		}
		g.EnergyJoules += a.dev.EnergyJoules
		g.GPUs = append(g.GPUs, a.dev)
	}
	if utilN > 0 {
		g.MeanUtilizationRatio = utilSum / float64(utilN)
	}
	if powN > 0 {
		g.MeanPowerWatts = powSum / float64(powN)
	}
	if len(accs) == 0 {
		g.EnergyFromPower = false
	}
	return g
}

func labels(m *dto.Metric) map[string]string {
	l := make(map[string]string, len(m.GetLabel()))
	for _, lp := range m.GetLabel() {
		l[lp.GetName()] = lp.GetValue()
	}
	return l
}

func value(m *dto.Metric) float64 {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}
