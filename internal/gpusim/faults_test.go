package gpusim

import (
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func TestFaultyScenario(t *testing.T) {
	_, lib, clk := newTestFleet(t, mustLoad(t, "faulty"), 3)
	clk.Set(10 * time.Second)

	// GPU 0 healthy, GPU 1 with two failing calls; everything else works.
	for i, want := range map[int][]nvml.Return{0: {nvml.SUCCESS, nvml.SUCCESS}, 1: {nvml.ERROR_UNKNOWN, nvml.ERROR_UNKNOWN}} {
		d := handle(t, lib, i)
		_, r1 := d.GetPowerUsage()
		_, r2 := d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.VOLATILE_ECC)
		if r1 != want[0] || r2 != want[1] {
			t.Errorf("gpu %d: GetPowerUsage %v, GetTotalEccErrors %v; want %v", i, r1, r2, want)
		}
		if _, r := d.GetUtilizationRates(); r != nvml.SUCCESS {
			t.Errorf("gpu %d: GetUtilizationRates %v", i, r)
		}
		if _, r := d.GetTemperature(nvml.TEMPERATURE_GPU); r != nvml.SUCCESS {
			t.Errorf("gpu %d: GetTemperature %v", i, r)
		}
	}

	// GPU 3 is fine at 44.9s and lost from 45s on, for every call.
	d3 := handle(t, lib, 3)
	clk.Set(44900 * time.Millisecond)
	if _, r := d3.GetPowerUsage(); r != nvml.SUCCESS {
		t.Fatalf("gpu 3 before 45s: %v", r)
	}
	for _, at := range []time.Duration{45 * time.Second, time.Hour} {
		clk.Set(at)
		v := takeSnapshot(d3)
		for j, r := range v.Rets {
			if r != nvml.ERROR_GPU_IS_LOST {
				t.Errorf("gpu 3 at %v: call %d returned %v; want ERROR_GPU_IS_LOST", at, j, r)
			}
		}
		if _, r := lib.DeviceGetHandleByIndex(3); r != nvml.ERROR_GPU_IS_LOST {
			t.Errorf("DeviceGetHandleByIndex(3) at %v = %v; want ERROR_GPU_IS_LOST", at, r)
		}
		if n, _ := lib.DeviceGetCount(); n != 4 {
			t.Errorf("DeviceGetCount = %d; lost GPUs still count", n)
		}
	}
}

func TestHangAndLatency(t *testing.T) {
	sc := mustParse(t, `
call_latency: 20ms
devices:
  - {count: 2, model: h100-sxm5-80gb, util: 10}
faults:
  - {kind: hang, gpu: 0, call: GetTemperature, delay: 200ms, from: 10s, until: 20s}
  - {kind: slow, gpu: 1, call: "*", delay: 50ms}
`)
	_, lib, clk := newTestFleet(t, sc, 1)
	d0, d1 := handle(t, lib, 0), handle(t, lib, 1)
	timeCall := func(fn func() nvml.Return) (time.Duration, nvml.Return) {
		start := time.Now()
		r := fn()
		return time.Since(start), r
	}
	temp := func(d nvml.Device) func() nvml.Return {
		return func() nvml.Return { _, r := d.GetTemperature(nvml.TEMPERATURE_GPU); return r }
	}
	power := func(d nvml.Device) func() nvml.Return {
		return func() nvml.Return { _, r := d.GetPowerUsage(); return r }
	}
	tests := []struct {
		name     string
		at       time.Duration
		fn       func() nvml.Return
		min, max time.Duration
	}{
		{"latency only before the window", 5 * time.Second, temp(d0), 20 * time.Millisecond, 150 * time.Millisecond},
		{"hang inside the window", 15 * time.Second, temp(d0), 220 * time.Millisecond, 1500 * time.Millisecond},
		{"other calls do not hang", 15 * time.Second, power(d0), 20 * time.Millisecond, 150 * time.Millisecond},
		{"window closed", 20 * time.Second, temp(d0), 20 * time.Millisecond, 150 * time.Millisecond},
		{"slow on every call", 15 * time.Second, power(d1), 70 * time.Millisecond, 500 * time.Millisecond},
	}
	for _, tc := range tests {
		clk.Set(tc.at)
		took, r := timeCall(tc.fn)
		if r != nvml.SUCCESS {
			t.Errorf("%s: %v", tc.name, r)
		}
		if took < tc.min || took > tc.max {
			t.Errorf("%s: call took %v; want between %v and %v", tc.name, took, tc.min, tc.max)
		}
	}
}

