package gpuprobe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"

	"github.com/gpulens/gpulens/internal/bytesize"
	"github.com/gpulens/gpulens/internal/gpuid"
)

// ErrBusy is returned by a Probe whose previous call was abandoned when its
// context ended while a driver call was still running: a CUDA call cannot
// be cancelled, so the call is left to finish on its own thread and the
// Probe refuses new work until it has (and has cleaned up after itself).
var ErrBusy = errors.New("gpuprobe: a previous probe is still stuck in a CUDA driver call")

// Options configure a Probe.
type Options struct {
	// Logger receives cleanup failures and per-measurement debug lines;
	// nil discards them.
	Logger *slog.Logger
	// FreeMemory reports a device's free memory before the probe creates a
	// context on it (the exporter: from its NVML snapshot; gpulens-verify:
	// from NVML). Nil, or not known for a device: the probe creates the
	// context, reads cuMemGetInfo at once and, when free memory is then
	// below what the measurements need plus ContextReserveBytes, destroys
	// it and skips (the context's own memory, a few hundred MiB, was held
	// for that moment); the context's memory is then unknown
	// (Result.ContextMemoryBytes 0) and assumed to be ContextReserveBytes.
	FreeMemory FreeMemoryFunc
	// Processes lists the PIDs NVML's process lists (compute, MPS,
	// graphics) of a device show now, and whether it could read them. The
	// probe calls it just before it creates its context and again right
	// after: the one PID that appears is this process as NVML reports it
	// (Result.NVMLPID), which differs from getpid() in a container
	// without the host's PID namespace. Called on the probe's locked
	// thread; it must return quickly.
	Processes ProcessesFunc
}

// ProcessesFunc is Options.Processes.
type ProcessesFunc func(DeviceInfo) (pids []uint32, ok bool)

// thread is the state of the OS thread a Probe's driver work runs on.
type thread struct {
	// ctxLive is set while a context of ours may exist on the thread: from
	// just before cuCtxCreate until cuCtxDestroy succeeds. A thread left
	// with one is never handed back to Go's thread pool (its goroutine
	// exits still locked, which ends the thread): another goroutine must
	// not run on a thread whose current context is ours.
	ctxLive bool
}

// Probe measures devices through a Driver. It implements Prober.
//
// All driver work of a Probe runs on one goroutine at a time, locked to its
// OS thread from context creation to destruction (CUDA's current context is
// per thread): a Probe or Devices call waits for the one in progress. When
// the caller's context ends first, the call returns ctx's error at once and
// the driver work carries on in the background; until it ends, every call
// returns ErrBusy (Wait blocks until it has).
type Probe struct {
	drv        Driver
	log        *slog.Logger
	ptx        [2]string // the base and tensor modules' PTX
	freeMemory FreeMemoryFunc
	processes  ProcessesFunc
	// lockThread and unlockThread are runtime.LockOSThread and
	// runtime.UnlockOSThread (tests count them).
	lockThread, unlockThread func()

	mu      sync.Mutex
	running chan struct{} // closed when the driver work in progress ends; nil when idle
	stuck   bool          // that work's caller gave up on it
}

var _ Prober = (*Probe)(nil)

// New returns a Probe driving drv.
func New(drv Driver, opts Options) *Probe {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Probe{drv: drv, log: log, ptx: [2]string{ptxBase, ptxTensor}, freeMemory: opts.FreeMemory, processes: opts.Processes,
		lockThread: runtime.LockOSThread, unlockThread: runtime.UnlockOSThread}
}

// Wait blocks until the driver work in progress when it is called (a stuck
// call included) has ended, or ctx ends. Callers use it before unloading the
// driver, or to wait out ErrBusy.
func (p *Probe) Wait(ctx context.Context) error {
	p.mu.Lock()
	done := p.running
	p.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// do runs fn on a goroutine locked to its OS thread, one at a time per
// Probe, and returns its error, or ctx's error as soon as ctx ends (fn then
// runs on and marks the Probe busy until it returns), or ErrBusy. When fn
// leaves th.ctxLive set (a context it could not destroy, or a panic while
// one existed) the goroutine exits without unlocking: Go then ends the
// thread instead of reusing it.
func (p *Probe) do(ctx context.Context, fn func(th *thread) error) error {
	p.mu.Lock()
	for p.running != nil {
		if p.stuck {
			p.mu.Unlock()
			return ErrBusy
		}
		wait := p.running
		p.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return ctx.Err()
		}
		p.mu.Lock()
	}
	done := make(chan struct{})
	p.running = done
	p.mu.Unlock()

	finished := make(chan struct{})
	var err error
	go func() {
		p.lockThread()
		th := &thread{}
		defer func() {
			if th.ctxLive {
				p.log.Error("gpuprobe: a context could not be destroyed; its OS thread is retired with it")
				return
			}
			p.unlockThread()
		}()
		defer func() {
			p.mu.Lock()
			p.running, p.stuck = nil, false
			p.mu.Unlock()
			close(done)
		}()
		defer close(finished)
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("gpuprobe: panic in the driver: %v", r)
			}
		}()
		err = fn(th)
	}()
	select {
	case <-finished:
		return err
	case <-ctx.Done():
		p.mu.Lock()
		defer p.mu.Unlock()
		select {
		case <-finished:
			return err
		default:
		}
		p.stuck = true
		return ctx.Err()
	}
}

