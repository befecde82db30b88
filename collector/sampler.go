package collector

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpulens/gpulens/internal/cudaver"
	"github.com/gpulens/gpulens/internal/nvmlret"
)

// Config tunes the sampler.
type Config struct {
	// Interval between two reads of a GPU.
	Interval time.Duration
	// DeviceTimeout is how long one GPU's cycle may take, a single NVML call
	// included, before the GPU is reported down (gpulens_gpu_up 0) and the
	// call in progress is counted as a deadline_exceeded error. NVML calls
	// cannot be cancelled: the GPU's goroutine waits for the call and
	// resumes; the other GPUs are unaffected.
	DeviceTimeout time.Duration
	// Simulated marks every GPU as simulated in gpulens_gpu_info.
	Simulated bool
	Logger    *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Processes configures the process and contention collectors.
	Processes ProcessOptions
}

// Validate checks the configuration and names the offending setting.
func (c Config) Validate() error {
	if c.Interval <= 0 {
		return fmt.Errorf("sampler interval must be positive, got %s", c.Interval)
	}
	if c.DeviceTimeout <= 0 {
		return fmt.Errorf("sampler device timeout must be positive, got %s", c.DeviceTimeout)
	}
	return c.Processes.validate()
}

// NamedCollector is an enabled collector with its flag name.
type NamedCollector struct {
	Name      string
	Collector Collector
}

// Sampler reads every GPU on its own goroutine and publishes an immutable
// snapshot of const metrics. It is a prometheus.Collector whose Collect only
// copies the latest snapshot.
type Sampler struct {
	lib nvml.Interface
	// probePID is the exporter's own PID as its probe found it in NVML's
	// process list (SetProbePID); 0 until then.
	probePID   atomic.Uint32
	cfg        Config
	now        func() time.Time
	logger     *slog.Logger
	collectors []NamedCollector
	workers    []*deviceWorker
	xid        *xidWatcher

	driverVersion string
	cudaVersion   string

	errors        *prometheus.CounterVec
	cycleDuration prometheus.Histogram

	publishMu sync.Mutex
	lastSize  int
	published uint64 // snapshots published so far; guarded by publishMu
	snap      atomic.Pointer[Snapshot]
}

// NewSampler discovers the GPUs of an initialised NVML library. It reads only
// the device count and library versions; each GPU's handle and identity are
// read by its own goroutine, so a GPU that hangs at start-up cannot block the
// others. withXID starts the XID event watcher.
func NewSampler(lib nvml.Interface, collectors []NamedCollector, withXID bool, cfg Config) (*Sampler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Sampler{
		lib:        lib,
		cfg:        cfg,
		now:        cfg.Now,
		logger:     cfg.Logger,
		collectors: collectors,
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "nvml_errors_total",
			Help: "NVML calls that failed, by call and error (ERROR_NOT_SUPPORTED is not an error: the metric is omitted). error=\"deadline_exceeded\" counts calls still running after --sampler.device-timeout.",
		}, []string{"call", "error"}),
		cycleDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "sampler_duration_seconds",
			Help:    "Time one GPU's sampler cycle took (every enabled collector's NVML calls for that GPU).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("counting GPUs (nvmlDeviceGetCount): %w", ret)
	}
	if v, ret := lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		s.driverVersion = v
	} else {
		s.RecordError("SystemGetDriverVersion", nvmlret.Label(ret))
	}
	if v, ret := lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		s.cudaVersion = cudaver.Format(v)
	} else {
		s.RecordError("SystemGetCudaDriverVersion", nvmlret.Label(ret))
	}
	for i := 0; i < n; i++ {
		w := &deviceWorker{s: s, index: i, gpu: strconv.Itoa(i), activity: &activityLog{}}
		w.currentCollector.Store(-1)
		s.workers = append(s.workers, w)
	}
	if withXID {
		s.xid = newXIDWatcher(lib, n, s, s.logger, s.now)
	}
	s.publish()
	return s, nil
}

