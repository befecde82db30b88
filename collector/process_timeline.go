package collector

import (
	"slices"
	"sort"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// utilTimeline turns the per-process samples of GetProcessUtilization into
// per-process time intervals and integrates them, cycle after cycle.
//
// A sample of process p at time ts covers (start, ts], where start is p's
// previous sample (kept across cycles) but at most one sample period back
// (the smallest gap seen between two samples of one process), or, for p's
// first sample, ts minus the sample period; start is never before the
// lastSeen timestamp the samples were asked with,
// so that the intervals of two cycles never overlap. Samples not newer than
// lastSeen are dropped (never read twice), duplicates (same pid and
// timestamp) are counted once, and the order samples arrive in does not
// matter.
type utilTimeline struct {
	lastSeen uint64            // newest sample timestamp accepted, µs; 0 before any
	prev     map[uint32]uint64 // newest sample timestamp per pid
	period   uint64            // smallest gap between two samples of one pid, µs; 0 unknown
	// maxCover bounds what one sample covers while period is unknown (the
	// sampler interval, µs; 0: no bound): the first sample of a process
	// whose clock is ahead of ours (a simulated fleet started in the
	// future) must not count the whole difference as busy time.
	maxCover uint64
}

// pidUtil is one process's activity over one cycle. The sums are ratio ×
// seconds over the time its samples cover.
type pidUtil struct {
	covered           float64 // seconds covered by samples
	sm, mem, enc, dec float64 // ∫ ratio dt
	active            bool    // SM activity in at least one sample
	attributed        float64 // GPU busy seconds attributed to the process
}

// mean returns the time-weighted mean of an integrated ratio.
func (u *pidUtil) mean(v float64) float64 {
	if u.covered <= 0 {
		return 0
	}
	return v / u.covered
}

// utilCycle is the activity of one GPU over one cycle.
type utilCycle struct {
	pids      map[uint32]*pidUtil
	busy      float64 // ∫ min(1, Σ SM ratios) dt: seconds the GPU was busy
	contended float64 // the part of busy during which ≥ 2 processes had SM activity
}

// periodJitter: gaps up to period + period/periodJitter between two samples
// of a process are one sample period (its timestamps' jitter), not a gap
// in its activity.
const periodJitter = 100

// interval is the part of a process's timeline one sample covers.
type interval struct {
	pid        uint32
	start, end uint64 // µs
	sm         float64
}

// add integrates the samples returned for lastSeen == since.
func (tl *utilTimeline) add(samples []nvml.ProcessUtilizationSample, since uint64) utilCycle {
	out := utilCycle{pids: map[uint32]*pidUtil{}}
	if tl.prev == nil {
		tl.prev = map[uint32]uint64{}
	}
	acc := make([]nvml.ProcessUtilizationSample, 0, len(samples))
	for _, s := range samples {
		if s.TimeStamp > since {
			acc = append(acc, s)
		}
	}
	sort.Slice(acc, func(i, j int) bool {
		if acc[i].Pid != acc[j].Pid {
			return acc[i].Pid < acc[j].Pid
		}
		return acc[i].TimeStamp < acc[j].TimeStamp
	})
	acc = slices.CompactFunc(acc, func(a, b nvml.ProcessUtilizationSample) bool {
		return a.Pid == b.Pid && a.TimeStamp == b.TimeStamp
	})
	// The sample period, from consecutive samples of one process.
	for i := range acc {
		var before uint64
		if i > 0 && acc[i-1].Pid == acc[i].Pid {
			before = acc[i-1].TimeStamp
		} else if p, ok := tl.prev[acc[i].Pid]; ok {
			before = p
		}
		if before > 0 && acc[i].TimeStamp > before {
			if gap := acc[i].TimeStamp - before; tl.period == 0 || gap < tl.period {
				tl.period = gap
			}
		}
	}
	ivs := make([]interval, 0, len(acc))
	for i, s := range acc {
		start := since
		if i > 0 && acc[i-1].Pid == s.Pid {
			start = acc[i-1].TimeStamp
		} else if p, ok := tl.prev[s.Pid]; ok {
			start = p
		}
		if tl.period > 0 && s.TimeStamp > tl.period && s.TimeStamp-start > tl.period+tl.period/periodJitter {
			// A sample covers at most one period, even after a gap; a gap
			// within the timestamps' jitter of the period is one period
			// (whole-µs stamps of a 1/6 s period are 166666 or 166667 µs
			// apart: the smallest gap would leave 1 µs of every other
			// period uncovered).
			start = max(start, s.TimeStamp-tl.period)
		} else if tl.period == 0 && tl.maxCover > 0 && s.TimeStamp > tl.maxCover {
			start = max(start, s.TimeStamp-tl.maxCover)
		}
		start = max(start, since)
		sec := float64(s.TimeStamp-start) / 1e6
		u := out.pids[s.Pid]
		if u == nil {
			u = &pidUtil{}
			out.pids[s.Pid] = u
		}
		sm := float64(s.SmUtil) / 100
		u.covered += sec
		u.sm += sm * sec
		u.mem += float64(s.MemUtil) / 100 * sec
		u.enc += float64(s.EncUtil) / 100 * sec
		u.dec += float64(s.DecUtil) / 100 * sec
		u.active = u.active || s.SmUtil > 0
		ivs = append(ivs, interval{pid: s.Pid, start: start, end: s.TimeStamp, sm: sm})
		tl.prev[s.Pid] = s.TimeStamp
		tl.lastSeen = max(tl.lastSeen, s.TimeStamp)
	}
	out.sweep(ivs)
	return out
}

// forget drops the timelines of processes that are no longer listed.
func (tl *utilTimeline) forget(live func(pid uint32) bool) {
	for pid := range tl.prev {
		if !live(pid) {
			delete(tl.prev, pid)
		}
	}
}

// sweep cuts the intervals at every boundary and integrates, per segment,
// the GPU's busy time min(1, S) (S the sum of the SM ratios of the
// processes covering it), the contended time (busy time of segments where
// two or more processes had SM activity), and each process's attributed
// share of the busy time, sm_p / S × min(1, S).
func (c *utilCycle) sweep(ivs []interval) {
	if len(ivs) == 0 {
		return
	}
	bounds := make([]uint64, 0, 2*len(ivs))
	for _, iv := range ivs {
		bounds = append(bounds, iv.start, iv.end)
	}
	slices.Sort(bounds)
	bounds = slices.Compact(bounds)
	idx := func(t uint64) int { i, _ := slices.BinarySearch(bounds, t); return i }
	dSum := make([]float64, len(bounds))
	dActive := make([]int, len(bounds))
	for _, iv := range ivs {
		if iv.end <= iv.start {
			continue
		}
		a, b := idx(iv.start), idx(iv.end)
		dSum[a] += iv.sm
		dSum[b] -= iv.sm
		if iv.sm > 0 {
			dActive[a]++
			dActive[b]--
		}
	}
	// cum[i] = ∫ from bounds[0] to bounds[i] of min(1,S)/S dt.
	cum := make([]float64, len(bounds))
	var sum float64
	var active int
	for i := 0; i+1 < len(bounds); i++ {
		sum += dSum[i]
		active += dActive[i]
		seg := float64(bounds[i+1]-bounds[i]) / 1e6
		f := 0.0
		if sum > 1e-12 {
			busy := min(1, sum) * seg
			c.busy += busy
			if active >= 2 {
				c.contended += busy
			}
			f = min(1, sum) / sum * seg
		}
		cum[i+1] = cum[i] + f
	}
	for _, iv := range ivs {
		if iv.end <= iv.start || iv.sm == 0 {
			continue
		}
		c.pids[iv.pid].attributed += iv.sm * (cum[idx(iv.end)] - cum[idx(iv.start)])
	}
}
