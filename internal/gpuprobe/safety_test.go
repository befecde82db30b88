package gpuprobe_test

import (
	"context"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpulens/gpulens/internal/gpuprobe"
	"github.com/gpulens/gpulens/internal/sim/simdriver"
)

// TestProbeLeavesTenantGPUAlone: a device in a compute mode other than
// DEFAULT, or with too little free memory, gets no context (the simulated
// driver would refuse a second context in EXCLUSIVE_PROCESS mode, and a
// tenant starting meanwhile would be refused), and the result says why.
func TestProbeLeavesTenantGPUAlone(t *testing.T) {
	// A 2 GiB budget, of which an H100 takes 1168 MiB (768 MiB counted
	// for the context, two copy buffers of 4 × its 50 MiB L2), + 768 MiB
	// for the context: 1936 MiB free needed.
	cfg := gpuprobe.ExporterConfig()
	for _, tc := range []struct {
		name   string
		dev    func(*simdriver.Device)
		free   func(gpuprobe.DeviceInfo) (uint64, bool) // nil: no FreeMemory hook
		reason string                                   // "" measured
		detail string
	}{
		{"exclusive process", func(d *simdriver.Device) { d.ComputeMode = gpuprobe.ComputeModeExclusiveProcess }, nil,
			gpuprobe.SkipComputeModeExclusiveProcess, "EXCLUSIVE_PROCESS"},
		{"exclusive process, nobody else yet", func(d *simdriver.Device) {
			d.ComputeMode = gpuprobe.ComputeModeExclusiveProcess
			d.OtherContexts = func(time.Time) int { return 0 }
		}, nil, gpuprobe.SkipComputeModeExclusiveProcess, "only DEFAULT"},
		{"prohibited", func(d *simdriver.Device) { d.ComputeMode = gpuprobe.ComputeModeProhibited }, nil,
			gpuprobe.SkipComputeModeProhibited, "PROHIBITED"},
		{"NVML free below need + reserve", nil, func(gpuprobe.DeviceInfo) (uint64, bool) { return 1936<<20 - 1, true },
			gpuprobe.SkipFreeMemoryLow, "the probe needs 1.89 GiB (the 1.14 GiB it takes on this GPU, at most its budget 2 GiB, + 768 MiB for the context)"},
		{"NVML free just enough", nil, func(gpuprobe.DeviceInfo) (uint64, bool) { return 1936 << 20, true }, "", ""},
		{"NVML free plenty", nil, func(gpuprobe.DeviceInfo) (uint64, bool) { return 80 * gib, true }, "", ""},
		// Unknown before: the context is created, found short and destroyed.
		{"free unknown, nearly full", func(d *simdriver.Device) {
			d.UsedByOthers = func(time.Time) uint64 { return 80*gib - 1200<<20 }
		}, func(gpuprobe.DeviceInfo) (uint64, bool) { return 0, false },
			gpuprobe.SkipFreeMemoryLow, "680 MiB free with the probe's context"},
		{"no hook, nearly full", func(d *simdriver.Device) {
			d.UsedByOthers = func(time.Time) uint64 { return 80*gib - 1200<<20 }
		}, nil, gpuprobe.SkipFreeMemoryLow, "the measurements need 400 MiB + 768 MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev := h100()
			if tc.dev != nil {
				tc.dev(&dev)
			}
			drv := simdriver.New([]simdriver.Device{dev}, simdriver.Options{Now: func() time.Time { return base }, Seed: 7})
			var created atomic.Int32
			p := gpuprobe.New(countingCtx{drv, &created}, gpuprobe.Options{FreeMemory: tc.free})
			res := probe(t, p, cfg)
			if tc.reason == "" {
				if res.Skipped != nil || len(res.Errors) > 0 || res.Stolen == nil {
					t.Fatalf("Skipped %+v, errors %+v: want measured", res.Skipped, res.Errors)
				}
				return
			}
			if res.Skipped == nil || res.Skipped.Reason != tc.reason || !strings.Contains(res.Skipped.Detail, tc.detail) {
				t.Fatalf("Skipped = %+v, want reason %s with %q", res.Skipped, tc.reason, tc.detail)
			}
			if res.Memory != nil || res.Stolen != nil || res.GPUTime != 0 || len(res.Errors) > 0 {
				t.Errorf("a skipped probe measured something: %+v", res)
			}
			// A context exists only where free memory was unknown, and
			// none is left behind.
			wantCreated := int32(0)
			if strings.Contains(tc.name, "unknown") || strings.Contains(tc.name, "no hook") {
				wantCreated = 1
			}
			if got := created.Load(); got != wantCreated {
				t.Errorf("contexts created: %d, want %d", got, wantCreated)
			}
			if _, err := drv.MemAlloc(1); err == nil {
				t.Errorf("a context was left behind")
			}
		})
	}
}

