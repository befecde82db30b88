package gpusim

import (
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// The probe's own CUDA context in NVML. A real driver lists every process
// holding a context, the prober's included: while the simulated CUDA driver
// (ProbeDriver) holds a context on a device, NVML's compute process list of
// that GPU shows this process (Fleet.SelfPID: os.Getpid() in the host's PID
// namespace, another, host PID in a container: the probe runs in the
// process that simulates the fleet) with probeContextMiB of memory, and,
// while its kernels run, its utilisation samples show it busy with its
// share of the GPU (procutil.go). The exporter must leave it out.

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
		defer func() {
			// What the context's open or close does to the periods held
			// back for the probe (reportedUntil, publishLog).
			if inst >= 0 {
				return
			}
			now := d.f.elapsed()
			if open {
				d.published.open(d.reportedUntil(now))
			} else {
				d.published.release(now, d.spec.nvml.samplePeriod)
			}
		}()
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
	pi := nvml.ProcessInfo{Pid: d.f.SelfPID(), UsedGpuMemory: probeContextMiB * mib, GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF}
	if inst >= 0 && inst < len(d.migDevices) {
		pi.GpuInstanceId, pi.ComputeInstanceId = uint32(d.migDevices[inst].giID), 0
	}
	return pi, true
}

// Bounds of the kernel spans a device remembers: those ending at most
// probeKernelHorizon sim seconds before the latest (well beyond the
// driver's sample buffer, procSampleWindow; both scaled alike under
// --sim.speed, Fleet.sampleBufferScale), at most probeKernelKeep.
const (
	probeKernelHorizon = 60.0
	probeKernelKeep    = 4096
)

// span is [from, to) in sim seconds.
type span struct{ from, to float64 }

// spanLog is the time the probe's kernels run on a whole GPU, as disjoint
// spans sorted by time; the simulated driver writes it (Device.Kernel, on
// the probe's thread), NVML reads it. Back-to-back kernels merge into one
// span.
type spanLog struct {
	mu    sync.Mutex
	spans []span
	// horizon is how far before the latest span's end spans are kept,
	// sim seconds; 0: probeKernelHorizon.
	horizon float64
}

// add records a kernel's run [from, to), merged with the spans it touches.
func (l *spanLog) add(from, to float64) {
	if !(to > from) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	i := sort.Search(len(l.spans), func(i int) bool { return l.spans[i].to >= from })
	j := i
	for j < len(l.spans) && l.spans[j].from <= to {
		from, to = math.Min(from, l.spans[j].from), math.Max(to, l.spans[j].to)
		j++
	}
	l.spans = slices.Replace(l.spans, i, j, span{from, to})
	latest := l.spans[len(l.spans)-1].to
	horizon := l.horizon
	if horizon <= 0 {
		horizon = probeKernelHorizon
	}
	drop := sort.Search(len(l.spans), func(i int) bool { return l.spans[i].to >= latest-horizon })
	drop = max(drop, len(l.spans)-probeKernelKeep)
	if drop > 0 {
		l.spans = append(l.spans[:0], l.spans[drop:]...)
	}
}

// latestEnd is the end of the latest span, or after when there is none
// later.
func (l *spanLog) latestEnd(after float64) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.spans); n > 0 && l.spans[n-1].to > after {
		return l.spans[n-1].to
	}
	return after
}

// openSince is when the probe's context open now was created, sim
// seconds, if one is open.
func (l *probeCtxLog) openSince() (float64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.spans) - 1; i >= 0; i-- {
		if math.IsInf(l.spans[i].to, 1) {
			return l.spans[i].from, true
		}
	}
	return 0, false
}

// reportedUntil is how far, in sim seconds, NVML may report process
// samples at sim time t. While the probe holds a context the simulated
// driver's virtual clock can lag the fleet's (it leaves its own emulation
// time out, which a loaded machine stretches): the probe's kernels of the
// periods since may be recorded only later, and a period reported before
// them would lack the probe's share for good (a reader never asks for it
// again). So while a context is open, periods are reported up to the end
// of its latest kernel (or its creation), and the rest once it closes or
// its kernels get there, as a driver reports a period once it is over on
// the GPU's clock. Every kernel the driver queues from now on starts at
// or after the fleet's clock less the driver's lag (simdriver.Options.Lag):
// periods before that are over whatever the probe does next, so they are
// reported at most probeReportHold (of the fleet's clock) beyond the lag
// later; a context left open (a hung probe) does not stop the samples.
func (d *device) reportedUntil(t float64) float64 {
	from, ok := d.probeCtxs.openSince()
	if !ok || from > t {
		return t
	}
	hold := (probeReportHold + d.f.lags.max()).Seconds() * d.f.speed
	hold = math.Max(hold, probeReportHold.Seconds()*d.f.sampleBufferScale())
	return math.Max(t-hold, math.Min(t, d.probeKernels.latestEnd(from)))
}

// probeReportHold bounds how long reportedUntil holds samples back beyond
// the probe driver's lag, in time of the fleet's clock: well beyond a
// probe call's own emulation time, well within the driver's sample buffer.
const probeReportHold = 2 * time.Second

// probeLags holds the lag of each probe driver the fleet made (see
// reportedUntil): drivers without a live context report 0.
type probeLags struct {
	mu   sync.Mutex
	next int
	lags map[int]time.Duration
	// total is every lag's growth added up, never reset: the wall time
	// the drivers spent emulating with a context live (Fleet.ProbeEmulated).
	total time.Duration
}

// tracker returns a new driver's simdriver.Options.Lag.
func (l *probeLags) tracker() func(time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	id := l.next
	l.next++
	return func(lag time.Duration) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if grew := lag - l.lags[id]; grew > 0 {
			l.total += grew
		}
		if lag <= 0 {
			delete(l.lags, id)
			return
		}
		if l.lags == nil {
			l.lags = map[int]time.Duration{}
		}
		l.lags[id] = lag
	}
}

// ProbeEmulated is the wall time the fleet's simulated CUDA drivers have
// spent so far inside their own calls while a context was live, added up
// and never reset: the simulator's time, not the GPU's, which their
// virtual clocks leave out and a loaded host stretches. A caller timing a
// probe of the simulated GPUs by the wall clock leaves out its growth over
// the probe (gpulens-verify's probe deadline). A call still in progress
// counts once it returns.
func (f *Fleet) ProbeEmulated() time.Duration {
	f.lags.mu.Lock()
	defer f.lags.mu.Unlock()
	return f.lags.total
}

// max is the largest lag of a driver with a live context.
func (l *probeLags) max() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var m time.Duration
	for _, v := range l.lags {
		m = max(m, v)
	}
	return m
}

// within appends to out the parts of the spans inside [a, b).
func (l *spanLog) within(a, b float64, out []span) []span {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := sort.Search(len(l.spans), func(i int) bool { return l.spans[i].to > a })
	for ; i < len(l.spans) && l.spans[i].from < b; i++ {
		out = append(out, span{math.Max(a, l.spans[i].from), math.Min(b, l.spans[i].to)})
	}
	return out
}

// probeKernel is the simulated CUDA device's Kernel hook for the whole GPU.
func (d *device) probeKernel(from, to time.Time) {
	a, b := d.f.simSeconds(from), d.f.simSeconds(to)
	d.probeKernels.add(a, b)
	// Period k covers [(k−1)·P, k·P).
	p := d.spec.nvml.samplePeriod
	d.periods.forget(int64(math.Floor(a/p))+1, int64(math.Ceil(b/p)))
	now := d.f.elapsed()
	d.published.note(d.reportedUntil(now), now, p)
}
