package collector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpulens/gpulens/internal/gpuid"
	"github.com/gpulens/gpulens/internal/gpuprobe"
)

// The continuous probe (--collector.probe) measures what each CUDA device
// delivers from the inside (internal/gpuprobe) on a goroutine of its own,
// every ProbeOptions.Interval, one device after the other. It is not a
// per-GPU sampler collector: a probe takes up to seconds of wall time and
// must never delay the NVML readings. Each run publishes an immutable
// snapshot of const metrics that ProbeCollector.Collect copies; a scrape
// never calls CUDA.

// Measurement label values beyond gpuprobe's measurement names.
const (
	// ProbeMeasurementInit: the CUDA library could not be loaded or
	// initialised, or the devices could not be listed.
	ProbeMeasurementInit = "init"
	// ProbeMeasurementProbe: a device's probe failed as a whole (nothing
	// measured: context creation failed, deadline, busy).
	ProbeMeasurementProbe = "probe"
)

// GPUIdentity names one NVML GPU: the labels probe results carry.
type GPUIdentity struct {
	GPU      string // NVML index, the gpu label
	UUID     string
	PCIBusID string // NVML's format, "00000000:18:00.0"
}

// GPUDirectory lists the NVML GPUs that CUDA devices are matched against.
// *Sampler implements it.
type GPUDirectory interface {
	// GPUs returns the GPUs whose identity is known, and whether every
	// GPU's identity is.
	GPUs() (gpus []GPUIdentity, complete bool)
}

// GPUs implements GPUDirectory: the GPUs whose worker has read the identity.
func (s *Sampler) GPUs() ([]GPUIdentity, bool) {
	out := make([]GPUIdentity, 0, len(s.workers))
	for _, w := range s.workers {
		if w.uuid.Load() == nil {
			continue
		}
		// readIdentity sets w.info before it stores w.uuid and never
		// changes it afterwards: having seen uuid, reading info is safe.
		out = append(out, GPUIdentity{GPU: w.gpu, UUID: w.info.UUID, PCIBusID: w.info.PCIBusID})
	}
	return out, len(out) == len(s.workers)
}

// OpenProber loads the prober. close releases what it holds (nil: nothing
// to release); it is called when the probe stops, unless a call is still
// stuck in the driver then.
type OpenProber func() (p gpuprobe.Prober, close func() error, err error)

// Ticker returns a channel of ticks every d and a function that stops it.
type Ticker func(d time.Duration) (<-chan time.Time, func())

func timeTicker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}

// ProbeOptions configures the continuous probe.
type ProbeOptions struct {
	// Interval between the starts of two runs, on average; a run probes
	// every CUDA device, in turn or together (Schedule).
	Interval time.Duration
	// Jitter spreads the runs: each start is Interval × (1 + Jitter × u)
	// after the one before, u uniform in [-1, 1), so that a tenant whose
	// load has a period that locks onto the interval (a batch job every
	// 5 minutes) is not met at the same phase every run. 0: every
	// Interval exactly; at most MaxProbeJitter.
	Jitter float64
	// Rand draws the u of Jitter, uniform in [0, 1) (mapped to [-1, 1));
	// nil: math/rand/v2's Float64. Tests inject a seeded source.
	Rand func() float64
	// Schedule is how a run takes the devices: ProbeSequential (""
	// included) one after another, ProbeTogether all at once
	// (probe_schedule.go).
	Schedule string
	// Config bounds each device's probe.
	Config gpuprobe.Config
	// Timeout is one device's deadline, and that of listing the devices.
	// 0: gpuprobe.Deadline(Config).
	Timeout time.Duration
	// FirstSampleWait bounds how long the first run waits for the
	// sampler's first reading of every GPU: its identity, so that results
	// carry the right labels from the start, and, with NVML set, its first
	// published sample, so that the probe knows the free memory before it
	// creates a context (and can tell its context's memory) and the MIG
	// instances. 0: 10 s.
	FirstSampleWait time.Duration
	Logger          *slog.Logger
	// Now is the clock of the timestamps; nil: time.Now.
	Now func() time.Time
	// NewTicker schedules the runs; nil: time.NewTicker.
	NewTicker Ticker
	// NVML, when set, gives the probe NVML's free memory before it creates
	// a context (gpuprobe.Options.FreeMemory, wired by the opener) and the
	// MIG instances CUDA does not show it (probe_safety.go).
	NVML NVMLView
	// Instances, when set with NVML, probes each MIG instance NVML lists
	// and CUDA does not show this process, one child process each
	// (gpuprobe.ChildProber), after the devices CUDA shows; nil: those
	// instances count as skipped, mig_instance_not_visible (probe_mig.go).
	Instances InstanceProber
	// Activity tells what NVML showed of each GPU's processes during a
	// probe, for the unexplained stolen time; nil: not known (reason
	// no_process_utilization).
	Activity ActivitySource
	// ActivityWait bounds how long a run waits, after its last device, for
	// NVML's samples to be read past every stolen-time window by a sample
	// period (a window not covered by then leaves the figure unknown,
	// reason samples_not_read). 0: 5 s.
	ActivityWait time.Duration
	// SelfPID is the exporter's own PID as NVML reports it, left out of
	// the tenants, while the probe has not found it in NVML's process
	// list (gpuprobe.Result.NVMLPID); 0: NVML's FallbackSelfPID, else
	// os.Getpid().
	SelfPID uint32
}

