package collector

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// BenchmarkProcessHostCycle is BenchmarkContentionSamplerCycle's
// time-sliced shape (8 GPUs × 64 processes, every collector) with the
// processes' host counters read from fixture files (as there) or from the
// real procfs (every fake pid a link to this process's /proc entry, so the
// kernel formats stat and io on each read), every cycle (UsageInterval 1 s)
// or every 5th (the default 5 s). Compare cpu-ms/gpu-cycle with
// BenchmarkContentionSamplerCycle/8gpu_timesliced_64proc of the commit
// before the host counters (docs/benchmarks.md).
func BenchmarkProcessHostCycle(b *testing.B) {
	for _, procfs := range []string{"fixture", "procfs"} {
		for _, every := range []time.Duration{time.Second, DefaultUsageInterval} {
			b.Run(fmt.Sprintf("%s/usage-interval=%s", procfs, every), func(b *testing.B) {
				s, clock := newHostBenchFleet(b, 8, 64, procfs == "procfs", every)
				b.ResetTimer()
				cpu0 := cpuTime()
				n := 0
				for b.Loop() {
					clock.Advance(time.Second)
					cycleAll(s)
					n++
				}
				b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/1000/float64(n*8), "cpu-ms/gpu-cycle")
				b.ReportMetric(float64(len(s.Snapshot().Metrics)), "series")
			})
		}
	}
}

// newHostBenchFleet is newBenchFleet's time-sliced shape with a choice of
// procfs and usage interval.
func newHostBenchFleet(b *testing.B, gpus, procsPerGPU int, realProcfs bool, every time.Duration) (*Sampler, *fakeClock) {
	b.Helper()
	root := b.TempDir()
	self := "/proc/" + strconv.Itoa(os.Getpid())
	devs := make([]nvml.Device, gpus)
	var allocs fakeAllocations
	attr := &fakeAttributor{m: map[uint32]Attribution{}}
	for g := range devs {
		d := &benchGPU{Device: newMockDevice(g)}
		d.GetComputeModeFunc = func() (nvml.ComputeMode, nvml.Return) { return nvml.COMPUTEMODE_DEFAULT, nvml.SUCCESS }
		uuid, _ := d.GetUUID()
		allocs = append(allocs, Allocation{Namespace: "ns", Pod: fmt.Sprintf("pod-%d", g), Container: "main", DeviceID: uuid})
		for i := range procsPerGPU {
			pid := uint32(10000 + g*1000 + i)
			d.procs = append(d.procs, nvml.ProcessInfo{Pid: pid, UsedGpuMemory: uint64(i+1) << 24, GpuInstanceId: noInstance, ComputeInstanceId: noInstance})
			if realProcfs {
				if err := os.Symlink(self, filepath.Join(root, strconv.Itoa(int(pid)))); err != nil {
					b.Fatal(err)
				}
			} else {
				writeProc(b, root, int(pid), "python3", []string{"python3", "serve.py", "--port", fmt.Sprint(8000 + i)}, 1000, uint64(pid))
			}
			attr.m[pid] = Attribution{ContainerID: fmt.Sprintf("%064x", pid), Runtime: "containerd", PodUID: "uid"}
		}
		devs[g] = d
	}
	if realProcfs {
		if _, err := os.ReadFile(filepath.Join(self, "io")); err != nil {
			b.Logf("this process's /proc/PID/io is not readable (%v): I/O not read", err)
		}
	}
	lib := newMockLib(devs...)
	lib.GpmSampleAllocFunc = func() (nvml.GpmSample, nvml.Return) { return &benchSample{}, nvml.SUCCESS }
	lib.GpmSampleFreeFunc = func(nvml.GpmSample) nvml.Return { return nvml.SUCCESS }
	lib.GpmMetricsGetFunc = func(m *nvml.GpmMetricsGetType) nvml.Return {
		for i := range m.NumMetrics {
			m.Metrics[i].Value, m.Metrics[i].NvmlReturn = 42, uint32(nvml.SUCCESS)
		}
		return nvml.SUCCESS
	}
	clock := newFakeClock()
	s, err := NewSampler(lib, allCollectors(), false, Config{
		Interval: time.Second, DeviceTimeout: time.Minute, Now: clock.Now,
		Processes: ProcessOptions{ProcRoot: root, Attributor: attr, Allocations: allocs, UsageInterval: every},
	})
	if err != nil {
		b.Fatal(err)
	}
	for range 2 {
		cycleAll(s)
		clock.Advance(time.Second)
	}
	return s, clock
}
