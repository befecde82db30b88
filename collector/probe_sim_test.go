package collector

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpulens/gpulens/internal/gpuprobe"
	"github.com/gpulens/gpulens/internal/sim/simdriver"
)

// simH100 is an H100-like simulated CUDA device.
func simH100(uuid, bus string) simdriver.Device {
	return simdriver.Device{
		Name: "NVIDIA H100 80GB HBM3", UUID: uuid, PCIBusID: bus,
		CCMajor: 9, CCMinor: 0, SMs: 132, TotalMemoryBytes: 80 << 30,
		ClockRateKHz: 1_980_000, MemoryClockKHz: 2_619_000, MemoryBusWidthBit: 5120,
		H2DBytesPerSecond: 55e9, D2HBytesPerSecond: 53e9, DeviceCopyBytesPerSecond: 3e12,
		FP32FLOPS: 6e13, FP16TensorFLOPS: 9e14, BF16TensorFLOPS: 9e14,
		LaunchLatency: 6 * time.Microsecond, TimerResolution: 32 * time.Nanosecond,
	}
}

// newSimProbe probes two simulated H100s through the real gpuprobe.Probe:
// CUDA ordinal 0 is NVML GPU 1, alone; ordinal 1 is NVML GPU 0, which an
// invisible neighbour time-slices, taking half of the GPU in 2 ms slices.
func newSimProbe(t *testing.T, clock *fakeClock) (*ProbeCollector, *simdriver.Driver) {
	t.Helper()
	alone := simH100(testGPUs[1].UUID, testGPUs[1].PCIBusID)
	shared := simH100(testGPUs[0].UUID, testGPUs[0].PCIBusID)
	shared.Neighbour = func(time.Time) (float64, time.Duration) { return 0.5, 2 * time.Millisecond }
	drv := simdriver.New([]simdriver.Device{alone, shared}, simdriver.Options{Now: clock.Now, Seed: 1})
	pr := gpuprobe.New(drv, gpuprobe.Options{})
	return newTestProbe(t, staticOpener(pr), &fakeDirectory{gpus: testGPUs, complete: true}, clock, nil), drv
}

func within(got, want, rel float64) bool { return math.Abs(got-want) <= rel*want }

// TestProbeOverSimulatedDriver runs the real probe over simdriver: the
// figures come out near the devices' and land on the right NVML GPU, and
// the time-sliced GPU shows its stolen time and halved throughput.
func TestProbeOverSimulatedDriver(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	p, _ := newSimProbe(t, clock)
	p.RunOnce(context.Background())
	got := gatherProbe(t, p)

	for _, tc := range []struct {
		id          string
		share       float64 // of the GPU left to us
		stolenRatio float64
	}{{gpu1, 1, 0}, {gpu0, 0.5, 0.5}} {
		if got["gpulens_probe_up{"+tc.id+"}"] != 1 {
			t.Fatalf("%s not probed: %v", tc.id, got)
		}
		for name, want := range map[string]float64{
			"gpulens_probe_device_copy_bandwidth_bytes_per_second": 3e12 * tc.share,
			"gpulens_probe_fp32_flop_per_second":                   6e13 * tc.share,
		} {
			if v := got[name+"{"+tc.id+"}"]; !within(v, want, 0.15) {
				t.Errorf("%s{%s} = %.4g, want %.4g ±15%%", name, tc.id, v, want)
			}
		}
		for _, dtype := range []string{"bf16", "fp16"} {
			key := seriesKey("gpulens_probe_tensor_flop_per_second", tc.id, "dtype="+dtype)
			if v := got[key]; !within(v, 9e14*tc.share, 0.15) {
				t.Errorf("%s = %.4g, want %.4g ±15%%", key, v, 9e14*tc.share)
			}
		}
		if v := got["gpulens_probe_stolen_time_ratio{"+tc.id+"}"]; math.Abs(v-tc.stolenRatio) > 0.1 {
			t.Errorf("stolen time of %s = %.3f, want %.1f ±0.1", tc.id, v, tc.stolenRatio)
		}
		if v := got["gpulens_probe_memory_total_bytes{"+tc.id+"}"]; v != 80<<30 {
			t.Errorf("memory total of %s = %v, want 80 GiB", tc.id, v)
		}
		if v := got["gpulens_probe_gpu_time_seconds{"+tc.id+"}"]; v <= 0 || v > 0.25*1.1 {
			t.Errorf("GPU time of %s = %vs, want within the 250 ms budget", tc.id, v)
		}
	}
	if v := got[seriesKey("gpulens_probe_stolen_gap_seconds", gpu0, "stat=median")]; !within(v, 0.002, 0.2) {
		t.Errorf("median gap of the time-sliced GPU = %vs, want the neighbour's 2 ms slice", v)
	}
	if v := got[seriesKey("gpulens_probe_stolen_gap_seconds", gpu1, "stat=max")]; v != 0 {
		t.Errorf("the dedicated GPU saw gaps up to %vs", v)
	}
	if v := got["gpulens_probe_h2d_bandwidth_bytes_per_second{"+gpu1+"}"]; !within(v, 55e9, 0.15) {
		t.Errorf("H2D of GPU 1 = %.4g, want 55e9 ±15%%", v)
	}
	for _, id := range []string{gpu0, gpu1} {
		if _, ok := got[seriesKey("gpulens_probe_launch_latency_seconds", id, "stat=median")]; !ok {
			t.Errorf("no launch latency for %s", id)
		}
	}
	for k := range got {
		if strings.HasPrefix(k, "gpulens_probe_errors_total") {
			t.Errorf("error on a healthy simulated GPU: %s", k)
		}
	}
}