// Devices lists the CUDA-visible devices.
func (p *Probe) Devices(ctx context.Context) ([]DeviceInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var infos []DeviceInfo
	err := p.do(ctx, func(*thread) error {
		if err := p.drv.Init(); err != nil {
			return fmt.Errorf("gpuprobe: %w", err)
		}
		n, err := p.drv.DeviceCount()
		if err != nil {
			return fmt.Errorf("gpuprobe: %w", err)
		}
		version, err := p.drv.DriverVersion()
		if err != nil {
			return fmt.Errorf("gpuprobe: %w", err)
		}
		for i := range n {
			info, err := deviceInfo(p.drv, i, version)
			if err != nil {
				return err
			}
			infos = append(infos, info)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return infos, nil
}

// deviceInfo reads what CUDA says of device ordinal without a context.
func deviceInfo(d Driver, ordinal, driverVersion int) (DeviceInfo, error) {
	info := DeviceInfo{Ordinal: ordinal, DriverVersion: driverVersion}
	fail := func(err error) (DeviceInfo, error) {
		return DeviceInfo{}, fmt.Errorf("gpuprobe: device %d: %w", ordinal, err)
	}
	var err error
	if info.Name, err = d.DeviceName(ordinal); err != nil {
		return fail(err)
	}
	if info.UUID, err = d.DeviceUUID(ordinal); err != nil {
		return fail(err)
	}
	attrs := []Attribute{AttrMultiprocessorCount, AttrComputeCapabilityMajor, AttrComputeCapabilityMinor, AttrPCIDomainID, AttrPCIBusID, AttrPCIDeviceID,
		AttrComputeMode, AttrL2CacheSize, AttrMaxThreadsPerMultiprocessor}
	v := make(map[Attribute]int, len(attrs))
	for _, a := range attrs {
		if v[a], err = d.DeviceAttribute(ordinal, a); err != nil {
			return fail(err)
		}
	}
	info.SMs = v[AttrMultiprocessorCount]
	info.ComputeMode = v[AttrComputeMode]
	info.L2CacheBytes = v[AttrL2CacheSize]
	info.MaxThreadsPerSM = v[AttrMaxThreadsPerMultiprocessor]
	info.ComputeCapability = fmt.Sprintf("%d.%d", v[AttrComputeCapabilityMajor], v[AttrComputeCapabilityMinor])
	// CUDA does not report the function number: 0, the GPU's.
	info.PCIBusID = gpuid.BusID{Domain: uint32(v[AttrPCIDomainID]), Bus: uint8(v[AttrPCIBusID]), Device: uint8(v[AttrPCIDeviceID])}.String()
	if info.TotalMemoryBytes, err = d.DeviceTotalMem(ordinal); err != nil {
		return fail(err)
	}
	if info.SMs <= 0 {
		return fail(fmt.Errorf("the driver reports %d SMs", info.SMs))
	}
	return info, nil
}

// Probe measures device ordinal within cfg's bounds (see Prober). The
// measurements run in Measurements order, skipping cfg.Skip; each failure
// is recorded in Result.Errors and the rest still run. Probe returns an
// error only when nothing could be measured: cfg is invalid, the driver
// does not initialise, the device does not exist or no context can be
// created on it, or ctx ended first (then also ErrBusy until the abandoned
// work returns: a CUDA call cannot be cancelled).
//
// A device that is not the probe's to touch is left alone, with
// Result.Skipped saying why and a nil error: a compute mode other than
// DEFAULT (read before any context exists), or free memory below
// MemoryNeed + cfg.ContextReserveBytes (see Options.FreeMemory).
func (p *Probe) Probe(ctx context.Context, ordinal int, cfg Config) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	var res Result
	err := p.do(ctx, func(th *thread) error {
		var err error
		res, err = p.run(ctx, th, ordinal, cfg)
		return err
	})
	switch {
	case errors.Is(err, ErrBusy):
		return Result{}, err
	case err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return Result{}, fmt.Errorf("gpuprobe: probe of device %d abandoned: %w", ordinal, err)
	case err != nil:
		return Result{}, err
	}
	return res, nil
}

// run is one probe on the locked thread.
func (p *Probe) run(ctx context.Context, th *thread, ordinal int, cfg Config) (Result, error) {
	d := p.drv
	if err := d.Init(); err != nil {
		return Result{}, fmt.Errorf("gpuprobe: %w", err)
	}
	n, err := d.DeviceCount()
	if err != nil {
		return Result{}, fmt.Errorf("gpuprobe: %w", err)
	}
	if ordinal < 0 || ordinal >= n {
		return Result{}, fmt.Errorf("gpuprobe: no CUDA device %d (%d visible)", ordinal, n)
	}
	version, err := d.DriverVersion()
	if err != nil {
		return Result{}, fmt.Errorf("gpuprobe: %w", err)
	}
	info, err := deviceInfo(d, ordinal, version)
	if err != nil {
		return Result{}, err
	}
	res := Result{Device: info, Started: d.Now()}
	skip := func(reason, detail string) (Result, error) {
		res.Skipped = &Skip{Reason: reason, Detail: detail}
		res.Duration = d.Now().Sub(res.Started)
		p.log.Info("gpuprobe: device left alone", "device", ordinal, "uuid", info.UUID, "reason", reason, "detail", detail)
		return res, nil
	}
	if reason := computeModeSkip(info.ComputeMode); reason != "" {
		return skip(reason, fmt.Sprintf("compute mode %d (%s): only DEFAULT lets the probe share the GPU", info.ComputeMode, computeModeName(info.ComputeMode)))
	}
	takes := MemoryNeed(info, cfg)
	need := takes + cfg.ContextReserveBytes
	var freeBefore uint64
	known := false
	if p.freeMemory != nil {
		freeBefore, known = p.freeMemory(info)
	}
	if known {
		res.FreeBeforeBytes = freeBefore
		if freeBefore < need {
			return skip(SkipFreeMemoryLow, fmt.Sprintf("%s free, the probe needs %s (the %s it takes on this GPU, at most its budget %s, + %s for the context)",
				fmtBytes(freeBefore), fmtBytes(need), fmtBytes(takes), fmtBytes(cfg.MaxMemoryBytes), fmtBytes(cfg.ContextReserveBytes)))
		}
	}
	var pidsBefore []uint32
	listed := false
	if p.processes != nil {
		pidsBefore, listed = p.processes(info)
	}
	th.ctxLive = true
	cctx, err := d.CtxCreate(ordinal)
	if err != nil {
		th.ctxLive = false
		return Result{}, fmt.Errorf("gpuprobe: device %d: %w", ordinal, err)
	}
	if listed {
		pidsWith, ok := p.processes(info)
		res.NVMLPID = newPID(pidsBefore, pidsWith, ok)
		if res.NVMLPID == 0 {
			p.log.Debug("gpuprobe: NVML's process list does not tell this process apart (no single new PID with the context)", "device", ordinal,
				"before", pidsBefore, "with_context", pidsWith, "read", ok)
		}
	}
	destroyed := false
	destroy := func() {
		if destroyed {
			return
		}
		destroyed = true
		if err := d.CtxDestroy(cctx); err != nil {
			p.log.Warn("gpuprobe: destroying the context", "device", ordinal, "err", err)
			return
		}
		th.ctxLive = false
	}
	// Deferred so that a panic in the driver (recovered by do) still
	// releases the GPU.
	defer destroy()
	free, _, err := d.MemGetInfo()
	if err != nil {
		return Result{}, fmt.Errorf("gpuprobe: device %d: reading free memory after creating the context: %w", ordinal, err)
	}
	ctxMem := cfg.ContextReserveBytes // assumed while unknown
	if known {
		// The drop in free memory is the context's only if nobody else
		// allocated or freed in between (the figure before may also be a
		// snapshot up to a sampling interval old): a drop that no context
		// takes (negative, or beyond maxContextBytes) says the tenant's
		// memory moved, and the context's memory stays unknown.
		if drop := int64(freeBefore) - int64(free); drop >= 0 && uint64(drop) <= maxContextBytes(cfg) {
			ctxMem = uint64(drop)
			res.ContextMemoryBytes = ctxMem
		} else {
			p.log.Debug("gpuprobe: free memory moved by more than a context while it was created; its memory is unknown",
				"device", ordinal, "free_before", freeBefore, "free_after", free)
		}
	}
	// The buffers get the budget less the context's memory, counted as at
	// most ContextReserveBytes: a larger drop is more likely the tenant's
	// memory moving while the context was created (or since the figure
	// before was taken) than a larger context, and the checks on free
	// memory before and after the context keep ContextReserveBytes for the
	// tenant either way.
	if counted := min(ctxMem, cfg.ContextReserveBytes); counted < cfg.MaxMemoryBytes {
		res.BufferBudgetBytes = min(cfg.MaxMemoryBytes-counted, BufferNeed(info, cfg))
	}
	if free < res.BufferBudgetBytes+cfg.ContextReserveBytes {
		destroy()
		return skip(SkipFreeMemoryLow, fmt.Sprintf("%s free with the probe's context, the measurements need %s + %s for the context",
			fmtBytes(free), fmtBytes(res.BufferBudgetBytes), fmtBytes(cfg.ContextReserveBytes)))
	}
	s := newSession(ctx, d, cfg, info, &res, p.log, p.ptx)
	func() {
		defer s.unloadModules()
		p.measureAll(s)
	}()
	destroy()
	res.GPUTime = s.gpuTime
	res.Duration = d.Now().Sub(res.Started)
	return res, nil
}

// newPID is the one PID in with that is not in before, else 0.
func newPID(before, with []uint32, ok bool) uint32 {
	if !ok {
		return 0
	}
	var found uint32
	for _, pid := range with {
		if pid == 0 || slices.Contains(before, pid) || pid == found {
			continue
		}
		if found != 0 {
			return 0 // two new processes: which one is ours?
		}
		found = pid
	}
	return found
}

// maxContextBytes is the largest drop in free memory taken for the
// context's own: twice ContextReserveBytes (1 GiB when that is 0). A bare
// context takes a few hundred MiB on any current GPU.
func maxContextBytes(cfg Config) uint64 {
	if cfg.ContextReserveBytes == 0 {
		return 1 << 30
	}
	return 2 * cfg.ContextReserveBytes
}

// computeModeSkip is the skip reason of a compute mode, "" for DEFAULT.
func computeModeSkip(mode int) string {
	switch mode {
	case ComputeModeDefault:
		return ""
	case ComputeModeExclusiveThread:
		return SkipComputeModeExclusiveThread
	case ComputeModeProhibited:
		return SkipComputeModeProhibited
	}
	// EXCLUSIVE_PROCESS, and any mode this package does not know: a
	// context of ours may lock the tenant out.
	return SkipComputeModeExclusiveProcess
}

func computeModeName(mode int) string {
	switch mode {
	case ComputeModeDefault:
		return "DEFAULT"
	case ComputeModeExclusiveThread:
		return "EXCLUSIVE_THREAD"
	case ComputeModeProhibited:
		return "PROHIBITED"
	case ComputeModeExclusiveProcess:
		return "EXCLUSIVE_PROCESS"
	}
	return "unknown"
}

// fmtBytes writes n for people, as every gpulens program does
// (bytesize.Human): "1.14 GiB", "768 MiB".
func fmtBytes(n uint64) string { return bytesize.Human(float64(n)) }

// measureAll runs the measurements in Measurements order, the stolen-time
// windows spread among them (stolenSchedule), and then combines the
// windows into the stolen measurement.
func (p *Probe) measureAll(s *session) {
	var others []string
	for _, m := range Measurements {
		if m != MeasureStolen && !s.cfg.skips(m) {
			others = append(others, m)
		}
	}
	n := s.cfg.stolenWindows()
	var after []int
	if !s.cfg.skips(MeasureStolen) {
		after = stolenSchedule(n, len(others))
	}
	w := 0
	windows := func(k int) {
		if after == nil {
			return
		}
		for range after[k] {
			before := s.gpuTime
			s.stolenWindow(w, n, k < len(others))
			p.log.Debug("gpuprobe: stolen-time window", "device", s.dev.Ordinal, "window", w+1, "of", n,
				"gpu_time", (s.gpuTime - before).String())
			w++
		}
	}
	windows(0)
	for k, m := range others {
		p.runMeasurement(s, m)
		windows(k + 1)
	}
	if after != nil {
		p.runMeasurement(s, MeasureStolen)
	}
}

// runMeasurement runs one measurement and records its failure.
func (p *Probe) runMeasurement(s *session, m string) {
	if err := s.ctx.Err(); err != nil && m != MeasureStolen {
		s.res.Errors = append(s.res.Errors, MeasurementError{Measurement: m, Err: "not run: " + err.Error()})
		return
	}
	before := s.gpuTime
	err := s.measure(m)
	var nr *notReportedError
	switch {
	case errors.As(err, &nr):
		s.res.NotReported = append(s.res.NotReported, NotReported{Measurement: m, Reason: nr.reason, Detail: nr.detail})
	case err != nil:
		s.res.Errors = append(s.res.Errors, MeasurementError{Measurement: m, Err: err.Error(), Code: code(err)})
	}
	p.log.Debug("gpuprobe: measurement", "device", s.dev.Ordinal, "measurement", m,
		"gpu_time", (s.gpuTime - before).String(), "err", err)
}