// MaxProbeJitter is the largest ProbeOptions.Jitter: runs at least half an
// interval apart.
const MaxProbeJitter = 0.5

// firstSamplePoll is how often the first run looks again whether the
// sampler has read every GPU.
const firstSamplePoll = 50 * time.Millisecond

// activityPoll is how often a run looks again whether NVML's samples cover
// its probes.
const activityPoll = 100 * time.Millisecond

// ProbeCollector runs the probe in the background and serves its latest
// results. It is a prometheus.Collector whose Collect copies a snapshot.
type ProbeCollector struct {
	open    OpenProber
	dir     GPUDirectory
	opts    ProbeOptions
	timeout time.Duration
	// grace is how long after the deadline a call may still return before
	// it is abandoned.
	grace  time.Duration
	logger *slog.Logger
	now    func() time.Time
	tick   Ticker

	// Owned by the goroutine running Run / RunOnce.
	prober      gpuprobe.Prober
	release     func() error
	devices     map[string]*probeDevice
	initFailing bool
	// selfPID is the exporter's own NVML PID the probe found (0: none
	// yet); selfWarned: the fallback was logged.
	selfPID    uint32
	selfWarned bool

	// busy is set while a prober call runs, including one abandoned past
	// its deadline; later calls fail fast until it returns. lastCall is
	// closed when the latest call has returned (tests wait on it).
	busy     atomic.Bool
	lastCall chan struct{}
	snap     atomic.Pointer[[]prometheus.Metric]

	// afterRun, when set (tests), is called after each run of Run.
	afterRun func()
}

// probeDevice is the state of one probed device (or, while CUDA cannot be
// used, of one NVML GPU), keyed by its CUDA UUID (the NVML UUID for an NVML
// GPU, "cuda:N" without UUID): owned by the probe goroutine.
type probeDevice struct {
	gpu, uuid string // labels
	matched   bool
	info      *gpuprobe.DeviceInfo // nil for an NVML GPU CUDA never listed
	result    *gpuprobe.Result     // latest run, nil when it failed as a whole
	// unexplained is the latest result's stolen time NVML's visible
	// processes do not explain, or why it is not known; nil: not worked
	// out (yet).
	unexplained *gpuprobe.Unexplained
	lastOK      time.Time
	runs        float64
	errs        map[probeErrKey]float64
	skips       map[string]float64 // runs that created no context, by reason
	// notReportedRuns counts measurements left out for a limit of the
	// configuration, by measurement and reason (probeErrKey.err).
	notReportedRuns map[probeErrKey]float64
	failing         bool
	// child: the probe children that measured this MIG instance
	// (probe_mig.go); nil for a device probed in process.
	child  *childCost
	seen   bool // succeeded at least once (first success is logged)
	warned bool // an unmatched device was logged
	// busy guards this device's prober calls when devices are probed
	// together (ProbeCollector.guard).
	busy atomic.Bool
}

type probeErrKey struct{ measurement, err string }

// NewProbeCollector returns the probe; Run starts it.
func NewProbeCollector(open OpenProber, dir GPUDirectory, opts ProbeOptions) (*ProbeCollector, error) {
	if opts.Interval <= 0 {
		return nil, fmt.Errorf("probe interval must be positive, got %s", opts.Interval)
	}
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("probe timeout must not be negative, got %s", opts.Timeout)
	}
	if opts.Jitter < 0 || opts.Jitter > MaxProbeJitter || math.IsNaN(opts.Jitter) {
		return nil, fmt.Errorf("probe interval jitter must be between 0 and %g, got %g", MaxProbeJitter, opts.Jitter)
	}
	if err := opts.Config.Validate(); err != nil {
		return nil, fmt.Errorf("probe configuration: %w", err)
	}
	if err := validSchedule(opts.Schedule); err != nil {
		return nil, err
	}
	p := &ProbeCollector{
		open: open, dir: dir, opts: opts,
		timeout: opts.Timeout, grace: 2 * time.Second,
		logger: opts.Logger, now: opts.Now, tick: opts.NewTicker,
		devices: map[string]*probeDevice{},
	}
	if p.timeout == 0 {
		p.timeout = gpuprobe.Deadline(opts.Config)
	}
	if p.opts.FirstSampleWait == 0 {
		p.opts.FirstSampleWait = 10 * time.Second
	}
	if p.opts.ActivityWait == 0 {
		p.opts.ActivityWait = 5 * time.Second
	}
	if p.logger == nil {
		p.logger = slog.New(slog.DiscardHandler)
	}
	if p.now == nil {
		p.now = time.Now
	}
	if p.tick == nil {
		p.tick = timeTicker
	}
	if p.opts.Rand == nil {
		p.opts.Rand = rand.Float64
	}
	p.snap.Store(&[]prometheus.Metric{})
	return p, nil
}

