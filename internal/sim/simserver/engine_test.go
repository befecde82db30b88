package simserver

import (
	"math/rand/v2"
	"reflect"
	"sync/atomic"
	"testing"
	"time"
)

func testRequest(seq uint64, prompt, target, stallAt int, arrival time.Time) *request {
	r := &request{
		seq: seq, arrival: arrival, promptTokens: prompt, target: target, kv: prompt + target,
		stallAt: stallAt, disconnectAt: -1, rng: rand.New(rand.NewPCG(1, seq)), notify: make(chan struct{}, 1),
	}
	r.times = make([]int64, 0, target)
	return r
}

// drive advances e from t0 through every event until nothing is pending
// and returns each request's token offsets from t0.
func drive(t *testing.T, e *engine, t0 time.Time, reqs []*request) [][]time.Duration {
	t.Helper()
	now := t0
	for i := 0; i < 10000; i++ {
		e.advance(now)
		next, ok := e.next()
		if !ok {
			break
		}
		if next.Before(now) {
			t.Fatalf("next %v is before now %v", next.Sub(t0), now.Sub(t0))
		}
		now = next
	}
	out := make([][]time.Duration, len(reqs))
	for i, r := range reqs {
		times, finished := r.snapshot()
		if !finished {
			t.Errorf("request %d not finished: %d/%d tokens", i, len(times), r.target)
		}
		for _, ts := range times {
			out[i] = append(out[i], time.Unix(0, ts).Sub(t0))
		}
	}
	return out
}

func ms(v ...float64) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, x := range v {
		out[i] = time.Duration(x * float64(time.Millisecond))
	}
	return out
}

func TestEngineSchedules(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		name string
		cfg  Config
		reqs [][3]int // prompt, target, stallAt
		want [][]time.Duration
		kv   int // KV tokens in use after everything finished
	}{
		{
			// Steps: {A,B} prefill 30 tokens: 3 + 10 + 2×1 = 15 ms; {A,B}
			// decode: 12 ms → 27; A and B finish, C is admitted: 0 + 10 +
			// 1 = 11 ms → 38.
			name: "batching with a full batch queues FIFO",
			cfg:  Config{PrefillPerToken: 100 * time.Microsecond, DecodeBase: 10 * time.Millisecond, DecodePerSeq: time.Millisecond, MaxBatch: 2},
			reqs: [][3]int{{10, 2, -1}, {20, 2, -1}, {0, 1, -1}},
			want: [][]time.Duration{ms(15, 27), ms(15, 27), ms(38)},
		},
		{
			// KV 25 tokens: A (12) and B (12) fit, C (12) waits for A.
			// Steps: {A,B}: 10+2 = 12; {A,B}: 24 (A done); {B,C}: 36 (B
			// done; C's first token); {C}: 47.
			name: "KV capacity limits admission",
			cfg:  Config{DecodeBase: 10 * time.Millisecond, DecodePerSeq: time.Millisecond, KVCapacityTokens: 25},
			reqs: [][3]int{{10, 2, -1}, {9, 3, -1}, {10, 2, -1}},
			want: [][]time.Duration{ms(12, 24), ms(12, 24, 36), ms(36, 47)},
		},
		{
			// A stalls 30 ms before its second token: B runs alone meanwhile.
			name: "batching stall",
			cfg:  Config{DecodeBase: 10 * time.Millisecond, StallDuration: 30 * time.Millisecond},
			reqs: [][3]int{{1, 3, 1}, {1, 3, -1}},
			want: [][]time.Duration{ms(10, 50, 60), ms(10, 20, 30)},
		},
		{
			name: "fixed delays with a stall before token 2",
			cfg:  Config{FixedTTFT: 50 * time.Millisecond, FixedITL: 5 * time.Millisecond, StallDuration: 100 * time.Millisecond},
			reqs: [][3]int{{100, 4, 2}, {0, 2, -1}},
			want: [][]time.Duration{ms(50, 55, 160, 165), ms(50, 55)},
		},
		{
			name: "fixed delays with max batch 1 queue",
			cfg:  Config{FixedTTFT: 20 * time.Millisecond, FixedITL: 5 * time.Millisecond, MaxBatch: 1},
			reqs: [][3]int{{1, 3, -1}, {1, 2, -1}},
			want: [][]time.Duration{ms(20, 25, 30), ms(50, 55)},
		},
		{
			name: "fixed stall before the first token",
			cfg:  Config{FixedTTFT: 20 * time.Millisecond, FixedITL: 5 * time.Millisecond, StallDuration: 7 * time.Millisecond},
			reqs: [][3]int{{1, 2, 0}},
			want: [][]time.Duration{ms(27, 32)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			var queued atomic.Int64
			e := newEngine(&cfg, newMetrics(cfg.Model), &queued)
			var reqs []*request
			for i, q := range tc.reqs {
				r := testRequest(uint64(i), q[0], q[1], q[2], t0)
				reqs = append(reqs, r)
				queued.Add(1)
				e.enqueue(r)
			}
			got := drive(t, e, t0, reqs)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("token times\n got %v\nwant %v", got, tc.want)
			}
			if e.kvUsed != 0 || len(e.running) != 0 || queued.Load() != 0 {
				t.Errorf("after the run: kvUsed %d, running %d, queued %d; want all 0", e.kvUsed, len(e.running), queued.Load())
			}
		})
	}
}