// countingCtx counts cuCtxCreate calls.
type countingCtx struct {
	*simdriver.Driver
	n *atomic.Int32
}

func (c countingCtx) CtxCreate(ordinal int) (gpuprobe.Context, error) {
	c.n.Add(1)
	return c.Driver.CtxCreate(ordinal)
}

// TestSimdriverExclusiveProcess: the simulated driver refuses a context in
// EXCLUSIVE_PROCESS mode while another process holds one (so a probe that
// ignored the compute mode would fail a tenant's job the same way).
func TestSimdriverExclusiveProcess(t *testing.T) {
	dev := h100()
	dev.ComputeMode = gpuprobe.ComputeModeExclusiveProcess
	others := 1
	dev.OtherContexts = func(time.Time) int { return others }
	drv := simdriver.New([]simdriver.Device{dev}, simdriver.Options{Now: func() time.Time { return base }})
	if err := drv.Init(); err != nil {
		t.Fatal(err)
	}
	if _, err := drv.CtxCreate(0); err == nil || !strings.Contains(err.Error(), "CUDA_ERROR_DEVICE_UNAVAILABLE") {
		t.Errorf("cuCtxCreate with another process's context: %v, want CUDA_ERROR_DEVICE_UNAVAILABLE", err)
	}
	others = 0
	c, err := drv.CtxCreate(0)
	if err != nil {
		t.Fatalf("cuCtxCreate alone: %v", err)
	}
	free, _, err := drv.MemGetInfo()
	if err != nil || free != 80*gib-h100ContextBytes {
		t.Errorf("free with our context: %d, %v; want %d", free, err, 80*gib-h100ContextBytes)
	}
	if err := drv.CtxDestroy(c); err != nil {
		t.Fatal(err)
	}
	dev.ComputeMode = gpuprobe.ComputeModeProhibited
	drv = simdriver.New([]simdriver.Device{dev}, simdriver.Options{Now: func() time.Time { return base }})
	_ = drv.Init()
	if _, err := drv.CtxCreate(0); err == nil || !strings.Contains(err.Error(), "PROHIBITED") {
		t.Errorf("cuCtxCreate in PROHIBITED mode: %v", err)
	}
}

