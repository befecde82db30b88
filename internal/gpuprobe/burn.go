package gpuprobe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"time"
)

// Burn keeps one GPU busy for a bounded time with the probe's own FMA
// kernel: the workload of scripts/real-gpu-validate.sh (`gpulens-verify
// burn`) on a host without PyTorch. It is a workload, not a measurement,
// but what it achieves is the workload's own view of contention: alone it
// runs at the GPU's FP32 rate, time-sliced with k other busy contexts at
// about 1/(k+1) of it.

// Bounds of a BurnConfig.
const (
	// MaxBurnDuration caps BurnConfig.Duration.
	MaxBurnDuration = time.Hour
	// DefaultBurnLaunch is the default length of one kernel launch.
	DefaultBurnLaunch = 10 * time.Millisecond
	minBurnLaunch     = time.Millisecond
	maxBurnLaunch     = time.Second
)

// BurnConfig bounds one Burn.
type BurnConfig struct {
	// Duration is how long the kernels run, on the driver's clock (the
	// host clock for a real GPU); required, at most MaxBurnDuration.
	Duration time.Duration
	// MemoryBytes of device memory to allocate, touch and hold until the
	// end, as a real workload would (0: only the kernel's small output).
	MemoryBytes uint64
	// Launch is the length one kernel launch is sized to (0:
	// DefaultBurnLaunch; 1 ms to 1 s). Launches run back to back, each
	// waited for, so the burn ends at most about one launch after Duration
	// or after its context ends.
	Launch time.Duration
	// Logger receives cleanup failures; nil discards them.
	Logger *slog.Logger
}

// Validate reports every field out of range, each message naming it.
func (c BurnConfig) Validate() error {
	var errs []error
	if c.Duration <= 0 || c.Duration > MaxBurnDuration {
		errs = append(errs, fmt.Errorf("Duration must be positive and at most %s, got %s", MaxBurnDuration, c.Duration))
	}
	if c.Launch != 0 && (c.Launch < minBurnLaunch || c.Launch > maxBurnLaunch) {
		errs = append(errs, fmt.Errorf("Launch must be between %s and %s, got %s", minBurnLaunch, maxBurnLaunch, c.Launch))
	}
	if c.Launch != 0 && c.Duration > 0 && c.Launch > c.Duration {
		errs = append(errs, fmt.Errorf("Launch (%s) must not be longer than Duration (%s)", c.Launch, c.Duration))
	}
	if len(errs) > 0 {
		return fmt.Errorf("gpuprobe: invalid burn config: %w", errors.Join(errs...))
	}
	return nil
}

// BurnResult is what one Burn did. Times are on the driver's clock.
type BurnResult struct {
	Device      DeviceInfo `json:"device"`
	Started     time.Time  `json:"started"` // the first launch, after the setup
	MemoryBytes uint64     `json:"memory_bytes"`
	// Duration is from the first launch to the end of the last one.
	Duration time.Duration `json:"duration_ns"`
	Launches int           `json:"launches"`
	// ItersPerLaunch is the FMA kernel's iteration count sized to
	// BurnConfig.Launch: the first few launches grow to it, and it is
	// corrected whenever the median of 4 launches in a row is off Launch
	// by more than a quarter (one launch that ran long, a neighbour that
	// came or went); the last size.
	ItersPerLaunch uint64 `json:"iters_per_launch"`
	// KernelTime sums the launches' GPU time between CUDA events: with
	// time-slicing it includes the slices other contexts ran in between.
	KernelTime   time.Duration `json:"kernel_time_ns"`
	LaunchMedian time.Duration `json:"launch_median_ns"` // of the last 4096 launches
	FLOP         float64       `json:"flop"`
	// FP32FLOPS is FLOP over Duration: the throughput this workload got.
	FP32FLOPS float64 `json:"fp32_flops"`
}