// TestProbeOverSimulatedDriverFaults injects driver faults: a failing
// allocation is counted per measurement with its CUDA error, a failing
// tensor kernel loses only the tensor figures, and a hung call ends the
// device's probe at the deadline as deadline_exceeded, then busy.
func TestProbeOverSimulatedDriverFaults(t *testing.T) {
	// Serial: the hung call's case gives the whole probe a 50 ms deadline,
	// which a busy neighbour makes the driver's init miss.
	t.Run("tensor kernel fails", func(t *testing.T) {
		clock := newFakeClock()
		p, drv := newSimProbe(t, clock)
		drv.FailCall(gpuprobe.KernelMMABF16, gpuprobe.CUDAErrLaunchTimeout)
		p.RunOnce(context.Background())
		got := gatherProbe(t, p)
		for _, id := range []string{gpu0, gpu1} {
			if got["gpulens_probe_up{"+id+"}"] != 1 {
				t.Errorf("%s down after a failed measurement: a partial result still counts", id)
			}
			if _, ok := got[seriesKey("gpulens_probe_tensor_flop_per_second", id, "dtype=bf16")]; ok {
				t.Errorf("%s: bf16 figure served although its kernel failed", id)
			}
			if _, ok := got[seriesKey("gpulens_probe_tensor_flop_per_second", id, "dtype=fp16")]; !ok {
				t.Errorf("%s: fp16 figure missing", id)
			}
			if v := got[errKey("launch_timeout", id, gpuprobe.MeasureBF16)]; v != 1 {
				t.Errorf("%s: bf16 launch_timeout errors = %v, want 1", id, v)
			}
		}
	})
	t.Run("no memory for the context", func(t *testing.T) {
		clock := newFakeClock()
		p, drv := newSimProbe(t, clock)
		drv.FailCall("cuCtxCreate_v2", gpuprobe.CUDAErrOutOfMemory)
		p.RunOnce(context.Background())
		p.RunOnce(context.Background())
		got := gatherProbe(t, p)
		for _, id := range []string{gpu0, gpu1} {
			if got["gpulens_probe_up{"+id+"}"] != 0 || got[errKey("out_of_memory", id, ProbeMeasurementProbe)] != 2 {
				t.Errorf("%s after two runs without a context: up %v, out_of_memory errors %v; want 0 and 2",
					id, got["gpulens_probe_up{"+id+"}"], got[errKey("out_of_memory", id, ProbeMeasurementProbe)])
			}
		}
	})
	t.Run("hung driver call", func(t *testing.T) {
		clock := newFakeClock()
		p, drv := newSimProbe(t, clock)
		// Long enough for the device listing, which answers, to beat the
		// wall-clock deadline on a loaded machine; the hung call waits it
		// out once.
		p.timeout = 2 * time.Second
		release := drv.HangCall("cuMemAllocHost_v2")
		defer release()
		p.RunOnce(context.Background())
		got := gatherProbe(t, p)
		// The first device's probe hits the deadline; the Probe is then
		// stuck in the driver and refuses the second device.
		if got[errKey(errDeadline, gpu1, ProbeMeasurementProbe)] != 1 || got["gpulens_probe_up{"+gpu1+"}"] != 0 {
			t.Errorf("hung device: %v", got)
		}
		if got[errKey("busy", gpu0, ProbeMeasurementProbe)] != 1 || got["gpulens_probe_up{"+gpu0+"}"] != 0 {
			t.Errorf("device after the hung one: %v", got)
		}
	})
}