// TestSimdriverOneMIGDevicePerProcess: CUDA enumerates one MIG instance per
// process; the simulated driver too, whatever CUDA_VISIBLE_DEVICES says.
func TestSimdriverOneMIGDevicePerProcess(t *testing.T) {
	gpu, m1, m2, m3 := h100(), h100(), h100(), h100()
	gpu.UUID = "GPU-aaaa"
	m1.UUID, m2.UUID, m3.UUID = "MIG-1111", "MIG-2222", "MIG-3333"
	for _, tc := range []struct {
		visible string
		want    []string
	}{
		{"", []string{"GPU-aaaa", "MIG-1111"}},
		{"MIG-2222", []string{"MIG-2222"}},
		{"MIG-3333,MIG-1111", []string{"MIG-3333"}},
		{"3,0", []string{"MIG-3333", "GPU-aaaa"}},
	} {
		drv := simdriver.New([]simdriver.Device{gpu, m1, m2, m3}, simdriver.Options{Now: func() time.Time { return base }, VisibleDevices: tc.visible})
		infos, err := gpuprobe.New(drv, gpuprobe.Options{}).Devices(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range infos {
			got = append(got, d.UUID)
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("CUDA_VISIBLE_DEVICES=%q: devices %v, want %v", tc.visible, got, tc.want)
		}
	}
}

// undestroyable is a driver whose cuCtxDestroy fails.
type undestroyable struct{ *simdriver.Driver }

func (undestroyable) CtxDestroy(gpuprobe.Context) error {
	return &gpuprobe.CUDAError{Call: "cuCtxDestroy_v2", Code: 999, Name: "CUDA_ERROR_UNKNOWN"}
}

// TestProbeRetiresThreadWithContext: the OS thread of a probe whose context
// could not be destroyed is not unlocked (its goroutine exits locked, so
// Go ends the thread); a clean probe's thread is.
func TestProbeRetiresThreadWithContext(t *testing.T) {
	for _, tc := range []struct {
		name       string
		wrap       func(*simdriver.Driver) gpuprobe.Driver
		wantUnlock int32
	}{
		{"destroyed", func(d *simdriver.Driver) gpuprobe.Driver { return d }, 1},
		{"destroy fails", func(d *simdriver.Driver) gpuprobe.Driver { return undestroyable{d} }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, drv := newProbe(h100())
			p := gpuprobe.New(tc.wrap(drv), gpuprobe.Options{})
			var locks, unlocks atomic.Int32
			gpuprobe.SetThreadHooks(p, func() { locks.Add(1); runtime.LockOSThread() },
				func() { unlocks.Add(1); runtime.UnlockOSThread() })
			cfg := gpuprobe.ExporterConfig()
			cfg.Skip = gpuprobe.Measurements[1:] // memory only: quick
			res := probe(t, p, cfg)
			if res.Memory == nil {
				t.Fatalf("nothing measured: %+v", res)
			}
			if err := p.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
			if locks.Load() != 1 || unlocks.Load() != tc.wantUnlock {
				t.Errorf("locks %d unlocks %d, want 1 and %d", locks.Load(), unlocks.Load(), tc.wantUnlock)
			}
		})
	}
}

// TestDeviceCopyNeedsBuffersBeyondL2: a copy whose buffers would fit in 4 ×
// L2 is not reported (it would be the L2's bandwidth), and that is not an
// error: nothing failed, the budget is too small for this GPU.
func TestDeviceCopyNeedsBuffersBeyondL2(t *testing.T) {
	for _, tc := range []struct {
		name     string
		l2       int
		memory   uint64
		reported bool
	}{
		{"H100 L2, 1 GiB budget", 50 << 20, 1 << 30, true},       // 2 × 200 MiB buffers: what it needs
		{"126 MiB L2, 1 GiB budget", 126 << 20, 1 << 30, false},  // would need 504 MiB each, 252 left
		{"126 MiB L2, 2 GiB budget", 126 << 20, 2 << 30, true},   // 504 MiB each
		{"H100 L2, 768 MiB budget", 50 << 20, 768 << 20, false},  // 124 MiB each
		{"no L2 reported, small budget", 0, 600 << 20, true},     // 40 MiB each, nothing to hold it to
		{"no L2 reported, exporter budget", 0, 2 << 30, true},    // 512 MiB each
		{"6 MiB L2 (A10), 1 GiB budget", 6 << 20, 1 << 30, true}, // 64 MiB each, the smallest buffer
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev := h100()
			dev.L2CacheBytes = tc.l2
			drv := simdriver.New([]simdriver.Device{dev}, simdriver.Options{Now: func() time.Time { return base }, Seed: 7})
			// NVML's free memory known: the 520 MiB context is measured.
			p := gpuprobe.New(drv, gpuprobe.Options{FreeMemory: func(gpuprobe.DeviceInfo) (uint64, bool) { return 80 * gib, true }})
			cfg := gpuprobe.ExporterConfig()
			cfg.MaxMemoryBytes = tc.memory
			res := probe(t, p, cfg)
			if len(res.Errors) > 0 {
				t.Errorf("errors %+v, want none", res.Errors)
			}
			if tc.reported {
				if len(res.NotReported) > 0 || res.DeviceCopyBytesPerSecond == 0 {
					t.Errorf("device copy not reported: %+v", res.NotReported)
				}
				return
			}
			if len(res.NotReported) != 1 || res.DeviceCopyBytesPerSecond != 0 || res.NotReported[0].Measurement != gpuprobe.MeasureDeviceCopy ||
				res.NotReported[0].Reason != gpuprobe.NotReportedBufferBudgetBelowL2 || !strings.Contains(res.NotReported[0].Detail, "L2 cache") {
				t.Errorf("device copy %.3g B/s, not reported %+v: want not reported, naming the L2", res.DeviceCopyBytesPerSecond, res.NotReported)
			}
		})
	}
}