// Run probes every device now, then every interval (spread by the
// jitter: nextWait), until ctx is cancelled. A failing or hanging probe
// only shows in the probe's own metrics.
func (p *ProbeCollector) Run(ctx context.Context) {
	defer func() {
		if p.release != nil && !p.busy.Load() {
			if err := p.release(); err != nil {
				p.logger.Warn("probe: releasing the CUDA library", "err", err)
			}
		}
	}()
	p.waitForSampler(ctx)
	for {
		if ctx.Err() != nil {
			return
		}
		start := p.now()
		p.RunOnce(ctx)
		if p.afterRun != nil {
			p.afterRun()
		}
		ticks, stop := p.tick(p.nextWait(start))
		select {
		case <-ctx.Done():
			stop()
			return
		case <-ticks:
		}
		stop()
	}
}

// nextWait is how long Run waits after a run that started at start: until
// Interval × (1 + Jitter × u) after it, u uniform in [-1, 1); a run that
// overran that waits the jittered interval from its end, so that runs never
// follow each other back to back.
func (p *ProbeCollector) nextWait(start time.Time) time.Duration {
	step := p.opts.Interval
	if j := p.opts.Jitter; j > 0 {
		step = time.Duration(float64(step) * (1 + j*(2*p.opts.Rand()-1)))
	}
	if wait := start.Add(step).Sub(p.now()); wait > 0 {
		return wait
	}
	return step
}

// waitForSampler waits, at most FirstSampleWait, until the sampler knows
// every GPU's identity and, with NVML set, has published every GPU's first
// sample: the free memory the probe reads before it creates a context.
func (p *ProbeCollector) waitForSampler(ctx context.Context) {
	ready := func() (identities, sampled bool) {
		_, identities = p.dir.GPUs()
		return identities, p.opts.NVML == nil || p.opts.NVML.Sampled()
	}
	if identities, sampled := ready(); identities && sampled {
		return
	}
	ticks, stop := p.tick(firstSamplePoll)
	defer stop()
	deadline := p.now().Add(p.opts.FirstSampleWait)
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticks:
		}
		identities, sampled := ready()
		if identities && sampled {
			return
		}
		if !p.now().Before(deadline) {
			if !identities {
				p.logger.Warn("probe: starting before every GPU's NVML identity is known; unmatched CUDA devices are labelled gpu=\"\"", "waited", p.opts.FirstSampleWait)
			}
			if !sampled {
				p.logger.Warn("probe: starting before the sampler's first reading of every GPU; where NVML's free memory is unknown the probe checks it with its own context (cuMemGetInfo) and its context memory is not reported", "waited", p.opts.FirstSampleWait)
			}
			return
		}
	}
}

// RunOnce probes every CUDA device once and publishes the results.
func (p *ProbeCollector) RunOnce(ctx context.Context) {
	gpus, _ := p.dir.GPUs()
	if p.prober == nil {
		pr, closeFn, err := p.open()
		if err != nil {
			p.failInit(gpus, gpuprobe.LabelUnavailable, err)
			return
		}
		p.prober, p.release = pr, closeFn
	}
	devs, err := callValue(ctx, p, &p.busy, p.prober.Devices)
	if ctx.Err() != nil {
		return // shutting down
	}
	if err == nil && len(devs) == 0 {
		err = gpuprobe.ErrNoDevice
	}
	if err != nil {
		p.failInit(gpus, gpuprobe.ErrorLabel(err), err)
		return
	}
	if p.initFailing {
		p.initFailing = false
		p.logger.Info("probe: CUDA devices available again", "devices", len(devs))
	}
	listed := map[string]bool{}
	for _, d := range devs {
		listed[deviceKey(d)] = true
	}
	hidden := p.invisibleMIG(listed)
	for k := range p.devices {
		if !listed[k] && !hidden.has(k) {
			delete(p.devices, k)
		}
	}
	var probed []*probeDevice
	if p.opts.Schedule == ProbeTogether {
		if probed = p.probeTogether(ctx, devs, gpus); ctx.Err() != nil {
			return
		}
	} else {
		for _, d := range devs {
			if ctx.Err() != nil {
				return
			}
			st := p.device(d, gpus)
			p.probe(ctx, st, d)
			p.publish()
			probed = append(probed, st)
		}
	}
	// The MIG instances CUDA does not show this process: one child
	// process each (probe_mig.go).
	probed = append(probed, p.probeHidden(ctx, hidden)...)
	p.explain(ctx, probed)
}

