package collector

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/gpulens/gpulens/internal/gpuprobe"
)

// seq returns the values in turn (the jitter's u draws).
func seq(vs ...float64) func() float64 {
	i := 0
	return func() float64 { v := vs[i%len(vs)]; i++; return v }
}

// TestProbeScheduleJitter: with a jitter, Run waits Interval × (1 + Jitter ×
// (2u − 1)) between runs, u drawn from the injected source: 4 min, 5 min
// 30 s, 6 min (just under) for u = 0, 0.75, 1⁻ at 5 min ± 20 %.
func TestProbeScheduleJitter(t *testing.T) {
	t.Parallel()
	fp := &fakeProber{devs: wholeGPUs(), results: map[int]gpuprobe.Result{0: okResult, 1: okResult}}
	ticker := newFakeTicker()
	clock := newFakeClock()
	p, err := NewProbeCollector(staticOpener(fp), &fakeDirectory{gpus: testGPUs, complete: true},
		ProbeOptions{Interval: 5 * time.Minute, Jitter: 0.2, Rand: seq(0, 0.75, 0.5), Config: gpuprobe.ExporterConfig(), Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	p.tick = ticker.ticker
	runs := make(chan struct{})
	p.afterRun = func() { runs <- struct{}{} }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	<-runs
	for i, wait := range []time.Duration{4 * time.Minute, 5*time.Minute + 30*time.Second, 5 * time.Minute, 4 * time.Minute} {
		ticker.get(wait) <- time.Time{}
		<-runs
		if probed, _ := fp.calls(); len(probed) != 2*(i+2) {
			t.Fatalf("after the wait of %s: %d probes, want %d", wait, len(probed), 2*(i+2))
		}
	}
	cancel()
	<-done
}

// TestProbeJitterSpreadsPhases: a tenant whose load repeats every 5
// minutes, exactly the probe's interval, meets every run at the same phase
// of its cycle without jitter; with the default 20 % jitter (seeded) the
// phases of 200 runs cover the cycle, none of its tenths left out.
func TestProbeJitterSpreadsPhases(t *testing.T) {
	t.Parallel()
	const period = 5 * time.Minute
	for _, tc := range []struct {
		jitter        float64
		wantTenthsMin int
	}{{0, 1}, {0.2, 10}} {
		clock := newFakeClock()
		p, err := NewProbeCollector(staticOpener(&fakeProber{}), &fakeDirectory{}, ProbeOptions{Interval: period, Jitter: tc.jitter,
			Rand: rand.New(rand.NewPCG(1, 2)).Float64, Config: gpuprobe.ExporterConfig(), Now: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		start := clock.Now()
		tenths := map[int]int{}
		var waits []time.Duration
		for range 200 {
			run := clock.Now()
			phase := run.Sub(start) % period
			tenths[int(10*phase/period)]++
			clock.Advance(2 * time.Second) // the run itself
			w := p.nextWait(run)
			waits = append(waits, w)
			clock.Advance(w)
		}
		if len(tenths) != tc.wantTenthsMin && !(tc.jitter > 0 && len(tenths) >= tc.wantTenthsMin) {
			t.Errorf("jitter %g: runs met %d tenths of the tenant's cycle (%v), want %d", tc.jitter, len(tenths), tenths, tc.wantTenthsMin)
		}
		lo, hi := slices.Min(waits), slices.Max(waits)
		wantLo, wantHi := time.Duration(float64(period)*(1-tc.jitter))-2*time.Second, time.Duration(float64(period)*(1+tc.jitter))-2*time.Second
		if lo < wantLo || hi > wantHi || (tc.jitter > 0 && hi-lo < time.Duration(float64(period)*tc.jitter)) {
			t.Errorf("jitter %g: waits from %s to %s, want within [%s, %s] and spread", tc.jitter, lo, hi, wantLo, wantHi)
		}
	}
	// A run that overran its jittered interval waits a whole one.
	clock := newFakeClock()
	p, err := NewProbeCollector(staticOpener(&fakeProber{}), &fakeDirectory{}, ProbeOptions{Interval: period, Jitter: 0.2, Rand: seq(0.5), Config: gpuprobe.ExporterConfig(), Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	run := clock.Now()
	clock.Advance(6 * time.Minute)
	if w := p.nextWait(run); w != period {
		t.Errorf("after an overrun: wait %s, want %s", w, period)
	}
	for _, bad := range []float64{-0.1, 0.6} {
		if _, err := NewProbeCollector(staticOpener(&fakeProber{}), &fakeDirectory{}, ProbeOptions{Interval: period, Jitter: bad, Config: gpuprobe.ExporterConfig()}); err == nil {
			t.Errorf("jitter %g accepted", bad)
		}
	}
}
