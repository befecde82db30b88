package gpusim

import (
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func TestFaultyScenario(t *testing.T) {
	t.Parallel()
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

// watchedClock wraps a clock: it records the real time of every read and
// signals reads on read (capacity 1: "read since the last receive"). The
// simulator reads its clock when a call observes the device, again after
// each injected delay, and on every round of an event set's Wait.
type watchedClock struct {
	now   func() time.Time
	mu    sync.Mutex
	reads []time.Time
	read  chan struct{}
}

func watch(now func() time.Time) *watchedClock {
	return &watchedClock{now: now, read: make(chan struct{}, 1)}
}

func (w *watchedClock) Now() time.Time {
	t := w.now()
	w.mu.Lock()
	w.reads = append(w.reads, time.Now())
	w.mu.Unlock()
	select {
	case w.read <- struct{}{}:
	default:
	}
	return t
}

// take returns the reads since the last take.
func (w *watchedClock) take() []time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.reads
	w.reads = nil
	return r
}

// quiet forgets a pending read signal: the next receive on read is a read
// made after quiet returned.
func (w *watchedClock) quiet() {
	select {
	case <-w.read:
	default:
	}
}

// newWatchedFleet is newTestFleet on a watched manual clock.
func newWatchedFleet(t testing.TB, sc *Scenario, seed int64) (nvml.Interface, *testClock, *watchedClock) {
	t.Helper()
	clk := newTestClock()
	w := watch(clk.Now)
	_, lib := newFleetOn(t, sc, seed, w.Now)
	return lib, clk, w
}

// TestHangAndLatency checks which delays each call goes through, without
// timing assumptions about the machine: a call observes the device (reads
// the sim clock) after the scenario's call latency, and again after each
// slow or hang delay that applies to it. Sleeps only overrun, so the gaps
// between these reads are lower bounds; which reads happen is exact.
func TestHangAndLatency(t *testing.T) {
	t.Parallel()
	sc := mustParse(t, `
call_latency: 20ms
devices:
  - {count: 2, model: h100-sxm5-80gb, util: 10}
faults:
  - {kind: hang, gpu: 0, call: GetTemperature, delay: 200ms, from: 10s, until: 20s}
  - {kind: slow, gpu: 1, call: "*", delay: 50ms}
`)
	lib, clk, w := newWatchedFleet(t, sc, 1)
	d0, d1 := handle(t, lib, 0), handle(t, lib, 1)
	temp := func(d nvml.Device) func() nvml.Return {
		return func() nvml.Return { _, r := d.GetTemperature(nvml.TEMPERATURE_GPU); return r }
	}
	power := func(d nvml.Device) func() nvml.Return {
		return func() nvml.Return { _, r := d.GetPowerUsage(); return r }
	}
	const latency = 20 * time.Millisecond
	tests := []struct {
		name   string
		at     time.Duration
		fn     func() nvml.Return
		delays []time.Duration // injected delays after the call latency
	}{
		{"latency only before the window", 5 * time.Second, temp(d0), nil},
		{"hang inside the window", 15 * time.Second, temp(d0), []time.Duration{200 * time.Millisecond}},
		{"other calls do not hang", 15 * time.Second, power(d0), nil},
		{"window closed", 20 * time.Second, temp(d0), nil},
		{"slow on every call", 15 * time.Second, power(d1), []time.Duration{50 * time.Millisecond}},
	}
	for _, tc := range tests {
		clk.Set(tc.at)
		w.take()
		start := time.Now()
		r := tc.fn()
		end := time.Now()
		reads := w.take()
		if r != nvml.SUCCESS {
			t.Errorf("%s: %v", tc.name, r)
		}
		if len(reads) != 1+len(tc.delays) {
			t.Errorf("%s: the call observed the device %d times; want %d (after the latency and after each of the delays %v)",
				tc.name, len(reads), 1+len(tc.delays), tc.delays)
			continue
		}
		if got := reads[0].Sub(start); got < latency {
			t.Errorf("%s: observed the device %v after the call began, before the call latency %v", tc.name, got, latency)
		}
		for i, d := range tc.delays {
			if got := reads[i+1].Sub(reads[i]); got < d {
				t.Errorf("%s: delay %d took %v, less than %v", tc.name, i, got, d)
			}
		}
		if end.Before(reads[len(reads)-1]) {
			t.Errorf("%s: returned before its last look at the device", tc.name)
		}
	}
}

func TestXIDEvents(t *testing.T) {
	t.Parallel()
	sc := mustParse(t, `
devices:
  - {count: 3, model: h100-sxm5-80gb, util: 50}
faults:
  - {kind: xid, gpu: 0, xid: 48, at: 10s, every: 20s}
  - {kind: xid, gpu: 2, xid: 13, at: 15s}
  - {kind: lost, gpu: 1, at: 25s}
  - {kind: xid, gpu: 1, xid: 31, at: 40s}
`)
	lib, clk, w := newWatchedFleet(t, sc, 1)
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

	// Wait blocks for its timeout in real time when nothing is due (at
	// least that long: timers only overrun).
	start := time.Now()
	if _, r := set.Wait(150); r != nvml.ERROR_TIMEOUT {
		t.Errorf("Wait(150) = %v", r)
	}
	if took := time.Since(start); took < 150*time.Millisecond {
		t.Errorf("Wait(150) took %v", took)
	}
	// A clock moved by another goroutine, once Wait has looked at it, wakes
	// the blocked Wait long before its minute is up (the bound only tells
	// the two apart).
	w.quiet()
	go func() {
		<-w.read
		clk.Set(70*time.Second + time.Millisecond)
	}()
	start = time.Now()
	e, r := set.Wait(60_000)
	if r != nvml.SUCCESS || e.EventData != 48 {
		t.Errorf("Wait across the clock move = %+v, %v", e, r)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("Wait returned after %v; want soon after the event's time, not at its timeout", took)
	}
}

func TestXIDWaitRealClock(t *testing.T) {
	t.Parallel()
	sc := mustParse(t, `
devices:
  - {model: h100-sxm5-80gb}
faults:
  - {kind: xid, gpu: 0, xid: 94, at: 300ms}
`)
	t0 := time.Now()
	w := watch(time.Now)
	f, err := New(sc, Options{Seed: 1, Start: t0, Now: w.Now})
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
	// The event is due 300 ms after the fleet's start: Wait cannot deliver
	// it sooner (causal), and delivers it long before its minute is up (the
	// bound only tells the two apart).
	e, r := set.Wait(60_000)
	took := time.Since(t0)
	close(stop)
	wg.Wait()
	if r != nvml.SUCCESS || e.EventData != 94 || e.Device != d {
		t.Fatalf("Wait = %+v, %v", e, r)
	}
	if took < 300*time.Millisecond || took > 30*time.Second {
		t.Errorf("XID at 300ms delivered %v after the start", took)
	}
	// Free wakes a Wait blocked on an empty set (once Wait has looked at the
	// clock, the readers being stopped).
	w.quiet()
	go func() { <-w.read; set.Free() }()
	start := time.Now()
	if _, r := set.Wait(60_000); r != nvml.ERROR_UNINITIALIZED || time.Since(start) > 30*time.Second {
		t.Errorf("Wait on a freed set = %v after %v", r, time.Since(start))
	}
}

func TestRandomXIDsSeeded(t *testing.T) {
	t.Parallel()
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
		if x != 13 && x != 31 && x != 43 {
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