// identity is the gpulens_gpu_info series of GPU index once its identity
// was read, whether or not the GPU is up now (a lost GPU keeps it); nil
// before.
func (s *Sampler) identity(index int) prometheus.Metric {
	if index < 0 || index >= len(s.workers) {
		return nil
	}
	w := s.workers[index]
	if w.uuid.Load() == nil {
		return nil
	}
	return w.infoM
}

// DeviceCount is the number of GPUs found at start-up.
func (s *Sampler) DeviceCount() int { return len(s.workers) }

// RecordError implements ErrorRecorder.
func (s *Sampler) RecordError(call, errName string) {
	s.errors.WithLabelValues(call, errName).Inc()
}

// Run samples every GPU until ctx is cancelled. It returns once every GPU
// goroutine has finished its cycle, or after one more DeviceTimeout if a GPU
// is stuck in an NVML call (that goroutine is abandoned).
func (s *Sampler) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, w := range s.workers {
		wg.Add(1)
		go func() { defer wg.Done(); w.run(ctx) }()
	}
	if s.xid != nil {
		wg.Add(1)
		go func() { defer wg.Done(); s.xid.run(ctx) }()
	}
	// The watchdog republishes even when every GPU is stuck, so that
	// stuck GPUs are reported down.
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(s.cfg.Interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				s.publish()
			}
		}
	}()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	<-ctx.Done()
	select {
	case <-done:
	case <-time.After(s.cfg.DeviceTimeout):
		s.logger.Warn("sampler stopped with a GPU still inside an NVML call")
	}
}

// Describe implements prometheus.Collector.
func (s *Sampler) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{gpuUpDesc, gpuInfoDesc, lastSuccessDesc, collectorSuccessDesc, collectorDurationDesc, xidDesc, lastXIDDesc} {
		ch <- d
	}
	for _, c := range s.collectors {
		c.Collector.Describe(ch)
	}
	s.errors.Describe(ch)
	s.cycleDuration.Describe(ch)
}

// Collect implements prometheus.Collector. It never calls NVML.
func (s *Sampler) Collect(ch chan<- prometheus.Metric) {
	snapshotCollector{s}.Collect(ch)
	liveCollector{s}.Collect(ch)
}

var (
	gpuUpDesc = desc("gpu", "up",
		"1 when the GPU was read successfully within --sampler.device-timeout, 0 when it cannot be read, hangs or is lost (its other series are then absent).")
	gpuInfoDesc = prometheus.NewDesc(namespace+"_gpu_info",
		"Identity of the GPU, value 1. Join on gpu and uuid to add model, driver and CUDA versions to any series.",
		[]string{"gpu", "uuid", "name", "pci_bus_id", "serial", "driver_version", "cuda_driver_version", "vbios_version", "simulated"}, nil)
	lastSuccessDesc = prometheus.NewDesc(namespace+"_sampler_last_success_timestamp_seconds",
		"Unix time the GPU's last successful sampler cycle finished.", []string{"gpu", "uuid"}, nil)
	collectorSuccessDesc = prometheus.NewDesc(namespace+"_scrape_collector_success",
		"1 when the collector's last cycle on every GPU that is up made no failed NVML call.", []string{"collector"}, nil)
	collectorDurationDesc = prometheus.NewDesc(namespace+"_scrape_collector_duration_seconds",
		"Longest time the collector's last cycle took on any GPU (time so far for a cycle still running past its deadline).", []string{"collector"}, nil)
)

// deviceWorker samples one GPU.
type deviceWorker struct {
	s     *Sampler
	index int
	gpu   string
	// activity is the GPU's visible-process timeline for the probe.
	activity *activityLog

	// Owned by the worker goroutine.
	handle   nvml.Device
	info     *Device
	infoM    prometheus.Metric
	samplers []DeviceSampler
	state    *deviceState // shared by the samplers; see Device

	// Shared with publish.
	current          atomic.Pointer[string] // NVML call in progress
	currentCollector atomic.Int32           // index of the collector in progress, -1 if none
	cycleStart       atomic.Int64           // UnixNano of the cycle in progress, 0 when idle
	result           atomic.Pointer[deviceResult]
	uuid             atomic.Pointer[string] // set once the identity is read

	hangReported int64 // cycleStart already reported as hung; guarded by publishMu
}

