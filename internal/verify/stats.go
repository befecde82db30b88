package verify

import (
	"math"
	"slices"
)

// Stat summarises one figure over the probe runs that measured it.
type Stat struct {
	N      int     `json:"n"`
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	// CV is the coefficient of variation: the sample standard deviation
	// over the mean; 0 with fewer than two values.
	CV float64 `json:"cv"`
}

// NewStat summarises values; nil when there are none.
func NewStat(values []float64) *Stat {
	if len(values) == 0 {
		return nil
	}
	v := slices.Clone(values)
	slices.Sort(v)
	n := len(v)
	s := &Stat{N: n, Min: v[0], Max: v[n-1]}
	if n%2 == 1 {
		s.Median = v[n/2]
	} else {
		s.Median = (v[n/2-1] + v[n/2]) / 2
	}
	if n >= 2 {
		var sum float64
		for _, x := range v {
			sum += x
		}
		mean := sum / float64(n)
		var ss float64
		for _, x := range v {
			ss += (x - mean) * (x - mean)
		}
		if mean != 0 {
			s.CV = math.Sqrt(ss/float64(n-1)) / math.Abs(mean)
		}
	}
	return s
}
