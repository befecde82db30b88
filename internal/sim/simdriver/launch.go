package simdriver

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/gpulens/gpulens/internal/gpuprobe"
)

// LaunchKernel emulates the package's kernels by name (gpuprobe.Kernel*):
// it checks the launch shape, the parameter count and that every output
// range lies inside an allocation of the context (CUDA_ERROR_ILLEGAL_ADDRESS
// otherwise), then queues the kernel on the stream (see Driver). Its effect
// on memory (a copy, the stolen-time records) is visible at once, which no
// caller can tell apart since reading it back waits for the stream.
func (d *Driver) LaunchKernel(f gpuprobe.Function, grid, block gpuprobe.Dim3, sharedMemBytes uint32, args ...uint64) error {
	d.mu.Lock()
	name := ""
	if c := d.ctxs[d.current]; c != nil {
		name = c.funcs[f]
	}
	d.mu.Unlock()
	err := d.enter(CallLaunchKernel, name)
	defer d.leave()
	if err != nil {
		return err
	}
	c, err := d.ctx(CallLaunchKernel)
	if err != nil {
		return err
	}
	if name == "" || c.funcs[f] != name {
		return cudaError(CallLaunchKernel, errInvalidHandle, "unknown function")
	}
	blocks := uint64(grid.X) * uint64(grid.Y) * uint64(grid.Z)
	threads := uint64(block.X) * uint64(block.Y) * uint64(block.Z)
	if blocks == 0 || threads == 0 || threads > maxThreadsPerBlock {
		return cudaError(CallLaunchKernel, errInvalidValue, fmt.Sprintf("launch shape grid %v block %v", grid, block))
	}
	want := map[string]int{
		gpuprobe.KernelNoop: 0, gpuprobe.KernelCopy: 3, gpuprobe.KernelFMA: 2,
		gpuprobe.KernelMMAF16: 2, gpuprobe.KernelMMABF16: 2, gpuprobe.KernelStolen: 4,
	}
	n, known := want[name]
	if !known {
		return cudaError(CallLaunchKernel, errNotSupported, fmt.Sprintf("the simulator cannot run kernel %q", name))
	}
	if len(args) != n {
		return cudaError(CallLaunchKernel, errInvalidValue, fmt.Sprintf("%s takes %d parameters, got %d", name, n, len(args)))
	}
	dev := &d.devs[c.dev]
	out := func(p uint64, bytes uint64) (*allocation, uint64, error) {
		a, off, ok := c.span(gpuprobe.DevicePtr(p), bytes)
		if !ok {
			return nil, 0, cudaError(CallLaunchKernel, errIllegalAddress,
				fmt.Sprintf("%s: %d bytes at %#x are outside any allocation", name, bytes, p))
		}
		return a, off, nil
	}
	latency := dev.LaunchLatency
	if latency <= 0 {
		latency = defaultLaunchLatency
	}
	latency = d.jittered(latency)
	warps := blocks * ((threads + 31) / 32)

	var work, rate float64 // FLOP or bytes, per second
	switch name {
	case gpuprobe.KernelNoop:
		d.enqueue(dev, latency, func(start time.Time) time.Time { return start })
		return nil
	case gpuprobe.KernelCopy:
		dst, src, n16 := args[0], args[1], args[2]
		da, doff, err := out(dst, 16*n16)
		if err != nil {
			return err
		}
		sa, soff, err := out(src, 16*n16)
		if err != nil {
			return err
		}
		if da.data != nil && sa.data != nil {
			copy(da.data[doff:doff+16*n16], sa.data[soff:soff+16*n16])
		}
		work, rate = float64(2*16*n16), dev.DeviceCopyBytesPerSecond
	case gpuprobe.KernelFMA:
		if _, _, err := out(args[0], 4*blocks*threads); err != nil {
			return err
		}
		work = float64(blocks*threads) * float64(args[1]) * gpuprobe.FMAChains * 2
		rate = dev.FP32FLOPS
	case gpuprobe.KernelMMAF16, gpuprobe.KernelMMABF16:
		if _, _, err := out(args[0], 4*warps); err != nil {
			return err
		}
		work = float64(warps) * float64(args[1]) * gpuprobe.MMAChains * gpuprobe.MMAFlop
		rate = dev.FP16TensorFLOPS
		if name == gpuprobe.KernelMMABF16 {
			rate = dev.BF16TensorFLOPS
		}
	case gpuprobe.KernelStolen:
		outPtr, window, threshold, maxGaps := args[0], args[1], args[2], args[3]
		if maxGaps > 1<<24 || window == 0 || window > uint64(time.Hour) {
			return cudaError(CallLaunchKernel, errInvalidValue, fmt.Sprintf("%s: window %d ns, max_gaps %d", name, window, maxGaps))
		}
		a, off, err := out(outPtr, blocks*gpuprobe.StolenBlockBytes(maxGaps))
		if err != nil {
			return err
		}
		res := dev.TimerResolution
		if res <= 0 {
			res = defaultTimerResolution
		}
		var raw []byte
		d.enqueue(dev, latency, func(start time.Time) (end time.Time) {
			raw, end = simulateStolen(stolenRun{
				start:      start,
				window:     time.Duration(window),
				threshold:  time.Duration(threshold),
				resolution: res,
				maxGaps:    int(maxGaps),
				blocks:     int(blocks),
				neighbour:  func(t time.Time) (float64, time.Duration) { return neighbour(dev, t) },
				rand:       d.rng.Float64,
			})
			return end
		})
		if a.data != nil {
			copy(a.data[off:], raw)
		}
		return nil
	}
	if rate <= 0 {
		return cudaError(CallLaunchKernel, errNoBinaryForGPU, fmt.Sprintf("the simulated device has no figure for %s", name))
	}
	d.enqueue(dev, latency, func(start time.Time) time.Time {
		share, _ := neighbour(dev, start)
		run := work / (rate * d.slowdown(dev, start)) * 1e9 / (1 - share)
		return start.Add(d.jittered(time.Duration(run)))
	})
	return nil
}