// Burn runs the FMA kernel on device ordinal back to back for cfg.Duration,
// holding cfg.MemoryBytes of device memory, then frees everything and
// destroys its context. It locks the calling goroutine to its OS thread
// while it runs (CUDA's current context is per thread). When ctx ends
// first, Burn stops after the launch in progress and returns what it did
// with ctx's error. A CUDA call that never returns blocks Burn: callers that
// must not hang run it on a goroutine of its own and give up on it. The
// kernel is the probe's FMA kernel, whose per-lane pseudo-random operands
// make the card draw the power of real work. The driver work runs on a
// goroutine of its own locked to its OS thread; when the context cannot be
// destroyed that goroutine exits still locked, so Go retires the thread
// rather than hand it, with our context current, to other goroutines.
func Burn(ctx context.Context, drv Driver, ordinal int, cfg BurnConfig) (BurnResult, error) {
	if err := cfg.Validate(); err != nil {
		return BurnResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return BurnResult{}, err
	}
	if cfg.Launch == 0 {
		cfg.Launch = DefaultBurnLaunch
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := &burner{drv: drv, log: log}
	var res BurnResult
	var err error
	var panicked any
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer func() {
			panicked = recover() // re-raised on the caller's goroutine
			if b.ctxLive {
				log.Error("gpuprobe: burn: the context could not be destroyed; its OS thread is retired with it")
			} else {
				runtime.UnlockOSThread()
			}
			close(done)
		}()
		res, err = b.run(ctx, ordinal, cfg)
	}()
	<-done
	if panicked != nil {
		panic(panicked)
	}
	if err != nil {
		return res, fmt.Errorf("gpuprobe: burn on device %d: %w", ordinal, err)
	}
	return res, nil
}

type burner struct {
	drv   Driver
	log   *slog.Logger
	undo  []func() error // cleanups, run in reverse
	names []string       // what each cleanup does, for the log
	// ctxLive is set from just before cuCtxCreate until cuCtxDestroy
	// succeeds.
	ctxLive bool
}

func (b *burner) onExit(what string, fn func() error) {
	b.undo = append(b.undo, fn)
	b.names = append(b.names, what)
}

func (b *burner) cleanup() {
	for i := len(b.undo) - 1; i >= 0; i-- {
		if err := b.undo[i](); err != nil {
			b.log.Warn("gpuprobe: burn cleanup", "step", b.names[i], "err", err)
		}
	}
}

