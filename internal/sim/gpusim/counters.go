package gpusim

import (
	"math"
	"sort"
	"sync"
)

const bucketSeconds = 3600.0

// process is a seeded event process with a mean of perHour events per hour:
// hour bucket h holds floor(perHour + u_h) events at hashed offsets. Counts and
// event lists are pure functions of (key, t); a prefix-sum cache keeps count
// O(1) amortised while time moves forward.
type process struct {
	perHour float64
	key     uint64

	mu     sync.Mutex
	cacheH int64  // buckets [0, cacheH) are summed in cacheN
	cacheN uint64 // events in those buckets
}

func newProcess(perHour float64, key uint64) *process {
	return &process{perHour: perHour, key: key}
}

func (p *process) bucketCount(h int64) int {
	return int(math.Floor(p.perHour + unitFloat(hashN(p.key, uint64(h), 0))))
}

// offsets returns the sorted event offsets (seconds) inside bucket h.
func (p *process) offsets(h int64) []float64 {
	n := p.bucketCount(h)
	out := make([]float64, n)
	for i := range out {
		out[i] = unitFloat(hashN(p.key, uint64(h), uint64(i)+1)) * bucketSeconds
	}
	sort.Float64s(out)
	return out
}

// count is the number of events in [0, t].
func (p *process) count(t float64) uint64 {
	if p == nil || p.perHour == 0 || t < 0 {
		return 0
	}
	h := int64(t / bucketSeconds)
	p.mu.Lock()
	if p.cacheH > h {
		p.cacheH, p.cacheN = 0, 0
	}
	for p.cacheH < h {
		p.cacheN += uint64(p.bucketCount(p.cacheH))
		p.cacheH++
	}
	n := p.cacheN
	p.mu.Unlock()
	rem := t - float64(h)*bucketSeconds
	for _, off := range p.offsets(h) {
		if off <= rem {
			n++
		}
	}
	return n
}

// maxBucketsScanned bounds the work of one events/next call (one year).
const maxBucketsScanned = 24 * 366

// events calls fn, in time order, for every event in (a, b].
func (p *process) events(a, b float64, fn func(t float64, h int64, i int)) {
	if p == nil || p.perHour == 0 || b <= a {
		return
	}
	if b-a > maxBucketsScanned*bucketSeconds {
		a = b - maxBucketsScanned*bucketSeconds
	}
	for h := int64(math.Max(0, math.Floor(a/bucketSeconds))); float64(h)*bucketSeconds <= b; h++ {
		for i, off := range p.offsets(h) {
			t := float64(h)*bucketSeconds + off
			if t > a && t <= b {
				fn(t, h, i)
			}
		}
	}
}

// next returns the first event time after a, looking no further than a+horizon;
// +Inf if there is none.
func (p *process) next(a, horizon float64) float64 {
	if p == nil || p.perHour == 0 {
		return math.Inf(1)
	}
	if horizon > maxBucketsScanned*bucketSeconds {
		horizon = maxBucketsScanned * bucketSeconds
	}
	for h := int64(math.Max(0, math.Floor(a/bucketSeconds))); float64(h)*bucketSeconds <= a+horizon; h++ {
		for _, off := range p.offsets(h) {
			if t := float64(h)*bucketSeconds + off; t > a {
				return t
			}
		}
	}
	return math.Inf(1)
}

// integrator is the running integral of a non-negative function on a fixed
// 1 s grid (midpoint rule), so the result depends only on t, not on the call
// pattern: I(t) = sum_{k<floor(t)} f(k+0.5) + f(floor(t)+0.5)*(t-floor(t)).
type integrator struct {
	f func(t float64) float64

	mu    sync.Mutex
	k     int64   // whole seconds summed
	total float64 // sum over [0, k)
}

func (in *integrator) at(t float64) float64 {
	if t <= 0 {
		return 0
	}
	k := int64(math.Floor(t))
	in.mu.Lock()
	if in.k > k {
		in.k, in.total = 0, 0
	}
	for in.k < k {
		in.total += in.f(float64(in.k) + 0.5)
		in.k++
	}
	total := in.total
	in.mu.Unlock()
	return total + in.f(float64(k)+0.5)*(t-float64(k))
}
