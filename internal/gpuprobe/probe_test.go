package gpuprobe_test

import (
	"context"
	"errors"
	"math"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpulens/gpulens/internal/gpuprobe"
	"github.com/gpulens/gpulens/internal/sim/simdriver"
)

const gib = 1 << 30

// base is the simulated clock's start: every test's clock is frozen there
// and advances only by simulated work, so results are deterministic.
var base = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// h100 is an H100 SXM-like device at spec, alone.
func h100() simdriver.Device {
	return simdriver.Device{
		Name:                     "NVIDIA H100 80GB HBM3",
		UUID:                     "GPU-6a4ae1cb-4a1b-3b1c-9d2e-0f1e2d3c4b5a",
		PCIBusID:                 "00000000:18:00.0",
		CCMajor:                  9,
		CCMinor:                  0,
		SMs:                      132,
		TotalMemoryBytes:         80 * gib,
		ClockRateKHz:             1980000,
		MemoryClockKHz:           2619000,
		MemoryBusWidthBit:        5120,
		H2DBytesPerSecond:        53e9,
		D2HBytesPerSecond:        51e9,
		DeviceCopyBytesPerSecond: 2.9e12,
		FP32FLOPS:                60e12,
		FP16TensorFLOPS:          480e12,
		BF16TensorFLOPS:          470e12,
		LaunchLatency:            6 * time.Microsecond,
		TimerResolution:          32 * time.Nanosecond,
		L2CacheBytes:             50 << 20,
		ContextMemoryBytes:       h100ContextBytes,
	}
}

// h100ContextBytes is the simulated H100's per-context memory.
const h100ContextBytes = 520 << 20

func newProbe(devs ...simdriver.Device) (*gpuprobe.Probe, *simdriver.Driver) {
	drv := simdriver.New(devs, simdriver.Options{Now: func() time.Time { return base }, Seed: 7})
	return gpuprobe.New(drv, gpuprobe.Options{FreeMemory: nvmlFree(devs)}), drv
}

// nvmlFree is NVML's free memory of the simulated devices at base (all of
// it but what others hold), as the exporter and gpulens-verify pass it.
func nvmlFree(devs []simdriver.Device) gpuprobe.FreeMemoryFunc {
	return func(d gpuprobe.DeviceInfo) (uint64, bool) {
		if d.Ordinal < 0 || d.Ordinal >= len(devs) {
			return 0, false
		}
		dev := devs[d.Ordinal]
		var used uint64
		if dev.UsedByOthers != nil {
			used = dev.UsedByOthers(base)
		}
		return dev.TotalMemoryBytes - used, true
	}
}

func probe(t *testing.T, p *gpuprobe.Probe, cfg gpuprobe.Config) gpuprobe.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := p.Probe(ctx, 0, cfg)
	if err != nil {
		t.Fatalf("Probe: %v", err)
	}
	return res
}

// within fails unless got is within tol (relative) of want.
func within(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol*math.Abs(want) {
		t.Errorf("%s = %.4g, want %.4g ± %.1f%%", what, got, want, 100*tol)
	}
}

func errorsOf(res gpuprobe.Result) map[string]gpuprobe.MeasurementError {
	m := map[string]gpuprobe.MeasurementError{}
	for _, e := range res.Errors {
		m[e.Measurement] = e
	}
	return m
}

