package gpuprobe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/gpulens/gpulens/internal/bytesize"
)

// How the measurements are sized. Every timed measurement but the stolen
// time and the launch latency runs the same way (calibrated): a pilot
// workload that grows until it takes pilotShare of the measurement's share of
// the GPU time budget (this also warms up the JIT-compiled kernel and the
// copy path), then targetIters iterations sized from the pilot's rate so
// that they fill the rest of the share. When a size hits its memory cap the
// iteration count grows instead, up to maxIters.
//
// A figure is the median of the iterations' rates, not the best: the best of
// several short runs can land in a moment when a time-slicing neighbour was
// idle and report the full GPU, hiding exactly what the probe is for; the
// median is what a tenant typically gets and still ignores a single outlier
// (a first-touch page fault, one preemption).
const (
	targetIters = 5
	maxIters    = 50
	pilotShare  = 20 // the pilot grows until it takes 1/pilotShare of the share
	// plannedShare is the share of the budget (less the stolen window)
	// planned for, leaving room for pilots overshooting and for a stolen
	// kernel that ends in a neighbour's slice.
	plannedShare = 0.9

	maxHostCopyBytes = 64 << 20 // PCIe peaks at a few MiB; pinned host memory is scarce
	// minDeviceCopyBytes is the smallest device-copy buffer (L2s of a few
	// MiB: A10); unknownL2CopyBytes the buffer size where the L2 size is
	// not known (more than L2BufferFactor × any L2 of the spec table).
	minDeviceCopyBytes = 64 << 20
	unknownL2CopyBytes = 512 << 20
	pilotCopyBytes     = 1 << 20
	pilotKernelIters   = 16

	// The copy kernel runs copyThreads-thread blocks filling every SM to
	// its thread limit (DeviceInfo.MaxThreadsPerSM: 2048 on sm_80 and
	// sm_90, 1536 on sm_86 and sm_89, 1024 on sm_75), each thread with
	// CopyUnroll independent 16-byte loads in flight.
	copyThreads      = 256
	minCopyBlocksPer = 4 // per SM, when the thread limit is unknown
	fmaBlocksPerSM   = 4
	fmaThreads       = 256
	mmaBlocksPerSM   = 8
	mmaThreads       = 128
	launchWarmup     = 5
	maxLaunches      = 1000
	stolenBlockWidth = 32

	// stolenSlack is the share of the GPU time left when the stolen-time
	// kernel starts that its window leaves free (at least minStolenSlack):
	// for its launch and a neighbour's time slice it may end in.
	stolenSlack    = 0.05
	minStolenSlack = 2 * time.Millisecond
	// minStolenWindow is the shortest window worth running (also at least
	// 20 × the gap threshold).
	minStolenWindow = time.Millisecond
)

// weight is m's part of the budget (less the stolen window).
func weight(m string) float64 {
	switch m {
	case MeasureH2D, MeasureD2H, MeasureDeviceCopy, MeasureFP32, MeasureFP16, MeasureBF16:
		return 1
	case MeasureLaunch:
		return 0.1 // a few ms are hundreds of round trips
	}
	return 0 // memory (untimed) and stolen (its own window)
}

// session is one Probe's state on its locked thread, inside its context.
type session struct {
	drv Driver
	ctx context.Context
	cfg Config
	dev DeviceInfo
	res *Result
	log *slog.Logger

	ptx         [2]string // base, tensor
	modules     [2]Module
	moduleErr   [2]error
	moduleTried [2]bool

	gpuTime     time.Duration // every timed part so far
	planned     time.Duration // GPU time planned for the measurements other than stolen
	weightsLeft float64
	mem         uint64 // device memory for the buffers: Result.BufferBudgetBytes

	stolen stolenRun // the stolen-time windows run so far
}

func newSession(ctx context.Context, drv Driver, cfg Config, dev DeviceInfo, res *Result, log *slog.Logger, ptx [2]string) *session {
	s := &session{drv: drv, ctx: ctx, cfg: cfg, dev: dev, res: res, log: log, ptx: ptx, mem: res.BufferBudgetBytes}
	avail := cfg.GPUTimeBudget
	if !cfg.skips(MeasureStolen) {
		avail -= cfg.StolenWindow
	}
	s.planned = time.Duration(float64(avail) * plannedShare)
	for _, m := range Measurements {
		if !cfg.skips(m) {
			s.weightsLeft += weight(m)
		}
	}
	return s
}