// stolenRun is one launch of the stolen-time kernel.
type stolenRun struct {
	start                         time.Time
	window, threshold, resolution time.Duration
	maxGaps, blocks               int
	neighbour                     func(time.Time) (share float64, slice time.Duration)
	rand                          func() float64 // [0,1)
}

// interval is a span of virtual time in Unix nanoseconds, [from, to).
type interval struct{ from, to int64 }

const (
	// blockStagger is how much later each block starts than the previous.
	blockStagger = 20 * time.Nanosecond
	// readCost is one iteration of the timer loop.
	readCost = 40 * time.Nanosecond
	// pollEvery is how often an absent neighbour is looked for again.
	pollEvery = time.Millisecond
	// sliceJitter is the relative spread (±half) of the neighbour's slices
	// and of our runs between them.
	sliceJitter = 0.04
)

// simulateStolen writes what gpuprobe.KernelStolen writes (the layout in
// kernels.go) and returns it with the time the last block finished. The
// neighbour's slices stop all our blocks at once: every block sees the same
// gaps, from its own start (blocks start blockStagger apart) to the first
// timer reading at least window after its first one. Timer readings are the
// virtual clock in Unix nanoseconds rounded down to the resolution; every
// step between two readings longer than the threshold is a gap, so a timer
// coarser than the threshold makes every step a gap, as on a real GPU.
func simulateStolen(r stolenRun) ([]byte, time.Time) {
	t0 := r.start.UnixNano()
	horizon := t0 + int64(r.blocks)*int64(blockStagger) + int64(r.window) + 2*int64(r.resolution)
	gaps := neighbourGaps(r, t0, horizon)

	blockBytes := gpuprobe.StolenBlockBytes(uint64(r.maxGaps))
	raw := make([]byte, uint64(r.blocks)*blockBytes)
	end := t0
	for b := 0; b < r.blocks; b++ {
		rec, blockEnd := stolenBlock(r, gaps, t0+int64(b)*int64(blockStagger))
		end = max(end, blockEnd)
		base := raw[uint64(b)*blockBytes:]
		for i, w := range rec {
			binary.LittleEndian.PutUint64(base[8*i:], w)
		}
	}
	return raw, time.Unix(0, end)
}