func TestXIDEvents(t *testing.T) {
	sc := mustParse(t, `
devices:
  - {count: 3, model: h100-sxm5-80gb, util: 50}
faults:
  - {kind: xid, gpu: 0, xid: 48, at: 10s, every: 20s}
  - {kind: xid, gpu: 2, xid: 13, at: 15s}
  - {kind: lost, gpu: 1, at: 25s}
  - {kind: xid, gpu: 1, xid: 31, at: 40s}
`)
	_, lib, clk := newTestFleet(t, sc, 1)
	set, r := lib.EventSetCreate()
	if r != nvml.SUCCESS {
		t.Fatal(r)
	}
	defer set.Free()
	devs := []nvml.Device{handle(t, lib, 0), handle(t, lib, 1), handle(t, lib, 2)}
	for _, d := range devs {
		types, _ := d.GetSupportedEventTypes()
		if r := d.RegisterEvents(types&nvml.EventTypeXidCriticalError, set); r != nvml.SUCCESS {
			t.Fatalf("RegisterEvents: %v", r)
		}
	}
	if _, r := set.Wait(0); r != nvml.ERROR_TIMEOUT {
		t.Fatalf("Wait before any event = %v; want ERROR_TIMEOUT", r)
	}
	// Jump past several events at once: they queue in time order.
	clk.Set(60 * time.Second)
	type ev struct {
		gpu int
		xid uint64
	}
	want := []ev{{0, 48}, {2, 13}, {1, 79}, {0, 48}, {0, 48}}
	for i, w := range want {
		e, r := set.Wait(0)
		if r != nvml.SUCCESS {
			t.Fatalf("event %d: Wait = %v", i, r)
		}
		idx, _ := e.Device.(*device)
		if idx == nil || idx.index != w.gpu || e.EventData != w.xid || e.EventType != nvml.EventTypeXidCriticalError || e.GpuInstanceId != 0xFFFFFFFF {
			t.Errorf("event %d = %+v; want gpu %d xid %d", i, e, w.gpu, w.xid)
		}
	}
	if _, r := set.Wait(0); r != nvml.ERROR_TIMEOUT {
		t.Errorf("after the queue drains Wait = %v; want ERROR_TIMEOUT (no XID 31 after the loss)", r)
	}

	// Wait blocks for its timeout in real time when nothing is due.
	start := time.Now()
	if _, r := set.Wait(150); r != nvml.ERROR_TIMEOUT {
		t.Errorf("Wait(150) = %v", r)
	}
	if took := time.Since(start); took < 150*time.Millisecond || took > 2*time.Second {
		t.Errorf("Wait(150) took %v", took)
	}
	// A clock moved by another goroutine wakes a blocked Wait early.
	go func() {
		time.Sleep(50 * time.Millisecond)
		clk.Set(70*time.Second + time.Millisecond)
	}()
	start = time.Now()
	e, r := set.Wait(5000)
	if r != nvml.SUCCESS || e.EventData != 48 {
		t.Errorf("Wait across the clock move = %+v, %v", e, r)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Wait returned after %v; want soon after the event's time", took)
	}
}

func TestXIDWaitRealClock(t *testing.T) {
	sc := mustParse(t, `
devices:
  - {model: h100-sxm5-80gb}
faults:
  - {kind: xid, gpu: 0, xid: 94, at: 300ms}
`)
	f, err := New(sc, Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	lib := f.Interface()
	lib.Init()
	defer lib.Shutdown()
	set, _ := lib.EventSetCreate()
	d := handle(t, lib, 0)
	if r := d.RegisterEvents(nvml.EventTypeXidCriticalError, set); r != nvml.SUCCESS {
		t.Fatal(r)
	}
	// Other goroutines read the device while Wait blocks (run with -race).
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					takeSnapshot(d)
				}
			}
		}()
	}
	start := time.Now()
	e, r := set.Wait(3000)
	took := time.Since(start)
	close(stop)
	wg.Wait()
	if r != nvml.SUCCESS || e.EventData != 94 || e.Device != d {
		t.Fatalf("Wait = %+v, %v", e, r)
	}
	if took < 200*time.Millisecond || took > 1500*time.Millisecond {
		t.Errorf("XID at 300ms delivered after %v", took)
	}
	// Free wakes a blocked Wait.
	go func() { time.Sleep(50 * time.Millisecond); set.Free() }()
	start = time.Now()
	if _, r := set.Wait(5000); r != nvml.ERROR_UNINITIALIZED || time.Since(start) > 2*time.Second {
		t.Errorf("Wait on a freed set = %v after %v", r, time.Since(start))
	}
}

func TestRandomXIDsSeeded(t *testing.T) {
	sc := mustLoad(t, "dgx-h100")
	count := func(seed int64) []uint64 {
		_, lib, clk := newTestFleet(t, sc, seed)
		set, _ := lib.EventSetCreate()
		defer set.Free()
		for i := 0; i < 8; i++ {
			handle(t, lib, i).RegisterEvents(nvml.EventTypeXidCriticalError, set)
		}
		clk.Set(10 * time.Hour)
		var got []uint64
		for {
			e, r := set.Wait(0)
			if r != nvml.SUCCESS {
				return got
			}
			got = append(got, e.EventData)
		}
	}
	a, b, c := count(1), count(1), count(2)
	// 8 GPUs at 0.4/h over 10h: 32 on average; per-hour counts are floor(0.4+u).
	if len(a) < 10 || len(a) > 60 {
		t.Errorf("%d random XIDs in 10h on 8 GPUs; want a few per hour", len(a))
	}
	if !equalU64(a, b) {
		t.Errorf("same seed, different XIDs: %v vs %v", a, b)
	}
	if equalU64(a, c) {
		t.Errorf("seeds 1 and 2 give identical XIDs %v", a)
	}
	for _, x := range a {
		if x != 13 && x != 31 && x != 43 && x != 63 && x != 94 {
			t.Errorf("XID %d not among the configured codes", x)
		}
	}
}

func equalU64(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
