package gpuprobe_test

import (
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
