package runner

import (
	"math"
	"slices"
	"testing"
	"time"
)

func TestConstant(t *testing.T) {
	got := Generate(ScheduleConfig{Rate: 4, Arrival: Constant}, 0, time.Second)
	want := []time.Duration{0, 250 * time.Millisecond, 500 * time.Millisecond, 750 * time.Millisecond}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestRampUp(t *testing.T) {
	// Rate ramps 0→10/s over 2 s: Λ(2s) = 10 expected arrivals, the 11th
	// (e=10) lands exactly at 2 s and later ones every 100 ms.
	got := Generate(ScheduleConfig{Rate: 10, Arrival: Constant, RampUp: 2 * time.Second}, 13, 0)
	if got[10] != 2*time.Second || got[12]-got[11] != 100*time.Millisecond {
		t.Fatalf("ramp schedule %v", got)
	}
	if got[1] != time.Duration(math.Sqrt(2*2*1.0/10)*float64(time.Second)) {
		t.Fatalf("second arrival %v", got[1])
	}
}

func TestSeededAndRates(t *testing.T) {
	for _, arr := range []string{Poisson, Gamma} {
		c := ScheduleConfig{Rate: 1000, Arrival: arr, Burstiness: 0.5, Seed: 42}
		a, b := Generate(c, 20000, 0), Generate(c, 20000, 0)
		if !slices.Equal(a, b) {
			t.Fatalf("%s: same seed, different schedules", arr)
		}
		c.Seed = 43
		if slices.Equal(a, Generate(c, 20000, 0)) {
			t.Fatalf("%s: different seeds, same schedule", arr)
		}
		rate := float64(len(a)-1) / a[len(a)-1].Seconds()
		if math.Abs(rate-1000)/1000 > 0.03 {
			t.Fatalf("%s: rate %v, want ≈1000", arr, rate)
		}
		// Burstier gamma (k=0.5) has inter-arrival CV² = 1/k = 2.
		if arr == Gamma {
			var sum, sq float64
			for i := 1; i < len(a); i++ {
				g := (a[i] - a[i-1]).Seconds()
				sum += g
				sq += g * g
			}
			n := float64(len(a) - 1)
			mean := sum / n
			cv2 := (sq/n - mean*mean) / (mean * mean)
			if math.Abs(cv2-2) > 0.2 {
				t.Fatalf("gamma CV² = %v, want ≈2", cv2)
			}
		}
	}
}

func TestShardUnionEqualsSchedule(t *testing.T) {
	c := ScheduleConfig{Rate: 500, Arrival: Poisson, Seed: 7}
	whole := Generate(c, 1001, 0)
	seen := make([]bool, len(whole))
	for i := 0; i < 3; i++ {
		s, err := ParseShard(string(rune('0'+i)) + "/3")
		if err != nil {
			t.Fatal(err)
		}
		for k := range Generate(c, 1001, 0) {
			if s.Owns(k) {
				if seen[k] {
					t.Fatalf("index %d owned twice", k)
				}
				seen[k] = true
			}
		}
	}
	for k, ok := range seen {
		if !ok {
			t.Fatalf("index %d owned by no shard", k)
		}
	}
	for _, bad := range []string{"3/3", "-1/2", "a/b", "1", "0/0"} {
		if _, err := ParseShard(bad); err == nil {
			t.Errorf("ParseShard(%q) accepted", bad)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []ScheduleConfig{{Rate: 0, Arrival: Poisson}, {Rate: 1, Arrival: "zipf"}, {Rate: 1, Arrival: Gamma}, {Rate: 1, Arrival: Poisson, RampUp: -1}} {
		if c.Validate() == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

func TestTraceReplay(t *testing.T) {
	ms := time.Millisecond
	offs := []time.Duration{0, 0, 250 * ms, 1000 * ms} // mean rate 3/s
	if r := MeanRate(offs); r != 3 {
		t.Fatalf("MeanRate = %v, want 3", r)
	}
	for _, tc := range []struct {
		name     string
		rate     float64
		n        int
		until    time.Duration
		want     []time.Duration
		wantRate float64
	}{
		{"as recorded", 3, 0, 0, offs, 3},
		{"twice the rate", 6, 0, 0, []time.Duration{0, 0, 125 * ms, 500 * ms}, 6},
		{"a third of the rate", 1, 0, 0, []time.Duration{0, 0, 750 * ms, 3000 * ms}, 1},
		{"first three", 3, 3, 0, offs[:3], 0},
		{"before 1 s", 3, 0, time.Second, offs[:3], 0},
		{"n and until", 6, 3, 200 * ms, []time.Duration{0, 0, 125 * ms}, 0},
		{"until cuts first", 6, 4, 100 * ms, offs[:2], 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ScheduleConfig{Arrival: Trace, Rate: tc.rate, Offsets: offs, Seed: 7, RampUp: time.Hour}
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			got := Generate(c, tc.n, tc.until)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			if tc.wantRate > 0 && math.Abs(MeanRate(got)-tc.wantRate) > 1e-9 {
				t.Errorf("mean rate %v, want %v", MeanRate(got), tc.wantRate)
			}
		})
	}
	for _, c := range []struct {
		offs []time.Duration
		rate float64
	}{{[]time.Duration{0, 0}, 2}, {[]time.Duration{5 * ms}, 1}} {
		// All at once (or one request): no rate to scale to; as recorded.
		if got := Generate(ScheduleConfig{Arrival: Trace, Rate: c.rate, Offsets: c.offs}, 0, 0); !slices.Equal(got, c.offs) || MeanRate(c.offs) != 0 {
			t.Errorf("%v at %v/s: got %v", c.offs, c.rate, got)
		}
	}
	for _, bad := range [][]time.Duration{nil, {0, -ms}, {2 * ms, ms}} {
		if err := (ScheduleConfig{Arrival: Trace, Rate: 1, Offsets: bad}).Validate(); err == nil {
			t.Errorf("offsets %v accepted", bad)
		}
	}
}
