package collector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gpulens/gpulens/internal/gpuprobe"
)

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