// measure runs one measurement, filling its part of the Result.
func (s *session) measure(m string) error {
	defer func() { s.weightsLeft -= weight(m) }()
	switch m {
	case MeasureMemory:
		return s.memory()
	case MeasureH2D:
		return s.hostCopy(m, true)
	case MeasureD2H:
		return s.hostCopy(m, false)
	case MeasureDeviceCopy:
		return s.deviceCopy(m)
	case MeasureFP32:
		return s.fp32(m)
	case MeasureFP16:
		return s.tensor(m, KernelMMAF16, &s.res.FP16TensorFLOPS)
	case MeasureBF16:
		return s.tensor(m, KernelMMABF16, &s.res.BF16TensorFLOPS)
	case MeasureLaunch:
		return s.launch(m)
	case MeasureStolen:
		return s.stolenResult()
	}
	return fmt.Errorf("unknown measurement %q", m)
}

// share is the GPU time measurement m may use: what is left of the planned
// time (the stolen-time windows run so far not counted against it), split
// by weight among the measurements still to run.
func (s *session) share(m string) (time.Duration, error) {
	left := s.planned - (s.gpuTime - s.stolen.gpuTime)
	if left <= 0 || s.weightsLeft <= 0 {
		return 0, fmt.Errorf("GPU time budget (%s) spent before this measurement", s.cfg.GPUTimeBudget)
	}
	return time.Duration(float64(left) * weight(m) / s.weightsLeft), nil
}

// cut reports a context that ended inside a measurement.
func (s *session) cut() error {
	if err := s.ctx.Err(); err != nil {
		return fmt.Errorf("cut short: %w", err)
	}
	return nil
}

// function returns a kernel of the base or tensor module, loading the
// module on first use; a module that failed to load fails every kernel of
// it with the same error.
func (s *session) function(name string) (Function, error) {
	i := 0
	if name == KernelMMAF16 || name == KernelMMABF16 {
		i = 1
	}
	if !s.moduleTried[i] {
		s.moduleTried[i] = true
		s.modules[i], s.moduleErr[i] = s.drv.ModuleLoadData(s.ptx[i])
		if s.moduleErr[i] != nil {
			s.moduleErr[i] = fmt.Errorf("loading the %s module: %w", [2]string{"base", "tensor"}[i], s.moduleErr[i])
		}
	}
	if s.moduleErr[i] != nil {
		return 0, s.moduleErr[i]
	}
	return s.drv.ModuleGetFunction(s.modules[i], name)
}

func (s *session) unloadModules() {
	for i, m := range s.modules {
		if s.moduleTried[i] && s.moduleErr[i] == nil {
			if err := s.drv.ModuleUnload(m); err != nil {
				s.log.Warn("gpuprobe: unloading a module", "err", err)
			}
		}
	}
}

// alloc allocates device memory and returns a function freeing it.
func (s *session) alloc(bytes uint64) (DevicePtr, func(), error) {
	p, err := s.drv.MemAlloc(bytes)
	if err != nil {
		return 0, nil, fmt.Errorf("allocating %d bytes of device memory: %w", bytes, err)
	}
	return p, func() {
		if err := s.drv.MemFree(p); err != nil {
			s.log.Warn("gpuprobe: freeing device memory", "err", err)
		}
	}, nil
}

type eventPair struct{ start, end Event }

func (s *session) events() (eventPair, func(), error) {
	var ev eventPair
	var err error
	if ev.start, err = s.drv.EventCreate(probeEventFlags); err != nil {
		return ev, nil, err
	}
	if ev.end, err = s.drv.EventCreate(probeEventFlags); err != nil {
		_ = s.drv.EventDestroy(ev.start)
		return ev, nil, err
	}
	return ev, func() {
		for _, e := range []Event{ev.start, ev.end} {
			if err := s.drv.EventDestroy(e); err != nil {
				s.log.Warn("gpuprobe: destroying an event", "err", err)
			}
		}
	}, nil
}