func TestEngineDropsGoneRequests(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	cfg := Config{DecodeBase: 10 * time.Millisecond, MaxBatch: 1}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	var queued atomic.Int64
	e := newEngine(&cfg, newMetrics(cfg.Model), &queued)
	a, b := testRequest(0, 5, 100, -1, t0), testRequest(1, 5, 1, -1, t0)
	queued.Add(2)
	e.enqueue(a)
	e.enqueue(b)
	e.advance(t0)
	e.advance(t0.Add(10 * time.Millisecond)) // a: 1 token
	a.gone.Store(true)                       // its client went away
	e.advance(t0.Add(20 * time.Millisecond)) // a dropped, b admitted
	e.advance(t0.Add(30 * time.Millisecond)) // b done
	if ta, _ := a.snapshot(); len(ta) != 1 {
		t.Errorf("gone request got %d tokens, want 1", len(ta))
	}
	if tb, fin := b.snapshot(); !fin || len(tb) != 1 || tb[0] != t0.Add(30*time.Millisecond).UnixNano() {
		t.Errorf("b: finished %v, times %v; want one token at +30ms", fin, tb)
	}
	if e.kvUsed != 0 {
		t.Errorf("kvUsed %d, want 0", e.kvUsed)
	}
}

func TestGeometric(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	const n, mean = 200000, 50
	sum := 0
	for range n {
		v := geometric(rng.Float64(), mean)
		if v < 1 {
			t.Fatalf("length %d < 1", v)
		}
		sum += v
	}
	if got := float64(sum) / n; got < 49 || got > 51 {
		t.Errorf("mean length %.2f, want 50 ± 1", got)
	}
	if got := geometric(0.5, 1); got != 1 {
		t.Errorf("geometric(0.5, 1) = %d, want 1", got)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"defaults", func(*Config) {}, ""},
		{"negative ttft", func(c *Config) { c.FixedTTFT = -1 }, "FixedTTFT must not be negative, got -1ns"},
		{"jitter", func(c *Config) { c.Jitter = 1 }, "Jitter must be in [0, 1), got 1"},
		{"error rate", func(c *Config) { c.ErrorRate = 1.5 }, "ErrorRate must be a probability in [0, 1], got 1.5"},
		{"chunk", func(c *Config) { c.TokensPerChunk = -2 }, "TokensPerChunk must be at least 1, got -2"},
		{"no timing", func(c *Config) { c.DecodeBase, c.DecodePerSeq = 0, 0 }, "DecodeBase and DecodePerSeq are both zero: set one, or use fixed mode (FixedTTFT/FixedITL)"},
		{"max batch", func(c *Config) { c.MaxBatch = -1 }, "MaxBatch must not be negative, got -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.mod(&c)
			err := c.Validate()
			if got := ""; err != nil {
				got = err.Error()
				if got != tc.want {
					t.Errorf("Validate() = %q, want %q", got, tc.want)
				}
			} else if tc.want != "" {
				t.Errorf("Validate() = nil, want %q", tc.want)
			}
		})
	}
}

// TestEngineJitterDeterministic drives the same arrivals through engines
// with jitter: the same seed gives the same schedule to the nanosecond, a
// different seed another one, and every delay stays within ±jitter.
func TestEngineJitterDeterministic(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	schedule := func(cfg Config) [][]time.Duration {
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		var queued atomic.Int64
		e := newEngine(&cfg, newMetrics(cfg.Model), &queued)
		var reqs []*request
		for i := range 5 {
			r := testRequest(uint64(i), 10, 20, -1, t0)
			r.rng = rand.New(rand.NewPCG(cfg.Seed, uint64(i)))
			reqs = append(reqs, r)
			queued.Add(1)
			e.enqueue(r)
		}
		return drive(t, e, t0, reqs)
	}
	for _, base := range []Config{
		{Seed: 1, FixedTTFT: 50 * time.Millisecond, FixedITL: 5 * time.Millisecond, Jitter: 0.1},
		{Seed: 1, DecodeBase: 10 * time.Millisecond, DecodePerSeq: time.Millisecond, MaxBatch: 2, Jitter: 0.1},
	} {
		a, b := schedule(base), schedule(base)
		other := base
		other.Seed = 2
		c := schedule(other)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("fixed=%v: same seed, different schedules", base.Fixed())
		}
		if reflect.DeepEqual(a, c) {
			t.Errorf("fixed=%v: seeds 1 and 2 gave the same schedule", base.Fixed())
		}
		if base.Fixed() {
			for _, times := range a {
				if ttft := times[0]; ttft < 45*time.Millisecond || ttft > 55*time.Millisecond {
					t.Errorf("TTFT %v outside 50ms ± 10%%", ttft)
				}
				for i := 1; i < len(times); i++ {
					if g := times[i] - times[i-1]; g < 4500*time.Microsecond || g > 5500*time.Microsecond {
						t.Errorf("gap %v outside 5ms ± 10%%", g)
					}
				}
			}
		}
	}
}