func TestProbeAtSpec(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  gpuprobe.Config
	}{
		{"default", gpuprobe.DefaultConfig()},
		{"exporter", gpuprobe.ExporterConfig()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev := h100()
			drv := simdriver.New([]simdriver.Device{dev}, simdriver.Options{Now: func() time.Time { return base }, Seed: 7})
			// NVML's free memory before the context: all of it.
			p := gpuprobe.New(drv, gpuprobe.Options{FreeMemory: func(gpuprobe.DeviceInfo) (uint64, bool) { return 80 * gib, true }})
			res := probe(t, p, tc.cfg)
			if len(res.Errors) > 0 {
				t.Fatalf("errors: %+v", res.Errors)
			}
			want := gpuprobe.DeviceInfo{Ordinal: 0, Name: dev.Name, UUID: dev.UUID, PCIBusID: "00000000:18:00.0",
				ComputeCapability: "9.0", SMs: 132, TotalMemoryBytes: 80 * gib, DriverVersion: 12040,
				L2CacheBytes: 50 << 20, MaxThreadsPerSM: 2048}
			if res.Device != want {
				t.Errorf("Device = %+v, want %+v", res.Device, want)
			}
			within(t, "H2D", res.H2DBytesPerSecond, dev.H2DBytesPerSecond, 0.02)
			within(t, "D2H", res.D2HBytesPerSecond, dev.D2HBytesPerSecond, 0.02)
			within(t, "device copy", res.DeviceCopyBytesPerSecond, dev.DeviceCopyBytesPerSecond, 0.02)
			within(t, "FP32", res.FP32FLOPS, dev.FP32FLOPS, 0.02)
			within(t, "FP16", res.FP16TensorFLOPS, dev.FP16TensorFLOPS, 0.02)
			within(t, "BF16", res.BF16TensorFLOPS, dev.BF16TensorFLOPS, 0.02)
			within(t, "launch latency", float64(res.LaunchLatency), float64(dev.LaunchLatency), 0.02)
			if res.LaunchLatencyP99 < res.LaunchLatency || float64(res.LaunchLatencyP99) > 1.01*float64(dev.LaunchLatency) {
				t.Errorf("launch p99 %s, median %s: want median <= p99 <= 1.01 × %s", res.LaunchLatencyP99, res.LaunchLatency, dev.LaunchLatency)
			}
			if res.Memory == nil || res.Memory.TotalBytes != 80*gib || res.Memory.FreeBytes != 80*gib-h100ContextBytes || res.Memory.FillTested {
				t.Errorf("Memory = %+v, want 80 GiB total, 80 GiB less the context free, no fill", res.Memory)
			}
			// The context's own memory is measured and counted in the budget.
			// The buffers get what they need on an H100, two copy
			// buffers of 4 × its 50 MiB L2, well within the budget.
			if res.Skipped != nil || res.FreeBeforeBytes != 80*gib || res.ContextMemoryBytes != h100ContextBytes ||
				res.BufferBudgetBytes != 400<<20 || gpuprobe.BufferNeed(res.Device, tc.cfg) != 400<<20 {
				t.Errorf("Skipped %v, free before %d, context %d, buffer budget %d; want not skipped, %d, %d, 400 MiB", res.Skipped,
					res.FreeBeforeBytes, res.ContextMemoryBytes, res.BufferBudgetBytes, 80*gib, h100ContextBytes)
			}
			st := res.Stolen
			if st == nil || st.Ratio != 0 || st.MaxRatio != 0 || st.Gaps != 0 || st.Blocks != 132 {
				t.Fatalf("Stolen = %+v, want 0 on 132 blocks", st)
			}
			if st.TimerResolution != 32*time.Nanosecond || st.Threshold != tc.cfg.GapThreshold {
				t.Errorf("Stolen resolution %s threshold %s, want 32ns and %s", st.TimerResolution, st.Threshold, tc.cfg.GapThreshold)
			}
			if st.Window < tc.cfg.StolenWindow || st.Window > tc.cfg.StolenWindow+time.Microsecond {
				t.Errorf("Stolen window %s, want %s", st.Window, tc.cfg.StolenWindow)
			}
			// The budget is used but not exceeded.
			if res.GPUTime > tc.cfg.GPUTimeBudget || res.GPUTime < tc.cfg.GPUTimeBudget*8/10 {
				t.Errorf("GPUTime %s, want within 80-100%% of the budget %s", res.GPUTime, tc.cfg.GPUTimeBudget)
			}
			if res.Duration < res.GPUTime || !res.Started.Equal(base) {
				t.Errorf("Started %s Duration %s, want %s and >= GPUTime %s", res.Started, res.Duration, base, res.GPUTime)
			}
		})
	}
}