// explain works out, for every device of a run with a stolen-time result,
// the part of it that the processes NVML showed do not explain
// (gpuprobe.EstimateUnexplained over its windows), once NVML's samples have
// been read past every window by a sample period (at most ActivityWait
// after the run; else it is unknown), and publishes.
func (p *ProbeCollector) explain(ctx context.Context, sts []*probeDevice) {
	src := p.opts.Activity
	deadline := p.now().Add(p.opts.ActivityWait)
	var ticks <-chan time.Time
	stop := func() {}
	defer func() { stop() }()
	changed := false
	for _, st := range sts {
		r := st.result
		if r == nil || r.Stolen == nil {
			continue
		}
		self := p.self(r)
		for {
			final := !p.now().Before(deadline)
			u := p.unexplained(src, st, r, self, final)
			if u.Reason == gpuprobe.UnknownSamplesNotRead && !final && !p.now().Before(deadline) {
				// The deadline passed during the look: look once more, the
				// last time.
				u = p.unexplained(src, st, r, self, true)
			}
			if u.Reason != gpuprobe.UnknownSamplesNotRead || !p.now().Before(deadline) {
				if !u.Known() {
					p.logger.Debug("probe: the unexplained stolen time is not known", "gpu", st.gpu, "uuid", st.uuid, "reason", u.Reason)
				}
				st.unexplained = &u
				changed = true
				break
			}
			if ticks == nil {
				ticks, stop = p.tick(activityPoll)
			}
			select {
			case <-ctx.Done():
				return
			case <-ticks:
			}
		}
	}
	if changed {
		p.publish()
	}
}

// unexplained is the unexplained stolen time of one device's result, with
// the probe's own process (self) left out of the tenants; final: the last
// look before the deadline (gpuprobe.NVMLActivity.Final).
func (p *ProbeCollector) unexplained(src ActivitySource, st *probeDevice, r *gpuprobe.Result, self uint32, final bool) gpuprobe.Unexplained {
	ws := r.Stolen.Windows
	switch {
	case src == nil || !st.matched:
		return gpuprobe.Unknown(gpuprobe.UnknownNoProcessUtilization)
	case len(ws) == 0:
		return gpuprobe.Unknown(gpuprobe.UnknownNoWindows)
	}
	a, unknown, raw := src.NVMLActivity(st.gpu, ws[0].Start, ws[len(ws)-1].End)
	switch {
	case raw && strings.HasPrefix(st.uuid, "MIG-"):
		return gpuprobe.Unknown(gpuprobe.UnknownMIG)
	case raw:
		return gpuprobe.RawUnexplained(r.Stolen)
	case unknown != "":
		return gpuprobe.Unknown(unknown)
	}
	a.Probe, a.Final = []uint32{self}, final
	return gpuprobe.EstimateUnexplained(r.Stolen, a)
}

// self is the exporter's own PID as NVML reports it: the one the probe
// found in NVML's process list (told to the process collectors), else the
// last one found, else the fallback (getpid or the host procfs's self
// link), logged once: in a container without the host's PID namespace the
// fallback is not NVML's, and the probe's own context would count as a
// tenant.
func (p *ProbeCollector) self(r *gpuprobe.Result) uint32 {
	if r.NVMLPID != 0 {
		if r.NVMLPID != p.selfPID {
			p.logger.Info("probe: found the exporter's own PID in NVML's process list", "pid", r.NVMLPID)
			p.selfPID = r.NVMLPID
			if p.opts.NVML != nil {
				p.opts.NVML.SetProbePID(r.NVMLPID)
			}
		}
		return r.NVMLPID
	}
	if p.selfPID != 0 {
		return p.selfPID
	}
	fallback := p.opts.SelfPID
	if fallback == 0 && p.opts.NVML != nil {
		fallback = p.opts.NVML.FallbackSelfPID()
	}
	if fallback == 0 {
		fallback = uint32(os.Getpid())
	}
	if !p.selfWarned {
		p.selfWarned = true
		p.logger.Warn("probe: NVML's process list did not tell the exporter's own PID apart; leaving out the procfs/getpid one, which is NVML's only in the host's PID namespace", "pid", fallback)
	}
	return fallback
}

func deviceKey(d gpuprobe.DeviceInfo) string {
	if d.UUID != "" {
		return d.UUID
	}
	return "cuda:" + strconv.Itoa(d.Ordinal)
}