// timed runs fn between two event records and returns the GPU time between
// them, adding it to the probe's GPU time.
func (s *session) timed(ev eventPair, fn func() error) (time.Duration, error) {
	if err := s.drv.EventRecord(ev.start); err != nil {
		return 0, err
	}
	if err := fn(); err != nil {
		return 0, err
	}
	if err := s.drv.EventRecord(ev.end); err != nil {
		return 0, err
	}
	if err := s.drv.EventSynchronize(ev.end); err != nil {
		return 0, err
	}
	el, err := s.drv.EventElapsed(ev.start, ev.end)
	if err != nil {
		return 0, err
	}
	s.gpuTime += el
	if el <= 0 {
		return 0, fmt.Errorf("events measured %s", el)
	}
	return el, nil
}

// workload is a timed job whose size is counted in units (bytes, words,
// loop iterations): run runs one of units and returns its GPU time.
type workload struct {
	pilot, max uint64
	run        func(units uint64) (time.Duration, error)
}

// calibrated runs w within share (see targetIters) and returns the median
// rate of its iterations in units per second. The share is a bound, not a
// plan: no run starts unless the GPU time it is expected to take (its size
// over the rate seen so far) fits in what is left of it, so a run that
// waited out a neighbour's time slice shortens the rest.
func (s *session) calibrated(share time.Duration, w workload) (float64, error) {
	var used time.Duration
	units := max(1, min(w.pilot, w.max))
	var rate float64
	fits := func(u uint64) bool {
		return used+time.Duration(float64(u)/rate*float64(time.Second)) <= share
	}
	for {
		el, err := w.run(units)
		if err != nil {
			return 0, err
		}
		used += el
		rate = float64(units) / el.Seconds()
		target := share / pilotShare
		if el >= target || units >= w.max {
			break
		}
		if err := s.cut(); err != nil {
			return 0, err
		}
		// Grow toward the target; time grows at most linearly with size,
		// so this does not overshoot it.
		grow := math.Min(16, math.Max(2, float64(target)/float64(el)))
		next := min(w.max, uint64(float64(units)*grow))
		if !fits(next) {
			return rate, nil
		}
		units = next
	}
	left := share - used
	per := rate * left.Seconds() / targetIters
	iters := targetIters
	if per > float64(w.max) {
		per = float64(w.max)
		iters = min(maxIters, max(targetIters, int(rate*left.Seconds()/per)))
	}
	if per < 1 || per < float64(units)/4 {
		// Too little time left for iterations worth timing: the pilot's
		// last run is the measurement.
		return rate, nil
	}
	rates := make([]float64, 0, iters)
	for range iters {
		if err := s.cut(); err != nil {
			return 0, err
		}
		if !fits(uint64(per)) {
			break
		}
		el, err := w.run(uint64(per))
		if err != nil {
			return 0, err
		}
		used += el
		rates = append(rates, float64(uint64(per))/el.Seconds())
	}
	if len(rates) == 0 {
		return rate, nil
	}
	return median(rates), nil
}

// memory reads cuMemGetInfo and, with Config.Fill, allocates and touches
// FillStep chunks until the driver refuses, the limit or the deadline.
func (s *session) memory() error {
	free, total, err := s.drv.MemGetInfo()
	if err != nil {
		return err
	}
	mr := &MemoryResult{FreeBytes: free, TotalBytes: total}
	s.res.Memory = mr
	if !s.cfg.Fill {
		return nil
	}
	mr.FillTested = true
	var chunks []DevicePtr
	defer func() {
		for _, p := range chunks {
			if err := s.drv.MemFree(p); err != nil {
				s.log.Warn("gpuprobe: freeing a fill-test chunk", "err", err)
			}
		}
	}()
	for {
		if s.ctx.Err() != nil {
			mr.FillStopped = "deadline"
			return nil
		}
		step := s.cfg.FillStep
		if limit := s.cfg.FillLimitBytes; limit > 0 {
			if mr.UsableBytes >= limit {
				mr.FillStopped = "limit"
				return nil
			}
			step = min(step, limit-mr.UsableBytes)
		}
		p, err := s.drv.MemAlloc(step)
		if err != nil {
			if code(err) == CUDAErrOutOfMemory {
				mr.FillStopped = "out_of_memory"
				return nil
			}
			mr.FillStopped = err.Error()
			return fmt.Errorf("fill test after %d bytes: %w", mr.UsableBytes, err)
		}
		chunks = append(chunks, p)
		if err := s.drv.MemsetD8(p, 0xa5, step); err != nil {
			mr.FillStopped = err.Error()
			return fmt.Errorf("fill test: touching %d bytes after %d: %w", step, mr.UsableBytes, err)
		}
		mr.UsableBytes += step
	}
}