// TestProbeBudgetEnforced: a neighbour holding the GPU for long slices
// makes every round trip wait; the probe still keeps to its GPU-time budget
// (bar the last kernel's tail), shortening the stolen-time window.
func TestProbeBudgetEnforced(t *testing.T) {
	for _, tc := range []struct {
		name    string
		share   float64
		slice   time.Duration
		latency time.Duration // each launch waits this long (a neighbour's slice)
	}{
		{"half in 20ms slices", 0.5, 20 * time.Millisecond, 0},
		{"0.9 in 10ms slices", 0.9, 10 * time.Millisecond, 0},
		// 25+ launch round trips of 3 ms were 75 ms where the plan had
		// 2 ms, and the stolen window ran in full: 330 ms of 250.
		{"every round trip waits 3ms", 0.5, 3 * time.Millisecond, 3 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev := h100()
			dev.Neighbour = func(time.Time) (float64, time.Duration) { return tc.share, tc.slice }
			if tc.latency > 0 {
				dev.LaunchLatency = tc.latency
			}
			p, _ := newProbe(dev)
			cfg := gpuprobe.ExporterConfig()
			res := probe(t, p, cfg)
			// The only overshoot allowed: the stolen kernel's slack.
			if res.GPUTime > cfg.GPUTimeBudget {
				t.Errorf("GPU time %s over the %s budget", res.GPUTime, cfg.GPUTimeBudget)
			}
			if st := res.Stolen; st != nil && st.WindowPlanned > cfg.StolenWindow {
				t.Errorf("stolen window planned %s, over %s", st.WindowPlanned, cfg.StolenWindow)
			}
		})
	}
}

// TestContextMemoryWhenTenantMemoryMoves: the context's memory is the drop
// in free memory; a drop no context takes is not taken for one, and the
// buffers never get less than the budget less ContextReserveBytes.
func TestContextMemoryWhenTenantMemoryMoves(t *testing.T) {
	// A 1280 MiB budget, 768 MiB reserve, on a GPU whose L2 size is
	// unknown (its buffers would take 1 GiB: the budget binds).
	cfg := gpuprobe.ExporterConfig()
	cfg.MaxMemoryBytes = 1280 << 20
	for _, tc := range []struct {
		name        string
		nvmlFree    uint64 // what the snapshot said before the context
		ctx, budget uint64
	}{
		{"steady", 80 * gib, h100ContextBytes, 1280<<20 - h100ContextBytes},
		// The tenant allocated 700 MiB since the snapshot: the drop (1220
		// MiB) is reported, counted as the 768 MiB reserve.
		{"tenant grew a little", 80*gib + 700<<20, h100ContextBytes + 700<<20, 512 << 20},
		// It allocated 3 GiB: no context is that large; unknown.
		{"tenant grew a lot", 83 * gib, 0, 512 << 20},
		// It freed 2 GiB: free rose; unknown.
		{"tenant shrank", 78 * gib, 0, 512 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev := h100()
			dev.L2CacheBytes = 0
			drv := simdriver.New([]simdriver.Device{dev}, simdriver.Options{Now: func() time.Time { return base }, Seed: 7})
			p := gpuprobe.New(drv, gpuprobe.Options{FreeMemory: func(gpuprobe.DeviceInfo) (uint64, bool) { return tc.nvmlFree, true }})
			cfg := cfg
			for _, m := range gpuprobe.Measurements {
				if m != gpuprobe.MeasureMemory && m != gpuprobe.MeasureDeviceCopy {
					cfg.Skip = append(cfg.Skip, m)
				}
			}
			res := probe(t, p, cfg)
			if res.Skipped != nil || res.ContextMemoryBytes != tc.ctx || res.BufferBudgetBytes != tc.budget {
				t.Errorf("skipped %v, context %d, buffer budget %d; want %d and %d", res.Skipped, res.ContextMemoryBytes, res.BufferBudgetBytes, tc.ctx, tc.budget)
			}
		})
	}
}