// TestProbeNeighbour: a neighbour time-sliced with us at share 0.5 in 2 ms
// slices takes half of every kernel's time and shows as stolen time.
func TestProbeNeighbour(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   gpuprobe.Config
		share float64
		slice time.Duration
	}{
		{"default half", gpuprobe.DefaultConfig(), 0.5, 2 * time.Millisecond},
		{"exporter half", gpuprobe.ExporterConfig(), 0.5, 2 * time.Millisecond},
		{"default quarter", gpuprobe.DefaultConfig(), 0.25, time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev := h100()
			dev.Neighbour = func(time.Time) (float64, time.Duration) { return tc.share, tc.slice }
			p, _ := newProbe(dev)
			res := probe(t, p, tc.cfg)
			if len(res.Errors) > 0 {
				t.Fatalf("errors: %+v", res.Errors)
			}
			st := res.Stolen
			// The window holds window/cycle slices; a partial first run and
			// the window's end in mid-slice leave up to a slice of error.
			tol := 0.02 + float64(tc.slice)/float64(tc.cfg.StolenWindow)
			within(t, "stolen ratio", st.Ratio, tc.share, tol)
			// Every block of a window sees the same slices: the worst
			// block is just above the worst window.
			worst := 0.0
			for _, w := range st.Windows {
				worst = max(worst, w.Ratio)
			}
			if len(st.Windows) != tc.cfg.StolenWindows || st.MaxRatio < worst || st.MaxRatio > worst+0.01 {
				t.Errorf("%d windows, max ratio %.4f, want %d and just above the worst window's %.4f", len(st.Windows), st.MaxRatio, tc.cfg.StolenWindows, worst)
			}
			within(t, "gap median", float64(st.GapMedian), float64(tc.slice), 0.02)
			if st.GapMax > tc.slice*103/100 || st.GapP90 > st.GapMax || st.GapP90 < st.GapMedian {
				t.Errorf("gaps median %s p90 %s max %s, want ordered and max within 2%% of %s", st.GapMedian, st.GapP90, st.GapMax, tc.slice)
			}
			cycle := float64(tc.slice) / tc.share
			wantGaps := float64(tc.cfg.StolenWindow) / cycle
			// Each window may hold one slice more or less.
			if tol := 1.5 * float64(tc.cfg.StolenWindows); math.Abs(float64(st.Gaps)-wantGaps) > tol {
				t.Errorf("gaps per block %d, want %.1f ± %.1f", st.Gaps, wantGaps, tol)
			}
			// Kernels get 1-share of the GPU; copies are not time-sliced.
			within(t, "FP32", res.FP32FLOPS, dev.FP32FLOPS*(1-tc.share), 0.02)
			within(t, "BF16", res.BF16TensorFLOPS, dev.BF16TensorFLOPS*(1-tc.share), 0.02)
			within(t, "device copy", res.DeviceCopyBytesPerSecond, dev.DeviceCopyBytesPerSecond*(1-tc.share), 0.02)
			within(t, "H2D", res.H2DBytesPerSecond, dev.H2DBytesPerSecond, 0.02)
			if res.GPUTime > tc.cfg.GPUTimeBudget {
				t.Errorf("GPUTime %s over the budget %s", res.GPUTime, tc.cfg.GPUTimeBudget)
			}
		})
	}
}

// TestProbeSlowdown: a GPU delivering half its figures measures half of
// every bandwidth and FLOP/s, and no stolen time.
func TestProbeSlowdown(t *testing.T) {
	dev := h100()
	dev.Slowdown = func(time.Time) float64 { return 0.5 }
	p, _ := newProbe(dev)
	res := probe(t, p, gpuprobe.ExporterConfig())
	if len(res.Errors) > 0 {
		t.Fatalf("errors: %+v", res.Errors)
	}
	for _, c := range []struct {
		what      string
		got, spec float64
	}{
		{"H2D", res.H2DBytesPerSecond, dev.H2DBytesPerSecond},
		{"D2H", res.D2HBytesPerSecond, dev.D2HBytesPerSecond},
		{"device copy", res.DeviceCopyBytesPerSecond, dev.DeviceCopyBytesPerSecond},
		{"FP32", res.FP32FLOPS, dev.FP32FLOPS},
		{"FP16", res.FP16TensorFLOPS, dev.FP16TensorFLOPS},
		{"BF16", res.BF16TensorFLOPS, dev.BF16TensorFLOPS},
	} {
		within(t, c.what, c.got, c.spec/2, 0.02)
	}
	if res.Stolen == nil || res.Stolen.Ratio != 0 {
		t.Errorf("Stolen = %+v, want ratio 0", res.Stolen)
	}
}

func TestProbeFill(t *testing.T) {
	for _, tc := range []struct {
		name        string
		limit, step uint64
		usable      uint64
		stopped     string
	}{
		{"until out of memory", 0, gib, 16 * gib, "out_of_memory"},
		{"limit", 5*gib + gib/2, gib, 5*gib + gib/2, "limit"},
		{"limit above what is free", 40 * gib, gib, 16 * gib, "out_of_memory"},
		{"small steps", 0, 256 << 20, 16 * gib, "out_of_memory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev := h100()
			dev.TotalMemoryBytes = 20 * gib
			dev.UsedByOthers = func(time.Time) uint64 { return 4 * gib }
			dev.ContextMemoryBytes = 0 // round figures
			p, _ := newProbe(dev)
			cfg := gpuprobe.ExporterConfig()
			cfg.Fill, cfg.FillStep, cfg.FillLimitBytes = true, tc.step, tc.limit
			res := probe(t, p, cfg)
			if len(res.Errors) > 0 {
				t.Fatalf("errors: %+v", res.Errors)
			}
			want := gpuprobe.MemoryResult{FreeBytes: 16 * gib, TotalBytes: 20 * gib, FillTested: true, UsableBytes: tc.usable, FillStopped: tc.stopped}
			if *res.Memory != want {
				t.Errorf("Memory = %+v, want %+v", *res.Memory, want)
			}
			// Every chunk was freed: a later probe sees all of it free.
			res = probe(t, p, gpuprobe.ExporterConfig())
			if res.Memory.FreeBytes != 16*gib {
				t.Errorf("free after the fill test: %d, want %d", res.Memory.FreeBytes, 16*gib)
			}
		})
	}
}