// hostCopy times cuMemcpyHtoD or cuMemcpyDtoH between pinned host memory
// and device memory, each buffer at most half of the buffer budget (and
// maxHostCopyBytes). No L2 bound: a copy over PCIe or C2C runs at a small
// fraction of the device memory's bandwidth, so the L2 cannot flatter it.
func (s *session) hostCopy(m string, toDevice bool) error {
	share, err := s.share(m)
	if err != nil {
		return err
	}
	size := min(s.mem/2, maxHostCopyBytes)
	if size < pilotCopyBytes {
		return fmt.Errorf("the buffer budget (%d bytes, MaxMemoryBytes less the context's memory) leaves under %d bytes per copy buffer", s.mem, pilotCopyBytes)
	}
	host, err := s.drv.MemAllocHost(size)
	if err != nil {
		return fmt.Errorf("allocating %d bytes of pinned host memory: %w", size, err)
	}
	defer func() {
		if err := s.drv.MemFreeHost(host); err != nil {
			s.log.Warn("gpuprobe: freeing pinned host memory", "err", err)
		}
	}()
	dev, free, err := s.alloc(size)
	if err != nil {
		return err
	}
	defer free()
	ev, destroy, err := s.events()
	if err != nil {
		return err
	}
	defer destroy()
	rate, err := s.calibrated(share, workload{pilot: pilotCopyBytes, max: size, run: func(n uint64) (time.Duration, error) {
		return s.timed(ev, func() error {
			if toDevice {
				return s.drv.MemcpyHtoD(dev, host[:n])
			}
			return s.drv.MemcpyDtoH(host[:n], dev)
		})
	}})
	if err != nil {
		return err
	}
	if toDevice {
		s.res.H2DBytesPerSecond = rate
	} else {
		s.res.D2HBytesPerSecond = rate
	}
	return nil
}

// kernel returns a workload runner timing one launch of f, with a grid of
// blocksPerSM blocks per SM, between the events ev.
func (s *session) kernel(ev eventPair, f Function, blocksPerSM, threads int, args func(units uint64) []uint64) func(uint64) (time.Duration, error) {
	grid := Dim3{uint32(s.dev.SMs * blocksPerSM), 1, 1}
	block := Dim3{uint32(threads), 1, 1}
	return func(units uint64) (time.Duration, error) {
		return s.timed(ev, func() error { return s.drv.LaunchKernel(f, grid, block, 0, args(units)...) })
	}
}

