package gpusim

import (
	"math"
)

// shape is the waveform of a signal.
type shape int

const (
	shapeConstant shape = iota
	shapeSine
	shapeSquare
	shapeRamp
	shapeSawtooth
	shapeTriangle
)

var shapeNames = map[string]shape{
	"constant": shapeConstant,
	"sine":     shapeSine,
	"square":   shapeSquare,
	"ramp":     shapeRamp,
	"sawtooth": shapeSawtooth,
	"triangle": shapeTriangle,
}

// signal is a validated time function: a waveform plus smooth, seeded noise.
// All times are in seconds of simulated time.
type signal struct {
	shape       shape
	value       float64 // constant
	min, max    float64 // other shapes
	period      float64 // seconds, > 0 for non-constant shapes
	phase       float64 // seconds added to t
	phaseStep   float64 // per device in a group, resolved by forDevice
	periodStep  float64 // per device in a group, resolved by forDevice
	duty        float64 // square: fraction of the period spent at max
	noise       float64 // amplitude of the noise, in the signal's unit
	noisePeriod float64 // seconds between independent noise points
	lo, hi      float64 // clamp range of the signal's kind
}

// forDevice returns a copy with the per-device phase and period steps
// applied for the k-th device of a group.
func (s *signal) forDevice(k int) *signal {
	if s == nil {
		return nil
	}
	c := *s
	c.phase += float64(k) * s.phaseStep
	c.period += float64(k) * s.periodStep
	return &c
}

// at evaluates the signal at sim time t (seconds); key selects the noise stream.
func (s *signal) at(t float64, key uint64) float64 {
	var v float64
	tt := t + s.phase
	switch s.shape {
	case shapeConstant:
		v = s.value
	case shapeSine:
		mid, amp := (s.min+s.max)/2, (s.max-s.min)/2
		v = mid + amp*math.Sin(2*math.Pi*tt/s.period)
	case shapeSquare:
		if frac(tt/s.period) < s.duty {
			v = s.max
		} else {
			v = s.min
		}
	case shapeRamp:
		v = s.min + (s.max-s.min)*clamp(tt/s.period, 0, 1)
	case shapeSawtooth:
		v = s.min + (s.max-s.min)*frac(tt/s.period)
	case shapeTriangle:
		p := frac(tt / s.period)
		if p < 0.5 {
			v = s.min + (s.max-s.min)*2*p
		} else {
			v = s.max - (s.max-s.min)*2*(p-0.5)
		}
	}
	if s.noise > 0 {
		v += s.noise * smoothNoise(key, t/s.noisePeriod)
	}
	return clamp(v, s.lo, s.hi)
}

func frac(x float64) float64 { return x - math.Floor(x) }

func clamp(x, lo, hi float64) float64 {
	if x < lo {
		return lo
	}
	if x > hi {
		return hi
	}
	return x
}

// mix64 is the splitmix64 finaliser.
func mix64(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// hashN hashes a fixed sequence of words into one.
func hashN(parts ...uint64) uint64 {
	h := uint64(0x9e3779b97f4a7c15)
	for _, p := range parts {
		h = mix64(h ^ (p + 0x9e3779b97f4a7c15 + (h << 6) + (h >> 2)))
	}
	return h
}

// hashString folds a string into a word (FNV-1a then mixed).
func hashString(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return mix64(h)
}

// unitFloat maps a hash to [0, 1).
func unitFloat(h uint64) float64 { return float64(h>>11) / (1 << 53) }

// smoothNoise is value noise in [-1, 1]: independent hashed points at integer
// x, joined with a smoothstep so the result is continuous in x.
func smoothNoise(key uint64, x float64) float64 {
	i := math.Floor(x)
	f := x - i
	s := f * f * (3 - 2*f)
	k := uint64(int64(i))
	a := unitFloat(hashN(key, k))*2 - 1
	b := unitFloat(hashN(key, k+1))*2 - 1
	return a + (b-a)*s
}