// TestProbeErrors: a failing CUDA call fails the measurements that need it,
// with its CUresult, and the others still run.
func TestProbeErrors(t *testing.T) {
	all := gpuprobe.Measurements
	for _, tc := range []struct {
		name   string
		dev    func(*simdriver.Device)
		drv    func(*simdriver.Driver)
		failed map[string]int // measurement -> code
	}{
		{"no device memory", nil, func(d *simdriver.Driver) { d.FailCall("cuMemAlloc_v2", 2) },
			map[string]int{"h2d": 2, "d2h": 2, "device_copy": 2, "fp32": 2, "fp16_tensor": 2, "bf16_tensor": 2, "stolen": 2}},
		{"no pinned memory", nil, func(d *simdriver.Driver) { d.FailCall("cuMemAllocHost_v2", 2) },
			map[string]int{"h2d": 2, "d2h": 2}},
		{"compute capability 7.5", func(dev *simdriver.Device) { dev.CCMajor, dev.CCMinor = 7, 5 }, nil,
			map[string]int{"fp16_tensor": 218, "bf16_tensor": 218}},
		{"bf16 kernel", nil, func(d *simdriver.Driver) { d.FailCall("gpulens_mma_bf16", 719) },
			map[string]int{"bf16_tensor": 719}},
		{"module load", nil, func(d *simdriver.Driver) { d.FailCall("cuModuleLoadDataEx", 218) },
			map[string]int{"device_copy": 218, "fp32": 218, "fp16_tensor": 218, "bf16_tensor": 218, "launch": 218, "stolen": 218}},
		{"events", nil, func(d *simdriver.Driver) { d.FailCall("cuEventCreate", 2) },
			map[string]int{"h2d": 2, "d2h": 2, "device_copy": 2, "fp32": 2, "fp16_tensor": 2, "bf16_tensor": 2, "stolen": 2}},
		{"stolen readback", nil, func(d *simdriver.Driver) { d.FailCall("cuMemcpyDtoH_v2", 700) },
			map[string]int{"d2h": 700, "stolen": 700}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev := h100()
			if tc.dev != nil {
				tc.dev(&dev)
			}
			p, drv := newProbe(dev)
			if tc.drv != nil {
				tc.drv(drv)
			}
			res := probe(t, p, gpuprobe.ExporterConfig())
			got := errorsOf(res)
			for _, m := range all {
				e, failed := got[m]
				code, want := tc.failed[m]
				switch {
				case want && !failed:
					t.Errorf("%s: no error, want code %d", m, code)
				case !want && failed:
					t.Errorf("%s: unexpected error %+v", m, e)
				case want && e.Code != code:
					t.Errorf("%s: code %d (%s), want %d", m, e.Code, e.Err, code)
				}
			}
			if len(res.Errors) != len(tc.failed) {
				t.Errorf("%d errors, want %d: %+v", len(res.Errors), len(tc.failed), res.Errors)
			}
			// The measurements that did not fail have their figures.
			figures := map[string]bool{
				"memory": res.Memory != nil, "h2d": res.H2DBytesPerSecond > 0, "d2h": res.D2HBytesPerSecond > 0,
				"device_copy": res.DeviceCopyBytesPerSecond > 0, "fp32": res.FP32FLOPS > 0,
				"fp16_tensor": res.FP16TensorFLOPS > 0, "bf16_tensor": res.BF16TensorFLOPS > 0,
				"launch": res.LaunchLatency > 0, "stolen": res.Stolen != nil,
			}
			for m, has := range figures {
				if _, failed := tc.failed[m]; has == failed {
					t.Errorf("%s: figure present %v, failed %v", m, has, failed)
				}
			}
			if res.GPUTime > gpuprobe.ExporterConfig().GPUTimeBudget {
				t.Errorf("GPUTime %s over budget", res.GPUTime)
			}
		})
	}
}

