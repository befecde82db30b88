package stats

import (
	"math"
	"testing"
)

func TestDist(t *testing.T) {
	v := []float64{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	d := Dist(v)
	if d.Count != 10 || d.Mean != 5.5 || d.Max != 10 || d.P50 != 5.5 {
		t.Fatalf("dist = %+v", d)
	}
	// pos = 0.9*9 = 8.1 → 9 + 0.1
	if math.Abs(d.P90-9.1) > 1e-12 || math.Abs(d.P99-9.91) > 1e-12 {
		t.Fatalf("p90 %v p99 %v", d.P90, d.P99)
	}
	if math.Abs(d.Stddev-3.0276503540974917) > 1e-12 {
		t.Fatalf("stddev = %v", d.Stddev)
	}
	if e := Dist(nil); e.Count != 0 || e.Mean != 0 {
		t.Fatalf("empty = %+v", e)
	}
}

func TestInterval(t *testing.T) {
	s := Interval([]float64{10, 12, 14})
	// mean 12, sd 2, half = 4.303*2/sqrt(3)
	half := 4.303 * 2 / math.Sqrt(3)
	if s.N != 3 || s.Mean != 12 || s.Stddev != 2 || math.Abs(s.CI95Low-(12-half)) > 1e-12 || math.Abs(s.CI95High-(12+half)) > 1e-12 {
		t.Fatalf("interval = %+v", s)
	}
	if one := Interval([]float64{3}); one.CI95Low != 3 || one.CI95High != 3 {
		t.Fatalf("single = %+v", one)
	}
	if TCritical95(1000) != 1.96 || TCritical95(5) != 2.571 {
		t.Fatal("t table")
	}
}