// deviceCopy times KernelCopy between two buffers of at most half of the
// buffer budget each, and at least L2BufferFactor × the L2 cache (else the
// copy would run from the L2 and the figure is not reported); bandwidth
// counts the bytes read and written. A timed run of more words than a
// buffer holds is several back-to-back launches between the same events,
// so that the launch latency of a short copy does not count against the
// bandwidth.
func (s *session) deviceCopy(m string) error {
	share, err := s.share(m)
	if err != nil {
		return err
	}
	l2 := uint64(max(0, s.dev.L2CacheBytes))
	size := min(s.mem/2, copyBufferBytes(s.dev)) / 16 * 16
	if size < L2BufferFactor*l2 || size < pilotCopyBytes {
		return &notReportedError{reason: NotReportedBufferBudgetBelowL2, detail: fmt.Sprintf(
			"copy buffers of %s (half the %s buffer budget) would sit in the %s L2 cache; the figure needs two buffers of at least %d × L2 (raise the probe's memory budget to at least %s)",
			fmtBytes(size), fmtBytes(s.mem), fmtBytes(l2), L2BufferFactor, bytesize.Format(bytesize.RoundUp(s.cfg.MaxMemoryBytes-s.mem+2*max(L2BufferFactor*l2, pilotCopyBytes), bytesize.MiB)))}
	}
	f, err := s.function(KernelCopy)
	if err != nil {
		return err
	}
	src, freeSrc, err := s.alloc(size)
	if err != nil {
		return err
	}
	defer freeSrc()
	dst, freeDst, err := s.alloc(size)
	if err != nil {
		return err
	}
	defer freeDst()
	ev, destroy, err := s.events()
	if err != nil {
		return err
	}
	defer destroy()
	grid, block := Dim3{uint32(s.dev.SMs * copyBlocksPerSM(s.dev)), 1, 1}, Dim3{copyThreads, 1, 1}
	words := size / 16
	run := func(n16 uint64) (time.Duration, error) {
		return s.timed(ev, func() error {
			launches := (n16 + words - 1) / words
			per := (n16 + launches - 1) / launches
			for left := n16; left > 0; left -= min(per, left) {
				if err := s.drv.LaunchKernel(f, grid, block, 0, uint64(dst), uint64(src), min(per, left)); err != nil {
					return err
				}
			}
			return nil
		})
	}
	rate, err := s.calibrated(share, workload{pilot: pilotCopyBytes / 16, max: math.MaxUint32 * words, run: run})
	if err != nil {
		return err
	}
	s.res.DeviceCopyBytesPerSecond = rate * 2 * 16
	return nil
}

// copyBufferBytes is the size of each device-copy buffer on dev:
// L2BufferFactor × its L2 cache, at least minDeviceCopyBytes
// (unknownL2CopyBytes when the L2 size is unknown), 16-byte aligned.
func copyBufferBytes(dev DeviceInfo) uint64 {
	if dev.L2CacheBytes <= 0 {
		return unknownL2CopyBytes
	}
	return (max(minDeviceCopyBytes, L2BufferFactor*uint64(dev.L2CacheBytes)) + 15) / 16 * 16
}

// BufferNeed is the device memory the measurement buffers of a probe of
// dev take at most under cfg: the largest any one measurement allocates
// (each frees its buffers before the next), the device copy's two buffers
// of L2BufferFactor × L2 on any GPU of the spec table.
func BufferNeed(dev DeviceInfo, cfg Config) uint64 {
	var need uint64
	if !cfg.skips(MeasureDeviceCopy) {
		need = max(need, 2*copyBufferBytes(dev))
	}
	if !cfg.skips(MeasureH2D) || !cfg.skips(MeasureD2H) {
		need = max(need, maxHostCopyBytes)
	}
	if !cfg.skips(MeasureStolen) {
		need = max(need, uint64(dev.SMs)*StolenBlockBytes(uint64(cfg.MaxGaps)))
	}
	if !cfg.skips(MeasureFP32) || !cfg.skips(MeasureFP16) || !cfg.skips(MeasureBF16) {
		// The compute kernels' outputs: 4 bytes a thread (FMA) or a warp.
		need = max(need, 4*uint64(dev.SMs*fmaBlocksPerSM*fmaThreads))
	}
	return need
}

// MemoryNeed is the device memory a probe of dev takes at most under cfg,
// its context's own counted as ContextReserveBytes: BufferNeed plus that,
// at most MaxMemoryBytes. The probe creates no context unless free memory
// is at least MemoryNeed + ContextReserveBytes.
func MemoryNeed(dev DeviceInfo, cfg Config) uint64 {
	return min(cfg.MaxMemoryBytes, cfg.ContextReserveBytes+BufferNeed(dev, cfg))
}

// copyBlocksPerSM fills every SM to its thread limit.
func copyBlocksPerSM(dev DeviceInfo) int {
	if n := dev.MaxThreadsPerSM / copyThreads; n > 0 {
		return n
	}
	return minCopyBlocksPer
}