// TestProbeFatal: when nothing can be measured Probe returns an error that
// says why.
func TestProbeFatal(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ordinal int
		fail    string
		code    int
		want    string
	}{
		{"no device", 0, "cuInit", 100, "CUDA_ERROR_NO_DEVICE"},
		{"no such ordinal", 3, "", 0, "no CUDA device 3 (1 visible)"},
		{"negative ordinal", -1, "", 0, "no CUDA device -1"},
		{"context", 0, "cuCtxCreate_v2", 46, "CUDA_ERROR_DEVICE_UNAVAILABLE"},
		{"uuid", 0, "cuDeviceGetUuid_v2", 999, "cuDeviceGetUuid_v2: CUDA_ERROR_UNKNOWN (999)"},
		// Free memory cannot be checked once the context exists: nothing
		// runs (and the context is destroyed, checked below).
		{"memory info", 0, "cuMemGetInfo_v2", 999, "reading free memory after creating the context: cuMemGetInfo_v2: CUDA_ERROR_UNKNOWN (999)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, drv := newProbe(h100())
			if tc.fail != "" {
				drv.FailCall(tc.fail, tc.code)
			}
			res, err := p.Probe(context.Background(), tc.ordinal, gpuprobe.ExporterConfig())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Probe error %v, want one mentioning %q", err, tc.want)
			}
			if res.Memory != nil || res.Stolen != nil || res.GPUTime != 0 {
				t.Errorf("result %+v, want empty", res)
			}
			var ce *gpuprobe.CUDAError
			if tc.code != 0 && (!errors.As(err, &ce) || ce.Code != tc.code) {
				t.Errorf("error %v does not carry CUDA code %d", err, tc.code)
			}
			if _, err := drv.MemAlloc(1); err == nil {
				t.Errorf("a context is left after the failed probe")
			}
		})
	}
	t.Run("invalid config", func(t *testing.T) {
		p, _ := newProbe(h100())
		cfg := gpuprobe.ExporterConfig()
		cfg.GPUTimeBudget = 0
		if _, err := p.Probe(context.Background(), 0, cfg); err == nil || !strings.Contains(err.Error(), "GPUTimeBudget must be positive") {
			t.Fatalf("Probe error %v, want the config's", err)
		}
	})
}

// TestProbeHang: a driver call that never returns does not hold the caller
// past its deadline; the Probe stays busy until the call returns.
func TestProbeHang(t *testing.T) {
	p, drv := newProbe(h100())
	release := drv.HangCall("cuEventSynchronize")
	defer release()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := p.Probe(ctx, 0, gpuprobe.ExporterConfig())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Probe error %v, want the context's deadline", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Probe returned after %s, want about 50ms", took)
	}
	for _, call := range []func() error{
		func() error { _, err := p.Probe(context.Background(), 0, gpuprobe.ExporterConfig()); return err },
		func() error { _, err := p.Devices(context.Background()); return err },
	} {
		if err := call(); !errors.Is(err, gpuprobe.ErrBusy) {
			t.Errorf("while stuck: %v, want ErrBusy", err)
		}
	}
	// Wait gives up with its context while the call is stuck.
	short, cancelShort := context.WithCancel(context.Background())
	cancelShort()
	if err := p.Wait(short); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait on a cancelled context: %v", err)
	}
	release()
	if err := p.Wait(context.Background()); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	res := probe(t, p, gpuprobe.ExporterConfig())
	if len(res.Errors) > 0 || res.Stolen == nil {
		t.Errorf("after release: %+v", res)
	}
	// The abandoned probe cleaned up: all memory but the new context's is
	// free again.
	if res.Memory.FreeBytes != 80*gib-h100ContextBytes {
		t.Errorf("free %d after the abandoned probe, want %d", res.Memory.FreeBytes, 80*gib-h100ContextBytes)
	}
}

// TestProbeCancelledInside: a context ending in the middle of a probe (no
// hang) stops it at the next check: the measurement in progress is cut
// short and the rest do not run. The context is cancelled from the
// simulated device at a known virtual time, 50 ms into the probe.
func TestProbeCancelledInside(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dev := h100()
	dev.Slowdown = func(now time.Time) float64 {
		if now.Sub(base) >= 50*time.Millisecond {
			cancel()
		}
		return 1
	}
	p, drv := newProbe(dev)
	res, err := p.Probe(ctx, 0, gpuprobe.ExporterConfig())
	switch {
	case errors.Is(err, context.Canceled):
		// Probe returned as the context ended, before the probe stopped.
	case err != nil:
		t.Fatalf("Probe: %v", err)
	default:
		// The probe stopped before Probe noticed the context: its result
		// says what was cut.
		got := errorsOf(res)
		// The windows before the cancel ran; the later ones did not.
		if len(got) == 0 || (res.Stolen != nil && len(res.Stolen.Windows) >= gpuprobe.ExporterConfig().StolenWindows) {
			t.Errorf("result after cancel: %+v", res)
		}
		if e, ok := got["stolen"]; !ok || !strings.Contains(e.Err, "not run") {
			t.Errorf("stolen: %+v, want not run", e)
		}
	}
	if err := p.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The probe stopped within one iteration of the cancel instead of
	// running its 230 ms.
	if spent := drv.Now().Sub(base); spent < 50*time.Millisecond || spent > 70*time.Millisecond {
		t.Errorf("virtual time spent %s, want the probe to stop soon after 50ms", spent)
	}
}

