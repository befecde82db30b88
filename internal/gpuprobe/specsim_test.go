package gpuprobe_test

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpulens/gpulens/internal/gpuprobe"
	"github.com/gpulens/gpulens/internal/gpuspec"
	"github.com/gpulens/gpulens/internal/sim/simdriver"
)

// specContextBytes is the per-context memory the spec-table devices take:
// above what the simulated fleet gives any model (600 MiB on a B200).
const specContextBytes = 640 << 20

// specDevice is a simulated device of a spec-table model delivering what
// the probe should reach on a healthy card (Spec.Expected).
func specDevice(t *testing.T, s gpuspec.Spec) simdriver.Device {
	t.Helper()
	major, minor, ok := strings.Cut(s.ComputeCapability, ".")
	ma, err1 := strconv.Atoi(major)
	mi, err2 := strconv.Atoi(minor)
	if !ok || err1 != nil || err2 != nil {
		t.Fatalf("%s: compute capability %q", s.Key, s.ComputeCapability)
	}
	threads := 2048
	if (ma == 8 && mi >= 6) || ma == 12 {
		threads = 1536
	}
	e := s.Expected()
	return simdriver.Device{
		Name: "NVIDIA " + s.Model, UUID: "GPU-00000000-0000-0000-0000-0000000000" + strconv.Itoa(10+len(s.Key)),
		PCIBusID: "00000000:18:00.0", CCMajor: ma, CCMinor: mi, SMs: s.SMs,
		TotalMemoryBytes: s.MemoryBytes, L2CacheBytes: int(s.L2CacheBytes), MaxThreadsPerSM: threads,
		ContextMemoryBytes: specContextBytes,
		H2DBytesPerSecond:  e.H2DBytesPerSecond, D2HBytesPerSecond: e.D2HBytesPerSecond,
		DeviceCopyBytesPerSecond: e.DeviceCopyBytesPerSecond, FP32FLOPS: e.FP32FLOPS,
		FP16TensorFLOPS: e.FP16TensorFLOPS, BF16TensorFLOPS: e.BF16TensorFLOPS,
		LaunchLatency: 6 * time.Microsecond, TimerResolution: 32 * time.Nanosecond,
	}
}

// launchRecorder records the largest iteration count each compute kernel
// was launched with.
type launchRecorder struct {
	gpuprobe.Driver
	names    map[gpuprobe.Function]string
	maxIters map[string]uint64
}

func (r *launchRecorder) ModuleGetFunction(m gpuprobe.Module, name string) (gpuprobe.Function, error) {
	f, err := r.Driver.ModuleGetFunction(m, name)
	if err == nil {
		r.names[f] = name
	}
	return f, err
}

func (r *launchRecorder) LaunchKernel(f gpuprobe.Function, grid, block gpuprobe.Dim3, shm uint32, args ...uint64) error {
	switch n := r.names[f]; n {
	case gpuprobe.KernelFMA, gpuprobe.KernelMMAF16, gpuprobe.KernelMMABF16:
		r.maxIters[n] = max(r.maxIters[n], args[1])
	}
	return r.Driver.LaunchKernel(f, grid, block, shm, args...)
}

// probeLaunchIters is the largest iteration count a probe at gpulens-verify's
// defaults launches each compute kernel with, over every model of the spec
// table: how long the emulations must run.
func probeLaunchIters(t *testing.T) map[string]uint64 {
	t.Helper()
	launchItersMu.Lock()
	defer launchItersMu.Unlock()
	if launchIters != nil {
		return launchIters
	}
	out := map[string]uint64{}
	for _, s := range gpuspec.All() {
		dev := specDevice(t, s)
		rec := &launchRecorder{Driver: simdriver.New([]simdriver.Device{dev}, simdriver.Options{Now: func() time.Time { return base }, Seed: 7}),
			names: map[gpuprobe.Function]string{}, maxIters: map[string]uint64{}}
		p := gpuprobe.New(rec, gpuprobe.Options{FreeMemory: nvmlFree([]simdriver.Device{dev})})
		probe(t, p, gpuprobe.DefaultConfig())
		for k, v := range rec.maxIters {
			out[k] = max(out[k], v)
		}
	}
	launchIters = out
	return out
}

// launchIters caches probeLaunchIters (15 probes).
var (
	launchItersMu sync.Mutex
	launchIters   map[string]uint64
)