// neighbourGaps lays out the neighbour's slices between from and horizon:
// our run first (its remaining length a random share of a full run, the
// phase at which the kernel happened to start), then slices of length
// slice alternating with our runs of slice*(1-share)/share, re-reading the
// neighbour at each run's start.
func neighbourGaps(r stolenRun, from, horizon int64) []interval {
	var gaps []interval
	t := from
	phase := true
	for t < horizon {
		share, slice := r.neighbour(time.Unix(0, t))
		if share <= 0 || slice <= 0 {
			t += int64(pollEvery)
			phase = true
			continue
		}
		run := float64(slice) * (1 - share) / share
		if phase {
			run *= r.rand()
			phase = false
		} else {
			run *= 1 + sliceJitter*(r.rand()-0.5)
		}
		gs := t + int64(run)
		ge := gs + int64(float64(slice)*(1+sliceJitter*(r.rand()-0.5)))
		if gs >= horizon {
			break
		}
		gaps = append(gaps, interval{gs, ge})
		t = ge
	}
	return gaps
}

// stolenBlock is one block's record: header words then kept gap pairs, and
// the time the block stopped.
func stolenBlock(r stolenRun, gaps []interval, start int64) ([]uint64, int64) {
	res, thr, w := int64(r.resolution), int64(r.threshold), int64(r.window)
	q := func(t int64) int64 { return t - t%res }
	var count, sum, minStep uint64
	var kept []uint64
	step := func(from, length int64) {
		if length <= 0 {
			return
		}
		if minStep == 0 || uint64(length) < minStep {
			minStep = uint64(length)
		}
		if length > thr {
			count++
			sum += uint64(length)
			if len(kept) < 2*r.maxGaps {
				kept = append(kept, uint64(from), uint64(length))
			}
		}
	}
	// steps accounts for the readings from..to (both multiples of res)
	// while running: (to-from)/res steps of one resolution each.
	steps := func(from, to int64) {
		n := (to - from) / res
		if n <= 0 {
			return
		}
		if minStep == 0 || uint64(res) < minStep {
			minStep = uint64(res)
		}
		if res <= thr {
			return
		}
		for k := int64(0); k < n && len(kept) < 2*r.maxGaps; k++ {
			kept = append(kept, uint64(from+k*res), uint64(res))
		}
		count += uint64(n)
		sum += uint64(n * res)
	}

	// A block launched inside a neighbour's slice starts when it ends.
	for _, g := range gaps {
		if g.from <= start && start < g.to {
			start = g.to
		}
	}
	first := q(start)
	target := first + (w+res-1)/res*res
	prev, segStart, running := first, start, int64(0)
	last, end := int64(-1), int64(0)
	for _, g := range gaps {
		if g.to <= segStart {
			continue
		}
		if target < g.from {
			break
		}
		hi := q(g.from - 1)
		steps(prev, hi)
		running += g.from - segStart
		after := q(g.to)
		step(hi, after-hi)
		prev, segStart = after, g.to
		if prev >= target {
			last, end = prev, g.to
			break
		}
	}
	if last < 0 {
		steps(prev, target)
		running += target - segStart
		last, end = target, target
	}
	reads := uint64(running/int64(readCost)) + 1
	rec := []uint64{uint64(first), uint64(last), count, sum, minStep, reads}
	rec = append(rec, kept...)
	for len(rec) < gpuprobe.StolenHeaderWords+2*r.maxGaps {
		rec = append(rec, 0)
	}
	return rec, end
}