func TestProbeConcurrent(t *testing.T) {
	p, _ := newProbe(h100(), h100())
	cfg := gpuprobe.ExporterConfig()
	results := make(chan gpuprobe.Result, 2)
	errs := make(chan error, 2)
	for i := range 2 {
		go func() {
			res, err := p.Probe(context.Background(), i, cfg)
			results <- res
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("Probe: %v", err)
		}
		if res := <-results; len(res.Errors) > 0 || res.Stolen == nil {
			t.Errorf("concurrent probe: %+v", res)
		}
	}
}

func TestProbeDeterministic(t *testing.T) {
	dev := h100()
	dev.Neighbour = func(time.Time) (float64, time.Duration) { return 0.3, time.Millisecond }
	p1, _ := newProbe(dev)
	p2, _ := newProbe(dev)
	a, b := probe(t, p1, gpuprobe.ExporterConfig()), probe(t, p2, gpuprobe.ExporterConfig())
	if a.FP32FLOPS != b.FP32FLOPS || !reflect.DeepEqual(*a.Stolen, *b.Stolen) || a.GPUTime != b.GPUTime {
		t.Errorf("same seed, different results:\n%+v\n%+v", a, b)
	}
}

func TestProbeSkip(t *testing.T) {
	p, _ := newProbe(h100())
	cfg := gpuprobe.ExporterConfig()
	cfg.Skip = []string{"stolen", "h2d", "d2h", "fp16_tensor", "bf16_tensor"}
	cfg.StolenWindow = 0
	res := probe(t, p, cfg)
	if len(res.Errors) > 0 {
		t.Fatalf("errors: %+v", res.Errors)
	}
	if res.Stolen != nil || res.H2DBytesPerSecond != 0 || res.D2HBytesPerSecond != 0 || res.FP16TensorFLOPS != 0 || res.BF16TensorFLOPS != 0 {
		t.Errorf("skipped measurements ran: %+v", res)
	}
	if res.FP32FLOPS == 0 || res.DeviceCopyBytesPerSecond == 0 || res.LaunchLatency == 0 || res.Memory == nil {
		t.Errorf("kept measurements missing: %+v", res)
	}
	// Without the stolen window the whole budget goes to the rest.
	if res.GPUTime < cfg.GPUTimeBudget*8/10 || res.GPUTime > cfg.GPUTimeBudget {
		t.Errorf("GPUTime %s, want 80-100%% of %s", res.GPUTime, cfg.GPUTimeBudget)
	}
}

func TestProbeCoarseTimer(t *testing.T) {
	dev := h100()
	dev.TimerResolution = 20 * time.Microsecond
	p, _ := newProbe(dev)
	cfg := gpuprobe.ExporterConfig()
	res := probe(t, p, cfg)
	st := res.Stolen
	if st == nil {
		t.Fatalf("no stolen result: %+v", res.Errors)
	}
	// Every 20µs step was over the 10µs threshold; raised to 200µs, none is.
	if st.TimerResolution != 20*time.Microsecond || st.Threshold != 200*time.Microsecond || st.Ratio != 0 || st.Gaps != 0 {
		t.Errorf("Stolen = %+v, want resolution 20µs, threshold 200µs, no gaps", st)
	}
}

func TestDevices(t *testing.T) {
	a, b := h100(), h100()
	b.Name, b.UUID, b.PCIBusID, b.CCMajor, b.CCMinor, b.SMs, b.TotalMemoryBytes = "NVIDIA L4", "MIG-1", "0000abcd:c1:1f.0", 8, 9, 58, 24*gib
	b.ComputeMode, b.L2CacheBytes, b.MaxThreadsPerSM = 3, 48<<20, 1536
	p, _ := newProbe(a, b)
	got, err := p.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []gpuprobe.DeviceInfo{
		{Ordinal: 0, Name: a.Name, UUID: a.UUID, PCIBusID: "00000000:18:00.0", ComputeCapability: "9.0", SMs: 132, TotalMemoryBytes: 80 * gib, DriverVersion: 12040,
			L2CacheBytes: 50 << 20, MaxThreadsPerSM: 2048},
		{Ordinal: 1, Name: "NVIDIA L4", UUID: "MIG-1", PCIBusID: "0000ABCD:C1:1F.0", ComputeCapability: "8.9", SMs: 58, TotalMemoryBytes: 24 * gib, DriverVersion: 12040,
			ComputeMode: 3, L2CacheBytes: 48 << 20, MaxThreadsPerSM: 1536},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("Devices = %+v\nwant %+v", got, want)
	}

	_, drv := newProbe(a)
	drv.FailCall("cuInit", 100)
	if _, err := gpuprobe.New(drv, gpuprobe.Options{}).Devices(context.Background()); err == nil || !strings.Contains(err.Error(), "CUDA_ERROR_NO_DEVICE") {
		t.Errorf("Devices with cuInit failing: %v", err)
	}
}

