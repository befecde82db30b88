// Package stats summarises what was measured: Summarize turns a run's
// per-request records (report.Record) into its report.Summary — latency
// distributions, throughput, goodput, cost — and Aggregate combines the
// repeats of a level into means with Student-t 95 % confidence intervals.
// Dist, Percentile and Interval are the arithmetic under both. The
// formulas are documented in docs/loadgen-metrics.md.
package stats

import (
	"math"
	"slices"

	"github.com/gpulens/gpulens/loadgen/report"
)

// Dist summarises values (sorted in place). Percentiles interpolate
// linearly between closest ranks (numpy's default); stddev is the sample
// standard deviation (n−1).
func Dist(values []float64) report.Dist {
	n := len(values)
	if n == 0 {
		return report.Dist{}
	}
	slices.Sort(values)
	sum := 0.0
	for _, v := range values {
		sum += v
	}
	mean := sum / float64(n)
	return report.Dist{
		Count: n, Mean: mean, Stddev: Stddev(values, mean),
		P50: Percentile(values, 50), P90: Percentile(values, 90), P95: Percentile(values, 95), P99: Percentile(values, 99),
		Max: values[n-1],
	}
}

// Percentile of sorted values, p in [0,100].
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	pos := p / 100 * float64(n-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, n-1)
	frac := pos - float64(lo)
	return sorted[lo] + frac*(sorted[hi]-sorted[lo])
}

// Stddev is the sample standard deviation around mean.
func Stddev(values []float64, mean float64) float64 {
	if len(values) < 2 {
		return 0
	}
	ss := 0.0
	for _, v := range values {
		ss += (v - mean) * (v - mean)
	}
	return math.Sqrt(ss / float64(len(values)-1))
}

// tTable holds two-sided 95 % Student t critical values for 1..30 degrees
// of freedom.
var tTable = [...]float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
	2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
	2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}

// TCritical95 is the two-sided 95 % Student t critical value for df degrees
// of freedom.
func TCritical95(df int) float64 {
	switch {
	case df < 1:
		return math.NaN()
	case df <= len(tTable):
		return tTable[df-1]
	case df <= 40:
		return 2.021
	case df <= 60:
		return 2.000
	case df <= 120:
		return 1.980
	default:
		return 1.960
	}
}

// Interval is the mean, sample stddev and Student-t 95 % confidence
// interval of values. With one value the interval is the value itself.
func Interval(values []float64) report.Stat {
	n := len(values)
	if n == 0 {
		return report.Stat{}
	}
	sum := 0.0
	for _, v := range values {
		sum += v
	}
	mean := sum / float64(n)
	sd := Stddev(values, mean)
	half := 0.0
	if n > 1 {
		half = TCritical95(n-1) * sd / math.Sqrt(float64(n))
	}
	return report.Stat{N: n, Mean: mean, Stddev: sd, CI95Low: mean - half, CI95High: mean + half}
}