// device returns the state of d, labelled after the NVML GPU it is.
func (p *ProbeCollector) device(d gpuprobe.DeviceInfo, gpus []GPUIdentity) *probeDevice {
	key := deviceKey(d)
	st := p.devices[key]
	if st == nil {
		st = &probeDevice{errs: map[probeErrKey]float64{}}
		p.devices[key] = st
	}
	info := d
	st.info = &info
	gpu, uuid, ok := matchGPU(d, gpus)
	if !ok && st.matched {
		return st // keep the labels found before (the GPU may be unreadable now)
	}
	if !ok && !st.warned {
		st.warned = true
		p.logger.Warn("probe: CUDA device not found among NVML's GPUs; labelled gpu=\"\"", "cuda_ordinal", d.Ordinal, "uuid", d.UUID, "pci_bus_id", d.PCIBusID)
	}
	st.gpu, st.uuid, st.matched = gpu, uuid, ok
	return st
}

// matchGPU finds the NVML GPU of a CUDA device (gpuid.MatchCUDA: by UUID,
// else by PCI bus id). A MIG instance, whose CUDA UUID is the instance's, is
// labelled with its parent's gpu and its own MIG UUID.
func matchGPU(d gpuprobe.DeviceInfo, gpus []GPUIdentity) (gpu, uuid string, ok bool) {
	ids := make([]gpuid.GPU, len(gpus))
	for i, g := range gpus {
		ids[i] = gpuid.GPU{UUID: g.UUID, BusID: g.PCIBusID}
	}
	m, ok := gpuid.MatchCUDA(d.UUID, d.PCIBusID, ids)
	if !ok {
		return "", d.UUID, false
	}
	g := gpus[m.GPU]
	if m.By == gpuid.ByBusID && strings.HasPrefix(d.UUID, "MIG-") {
		return g.GPU, d.UUID, true
	}
	return g.GPU, g.UUID, true
}

// probe measures one device and records the outcome.
func (p *ProbeCollector) probe(ctx context.Context, st *probeDevice, d gpuprobe.DeviceInfo) {
	cfg := p.configFor(d)
	res, err := callValue(ctx, p, p.guard(st), func(ctx context.Context) (gpuprobe.Result, error) {
		return p.prober.Probe(ctx, d.Ordinal, cfg)
	})
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return // shutting down: not the device's fault
	}
	p.record(ctx, st, res, err, d.Ordinal)
}

// record counts one probe of st (in process, or in a child for a MIG
// instance: probe_mig.go) and keeps its result.
func (p *ProbeCollector) record(ctx context.Context, st *probeDevice, res gpuprobe.Result, err error, ordinal int) {
	st.runs++
	st.countChild(res.Child)
	st.unexplained = nil
	for _, me := range res.Errors {
		st.errs[probeErrKey{me.Measurement, gpuprobe.MeasurementErrorLabel(me)}]++
	}
	for _, nr := range res.NotReported {
		st.notReported(nr)
	}
	if err != nil {
		st.errs[probeErrKey{ProbeMeasurementProbe, gpuprobe.ErrorLabel(err)}]++
		st.result = nil
		if !st.failing {
			p.logger.Warn("probe: device probe failed; retrying every interval", "gpu", st.gpu, "uuid", st.uuid, "cuda_ordinal", ordinal, "err", err)
		} else {
			p.logger.Debug("probe: device probe still failing", "gpu", st.gpu, "uuid", st.uuid, "err", err)
		}
		st.failing = true
		return
	}
	if res.Skipped != nil {
		st.skip(res.Skipped.Reason)
		st.result = nil
		level := slog.LevelDebug
		if !st.failing && st.skips[res.Skipped.Reason] == 1 {
			level = slog.LevelInfo
		}
		p.logger.Log(ctx, level, "probe: device not measured", "gpu", st.gpu, "uuid", st.uuid, "reason", res.Skipped.Reason, "detail", res.Skipped.Detail)
		return
	}
	r := res
	st.result = &r
	st.lastOK = p.finished(res)
	if st.failing {
		p.logger.Info("probe: device probe works again", "gpu", st.gpu, "uuid", st.uuid)
	}
	st.failing = false
	level := slog.LevelDebug
	if !st.seen {
		level = slog.LevelInfo
		st.seen = true
	}
	attrs := []any{"gpu", st.gpu, "uuid", st.uuid, "duration", res.Duration, "gpu_time", res.GPUTime,
		"device_copy_bytes_per_second", res.DeviceCopyBytesPerSecond, "fp32_flops", res.FP32FLOPS}
	if res.Stolen != nil {
		attrs = append(attrs, "stolen_ratio", res.Stolen.Ratio)
	}
	for _, me := range res.Errors {
		attrs = append(attrs, "error_"+me.Measurement, me.Err)
	}
	for _, nr := range res.NotReported {
		attrs = append(attrs, "not_reported_"+nr.Measurement, nr.Detail)
	}
	p.logger.Log(ctx, level, "probe: device measured", attrs...)
}

