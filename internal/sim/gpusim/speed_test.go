package gpusim

import (
	"math"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// TestSpeed: with Options.Speed, sim time runs Speed times faster than the
// fleet's clock, and so does everything measured in sim time: the tenants'
// timeline, the wall times of process samples, XID events and fault delays.
func TestSpeed(t *testing.T) {
	t.Parallel()
	for _, bad := range []float64{-1, MaxSpeed + 1, math.NaN(), math.Inf(1)} {
		if _, err := New(mustLoad(t, "minimal"), Options{Speed: bad}); err == nil {
			t.Errorf("speed %v accepted", bad)
		}
	}
	sc := mustParse(t, `
devices:
  - {model: h100-sxm5-80gb, nvml: {process_sample_period: 1s}}
tenants:
  - {name: late, gpu: 0, pid: 100, start: 10m, sm_util: 50, memory: 1024}
`)
	clk := newTestClock()
	f, err := New(sc, Options{Seed: 1, Start: epoch, Now: clk.Now, Speed: 60})
	if err != nil {
		t.Fatal(err)
	}
	lib := f.Interface()
	lib.Init()
	defer lib.Shutdown()
	d := handle(t, lib, 0)
	clk.Set(9 * time.Second) // sim 9 min
	if got := f.Elapsed(); got != 9*time.Minute {
		t.Errorf("Elapsed at 9 s of the clock = %v; want 9m", got)
	}
	if ps, _ := d.GetComputeRunningProcesses(); len(ps) != 0 {
		t.Errorf("at sim 9 min: %d processes; the tenant starts at 10 min", len(ps))
	}
	clk.Set(11 * time.Second) // sim 11 min
	ps, _ := d.GetComputeRunningProcesses()
	if len(ps) != 1 || ps[0].Pid != 100 {
		t.Fatalf("at sim 11 min: processes %+v; want pid 100", ps)
	}
	// Samples every 1 s of sim time (the scenario's sample period),
	// stamped with the clock's time at the end of their period: the
	// newest, ending at sim 660 s, is at 11 s of the clock.
	samples, r := d.GetProcessUtilization(0)
	if r != nvml.SUCCESS || len(samples) == 0 {
		t.Fatalf("GetProcessUtilization = %d samples, %v", len(samples), r)
	}
	last := samples[len(samples)-1]
	if want := uint64(epoch.Add(11 * time.Second).UnixMicro()); last.TimeStamp != want || last.SmUtil != 50 {
		t.Errorf("newest sample %+v; want time stamp %d (the clock at sim 660 s), 50 %% SM", last, want)
	}
	if step := samples[len(samples)-1].TimeStamp - samples[len(samples)-2].TimeStamp; step != 1_000_000/60 && step != 1_000_000/60+1 {
		t.Errorf("samples %d µs apart on the clock; want 1 s of sim time / 60", step)
	}
}

// TestSpeedSampleBuffer: the driver's process-sample buffer holds the last
// 10 s of the clock at any speed (10 s of sim time at speed 1, 600 s at
// 60): a reader that samples every few seconds of the clock, as the
// exporter does, loses nothing when compressed. With the buffer in sim
// time it held 1/6 s of the clock at 60x, and a sampler delayed by a
// loaded machine found the probe's windows without samples.
func TestSpeedSampleBuffer(t *testing.T) {
	t.Parallel()
	sc := mustParse(t, `
devices:
  - {model: h100-sxm5-80gb, nvml: {process_sample_period: 1s}}
tenants:
  - {name: busy, gpu: 0, pid: 100, sm_util: 50, memory: 1024}
`)
	for _, tc := range []struct {
		speed float64
		want  int // samples in the buffer once it is full
	}{{1, 10}, {60, 600}} {
		clk := newTestClock()
		f, err := New(sc, Options{Seed: 1, Start: epoch, Now: clk.Now, Speed: tc.speed})
		if err != nil {
			t.Fatal(err)
		}
		lib := f.Interface()
		lib.Init()
		clk.Set(30 * time.Second)
		samples, r := handle(t, lib, 0).GetProcessUtilization(0)
		lib.Shutdown()
		if r != nvml.SUCCESS || len(samples) != tc.want {
			t.Errorf("speed %v: %d samples (%v) after 30 s of the clock, want %d (the last 10 s of the clock)", tc.speed, len(samples), r, tc.want)
			continue
		}
		if oldest := time.UnixMicro(int64(samples[0].TimeStamp)).Sub(epoch); oldest < 20*time.Second {
			t.Errorf("speed %v: oldest sample at %s of the clock, want within its last 10 s", tc.speed, oldest)
		}
	}
}

// TestSpeedRealTime: fault delays and the wait for an XID last their sim
// duration divided by the speed, in real time.
func TestSpeedRealTime(t *testing.T) {
	// Serial: it times a 300 ms hang on the wall clock.
	sc := mustParse(t, `
devices:
  - {model: h100-sxm5-80gb}
faults:
  - {kind: hang, gpu: 0, call: GetPowerUsage, delay: 30s}
  - {kind: xid, gpu: 0, xid: 13, at: 20s}
`)
	f, err := New(sc, Options{Seed: 1, Speed: 100})
	if err != nil {
		t.Fatal(err)
	}
	lib := f.Interface()
	lib.Init()
	defer lib.Shutdown()
	d := handle(t, lib, 0)
	set, _ := lib.EventSetCreate()
	defer set.Free()
	if r := d.RegisterEvents(nvml.EventTypeXidCriticalError, set); r != nvml.SUCCESS {
		t.Fatal(r)
	}
	began := time.Now()
	if _, r := d.GetPowerUsage(); r != nvml.SUCCESS {
		t.Fatal(r)
	}
	// 30 s of sim time at 100x: 300 ms. Sleeps only overrun, so the lower
	// bound is causal; the upper one only tells the speed apart from its
	// absence (30 s), however loaded the machine.
	if took := time.Since(began); took < 290*time.Millisecond || took > 15*time.Second {
		t.Errorf("a 30 s hang at speed 100 took %v; want about 300 ms (at most half of the unscaled 30 s)", took)
	}
	// The XID at sim 20 s (200 ms on the clock) is already due.
	ev, r := set.Wait(5000)
	if r != nvml.SUCCESS || ev.EventData != 13 {
		t.Errorf("Wait = %+v, %v; want XID 13", ev, r)
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("XID at sim 20 s arrived after %v of real time at speed 100; want about 200 ms (at most half of the unscaled 20 s)", took)
	}
}
