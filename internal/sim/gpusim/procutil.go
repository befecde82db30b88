package gpusim

import (
	"math"
	"slices"
	"sort"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Per-process utilisation samples as the driver gives them
// (nvmlDeviceGetProcessUtilization, as NVML's API reference documents it):
//
//   - the driver samples every period (the device group's
//     nvml.process_sample_period, about 1/6 s by default): period k covers
//     sim time [(k−1)·P, k·P) and its samples carry the wall time of its
//     end, in µs;
//   - a process's sample is its mean SM (and memory) utilisation over the
//     period, time-weighted: a tenant that starts, stops or restarts inside
//     the period, or bursts (a square signal), counts for the time it ran;
//   - a process whose mean over the period rounds to 0 % (SM and memory)
//     has no sample at all: an idle or bursty tenant leaves gaps, which
//     mean 0 %, not "unknown";
//   - while the probe's kernels run (Device.Kernel spans), every busy
//     context takes turns with the probe's (probe_tenants.go): a tenant's
//     utilisation is then its share, not its demand, and the probe's own
//     process (Fleet.SelfPID) has samples with its share;
//   - MPS clients have their own samples (their part of the server's
//     context); the MPS server's process has none, as its context's work
//     is its clients': counting it too would count that work twice;
//   - the driver keeps the last procSampleWindow of samples (of wall time
//     under --sim.speed: Fleet.sampleBufferScale), counted from when it
//     published them: a period is published once it is over, or, held
//     back for the probe (reportedUntil), when the hold ends (publishLog);
//     only those newer than lastSeen come back, oldest first (by PID
//     within a period), and ERROR_NOT_FOUND when none is;
//   - ERROR_NOT_SUPPORTED in MIG mode and with nvml.process_utilization:
//     not_supported (some vGPU guests).
//
// Means are exact at every jump (start, stop, restart, square and sawtooth
// edges, the neighbour's windows, the probe's kernel spans) and midpoint
// sums of procIntegrationStep between them.
const (
	procSampleWindow    = 10.0  // sim seconds of samples the driver keeps (rounded to whole periods)
	procIntegrationStep = 0.005 // sim seconds
)

// sampleBufferScale is how many times procSampleWindow of sim time the
// driver's sample buffer holds: 1, or the speed when time is compressed,
// so that the buffer holds the last 10 s of wall time. A reader samples
// in wall time (the exporter's sampler every second, or every 10 s of sim
// time in alerts/scenarios_test.go at 40x): with the buffer in sim time
// it would hold one sampler interval there, and a reader delayed by a
// loaded machine would lose samples a real driver still holds for it
// (the probe's windows then had none: unexplained stolen time unknown).
func (f *Fleet) sampleBufferScale() float64 { return math.Max(1, f.speed) }

// GetProcessUtilization returns the samples newer than lastSeen (µs since
// the Unix epoch, wall time = Start + sim time / Speed), oldest first;
// ERROR_NOT_FOUND when there are none, as the driver answers.
func (d *device) GetProcessUtilization(lastSeen uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
	t, r := d.enter("GetProcessUtilization")
	if r != nvml.SUCCESS {
		return nil, r
	}
	if d.migEnabled() || d.spec.nvml.utilNotSupported {
		return nil, nvml.ERROR_NOT_SUPPORTED // as on real GPUs in MIG mode, and some vGPU guests
	}
	p := d.spec.nvml.samplePeriod
	until := d.reportedUntil(t)
	last := int64(math.Floor(until/p + 1e-9))
	keep := procSampleWindow * d.f.sampleBufferScale()
	first := max(1, last-int64(math.Max(1, math.Round(keep/p)))+1)
	d.published.note(until, t, p)
	if from, ok := d.published.kept(t, keep); ok {
		first = max(1, min(first, int64(math.Floor(from/p+1e-9))+1))
	}
	var w periodWork
	ts := func(k int64) uint64 { return uint64(d.f.wallMicros(float64(k) * p)) }
	out := d.periods.samples(first, last, lastSeen, ts, func(k int64, out []nvml.ProcessUtilizationSample) []nvml.ProcessUtilizationSample {
		end := float64(k) * p
		return d.periodSamples(end-p, end, ts(k), &w, out)
	}, nil)
	if len(out) == 0 {
		return nil, nvml.ERROR_NOT_FOUND
	}
	return out, nvml.SUCCESS
}

// periodWork is periodSamples's scratch space.
type periodWork struct {
	edges []float64
	spans []span
	sh    sharing
	acc   []procAcc
}

// procAcc is one process's utilisation integrated over a period.
type procAcc struct {
	pid     uint32
	sm, mem float64 // percent × sim seconds
}

// periodSamples appends the samples of the period [a, b), stamped ts.
func (d *device) periodSamples(a, b float64, ts uint64, w *periodWork, out []nvml.ProcessUtilizationSample) []nvml.ProcessUtilizationSample {
	edges := append(w.edges[:0], a, b)
	for _, tn := range d.spec.tenants {
		edges = tn.edges(a, b, edges)
	}
	edges = d.spec.probe.neighbour.edges(a, b, edges)
	w.spans = d.probeKernels.within(a, b, w.spans[:0])
	for _, s := range w.spans {
		edges = append(edges, s.from, s.to)
	}
	sort.Float64s(edges)
	edges = slices.Compact(edges)
	w.edges = edges

	acc := w.acc[:0]
	add := func(pid uint32, sm, mem float64) {
		for i := range acc {
			if acc[i].pid == pid {
				acc[i].sm += sm
				acc[i].mem += mem
				return
			}
		}
		acc = append(acc, procAcc{pid, sm, mem})
	}
	var probe float64
	si := 0
	for i := 0; i+1 < len(edges); i++ {
		x, y := edges[i], edges[i+1]
		if !(y > x) {
			continue
		}
		mid := (x + y) / 2
		for si < len(w.spans) && w.spans[si].to <= mid {
			si++
		}
		busy := si < len(w.spans) && w.spans[si].from <= mid
		n := int(math.Ceil((y - x) / procIntegrationStep))
		dt := (y - x) / float64(n)
		for j := range n {
			d.sharingAt(x+(float64(j)+0.5)*dt, -1, &w.sh)
			var level float64
			if busy {
				level = probeShareOf(1-w.sh.neighbour, w.sh.demands)
				probe += 100 * w.sh.probeShare() * dt
			}
			for _, ta := range w.sh.tenants {
				if ta.ts.kind == ProcessMPSServer {
					continue // its work is its clients'
				}
				f := 1.0
				if busy && ta.ctx >= 0 {
					dm := w.sh.demands[ta.ctx]
					f = math.Min(dm, level) / dm
				}
				add(ta.s.pid, ta.s.sm*f*dt, ta.s.mem*f*dt)
			}
		}
	}
	if probe > 0 {
		add(d.f.SelfPID(), probe, 0)
	}
	w.acc = acc
	slices.SortFunc(acc, func(x, y procAcc) int { return int(int64(x.pid) - int64(y.pid)) })
	for _, pa := range acc {
		sm, mem := math.Round(pa.sm/(b-a)), math.Round(pa.mem/(b-a))
		if sm <= 0 && mem <= 0 {
			continue // no activity over the period: no sample
		}
		out = append(out, nvml.ProcessUtilizationSample{
			Pid: pa.pid, TimeStamp: ts,
			SmUtil: uint32(math.Min(sm, 100)), MemUtil: uint32(math.Min(mem, 100)),
		})
	}
	return out
}

// edges appends the sim times in (a, b) where the tenant starts, stops or
// restarts, or where one of its signals jumps.
func (ts *tenantSpec) edges(a, b float64, out []float64) []float64 {
	add := func(x float64) {
		if x > a && x < b {
			out = append(out, x)
		}
	}
	if b <= ts.start {
		return out
	}
	runLen := math.Inf(1)
	if ts.stop > 0 {
		runLen = ts.stop - ts.start
	}
	k0, k1 := 0.0, 0.0
	if ts.every > 0 {
		k0 = math.Max(0, math.Floor((a-ts.start)/ts.every))
		k1 = math.Floor((b - ts.start) / ts.every)
	}
	// piece adds the signals' jumps in [lo, hi) of a (re)start at base.
	piece := func(base, lo, hi float64) {
		add(base)
		for _, s := range []*signal{ts.smUtil, ts.memUtil} {
			out = s.edges(lo-base, hi-base, base, out, a, b)
		}
	}
	for k := k0; k <= k1; k++ {
		rs := ts.start + k*ts.every
		re := rs + runLen
		add(re)
		lo, hi := math.Max(a, rs), math.Min(b, re)
		if !(hi > lo) {
			add(rs)
			continue
		}
		if ts.restart <= 0 {
			piece(rs, lo, hi)
			continue
		}
		for j := math.Floor((lo - rs) / ts.restart); j <= math.Floor((hi-rs)/ts.restart); j++ {
			sb := rs + j*ts.restart
			if pl, ph := math.Max(lo, sb), math.Min(hi, sb+ts.restart); ph > pl {
				piece(sb, pl, ph)
			} else {
				add(sb)
			}
		}
	}
	return out
}

// edges appends the sim times (base + local time, within (a, b)) where the
// signal jumps for local times in [l0, l1): a square's rising and falling
// edges, a sawtooth's drops. Other shapes and the noise are continuous.
func (s *signal) edges(l0, l1, base float64, out []float64, a, b float64) []float64 {
	if s == nil || (s.shape != shapeSquare && s.shape != shapeSawtooth) || !(s.period > 0) {
		return out
	}
	add := func(x float64) {
		if x > a && x < b {
			out = append(out, x)
		}
	}
	for m := math.Floor((l0 + s.phase) / s.period); m <= math.Floor((l1+s.phase)/s.period); m++ {
		add(base + m*s.period - s.phase)
		if s.shape == shapeSquare {
			add(base + (m+s.duty)*s.period - s.phase)
		}
	}
	return out
}

// edges appends the sim times in (a, b) where the neighbour starts or
// stops.
func (n *neighbourSpec) edges(a, b float64, out []float64) []float64 {
	if n == nil || b <= n.start {
		return out
	}
	add := func(x float64) {
		if x > a && x < b {
			out = append(out, x)
		}
	}
	add(n.start)
	if n.active <= 0 {
		return out
	}
	if n.every <= 0 {
		add(n.start + n.active)
		return out
	}
	for k := math.Max(0, math.Floor((a-n.start)/n.every)); k <= math.Floor((b-n.start)/n.every); k++ {
		add(n.start + k*n.every)
		add(n.start + k*n.every + n.active)
	}
	return out
}

// publishLog is when the periods held back for the probe (reportedUntil)
// were published, so that the driver's buffer keeps them procSampleWindow
// from then, as it keeps every other period from its end. The simulated
// driver's virtual clock can lag the fleet's by more than the buffer (a
// loaded host: it leaves its emulation time out): without this, the periods
// of the probe's last kernels, held until its context closed, fell out of
// the buffer the moment they were published, and no reader ever saw them
// (the probe's last stolen-time window then had no sample after it).
type publishLog struct {
	mu     sync.Mutex
	active bool    // the probe's context is open: reports may be held back
	last   float64 // reportedUntil at the last look while active, sim seconds
	segs   []published
}

// published is the periods ending in (from, to] published at sim time at.
type published struct{ from, to, at float64 }

// open starts watching the hold at sim time now, reports then up to until.
func (l *publishLog) open(until float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.active {
		l.active, l.last = true, until
	}
}

// note records that at sim time now periods are reported up to until
// (sample period p): those ending more than a period ago that were held
// back at the last look are published now.
func (l *publishLog) note(until, now, p float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.noteLocked(until, now, p)
}

func (l *publishLog) noteLocked(until, now, p float64) {
	if !l.active || until <= l.last {
		return
	}
	if l.last < now-p {
		l.segs = append(l.segs, published{l.last, until, now})
	}
	l.last = until
}

// release ends the hold at sim time now (the probe's context closes):
// every period up to now is published.
func (l *publishLog) release(now, p float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.noteLocked(now, now, p)
	l.active = false
}

// kept returns the earliest end of a late-published period the buffer
// still keeps at sim time now (within keep of its publication), if any.
func (l *publishLog) kept(now, keep float64) (float64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.segs = slices.DeleteFunc(l.segs, func(s published) bool { return now-s.at > keep })
	if len(l.segs) == 0 {
		return 0, false
	}
	from := l.segs[0].from
	for _, s := range l.segs[1:] {
		from = math.Min(from, s.from)
	}
	return from, true
}