func (b *burner) run(ctx context.Context, ordinal int, cfg BurnConfig) (BurnResult, error) {
	d := b.drv
	if err := d.Init(); err != nil {
		return BurnResult{}, err
	}
	n, err := d.DeviceCount()
	if err != nil {
		return BurnResult{}, err
	}
	if ordinal < 0 || ordinal >= n {
		return BurnResult{}, fmt.Errorf("no CUDA device %d (%d visible)", ordinal, n)
	}
	version, err := d.DriverVersion()
	if err != nil {
		return BurnResult{}, err
	}
	info, err := deviceInfo(d, ordinal, version)
	if err != nil {
		return BurnResult{}, err
	}
	res := BurnResult{Device: info}
	b.ctxLive = true
	cctx, err := d.CtxCreate(ordinal)
	if err != nil {
		b.ctxLive = false
		return res, err
	}
	// Deferred so that a panic in the driver still releases the GPU.
	defer b.cleanup()
	b.onExit("destroying the context", func() error {
		err := d.CtxDestroy(cctx)
		if err == nil {
			b.ctxLive = false
		}
		return err
	})
	mod, err := d.ModuleLoadData(ptxBase)
	if err != nil {
		return res, fmt.Errorf("loading the base module: %w", err)
	}
	b.onExit("unloading the module", func() error { return d.ModuleUnload(mod) })
	f, err := d.ModuleGetFunction(mod, KernelFMA)
	if err != nil {
		return res, err
	}
	threads := uint64(info.SMs * fmaBlocksPerSM * fmaThreads)
	out, err := b.alloc(4*threads, "the kernel's output")
	if err != nil {
		return res, err
	}
	if cfg.MemoryBytes > 0 {
		hold, err := b.alloc(cfg.MemoryBytes, "the memory to hold")
		if err != nil {
			return res, err
		}
		if err := d.MemsetD8(hold, 0x5a, cfg.MemoryBytes); err != nil {
			return res, fmt.Errorf("touching the %d bytes held: %w", cfg.MemoryBytes, err)
		}
		res.MemoryBytes = cfg.MemoryBytes
	}
	var ev eventPair
	if ev.start, err = d.EventCreate(probeEventFlags); err != nil {
		return res, err
	}
	b.onExit("destroying an event", func() error { return d.EventDestroy(ev.start) })
	if ev.end, err = d.EventCreate(probeEventFlags); err != nil {
		return res, err
	}
	b.onExit("destroying an event", func() error { return d.EventDestroy(ev.end) })

	grid, block := Dim3{uint32(threads / fmaThreads), 1, 1}, Dim3{fmaThreads, 1, 1}
	launch := func(iters uint64) (time.Duration, error) {
		if err := d.EventRecord(ev.start); err != nil {
			return 0, err
		}
		if err := d.LaunchKernel(f, grid, block, 0, uint64(out), iters); err != nil {
			return 0, err
		}
		if err := d.EventRecord(ev.end); err != nil {
			return 0, err
		}
		if err := d.EventSynchronize(ev.end); err != nil {
			return 0, err
		}
		return d.EventElapsed(ev.start, ev.end)
	}

	res.Started = d.Now()
	end := res.Started.Add(cfg.Duration)
	iters, sized := uint64(pilotKernelIters), false
	times := make([]time.Duration, 0, burnTimesKept) // the last launches', a ring
	// The launches since the size last changed, for re-sizing: one sizing
	// launch can run long for reasons that do not last (the host thread
	// descheduled between recording the start event and launching, a
	// neighbour's burst), so the size is checked against the median of
	// each burnResizeAfter launches that follow and corrected when it is
	// off by more than burnResizeBand.
	atSize := make([]time.Duration, 0, burnResizeAfter)
	finish := func() {
		res.Duration = d.Now().Sub(res.Started)
		if res.Duration > 0 {
			res.FP32FLOPS = res.FLOP / res.Duration.Seconds()
		}
		res.LaunchMedian = medianDuration(times)
	}
	for d.Now().Before(end) {
		if err := ctx.Err(); err != nil {
			finish()
			return res, fmt.Errorf("stopped after %s of %s: %w", res.Duration.Round(time.Millisecond), cfg.Duration, err)
		}
		el, err := launch(iters)
		if err != nil {
			finish()
			return res, fmt.Errorf("launch %d: %w", res.Launches+1, err)
		}
		res.Launches++
		res.KernelTime += el
		res.FLOP += float64(threads) * float64(iters) * FMAChains * 2
		if len(times) < burnTimesKept {
			times = append(times, el)
		} else {
			times[res.Launches%burnTimesKept] = el
		}
		// Grow the launches toward cfg.Launch (time grows at most
		// linearly with the iterations, so this does not overshoot it),
		// then keep their size while the median of each
		// burnResizeAfter launches stays near cfg.Launch.
		if sized {
			atSize = append(atSize, el)
			if len(atSize) == burnResizeAfter {
				if next, ok := resize(iters, medianDuration(atSize), cfg.Launch); ok {
					iters = next
					res.ItersPerLaunch = iters
				}
				atSize = atSize[:0]
			}
			continue
		}
		switch {
		case el >= cfg.Launch/2 || iters == math.MaxUint32:
			sized = true
			if el > 0 {
				iters = uint64(math.Max(1, math.Min(math.MaxUint32, float64(iters)*float64(cfg.Launch)/float64(el))))
			}
		default:
			grow := 16.0
			if el > 0 {
				grow = math.Min(16, math.Max(2, float64(cfg.Launch)/float64(el)))
			}
			iters = uint64(math.Min(math.MaxUint32, float64(iters)*grow))
		}
		res.ItersPerLaunch = iters
	}
	finish()
	return res, nil
}

// burnTimesKept is how many of the last launches' times LaunchMedian is
// taken over.
const burnTimesKept = 4096

// A sized burn re-sizes its launches when the median of burnResizeAfter
// launches in a row is off cfg.Launch by more than the factor
// burnResizeBand either way: a median of 4 ignores one launch that ran long
// for a reason that does not last, and time-slicing beside a busy context
// (a slice of 2 ms in 10 ms launches) stays inside the band.
const (
	burnResizeAfter = 4
	burnResizeBand  = 1.25
)

// resize is the iteration count that makes launches that took median at
// iters take launch, and whether it differs enough from iters to switch.
func resize(iters uint64, median, launch time.Duration) (uint64, bool) {
	if median <= 0 {
		return iters, false
	}
	r := float64(launch) / float64(median)
	if r <= burnResizeBand && r >= 1/burnResizeBand {
		return iters, false
	}
	next := uint64(math.Max(1, math.Min(math.MaxUint32, float64(iters)*r)))
	return next, next != iters
}

func (b *burner) alloc(bytes uint64, what string) (DevicePtr, error) {
	p, err := b.drv.MemAlloc(bytes)
	if err != nil {
		return 0, fmt.Errorf("allocating %d bytes for %s: %w", bytes, what, err)
	}
	b.onExit("freeing "+what, func() error { return b.drv.MemFree(p) })
	return p, nil
}