// configFor is the configuration for d: tensor measurements are skipped on
// GPUs older than Ampere (compute capability 8.0), which lack the mma.sync
// shapes the kernels use; their absence is not an error.
func (p *ProbeCollector) configFor(d gpuprobe.DeviceInfo) gpuprobe.Config {
	cfg := p.opts.Config
	major, _, _ := strings.Cut(d.ComputeCapability, ".")
	if m, err := strconv.Atoi(major); err == nil && m > 0 && m < 8 {
		cfg.Skip = append(slices.Clone(cfg.Skip), gpuprobe.MeasureFP16, gpuprobe.MeasureBF16)
	}
	return cfg
}

// failInit records a failure to load CUDA or list its devices on every
// device known and every NVML GPU, and publishes.
func (p *ProbeCollector) failInit(gpus []GPUIdentity, label string, err error) {
	if !p.initFailing {
		p.logger.Warn("probe: CUDA unavailable; gpulens_probe_up is 0 and the probe retries every interval", "interval", p.opts.Interval, "err", err)
	} else {
		p.logger.Debug("probe: CUDA still unavailable", "err", err)
	}
	p.initFailing = true
	for _, g := range gpus {
		covered := false
		for _, st := range p.devices {
			if st.matched && st.gpu == g.GPU {
				covered = true
				break
			}
		}
		if !covered && p.devices[g.UUID] == nil {
			p.devices[g.UUID] = &probeDevice{gpu: g.GPU, uuid: g.UUID, matched: true, errs: map[probeErrKey]float64{}}
		}
	}
	for _, st := range p.devices {
		st.runs++
		st.errs[probeErrKey{ProbeMeasurementInit, label}]++
		st.result = nil
		st.failing = true
	}
	p.publish()
}

// callValue is callWith for a call with a result. The value comes back
// over a channel, never through a variable the call writes: a call
// abandoned at its deadline (callWith returns, its goroutine runs on)
// would otherwise write that variable while the caller reads it. The
// value is f's when f returned before callWith did; else the zero value.
func callValue[T any](ctx context.Context, p *ProbeCollector, busy *atomic.Bool, f func(context.Context) (T, error)) (T, error) {
	got := make(chan T, 1)
	err := p.callWith(ctx, busy, func(ctx context.Context) error {
		v, err := f(ctx)
		got <- v
		return err
	})
	select {
	case v := <-got:
		return v, err
	default:
		var zero T
		return zero, err
	}
}

// callWith runs f on a goroutine of its own under the probe deadline. A call
// that has not returned a grace period after its deadline is abandoned (it
// keeps its goroutine until the driver returns); until then later calls
// fail at once with gpuprobe.ErrBusy, so at most one call is ever stuck.
// This layer is the collector's own on top of gpuprobe.Probe's (which also
// answers ErrBusy while an abandoned driver call runs): it also bounds a
// Prober that does not honour its context, and recovers its panics.
//
// busy is p.busy, or one device's own flag when
// devices are probed together (guard), so that at most one call per device
// is ever stuck.
func (p *ProbeCollector) callWith(ctx context.Context, busy *atomic.Bool, f func(context.Context) error) error {
	if !busy.CompareAndSwap(false, true) {
		return gpuprobe.ErrBusy
	}
	cctx, cancel := context.WithTimeout(ctx, p.timeout)
	done := make(chan error, 1)
	finished := make(chan struct{})
	if busy == &p.busy {
		p.lastCall = finished
	}
	go func() {
		defer cancel()
		var err error
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("%w: %v", gpuprobe.ErrPanic, r)
			}
			busy.Store(false)
			close(finished)
			done <- err
		}()
		err = f(cctx)
	}()
	abandon := time.NewTimer(p.timeout + p.grace)
	defer abandon.Stop()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-abandon.C:
		return fmt.Errorf("probe call abandoned past its deadline (%s): %w", p.timeout, context.DeadlineExceeded)
	}
}