// TestEverySpecModelProbes: with the exporter's and gpulens-verify's
// default settings, the probe of every model of the spec table runs every
// measurement without an error or a figure left out, its device copy on
// buffers of at least 4 × the model's L2, whether NVML's free memory before
// the context is known or not. With the exporter's old 1280 MiB budget a
// B200 (126 MiB L2) failed its device copy on every run
// (gpulens_probe_errors_total{measurement="device_copy"}), so that
// GpulensGPUProbeFailing fired for good on healthy B200 nodes.
func TestEverySpecModelProbes(t *testing.T) {
	for _, cfg := range []struct {
		name string
		cfg  gpuprobe.Config
	}{
		{"exporter", gpuprobe.ExporterConfig()},
		{"verify", gpuprobe.DefaultConfig()},
	} {
		for _, s := range gpuspec.All() {
			for _, known := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/%s/free known %t", cfg.name, s.Key, known), func(t *testing.T) {
					dev := specDevice(t, s)
					drv := simdriver.New([]simdriver.Device{dev}, simdriver.Options{Now: func() time.Time { return base }, Seed: 7})
					opts := gpuprobe.Options{}
					if known {
						opts.FreeMemory = nvmlFree([]simdriver.Device{dev})
					}
					res := probe(t, gpuprobe.New(drv, opts), cfg.cfg)
					if res.Skipped != nil || len(res.Errors) > 0 || len(res.NotReported) > 0 {
						t.Fatalf("skipped %+v, errors %+v, not reported %+v; want every measurement", res.Skipped, res.Errors, res.NotReported)
					}
					e := s.Expected()
					within(t, "device copy", res.DeviceCopyBytesPerSecond, e.DeviceCopyBytesPerSecond, 0.03)
					within(t, "FP32", res.FP32FLOPS, e.FP32FLOPS, 0.03)
					if res.Stolen == nil || res.LaunchLatency == 0 || res.H2DBytesPerSecond == 0 || res.FP16TensorFLOPS == 0 {
						t.Errorf("figures missing: %+v", res)
					}
					// What the probe took fits in what it checked free.
					if need := gpuprobe.MemoryNeed(res.Device, cfg.cfg); need > cfg.cfg.MaxMemoryBytes || res.BufferBudgetBytes < 2*gpuprobe.L2BufferFactor*s.L2CacheBytes {
						t.Errorf("memory need %d (budget %d), buffer budget %d: want the budget to hold two buffers of 4 × L2 (%d)", need, cfg.cfg.MaxMemoryBytes, res.BufferBudgetBytes, s.L2CacheBytes)
					}
				})
			}
		}
	}
}

// TestDeviceCopyNotReportedBelowL2: a budget too small for two buffers of
// 4 × L2 leaves the device copy out, as not reported with its reason, not
// as an error: the figure would be the L2's, and nothing failed.
func TestDeviceCopyNotReportedBelowL2(t *testing.T) {
	s, err := gpuspec.ByKey("b200")
	if err != nil {
		t.Fatal(err)
	}
	dev := specDevice(t, s)
	drv := simdriver.New([]simdriver.Device{dev}, simdriver.Options{Now: func() time.Time { return base }, Seed: 7})
	cfg := gpuprobe.ExporterConfig()
	cfg.MaxMemoryBytes = 1280 << 20 // the exporter's old default
	res := probe(t, gpuprobe.New(drv, gpuprobe.Options{FreeMemory: nvmlFree([]simdriver.Device{dev})}), cfg)
	if len(res.Errors) > 0 {
		t.Errorf("errors %+v, want none", res.Errors)
	}
	if len(res.NotReported) != 1 || res.NotReported[0].Measurement != gpuprobe.MeasureDeviceCopy ||
		res.NotReported[0].Reason != gpuprobe.NotReportedBufferBudgetBelowL2 || !strings.Contains(res.NotReported[0].Detail, "126 MiB L2") ||
		!strings.Contains(res.NotReported[0].Detail, "raise the probe's memory budget to at least 1648MiB") {
		t.Errorf("not reported %+v, want device_copy %s naming the 126 MiB L2 and the budget to set, 1648MiB", res.NotReported, gpuprobe.NotReportedBufferBudgetBelowL2)
	}
	if res.DeviceCopyBytesPerSecond != 0 || res.FP32FLOPS == 0 || res.Stolen == nil {
		t.Errorf("device copy %g, FP32 %g, stolen %v: want no device copy, the rest measured", res.DeviceCopyBytesPerSecond, res.FP32FLOPS, res.Stolen)
	}
}