// panicky is a driver whose first cuMemGetInfo panics, as a broken binding
// might.
type panicky struct {
	*simdriver.Driver
	panicked *bool
}

func (p panicky) MemGetInfo() (uint64, uint64, error) {
	if !*p.panicked {
		*p.panicked = true
		panic("boom")
	}
	return p.Driver.MemGetInfo()
}

// TestProbePanic: a panic in the driver is an error, not a crash, and the
// context is still destroyed.
func TestProbePanic(t *testing.T) {
	_, drv := newProbe(h100())
	p := gpuprobe.New(panicky{drv, new(bool)}, gpuprobe.Options{FreeMemory: nvmlFree([]simdriver.Device{h100()})})
	_, err := p.Probe(context.Background(), 0, gpuprobe.ExporterConfig())
	if err == nil || !strings.Contains(err.Error(), "panic in the driver: boom") {
		t.Fatalf("Probe: %v, want the panic as an error", err)
	}
	// The context is gone: the driver has no current one.
	if _, err := drv.MemAlloc(1); err == nil || !strings.Contains(err.Error(), "CUDA_ERROR_INVALID_CONTEXT") {
		t.Errorf("after the panic, cuMemAlloc: %v, want no context", err)
	}
	// And the Probe is usable again.
	cfg := gpuprobe.ExporterConfig()
	cfg.Skip = []string{"memory"}
	if res, err := p.Probe(context.Background(), 0, cfg); err != nil || len(res.Errors) > 0 {
		t.Errorf("next probe: %v %+v", err, res.Errors)
	}
}

// TestExporterBudget: the exporter's probe stays within 250 ms of virtual
// GPU time (and of virtual wall time) whatever the device delivers.
func TestExporterBudget(t *testing.T) {
	for _, tc := range []struct {
		name string
		dev  func(*simdriver.Device)
	}{
		{"at spec", func(*simdriver.Device) {}},
		{"neighbour half in 5ms slices", func(d *simdriver.Device) {
			d.Neighbour = func(time.Time) (float64, time.Duration) { return 0.5, 5 * time.Millisecond }
		}},
		{"neighbour 0.9", func(d *simdriver.Device) {
			d.Neighbour = func(time.Time) (float64, time.Duration) { return 0.9, 2 * time.Millisecond }
		}},
		{"throttled to 10%", func(d *simdriver.Device) { d.Slowdown = func(time.Time) float64 { return 0.1 } }},
		{"small slow GPU", func(d *simdriver.Device) {
			d.SMs, d.H2DBytesPerSecond, d.D2HBytesPerSecond, d.DeviceCopyBytesPerSecond = 20, 3e9, 3e9, 100e9
			d.FP32FLOPS, d.FP16TensorFLOPS, d.BF16TensorFLOPS, d.LaunchLatency = 4e12, 30e12, 30e12, 20*time.Microsecond
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev := h100()
			tc.dev(&dev)
			p, drv := newProbe(dev)
			res := probe(t, p, gpuprobe.ExporterConfig())
			if len(res.Errors) > 0 {
				t.Fatalf("errors: %+v", res.Errors)
			}
			const budget = 250 * time.Millisecond
			if res.GPUTime > budget || res.GPUTime < budget*3/4 {
				t.Errorf("GPU time %s, want 188-250ms", res.GPUTime)
			}
			if spent := drv.Now().Sub(base); spent > budget || res.Duration > spent {
				t.Errorf("virtual time spent %s (Duration %s), want at most %s", spent, res.Duration, budget)
			}
		})
	}
}

// TestProbeDoesNotSpin: every wait of a probe blocks its thread. The
// context is CU_CTX_SCHED_BLOCKING_SYNC, but cuEventSynchronize busy-waits
// on an event without CU_EVENT_BLOCKING_SYNC whatever the context says (the
// CUDA driver API's cuEventCreate): with the events created
// CU_EVENT_DEFAULT, as they were, a probe spins a core for about its whole
// GPU time (the simulated driver counts it: SpinTime).
func TestProbeDoesNotSpin(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  gpuprobe.Config
	}{
		{"default", gpuprobe.DefaultConfig()},
		{"exporter", gpuprobe.ExporterConfig()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, drv := newProbe(h100())
			res := probe(t, p, tc.cfg)
			if len(res.Errors) > 0 {
				t.Fatalf("errors: %+v", res.Errors)
			}
			if spin := drv.SpinTime(); spin != 0 {
				t.Errorf("the probe busy-waited %s of its %s of GPU time (%.0f %%); want 0: events must be CU_EVENT_BLOCKING_SYNC",
					spin, res.GPUTime, 100*spin.Seconds()/res.GPUTime.Seconds())
			}
		})
	}
}

