// Package schedule computes the seeded open-loop arrival schedule: absolute
// send offsets for request indexes 0, 1, 2, … . Worker i of N (a shard)
// takes every index k with k mod N = i from the one schedule, so the shards
// together send exactly the single-process schedule. A trace replay
// (Arrival Trace) takes its offsets from the trace instead.

package runner

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/gpulens/gpulens/loadgen/option"
)

// Arrival processes.
const (
	Constant = "constant"
	Poisson  = "poisson"
	Gamma    = "gamma"
	// Trace sends at a trace's own arrival offsets (ScheduleConfig.Offsets),
	// stretched or compressed to the mean rate ScheduleConfig.Rate.
	Trace = "trace"
)

// ScheduleConfig describes the arrival process.
type ScheduleConfig struct {
	Rate    float64 // requests per second after ramp-up
	Arrival string
	// Burstiness is the gamma shape k: 1 is Poisson, <1 burstier, >1
	// more regular. Only used by gamma.
	Burstiness float64
	// RampUp raises the rate linearly from 0 to Rate over this time.
	RampUp time.Duration
	Seed   int64
	// Offsets are a trace's arrival offsets, in order (Arrival Trace).
	// Generate scales them by MeanRate(Offsets) / Rate, so that a Rate
	// equal to the trace's own mean rate replays it as recorded; Seed,
	// Burstiness and RampUp are not used.
	Offsets []time.Duration
}

// Validate checks the configuration.
func (c ScheduleConfig) Validate() error {
	if !(c.Rate > 0) || math.IsInf(c.Rate, 0) {
		return option.Errorf("%s must be a positive number, got %v", option.Name("Rate"), c.Rate)
	}
	switch c.Arrival {
	case Constant, Poisson:
	case Gamma:
		if !(c.Burstiness > 0) {
			return option.Errorf("%s must be positive for gamma arrivals, got %v", option.Name("Burstiness"), c.Burstiness)
		}
	case Trace:
		if len(c.Offsets) == 0 {
			return option.Errorf("%s %q needs a trace's arrival offsets (%s)", option.Name("Arrival"), c.Arrival, option.Name("Offsets"))
		}
		for i, o := range c.Offsets {
			if o < 0 || i > 0 && o < c.Offsets[i-1] {
				return option.Errorf("%s: offset %d (%v) is negative or before the previous one", option.Name("Offsets"), i, o)
			}
		}
	default:
		return option.Errorf("%s %q: must be constant, poisson or gamma", option.Name("Arrival"), c.Arrival)
	}
	if c.RampUp < 0 {
		return option.Errorf("%s must not be negative, got %s", option.Name("RampUp"), c.RampUp)
	}
	return nil
}

// Generate returns offsets for requests 0..n-1, stopping early at the
// first offset past until (when until > 0). It needs n > 0 or until > 0.
func Generate(c ScheduleConfig, n int, until time.Duration) []time.Duration {
	if c.Arrival == Trace {
		return replay(c, n, until)
	}
	rng := rand.New(rand.NewPCG(uint64(c.Seed), 0x5ced))
	var out []time.Duration
	if n > 0 {
		out = make([]time.Duration, 0, n)
	}
	e := 0.0 // cumulative expected arrivals ("work")
	for k := 0; n <= 0 || k < n; k++ {
		var gap float64 // in units of mean inter-arrival (mean 1)
		switch c.Arrival {
		case Constant:
			gap = 1
		case Poisson:
			gap = rng.ExpFloat64()
		case Gamma:
			gap = gammaSample(rng, c.Burstiness) / c.Burstiness
		}
		if k == 0 {
			gap = 0 // the first request goes at t=0
		}
		e += gap
		t := warp(e, c.Rate, c.RampUp.Seconds())
		d := time.Duration(t * float64(time.Second))
		if until > 0 && d >= until {
			break
		}
		out = append(out, d)
	}
	return out
}

// replay returns the trace's offsets scaled to the rate, at most n of them
// (n > 0) and those before until (until > 0).
func replay(c ScheduleConfig, n int, until time.Duration) []time.Duration {
	factor := 1.0
	if r := MeanRate(c.Offsets); r > 0 && c.Rate > 0 && math.Abs(r/c.Rate-1) > 1e-9 {
		factor = r / c.Rate
	}
	out := make([]time.Duration, 0, len(c.Offsets))
	for k, o := range c.Offsets {
		if n > 0 && k >= n {
			break
		}
		d := o
		if factor != 1 {
			d = time.Duration(math.Round(float64(o) * factor))
		}
		if until > 0 && d >= until {
			break
		}
		out = append(out, d)
	}
	return out
}

// MeanRate is the mean rate of arrival offsets in requests per second,
// (n − 1) / (last − first) as a run's achieved rate is measured; 0 for
// fewer than two offsets or when they are all equal.
func MeanRate(offsets []time.Duration) float64 {
	n := len(offsets)
	if n < 2 || offsets[n-1] <= offsets[0] {
		return 0
	}
	return float64(n-1) / (offsets[n-1] - offsets[0]).Seconds()
}

// warp maps cumulative expected arrivals e to time for a rate that ramps
// linearly from 0 to r over T seconds: Λ(t) = r t²/(2T) for t ≤ T, then
// r(T/2 + t − T).
func warp(e, r, T float64) float64 {
	if T <= 0 {
		return e / r
	}
	if e <= r*T/2 {
		return math.Sqrt(2 * T * e / r)
	}
	return T + (e-r*T/2)/r
}

// gammaSample draws from Gamma(shape, 1) (Marsaglia and Tsang).
func gammaSample(rng *rand.Rand, shape float64) float64 {
	if shape < 1 {
		u := rng.Float64()
		return gammaSample(rng, 1+shape) * math.Pow(u, 1/shape)
	}
	d := shape - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := rng.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := rng.Float64()
		if u < 1-0.0331*x*x*x*x || math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}

// Shard is worker Index of Count.
type Shard struct{ Index, Count int }

// ParseShard parses "i/N" (0 ≤ i < N).
func ParseShard(s string) (Shard, error) {
	if s == "" {
		return Shard{0, 1}, nil
	}
	a, b, ok := strings.Cut(s, "/")
	i, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || n < 1 || i < 0 || i >= n {
		return Shard{}, option.Errorf("%s %q: want i/N with 0 ≤ i < N", option.Name("Shard"), s)
	}
	return Shard{i, n}, nil
}

// Owns reports whether request index k belongs to the shard.
func (s Shard) Owns(k int) bool { return s.Count <= 1 || k%s.Count == s.Index }

// String formats the shard as i/N.
func (s Shard) String() string { return fmt.Sprintf("%d/%d", s.Index, s.Count) }
