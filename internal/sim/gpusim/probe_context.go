package gpusim

import (
	"math"
	"os"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// The probe's own CUDA context in NVML. A real driver lists every process
// holding a context, the prober's included: while the simulated CUDA driver
// (ProbeDriver) holds a context on a device, NVML's compute process list of
// that GPU shows this process (os.Getpid(): the probe runs in the process
// that simulates the fleet) with probeContextMiB of memory, and its
// utilisation samples show it busy with the probe's share of the GPU. The
// exporter must leave it out (collector: ProcessOptions.SelfPID).

// probeContextMiB is what NVML lists for the probe's context: about what a
// CUDA 12 context holds on an H100 (its own memory, not its buffers).
const probeContextMiB = 512

// probeCtxKeep bounds the context spans a device remembers.
const probeCtxKeep = 64

// ctxSpan is a context's life in sim seconds; to is +Inf while it is open.
type ctxSpan struct {
	inst     int // MIG instance index; -1: the whole GPU
	from, to float64
}

// probeCtxLog is a device's probe context spans; the driver writes it (on
// the probe's thread), NVML reads it.
type probeCtxLog struct {
	mu    sync.Mutex
	spans []ctxSpan
}

// probeContext is the simulated CUDA device's Context hook for the whole
// GPU (inst < 0) or MIG instance inst.
func (d *device) probeContext(inst int) func(open bool, at time.Time) {
	return func(open bool, at time.Time) {
		t := d.f.simSeconds(at)
		l := &d.probeCtxs
		l.mu.Lock()
		defer l.mu.Unlock()
		if open {
			l.spans = append(l.spans, ctxSpan{inst: inst, from: t, to: math.Inf(1)})
			if n := len(l.spans); n > probeCtxKeep {
				l.spans = append(l.spans[:0], l.spans[n-probeCtxKeep:]...)
			}
			return
		}
		for i := len(l.spans) - 1; i >= 0; i-- {
			if l.spans[i].inst == inst && math.IsInf(l.spans[i].to, 1) {
				l.spans[i].to = t
				return
			}
		}
	}
}

// probeContextAt reports whether the probe holds a context on the device at
// sim time t, and on which MIG instance (-1: the whole GPU).
func (d *device) probeContextAt(t float64) (inst int, ok bool) {
	l := &d.probeCtxs
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.spans {
		if s.from <= t && t < s.to {
			return s.inst, true
		}
	}
	return 0, false
}

// probeProcess is the probe's context as NVML's compute process list shows
// it at sim time t.
func (d *device) probeProcess(t float64) (nvml.ProcessInfo, bool) {
	inst, ok := d.probeContextAt(t)
	if !ok {
		return nvml.ProcessInfo{}, false
	}
	pi := nvml.ProcessInfo{Pid: uint32(os.Getpid()), UsedGpuMemory: probeContextMiB * mib, GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF}
	if inst >= 0 && inst < len(d.migDevices) {
		pi.GpuInstanceId, pi.ComputeInstanceId = uint32(d.migDevices[inst].giID), 0
	}
	return pi, true
}

// probeSample is the probe's utilisation sample at sim time st (the share
// of the GPU its kernels get), if its context exists then.
func (d *device) probeSample(st float64, ts uint64) (nvml.ProcessUtilizationSample, bool) {
	if _, ok := d.probeContextAt(st); !ok {
		return nvml.ProcessUtilizationSample{}, false
	}
	share, _ := d.probeNeighbour(-1)(d.f.wallTime(st))
	return nvml.ProcessUtilizationSample{Pid: uint32(os.Getpid()), TimeStamp: ts, SmUtil: uint32(math.Round(100 * (1 - share)))}, true
}