// fp32 times KernelFMA: FLOP = threads * iters * FMAChains * 2.
func (s *session) fp32(m string) error {
	threads := uint64(s.dev.SMs * fmaBlocksPerSM * fmaThreads)
	rate, err := s.computeRate(m, KernelFMA, fmaBlocksPerSM, fmaThreads, threads)
	if err != nil {
		return err
	}
	s.res.FP32FLOPS = rate * float64(threads) * FMAChains * 2
	return nil
}

// tensor times KernelMMAF16 or KernelMMABF16: FLOP = warps * iters *
// MMAChains * MMAFlop.
func (s *session) tensor(m, kernel string, figure *float64) error {
	warps := uint64(s.dev.SMs * mmaBlocksPerSM * mmaThreads / 32)
	rate, err := s.computeRate(m, kernel, mmaBlocksPerSM, mmaThreads, warps)
	if err != nil {
		return err
	}
	*figure = rate * float64(warps) * MMAChains * MMAFlop
	return nil
}

// computeRate runs a compute kernel taking (out, iters), blocksPerSM blocks
// of threads on every SM, calibrated to measurement m's share of the budget,
// and returns the iterations per second; out holds outWords 4-byte results.
func (s *session) computeRate(m, kernel string, blocksPerSM, threads int, outWords uint64) (float64, error) {
	share, err := s.share(m)
	if err != nil {
		return 0, err
	}
	f, err := s.function(kernel)
	if err != nil {
		return 0, err
	}
	out, free, err := s.alloc(4 * outWords)
	if err != nil {
		return 0, err
	}
	defer free()
	ev, destroy, err := s.events()
	if err != nil {
		return 0, err
	}
	defer destroy()
	run := s.kernel(ev, f, blocksPerSM, threads, func(iters uint64) []uint64 { return []uint64{uint64(out), iters} })
	return s.calibrated(share, workload{pilot: pilotKernelIters, max: math.MaxUint32, run: run})
}

// launch times round trips of an empty kernel (cuLaunchKernel then
// cuCtxSynchronize) on the host clock: a few to warm up and estimate, then
// as many as the share allows (at most maxLaunches; none start once the
// next would not fit, so on a GPU a neighbour holds for long slices the
// figure rests on fewer launches, the warm-up ones included).
func (s *session) launch(m string) error {
	share, err := s.share(m)
	if err != nil {
		return err
	}
	f, err := s.function(KernelNoop)
	if err != nil {
		return err
	}
	one := Dim3{1, 1, 1}
	trip := func() (time.Duration, error) {
		t0 := s.drv.Now()
		if err := s.drv.LaunchKernel(f, one, one, 0); err != nil {
			return 0, err
		}
		if err := s.drv.CtxSynchronize(); err != nil {
			return 0, err
		}
		dt := s.drv.Now().Sub(t0)
		s.gpuTime += dt
		return dt, nil
	}
	var trips []time.Duration
	var used, est time.Duration
	for i := range launchWarmup + maxLaunches {
		if i == launchWarmup {
			est = medianDuration(trips)
		}
		if i >= launchWarmup {
			if err := s.cut(); err != nil {
				return err
			}
			if used+est > share {
				break
			}
		}
		dt, err := trip()
		if err != nil {
			return err
		}
		used += dt
		trips = append(trips, dt)
	}
	if len(trips) > launchWarmup {
		trips = trips[launchWarmup:] // the warm-up launches only estimate
	}
	slices.Sort(trips)
	s.res.LaunchLatency = medianSorted(trips)
	s.res.LaunchLatencyP99 = quantileSorted(trips, 0.99)
	return nil
}

// code is the CUresult of a failed CUDA call in err's chain, else 0.
func code(err error) int {
	var ce *CUDAError
	if errors.As(err, &ce) {
		return ce.Code
	}
	return 0
}

// median of unsorted values (the mean of the middle two for an even count).
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func medianDuration(v []time.Duration) time.Duration {
	s := slices.Clone(v)
	slices.Sort(s)
	return medianSorted(s)
}

func medianSorted(s []time.Duration) time.Duration {
	n := len(s)
	switch {
	case n == 0:
		return 0
	case n%2 == 1:
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// quantileSorted is the nearest-rank q quantile of sorted values.
func quantileSorted(s []time.Duration, q float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(len(s)-1, max(0, i))]
}
