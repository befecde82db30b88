package collector

import (
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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