// TestStolenWindowsSpread: the stolen-time windows sample the whole probe,
// not its end. A neighbour that takes half the GPU from 150 ms into the
// probe on is missed by the first windows and seen by the last; each
// window's span (host clock) lies in the probe, after the one before, and
// the run's ratio is the windows' ratios weighted by their length.
func TestStolenWindowsSpread(t *testing.T) {
	dev := h100()
	joins := base.Add(150 * time.Millisecond)
	dev.Neighbour = func(at time.Time) (float64, time.Duration) {
		if at.Before(joins) {
			return 0, 0
		}
		return 0.5, 2 * time.Millisecond
	}
	p, _ := newProbe(dev)
	cfg := gpuprobe.ExporterConfig()
	res := probe(t, p, cfg)
	st := res.Stolen
	if st == nil || len(st.Windows) != cfg.StolenWindows {
		t.Fatalf("Stolen = %+v, want %d windows", st, cfg.StolenWindows)
	}
	end := res.Started.Add(res.Duration)
	prev := res.Started
	var sum, total float64
	for i, w := range st.Windows {
		if w.Start.Before(prev) || !w.End.After(w.Start) || w.End.After(end) || w.End.Sub(w.Start) < w.Window {
			t.Errorf("window %d [%s, %s] (%s watched): want after %s, within the probe (ends %s) and no shorter than watched",
				i, w.Start.Sub(base), w.End.Sub(base), w.Window, prev.Sub(base), end.Sub(base))
		}
		prev = w.End
		sum += w.Ratio * float64(w.Window)
		total += float64(w.Window)
	}
	if first := st.Windows[0]; first.End.After(joins) || first.Ratio != 0 {
		t.Errorf("first window [%s, %s] ratio %.3f: want before the neighbour (%s) and 0", first.Start.Sub(base), first.End.Sub(base), first.Ratio, joins.Sub(base))
	}
	if last := st.Windows[len(st.Windows)-1]; last.Start.Before(joins) || math.Abs(last.Ratio-0.5) > 0.1 {
		t.Errorf("last window [%s, %s] ratio %.3f: want after the neighbour joined (%s) and 0.5 ± 0.1", last.Start.Sub(base), last.End.Sub(base), last.Ratio, joins.Sub(base))
	}
	if math.Abs(st.Ratio-sum/total) > 1e-9 {
		t.Errorf("ratio %.4f, want the windows' weighted mean %.4f", st.Ratio, sum/total)
	}
	// A window ends at the first reading after its length: after a
	// neighbour's slice when one covers its end.
	if d := st.Window - cfg.StolenWindow; d < 0 || d > time.Duration(cfg.StolenWindows)*2*time.Millisecond {
		t.Errorf("watched %s in all, want %s and at most a slice more per window", st.Window, cfg.StolenWindow)
	}
}

// TestProbeFindsItsNVMLPID: NVML lists host PIDs, which differ from
// getpid() in a container; the PID NVML's process list gains with the
// probe's context is the probe's, and nothing is claimed when the list
// cannot be read or another process appeared at the same moment.
func TestProbeFindsItsNVMLPID(t *testing.T) {
	const hostPID = 73311
	for _, tc := range []struct {
		name    string
		other   bool // another process starts with ours
		readErr bool
		want    uint32
	}{
		{"found", false, false, hostPID},
		{"another process starts too", true, false, 0},
		{"list unreadable", false, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev := h100()
			var open atomic.Bool
			dev.Context = func(o bool, _ time.Time) { open.Store(o) }
			calls := 0
			list := func(gpuprobe.DeviceInfo) ([]uint32, bool) {
				calls++
				pids := []uint32{100, 200}
				if open.Load() {
					pids = append(pids, hostPID)
					if tc.other {
						pids = append(pids, 300)
					}
				}
				return pids, !tc.readErr
			}
			drv := simdriver.New([]simdriver.Device{dev}, simdriver.Options{Now: func() time.Time { return base }, Seed: 7})
			p := gpuprobe.New(drv, gpuprobe.Options{Processes: list})
			res := probe(t, p, gpuprobe.ExporterConfig())
			if res.NVMLPID != tc.want || calls != 2-b2i(tc.readErr) {
				t.Errorf("NVMLPID %d after %d listings, want %d after %d", res.NVMLPID, calls, tc.want, 2-b2i(tc.readErr))
			}
		})
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