// deviceResult is one finished cycle of one GPU; immutable once stored.
type deviceResult struct {
	up          bool
	completed   time.Time
	lastSuccess time.Time
	metrics     []prometheus.Metric
	collectorOK []bool
	collectorD  []time.Duration
}

func (w *deviceWorker) run(ctx context.Context) {
	t := time.NewTicker(w.s.cfg.Interval)
	defer t.Stop()
	for {
		w.cycle()
		w.s.publish()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (w *deviceWorker) cycle() {
	s := w.s
	start := s.now()
	w.cycleStart.Store(start.UnixNano())
	defer w.cycleStart.Store(0)
	r := &Reader{Device: w.handle, errs: s, current: &w.current}

	if w.handle == nil {
		h, ok := Call(r, "DeviceGetHandleByIndex", func() (nvml.Device, nvml.Return) { return s.lib.DeviceGetHandleByIndex(w.index) })
		if ok {
			w.handle, r.Device = h, h
		}
	}
	if w.handle != nil && w.info == nil {
		w.readIdentity(r)
	}

	prev := w.result.Load()
	res := &deviceResult{
		collectorOK: make([]bool, len(s.collectors)),
		collectorD:  make([]time.Duration, len(s.collectors)),
	}
	if prev != nil {
		res.lastSuccess = prev.lastSuccess
	}
	if w.info != nil {
		w.state.beginCycle()
		e := newEmitter(w.gpu, w.info.UUID, max(64, len(metricsOf(prev))))
		e.metrics = append(e.metrics, w.infoM)
		for i, smp := range w.samplers {
			failures, t0 := r.failures, s.now()
			w.currentCollector.Store(int32(i))
			smp.Sample(r, e, t0)
			res.collectorD[i] = s.now().Sub(t0)
			res.collectorOK[i] = r.failures == failures && !r.lost
		}
		w.currentCollector.Store(-1)
		res.metrics = e.metrics
	}
	end := s.now()
	res.completed = end
	res.up = w.info != nil && !r.lost && (r.success > 0 || len(w.samplers) == 0)
	if res.up {
		res.lastSuccess = end
	}
	s.cycleDuration.Observe(end.Sub(start).Seconds())
	w.result.Store(res)
}

func metricsOf(r *deviceResult) []prometheus.Metric {
	if r == nil {
		return nil
	}
	return r.metrics
}

// readIdentity reads the GPU's static identity once. Only the UUID is
// required; the other fields stay empty when unavailable.
func (w *deviceWorker) readIdentity(r *Reader) {
	s := w.s
	uuid, ok := Call(r, "GetUUID", r.Device.GetUUID)
	if !ok {
		return
	}
	w.state = newDeviceState(s.lib, uuid, s.cfg.Interval, s.cfg.Processes)
	w.state.procs.activity = w.activity
	w.state.procs.probePID = &s.probePID
	d := &Device{Index: w.index, UUID: uuid, state: w.state}
	d.Name, _ = Call(r, "GetName", r.Device.GetName)
	if pci, ok := Call(r, "GetPciInfo", r.Device.GetPciInfo); ok {
		d.PCIBusID = cString(pci.BusId[:])
	}
	d.Serial, _ = Call(r, "GetSerial", r.Device.GetSerial)
	d.VBIOS, _ = Call(r, "GetVbiosVersion", r.Device.GetVbiosVersion)
	w.info = d
	w.infoM = prometheus.MustNewConstMetric(gpuInfoDesc, prometheus.GaugeValue, 1,
		w.gpu, d.UUID, d.Name, d.PCIBusID, d.Serial, s.driverVersion, s.cudaVersion, d.VBIOS, strconv.FormatBool(s.cfg.Simulated))
	w.uuid.Store(&d.UUID) // after infoM: identity reads infoM once uuid is set
	for _, c := range s.collectors {
		w.samplers = append(w.samplers, c.Collector.NewDevice(*d))
	}
	s.logger.Info("GPU found", "gpu", w.index, "uuid", d.UUID, "name", d.Name, "pci_bus_id", d.PCIBusID)
}

// cString converts a NUL-terminated C char array.
func cString(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