var (
	probeUpDesc = desc("probe", "up",
		"1 when the last probe of the CUDA device measured something, 0 when it failed as a whole (no libcuda, no device, deadline, busy); its figures are then absent.")
	probeDeviceInfoDesc = desc("probe", "device_info",
		"CUDA's view of the probed device, value 1: ordinal, name and compute capability.",
		"cuda_ordinal", "name", "compute_capability")
	probeLastSuccessDesc = desc("probe", "last_success_timestamp_seconds",
		"Unix time the device's last successful probe finished.")
	probeDurationDesc = desc("probe", "duration_seconds",
		"Wall time of the device's last probe (context, JIT, allocations and measurements).")
	probeGPUTimeDesc = desc("probe", "gpu_time_seconds",
		"GPU time the timed kernels and copies of the device's last probe took (bounded by --collector.probe.budget).")
	probeRunsDesc = desc("probe", "runs_total",
		"Probes of the device attempted, failed ones included.")
	probeErrorsDesc = desc("probe", "errors_total",
		"Probe failures by measurement (h2d, fp32, ..., probe: the whole device probe, init: loading CUDA or listing devices) and error (a CUDA error name such as out_of_memory, deadline_exceeded, busy, unavailable, other).",
		"measurement", "error")
	probeMemFreeDesc = desc("probe", "memory_free_bytes",
		"Device memory free as the probe's CUDA context sees it (cuMemGetInfo), after the context exists.")
	probeMemTotalDesc = desc("probe", "memory_total_bytes",
		"Device memory total as CUDA reports it (cuMemGetInfo): a vGPU guest or MIG instance sees its share.")
	probeH2DDesc = desc("probe", "h2d_bandwidth_bytes_per_second",
		"Host-to-device copy bandwidth from pinned memory measured by the last probe.")
	probeD2HDesc = desc("probe", "d2h_bandwidth_bytes_per_second",
		"Device-to-host copy bandwidth into pinned memory measured by the last probe.")
	probeDeviceCopyDesc = desc("probe", "device_copy_bandwidth_bytes_per_second",
		"Device memory bandwidth of a copy kernel (bytes read plus written per second) measured by the last probe.")
	probeFP32Desc = desc("probe", "fp32_flop_per_second",
		"FP32 FMA throughput measured by the last probe, in floating-point operations per second.")
	probeTensorDesc = desc("probe", "tensor_flop_per_second",
		"Tensor-core mma.sync throughput (f32 accumulate) measured by the last probe, in floating-point operations per second.",
		"dtype")
	probeLaunchDesc = desc("probe", "launch_latency_seconds",
		"Round trip of an empty kernel (launch and synchronise) over the last probe's launches: stat=median or p99.",
		"stat")
	probeStolenDesc = desc("probe", "stolen_time_ratio",
		"Share of the stolen-time windows the probe's kernel did not run (gaps in %globaltimer; median over SMs per window, the windows weighted by length): GPU time given to other contexts. ~0 on a GPU that is yours alone.")
	probeUnexplainedDesc = desc("probe", "unexplained_stolen_time_ratio",
		"Share of the stolen-time windows taken by contexts NVML does not show. basis=visible_processes: the least the GPU's visible contexts can leave unexplained, per window, by NVML's per-process samples (each context at most an equal turn with the probe and its samples' busy time inside the window; the exporter itself left out, MPS clients and server one context); ~0 on a GPU busy only with processes NVML lists. basis=raw: NVML has no per-process utilisation on the GPU (NOT_SUPPORTED, a vGPU guest): the raw stolen time ratio, the tenant's own processes included. Absent when not known (see unexplained_stolen_time_unknown).",
		"basis")
	probeUnexplainedUpperDesc = desc("probe", "unexplained_stolen_time_upper_ratio",
		"The most the unexplained stolen time can be by NVML's samples: up to the stolen time ratio when a sample period longer than the windows holds a busy visible tenant (NVML cannot tell whether it or a neighbour took the windows); minus unexplained_stolen_time_ratio, the figure's error bound.",
		"basis")
	probeUnexplainedUnknownDesc = desc("probe", "unexplained_stolen_time_unknown",
		"1 when the last probe measured stolen time but the unexplained part is not known, by reason: no_process_utilization (the process collectors are off), mig, utilization_read_failed, samples_not_read (NVML not read a sample period past a window within the wait), no_samples_during_probe (NVML showed no sample at all while the probe ran and lost time: it does not see this GPU's contexts), no_windows.",
		"reason")
	probeGapDesc = desc("probe", "stolen_gap_seconds",
		"Length of the gaps the stolen-time kernel saw (stat=median, p90, max; 0 without gaps): the time slice other contexts got.",
		"stat")
)

// DescribeProbe sends the descriptors of every probe metric.
func DescribeProbe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{probeUpDesc, probeDeviceInfoDesc, probeLastSuccessDesc, probeDurationDesc,
		probeGPUTimeDesc, probeRunsDesc, probeErrorsDesc, probeMemFreeDesc, probeMemTotalDesc, probeH2DDesc,
		probeD2HDesc, probeDeviceCopyDesc, probeFP32Desc, probeTensorDesc, probeLaunchDesc, probeStolenDesc, probeUnexplainedDesc,
		probeUnexplainedUpperDesc, probeUnexplainedUnknownDesc, probeGapDesc,
		probeSkippedDesc, probeNotReportedDesc, probeContextMemDesc, probeChildCPUDesc, probeChildRSSDesc} {
		ch <- d
	}
}

// Describe implements prometheus.Collector.
func (p *ProbeCollector) Describe(ch chan<- *prometheus.Desc) { DescribeProbe(ch) }

// Collect implements prometheus.Collector: it copies the latest snapshot and
// never calls CUDA.
func (p *ProbeCollector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range *p.snap.Load() {
		ch <- m
	}
}