// TestProbeB200DeviceCopy: a B200's 126 MiB L2 needs two 504 MiB copy
// buffers. With the exporter's default budget the device copy is measured;
// with a budget too small for them (the old default, 1280 MiB) its figure
// is left out and counted in gpulens_probe_not_reported_total, never in
// gpulens_probe_errors_total, so GpulensGPUProbeFailing stays quiet on a
// healthy B200 (before, every run counted a device_copy error).
func TestProbeB200DeviceCopy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		maxMem   uint64
		reported bool
	}{
		{"default budget", gpuprobe.ExporterConfig().MaxMemoryBytes, true},
		{"1280 MiB budget", 1280 << 20, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := newFakeClock()
			b200 := simH100(testGPUs[0].UUID, testGPUs[0].PCIBusID)
			b200.Name, b200.CCMajor, b200.SMs, b200.TotalMemoryBytes = "NVIDIA B200", 10, 148, 180<<30
			b200.L2CacheBytes, b200.ContextMemoryBytes = 126<<20, 600<<20
			drv := simdriver.New([]simdriver.Device{b200}, simdriver.Options{Now: clock.Now, Seed: 1})
			opts := ProbeOptions{Interval: 5 * time.Minute, Config: gpuprobe.ExporterConfig(), Now: clock.Now}
			opts.Config.MaxMemoryBytes = tc.maxMem
			p, err := NewProbeCollector(staticOpener(gpuprobe.New(drv, gpuprobe.Options{})), &fakeDirectory{gpus: testGPUs[:1], complete: true}, opts)
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				p.RunOnce(context.Background())
			}
			got := gatherProbe(t, p)
			for k := range got {
				if strings.HasPrefix(k, "gpulens_probe_errors_total") {
					t.Errorf("error counted: %s = %v", k, got[k])
				}
			}
			nr := seriesKey("gpulens_probe_not_reported_total", gpu0, "measurement=device_copy", "reason="+gpuprobe.NotReportedBufferBudgetBelowL2)
			copyKey := "gpulens_probe_device_copy_bandwidth_bytes_per_second{" + gpu0 + "}"
			if tc.reported {
				if _, ok := got[nr]; ok || got[copyKey] == 0 {
					t.Errorf("device copy %v, not reported %v: want measured", got[copyKey], got[nr])
				}
				return
			}
			if got[nr] != 3 || got[copyKey] != 0 || got["gpulens_probe_up{"+gpu0+"}"] != 1 {
				t.Errorf("not reported %v, device copy %v, up %v: want 3 runs not reported, no figure, up 1", got[nr], got[copyKey], got["gpulens_probe_up{"+gpu0+"}"])
			}
		})
	}
}
