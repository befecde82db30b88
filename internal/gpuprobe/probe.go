package gpuprobe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
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
	drv Driver
	log *slog.Logger
	ptx [2]string // the base and tensor modules' PTX

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
	return &Probe{drv: drv, log: log, ptx: [2]string{ptxBase, ptxTensor}}
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
// runs on and marks the Probe busy until it returns), or ErrBusy.
func (p *Probe) do(ctx context.Context, fn func() error) error {
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
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
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
		err = fn()
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
	err := p.do(ctx, func() error {
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
	attrs := []Attribute{AttrMultiprocessorCount, AttrComputeCapabilityMajor, AttrComputeCapabilityMinor, AttrPCIDomainID, AttrPCIBusID, AttrPCIDeviceID}
	v := make(map[Attribute]int, len(attrs))
	for _, a := range attrs {
		if v[a], err = d.DeviceAttribute(ordinal, a); err != nil {
			return fail(err)
		}
	}
	info.SMs = v[AttrMultiprocessorCount]
	info.ComputeCapability = fmt.Sprintf("%d.%d", v[AttrComputeCapabilityMajor], v[AttrComputeCapabilityMinor])
	info.PCIBusID = fmt.Sprintf("%08X:%02X:%02X.0", v[AttrPCIDomainID], v[AttrPCIBusID], v[AttrPCIDeviceID])
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
func (p *Probe) Probe(ctx context.Context, ordinal int, cfg Config) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	var res Result
	err := p.do(ctx, func() error {
		var err error
		res, err = p.run(ctx, ordinal, cfg)
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
func (p *Probe) run(ctx context.Context, ordinal int, cfg Config) (Result, error) {
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
	cctx, err := d.CtxCreate(ordinal)
	if err != nil {
		return Result{}, fmt.Errorf("gpuprobe: device %d: %w", ordinal, err)
	}
	s := newSession(ctx, d, cfg, info, &res, p.log, p.ptx)
	func() {
		// Deferred so that a panic in the driver (recovered by do) still
		// releases the GPU.
		defer func() {
			s.unloadModules()
			if err := d.CtxDestroy(cctx); err != nil {
				p.log.Warn("gpuprobe: destroying the context", "device", ordinal, "err", err)
			}
		}()
		p.measureAll(s)
	}()
	res.GPUTime = s.gpuTime
	res.Duration = d.Now().Sub(res.Started)
	return res, nil
}

func (p *Probe) measureAll(s *session) {
	for _, m := range Measurements {
		if s.cfg.skips(m) {
			continue
		}
		if err := s.ctx.Err(); err != nil {
			s.res.Errors = append(s.res.Errors, MeasurementError{Measurement: m, Err: "not run: " + err.Error()})
			continue
		}
		before := s.gpuTime
		err := s.measure(m)
		if err != nil {
			s.res.Errors = append(s.res.Errors, MeasurementError{Measurement: m, Err: err.Error(), Code: code(err)})
		}
		p.log.Debug("gpuprobe: measurement", "device", s.dev.Ordinal, "measurement", m,
			"gpu_time", (s.gpuTime - before).String(), "err", err)
	}
}