// publish renders every device's state into a new snapshot.
func (p *ProbeCollector) publish() {
	devs := make([]*probeDevice, 0, len(p.devices))
	for _, st := range p.devices {
		devs = append(devs, st)
	}
	slices.SortFunc(devs, func(a, b *probeDevice) int {
		ai, aerr := strconv.Atoi(a.gpu)
		bi, berr := strconv.Atoi(b.gpu)
		switch {
		case aerr == nil && berr == nil && ai != bi:
			return ai - bi
		case (aerr == nil) != (berr == nil):
			if aerr == nil {
				return -1
			}
			return 1
		}
		return strings.Compare(a.uuid, b.uuid)
	})
	var ms []prometheus.Metric
	for _, st := range devs {
		ms = st.appendMetrics(ms)
	}
	p.snap.Store(&ms)
}

func (st *probeDevice) appendMetrics(ms []prometheus.Metric) []prometheus.Metric {
	g := func(d *prometheus.Desc, v float64, extra ...string) {
		ms = append(ms, prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{st.gpu, st.uuid}, extra...)...))
	}
	g(probeUpDesc, b2f(st.result != nil))
	if st.info != nil {
		g(probeDeviceInfoDesc, 1, strconv.Itoa(st.info.Ordinal), st.info.Name, st.info.ComputeCapability)
	}
	if !st.lastOK.IsZero() {
		g(probeLastSuccessDesc, float64(st.lastOK.UnixNano())/1e9)
	}
	ms = append(ms, prometheus.MustNewConstMetric(probeRunsDesc, prometheus.CounterValue, st.runs, st.gpu, st.uuid))
	keys := make([]probeErrKey, 0, len(st.errs))
	for k := range st.errs {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b probeErrKey) int {
		if c := strings.Compare(a.measurement, b.measurement); c != 0 {
			return c
		}
		return strings.Compare(a.err, b.err)
	})
	for _, k := range keys {
		ms = append(ms, prometheus.MustNewConstMetric(probeErrorsDesc, prometheus.CounterValue, st.errs[k], st.gpu, st.uuid, k.measurement, k.err))
	}
	for _, reason := range gpuprobe.SkipReasons {
		if n, ok := st.skips[reason]; ok {
			ms = append(ms, prometheus.MustNewConstMetric(probeSkippedDesc, prometheus.CounterValue, n, st.gpu, st.uuid, reason))
		}
	}
	for _, m := range gpuprobe.Measurements {
		for _, reason := range gpuprobe.NotReportedReasons {
			if n, ok := st.notReportedRuns[probeErrKey{m, reason}]; ok {
				ms = append(ms, prometheus.MustNewConstMetric(probeNotReportedDesc, prometheus.CounterValue, n, st.gpu, st.uuid, m, reason))
			}
		}
	}
	ms = st.appendChildMetrics(ms)
	r := st.result
	if r == nil {
		return ms
	}
	g(probeDurationDesc, r.Duration.Seconds())
	g(probeGPUTimeDesc, r.GPUTime.Seconds())
	if r.ContextMemoryBytes > 0 {
		g(probeContextMemDesc, float64(r.ContextMemoryBytes))
	}
	if r.Memory != nil {
		g(probeMemFreeDesc, float64(r.Memory.FreeBytes))
		g(probeMemTotalDesc, float64(r.Memory.TotalBytes))
	}
	nonZero := func(d *prometheus.Desc, v float64, extra ...string) {
		if v > 0 {
			g(d, v, extra...)
		}
	}
	nonZero(probeH2DDesc, r.H2DBytesPerSecond)
	nonZero(probeD2HDesc, r.D2HBytesPerSecond)
	nonZero(probeDeviceCopyDesc, r.DeviceCopyBytesPerSecond)
	nonZero(probeFP32Desc, r.FP32FLOPS)
	nonZero(probeTensorDesc, r.FP16TensorFLOPS, "fp16")
	nonZero(probeTensorDesc, r.BF16TensorFLOPS, "bf16")
	nonZero(probeLaunchDesc, r.LaunchLatency.Seconds(), "median")
	nonZero(probeLaunchDesc, r.LaunchLatencyP99.Seconds(), "p99")
	if s := r.Stolen; s != nil {
		g(probeStolenDesc, s.Ratio)
		if u := st.unexplained; u != nil && u.Known() {
			g(probeUnexplainedDesc, u.Ratio, u.Basis)
			g(probeUnexplainedUpperDesc, u.Upper, u.Basis)
		} else if u != nil {
			g(probeUnexplainedUnknownDesc, 1, u.Reason)
		}
		g(probeGapDesc, s.GapMedian.Seconds(), "median")
		g(probeGapDesc, s.GapP90.Seconds(), "p90")
		g(probeGapDesc, s.GapMax.Seconds(), "max")
	}
	return ms
}
