package collector

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpulens/gpulens/internal/gpuprobe"
)

// overlapProber records how many of its Probe calls overlap. With
// barrier > 0 every call waits until barrier calls are in flight (or its
// context ends, then it fails), so that the test passes only when the
// devices really are probed at once.
type overlapProber struct {
	devs    []gpuprobe.DeviceInfo
	barrier int
	result  func(ordinal int) gpuprobe.Result

	mu       sync.Mutex
	cond     *sync.Cond
	inFlight int
	arrived  int
	most     int
	probed   []int
}

func newOverlapProber(n, barrier int) *overlapProber {
	f := &overlapProber{barrier: barrier}
	for i := range n {
		f.devs = append(f.devs, gpuprobe.DeviceInfo{Ordinal: i, UUID: "GPU-" + strings.Repeat(string(rune('a'+i)), 8), ComputeCapability: "9.0"})
	}
	f.cond = sync.NewCond(&f.mu)
	return f
}

func (f *overlapProber) Devices(context.Context) ([]gpuprobe.DeviceInfo, error) { return f.devs, nil }

func (f *overlapProber) Probe(ctx context.Context, ordinal int, _ gpuprobe.Config) (gpuprobe.Result, error) {
	f.mu.Lock()
	f.inFlight++
	f.arrived++
	f.most = max(f.most, f.inFlight)
	f.probed = append(f.probed, ordinal)
	f.cond.Broadcast()
	stop := context.AfterFunc(ctx, func() {
		f.mu.Lock()
		f.cond.Broadcast()
		f.mu.Unlock()
	})
	defer stop()
	for f.barrier > 0 && f.arrived < f.barrier && ctx.Err() == nil {
		f.cond.Wait()
	}
	f.inFlight--
	err := ctx.Err()
	f.mu.Unlock()
	if err != nil {
		return gpuprobe.Result{}, err
	}
	res := okResult
	if f.result != nil {
		res = f.result(ordinal)
	}
	return res, nil
}

func (f *overlapProber) stats() (most int, probed []int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.most, append([]int(nil), f.probed...)
}

func scheduleDirectory(f *overlapProber) *fakeDirectory {
	var gpus []GPUIdentity
	for _, d := range f.devs {
		gpus = append(gpus, GPUIdentity{GPU: string(rune('0' + d.Ordinal)), UUID: d.UUID})
	}
	return &fakeDirectory{gpus: gpus, complete: true}
}

