package observe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpulens/gpulens/internal/promtext"
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
	// metricStamp is when the exporter read the GPU: the time its other
	// readings are valid at (they are up to one sampler interval old when
	// scraped).
	metricStamp = "gpulens_sampler_last_success_timestamp_seconds"
)

// maxStampSkew bounds how far a gpuReading's time may lie after the scrape
// that returned it (clocks of two machines); beyond it, or older than
// maxStampAge, the scrape's own time is used.
const (
	maxStampSkew = time.Second
	maxStampAge  = 5 * time.Minute
)

// ShortRunRatio: a run whose energy is more than this share extrapolated
// from power (not between two readings of the energy counter) is flagged
// as too short for a trustworthy energy figure (report.RunGPU.Warning).
const ShortRunRatio = 0.5

// DefaultPollInterval is PollerConfig.Interval when it is zero.
const DefaultPollInterval = 2 * time.Second

// defaultTimeout is PollerConfig.Timeout when it is zero.
const defaultTimeout = 5 * time.Second

// PollerConfig configures a Poller.
type PollerConfig struct {
	// URL is the exporter's metrics URL (http://host:9842/metrics).
	URL string
	// Interval is how often Run polls (DefaultPollInterval when zero). Begin
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
	cfg  PollerConfig
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
func New(cfg PollerConfig) *Poller {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultPollInterval
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
	return New(PollerConfig{URL: url, Interval: interval, Logger: logger})
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
	stamp                          float64 // Unix seconds the exporter read the GPU
	hasStamp                       bool
}

// sample is one scrape: the GPUs serving, in exporter order.
type sample struct {
	at   time.Time
	gpus []gpuSample
}

// Ingest parses one scrape in the text format.
func (p *Poller) Ingest(r io.Reader) error {
	fams, err := promtext.Parse(r)
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
			l := promtext.Labels(m)
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
			l := promtext.Labels(m)
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
	for _, name := range []string{metricInfo, metricMemory, metricUtil, metricPower, metricEnergy, metricStamp} {
		f := fams[name]
		if f == nil {
			continue
		}
		for _, m := range f.GetMetric() {
			l := promtext.Labels(m)
			if !p.serving(l["gpu"], l["uuid"]) {
				continue
			}
			g := get(l)
			v, ok := promtext.Value(m)
			if name != metricInfo && !ok {
				continue // NaN or ±Inf: no reading
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
			case metricStamp:
				g.stamp, g.hasStamp = v, v > 0
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
	samples []sample  // guarded by p.mu
	err     string    // the last failed scrape's error; guarded by p.mu
	start   time.Time // the run's start: the first scrape's time
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
	w.markStart()
	return w
}

// markStart sets the window's start: its first scrape's time (the run
// starts right after it), or now without one.
func (w *Window) markStart() {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	if len(w.samples) > 0 {
		w.start = w.samples[0].at
	} else {
		w.start = w.p.now()
	}
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
	w.markStart()
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
	end := w.start
	if n := len(samples); n > 0 && samples[n-1].at.After(w.start) {
		end = samples[n-1].at
	} else if n == 0 {
		end = w.p.now()
	}
	g := summarize(samples, w.start, end)
	if errText != "" {
		g.Error = errText
	}
	return g
}

// errNoSample is the window's error when no scrape succeeded.
var errNoSample = errors.New("no successful scrape of the exporter during the run")

// gpuReading is one GPU's readings from one exporter cycle, at the time the
// exporter made them.
type gpuReading struct {
	t   float64 // Unix seconds
	gs  gpuSample
	raw time.Time // the scrape that returned it
}

// readingTime is when the exporter read the GPU: its sampler's stamp when
// the exporter gives one (and it is plausible), else the scrape's time.
func readingTime(gs gpuSample, at time.Time) float64 {
	t := float64(at.UnixNano()) / 1e9
	if gs.hasStamp && gs.stamp <= t+maxStampSkew.Seconds() && gs.stamp >= t-maxStampAge.Seconds() {
		return gs.stamp
	}
	return t
}

// summarize is the GPU side of a window's samples, in time order, for the
// run from start to end. Every GPU's readings are placed at the time the
// exporter made them (gpulens_sampler_last_success_timestamp_seconds, up
// to one sampler interval before the scrape), the same gpuReading scraped
// twice counting once.
//
// Energy, per GPU: the energy counter at the run's end minus at its start,
// each interpolated linearly between the two readings around it, or
// extrapolated from the nearest gpuReading with its power draw where no
// gpuReading lies beyond it; so the energy covers exactly the run, whatever
// its length against the poll and sampler intervals. A counter that went
// down was reset: the increases are added as Prometheus's increase() does,
// from the first gpuReading to the last. Without an energy counter: mean
// power × the run's length (EnergyFromPower). EnergyExtrapolatedRatio is
// the share of the run's energy not between two counter readings; above
// ShortRunRatio the run is too short for a trustworthy figure (Warning).
//
// Memory, utilisation and power: over the readings made during the run
// (from start to end), or the last one made before its end when none was.
// Summed: the peak over those readings of the memory used by all the GPUs,
// the mean of the summed power, the mean utilisation over GPUs and
// readings, the energies added.
func summarize(samples []sample, start, end time.Time) *report.RunGPU {
	g := &report.RunGPU{Samples: len(samples), GPUs: []report.RunGPUDevice{}}
	if len(samples) == 0 {
		g.Error = errNoSample.Error()
		return g
	}
	t0, t1 := float64(start.UnixNano())/1e9, float64(end.UnixNano())/1e9
	if t1 < t0 {
		t1 = t0
	}
	type acc struct {
		dev      report.RunGPUDevice
		readings []gpuReading
	}
	var accs []*acc
	at := map[[2]string]*acc{}
	for _, s := range samples {
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
			r := gpuReading{t: readingTime(gs, s.at), gs: gs, raw: s.at}
			if n := len(a.readings); n > 0 && gs.hasStamp && a.readings[n-1].gs.hasStamp && a.readings[n-1].t == r.t {
				continue // the same exporter cycle scraped again
			}
			a.readings = append(a.readings, r)
		}
	}
	// inRun: the readings of each GPU that describe the run.
	inRun := func(rs []gpuReading) []gpuReading {
		var out []gpuReading
		for _, r := range rs {
			if r.t >= t0 && r.t <= t1 {
				out = append(out, r)
			}
		}
		if len(out) == 0 {
			for i := len(rs) - 1; i >= 0; i-- {
				if rs[i].t <= t1 {
					return rs[i : i+1]
				}
			}
			return rs[:1]
		}
		return out
	}
	// The sums over GPUs, per scrape of the readings in the run.
	type sums struct{ mem, pow float64 }
	byScrape := map[time.Time]*sums{}
	var scrapes []time.Time
	var utilSum, powSum float64
	var utilN, powN int
	extrapolated, total := 0.0, 0.0
	for _, a := range accs {
		var aUtil, aPow float64
		var aUtilN, aPowN int
		for _, r := range inRun(a.readings) {
			sm := byScrape[r.raw]
			if sm == nil {
				sm = &sums{mem: -1, pow: -1}
				byScrape[r.raw] = sm
				scrapes = append(scrapes, r.raw)
			}
			if r.gs.hasMem {
				a.dev.PeakMemoryUsedBytes = max(a.dev.PeakMemoryUsedBytes, r.gs.mem)
				sm.mem = max(sm.mem, 0) + r.gs.mem
			}
			if r.gs.hasUtil {
				aUtil += r.gs.util
				aUtilN++
				utilSum += r.gs.util
				utilN++
			}
			if r.gs.hasPow {
				aPow += r.gs.power
				aPowN++
				sm.pow = max(sm.pow, 0) + r.gs.power
			}
		}
		if aUtilN > 0 {
			a.dev.MeanUtilizationRatio = aUtil / float64(aUtilN)
		}
		if aPowN > 0 {
			a.dev.MeanPowerWatts = aPow / float64(aPowN)
		}
		e, extra, ok := energy(a.readings, t0, t1)
		if !ok { // no counter: flagged as such, not as extrapolated
			e, extra = a.dev.MeanPowerWatts*(t1-t0), 0
			g.EnergyFromPower = true
		}
		a.dev.EnergyJoules = e
		g.EnergyJoules += e
		extrapolated += extra
		total += e
		g.GPUs = append(g.GPUs, a.dev)
	}
	for _, t := range scrapes {
		sm := byScrape[t]
		if sm.mem >= 0 {
			g.PeakMemoryUsedBytes = max(g.PeakMemoryUsedBytes, sm.mem)
		}
		if sm.pow >= 0 {
			powSum += sm.pow
			powN++
		}
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
	g.DurationSeconds = t1 - t0
	if total > 0 {
		g.EnergyExtrapolatedRatio = min(extrapolated/total, 1)
	}
	if g.EnergyExtrapolatedRatio > ShortRunRatio {
		g.Warning = fmt.Sprintf("run too short for a trustworthy energy figure: %.0f%% of its %.2fs estimated from power, not measured between two readings of the energy counter (make runs longer than the exporter's sampler interval)",
			g.EnergyExtrapolatedRatio*100, g.DurationSeconds)
	}
	return g
}

// energy is the increase of one GPU's energy counter from t0 to t1 (see
// summarize) and the part of it extrapolated from power; ok is false
// without a counter gpuReading.
func energy(rs []gpuReading, t0, t1 float64) (e, extrapolated float64, ok bool) {
	var pts []gpuReading
	for _, r := range rs {
		if r.gs.hasEn {
			pts = append(pts, r)
		}
	}
	if len(pts) == 0 {
		return 0, 0, false
	}
	for i := 1; i < len(pts); i++ {
		if pts[i].gs.energy < pts[i-1].gs.energy { // reset: increase() over the readings
			for j := 1; j < len(pts); j++ {
				if d := pts[j].gs.energy - pts[j-1].gs.energy; d >= 0 {
					e += d
				} else {
					e += pts[j].gs.energy
				}
			}
			return e, 0, true
		}
	}
	// at is the counter at t and the joules of it extrapolated.
	at := func(t float64) (float64, float64) {
		first, last := pts[0], pts[len(pts)-1]
		switch {
		case t <= first.t:
			if !first.gs.hasPow {
				return first.gs.energy, 0
			}
			d := first.gs.power * (first.t - t)
			return first.gs.energy - d, d
		case t >= last.t:
			if !last.gs.hasPow {
				return last.gs.energy, 0
			}
			d := last.gs.power * (t - last.t)
			return last.gs.energy + d, d
		}
		for i := 1; i < len(pts); i++ {
			a, b := pts[i-1], pts[i]
			if t <= b.t {
				if b.t == a.t {
					return b.gs.energy, 0
				}
				return a.gs.energy + (b.gs.energy-a.gs.energy)*(t-a.t)/(b.t-a.t), 0
			}
		}
		return last.gs.energy, 0
	}
	e0, x0 := at(t0)
	e1, x1 := at(t1)
	// The run's part outside the readings: before the first gpuReading (the
	// start's extrapolation counts inside the run only when the first
	// gpuReading is inside it) and after the last.
	extra := x1
	if pts[0].t > t0 {
		extra += x0
	}
	return max(e1-e0, 0), extra, true
}