func newScheduleProbe(t *testing.T, f *overlapProber, schedule string, timeout time.Duration) (*ProbeCollector, *fakeClock) {
	t.Helper()
	clock := newFakeClock()
	p, err := NewProbeCollector(staticOpener(f), scheduleDirectory(f), ProbeOptions{
		Interval: 5 * time.Minute, Config: gpuprobe.ExporterConfig(), Now: clock.Now, Schedule: schedule, Timeout: timeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	return p, clock
}

// --collector.probe.schedule=together probes all of a node's devices at
// once: eight calls in flight together, each succeeding; sequential (the
// default) one at a time.
func TestProbeScheduleTogether(t *testing.T) {
	t.Parallel()
	// Each call waits for all eight: one after another, the first would
	// wait for its deadline (10 s here) and fail.
	f := newOverlapProber(8, 8)
	p, _ := newScheduleProbe(t, f, ProbeTogether, 10*time.Second)
	p.RunOnce(context.Background())
	most, probed := f.stats()
	if most != 8 || len(probed) != 8 {
		t.Errorf("together: %d calls in flight at most, %d calls; want 8 and 8", most, len(probed))
	}
	got := gatherProbe(t, p)
	for i := range 8 {
		id := "gpu=" + string(rune('0'+i)) + ",uuid=" + f.devs[i].UUID
		if got["gpulens_probe_up{"+id+"}"] != 1 || got["gpulens_probe_runs_total{"+id+"}"] != 1 {
			t.Errorf("together: device %d up %v runs %v, want 1 and 1", i, got["gpulens_probe_up{"+id+"}"], got["gpulens_probe_runs_total{"+id+"}"])
		}
	}

	for _, schedule := range []string{"", ProbeSequential} {
		f := newOverlapProber(8, 0)
		p, _ := newScheduleProbe(t, f, schedule, 0)
		p.RunOnce(context.Background())
		most, probed := f.stats()
		if most != 1 || len(probed) != 8 {
			t.Errorf("schedule %q: %d calls in flight at most, %d calls; want 1 and 8", schedule, most, len(probed))
		}
		for i, o := range probed {
			if o != i {
				t.Errorf("schedule %q: devices probed in the order %v, want 0…7", schedule, probed)
				break
			}
		}
	}
}

// Together, a device whose call is stuck in the driver makes only that
// device's next probe answer busy; the others are probed.
func TestProbeTogetherStuckDeviceAlone(t *testing.T) {
	t.Parallel()
	f := newOverlapProber(3, 0)
	release := make(chan struct{})
	defer close(release)
	hang := &hangOne{overlapProber: f, ordinal: 1, release: release}
	// The deadline is on the wall clock and the answering devices' calls
	// race it on their goroutines: long enough that a loaded machine
	// starts them in time (at 1 ms, device 2 missed it under -race beside
	// a second make test), as the stuck device waits for it once.
	p, err := NewProbeCollector(staticOpener(hang), scheduleDirectory(f), ProbeOptions{
		Interval: 5 * time.Minute, Config: gpuprobe.ExporterConfig(), Now: newFakeClock().Now, Schedule: ProbeTogether, Timeout: 3 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	p.grace = time.Millisecond
	p.RunOnce(context.Background())
	p.RunOnce(context.Background())
	got := gatherProbe(t, p)
	for i, want := range []float64{1, 0, 1} {
		id := "gpu=" + string(rune('0'+i)) + ",uuid=" + f.devs[i].UUID
		if got["gpulens_probe_up{"+id+"}"] != want {
			t.Errorf("device %d: up %v, want %v", i, got["gpulens_probe_up{"+id+"}"], want)
		}
		if want == 0 {
			if got[errKey("busy", id, "probe")] != 1 || got[errKey("deadline_exceeded", id, "probe")] != 1 {
				t.Errorf("the stuck device's errors: %v", got)
			}
		}
	}
}

// hangOne is an overlapProber whose calls for one ordinal never return
// until release is closed, ignoring their context.
type hangOne struct {
	*overlapProber
	ordinal int
	release chan struct{}
}

func (h *hangOne) Probe(ctx context.Context, ordinal int, cfg gpuprobe.Config) (gpuprobe.Result, error) {
	if ordinal == h.ordinal {
		<-h.release
		return gpuprobe.Result{}, ctx.Err()
	}
	return h.overlapProber.Probe(ctx, ordinal, cfg)
}

// A successful probe's last-success timestamp is when it ended on the
// probe's own clock (Result.Started + Duration), so that the devices of a
// sequential run on the simulated driver's virtual clock follow one
// another; without a start, the collector's clock.
func TestProbeLastSuccessIsTheRunsEnd(t *testing.T) {
	t.Parallel()
	f := newOverlapProber(2, 0)
	start := time.Unix(1_800_000_000, 0)
	f.result = func(ordinal int) gpuprobe.Result {
		r := okResult
		if ordinal == 0 {
			r.Started, r.Duration = start, 250*time.Millisecond
		}
		return r
	}
	p, clock := newScheduleProbe(t, f, ProbeSequential, 0)
	p.RunOnce(context.Background())
	got := gatherProbe(t, p)
	for i, want := range []float64{float64(start.Add(250*time.Millisecond).UnixNano()) / 1e9, float64(clock.Now().Unix())} {
		id := "gpu=" + string(rune('0'+i)) + ",uuid=" + f.devs[i].UUID
		if v := got["gpulens_probe_last_success_timestamp_seconds{"+id+"}"]; v != want {
			t.Errorf("device %d: last success %v, want %v", i, v, want)
		}
	}
}

func TestProbeScheduleRejected(t *testing.T) {
	t.Parallel()
	_, err := NewProbeCollector(staticOpener(&fakeProber{}), &fakeDirectory{}, ProbeOptions{Interval: time.Minute, Config: gpuprobe.ExporterConfig(), Schedule: "parallel"})
	if err == nil || err.Error() != `probe schedule must be "sequential" or "together", got "parallel"` {
		t.Errorf("err %v", err)
	}
}
