package collector

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/prometheus/client_golang/prometheus"
)

// benchGPU is a mock GPU with many processes, optionally in MIG mode with
// seven 1g.10gb instances; the process, MIG and GPM calls are answered
// without the mock's call recording.
type benchGPU struct {
	*mock.Device
	mig   []nvml.Device
	procs []nvml.ProcessInfo
}

type benchMIG struct {
	nvml.Device // nil: any other call panics
	uuid        string
	gi          int
}

func (m *benchMIG) GetUUID() (string, nvml.Return)           { return m.uuid, nvml.SUCCESS }
func (m *benchMIG) GetGpuInstanceId() (int, nvml.Return)     { return m.gi, nvml.SUCCESS }
func (m *benchMIG) GetComputeInstanceId() (int, nvml.Return) { return 0, nvml.SUCCESS }
func (m *benchMIG) GetName() (string, nvml.Return) {
	return "NVIDIA H100 80GB HBM3 MIG 1g.10gb", nvml.SUCCESS
}
func (m *benchMIG) GetMemoryInfo_v2() (nvml.Memory_v2, nvml.Return) {
	return nvml.Memory_v2{Total: 10240 << 20, Used: 4096 << 20, Free: 6144 << 20}, nvml.SUCCESS
}

func (g *benchGPU) GetMigMode() (int, int, nvml.Return) {
	if len(g.mig) > 0 {
		return nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS
	}
	return nvml.DEVICE_MIG_DISABLE, nvml.DEVICE_MIG_DISABLE, nvml.SUCCESS
}
func (g *benchGPU) GetMaxMigDeviceCount() (int, nvml.Return) { return 7, nvml.SUCCESS }
func (g *benchGPU) GetMigDeviceHandleByIndex(i int) (nvml.Device, nvml.Return) {
	if i < len(g.mig) {
		return g.mig[i], nvml.SUCCESS
	}
	return nil, nvml.ERROR_NOT_FOUND
}
func (g *benchGPU) GetComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	return g.procs, nvml.SUCCESS
}
func (g *benchGPU) GetGraphicsRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	return nil, nvml.SUCCESS
}
func (g *benchGPU) GetMPSComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	return nil, nvml.SUCCESS
}

// GetProcessUtilization returns five samples per process, 200 ms apart,
// after lastSeen.
func (g *benchGPU) GetProcessUtilization(since uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
	if len(g.mig) > 0 {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	out := make([]nvml.ProcessUtilizationSample, 0, 5*len(g.procs))
	for k := uint64(1); k <= 5; k++ {
		for i, p := range g.procs {
			out = append(out, nvml.ProcessUtilizationSample{Pid: p.Pid, TimeStamp: since + k*200_000, SmUtil: uint32(i % 5), MemUtil: uint32(i % 3)})
		}
	}
	return out, nvml.SUCCESS
}
func (g *benchGPU) GpmQueryDeviceSupport() (nvml.GpmSupport, nvml.Return) {
	return nvml.GpmSupport{Version: 1, IsSupportedDevice: 1}, nvml.SUCCESS
}
func (g *benchGPU) GpmSampleGet(nvml.GpmSample) nvml.Return         { return nvml.SUCCESS }
func (g *benchGPU) GpmMigSampleGet(int, nvml.GpmSample) nvml.Return { return nvml.SUCCESS }

type benchSample struct{ nvml.GpmSample }

func newBenchFleet(b testing.TB, gpus, procsPerGPU int, mig bool) (*Sampler, *Exposition, *fakeClock) {
	b.Helper()
	root := b.TempDir()
	devs := make([]nvml.Device, gpus)
	var allocs fakeAllocations
	attr := &fakeAttributor{m: map[uint32]Attribution{}}
	for g := range devs {
		d := &benchGPU{Device: newMockDevice(g)}
		d.GetComputeModeFunc = func() (nvml.ComputeMode, nvml.Return) { return nvml.COMPUTEMODE_DEFAULT, nvml.SUCCESS }
		uuid, _ := d.GetUUID()
		if mig {
			for i := range 7 {
				m := &benchMIG{uuid: fmt.Sprintf("MIG-%08d-%04d-0000-0000-000000000000", g, i), gi: i + 1}
				d.mig = append(d.mig, m)
				allocs = append(allocs, Allocation{Namespace: "ns", Pod: fmt.Sprintf("pod-%d-%d", g, i), Container: "main", DeviceID: m.uuid})
			}
		} else {
			allocs = append(allocs, Allocation{Namespace: "ns", Pod: fmt.Sprintf("pod-%d", g), Container: "main", DeviceID: uuid})
		}
		for i := range procsPerGPU {
			pid := uint32(10000 + g*1000 + i)
			p := nvml.ProcessInfo{Pid: pid, UsedGpuMemory: uint64(i+1) << 24, GpuInstanceId: noInstance, ComputeInstanceId: noInstance}
			if mig {
				p.GpuInstanceId, p.ComputeInstanceId = uint32(1+i%7), 0
			}
			d.procs = append(d.procs, p)
			writeProc(b, root, int(pid), "python3", []string{"python3", "serve.py", "--port", fmt.Sprint(8000 + i)}, 1000, uint64(pid))
			attr.m[pid] = Attribution{ContainerID: fmt.Sprintf("%064x", pid), Runtime: "containerd", PodUID: "uid"}
		}
		devs[g] = d
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
		Processes: ProcessOptions{ProcRoot: root, Attributor: attr, Allocations: allocs},
	})
	if err != nil {
		b.Fatal(err)
	}
	live := prometheus.NewRegistry()
	live.MustRegister(s.Live())
	for range 2 {
		cycleAll(s)
		clock.Advance(time.Second)
	}
	return s, NewExposition(s, live, ExpositionOptions{Now: clock.Now}), clock
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

var benchShapes = []struct {
	name string
	mig  bool
}{{"8gpu_7mig_64proc", true}, {"8gpu_timesliced_64proc", false}}

// BenchmarkContentionScrape serves the snapshot of 8 GPUs × 7 MIG
// instances × 64 processes (and a time-sliced variant) over HTTP on
// 127.0.0.1 and reports the median scrape time.
func BenchmarkContentionScrape(b *testing.B) {
	for _, shape := range benchShapes {
		b.Run(shape.name, func(b *testing.B) {
			_, h, _ := newBenchFleet(b, 8, 64, shape.mig)
			srv := httptest.NewServer(h)
			defer srv.Close()
			client := srv.Client()
			var bytes int64
			durs := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for b.Loop() {
				t0 := time.Now()
				resp, err := client.Get(srv.URL)
				if err != nil {
					b.Fatal(err)
				}
				n, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("status %d", resp.StatusCode)
				}
				durs = append(durs, time.Since(t0))
				bytes = n
			}
			slices.Sort(durs)
			b.ReportMetric(float64(durs[len(durs)/2].Microseconds())/1000, "ms-median/scrape")
			b.ReportMetric(float64(bytes), "bytes/scrape")
		})
	}
}

// BenchmarkContentionSamplerCycle runs one sampler cycle of every GPU (all
// collectors) and reports the CPU time per GPU cycle.
func BenchmarkContentionSamplerCycle(b *testing.B) {
	for _, shape := range benchShapes {
		b.Run(shape.name, func(b *testing.B) {
			s, _, clock := newBenchFleet(b, 8, 64, shape.mig)
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

// BenchmarkContentionRender is the work behind those scrapes: gathering,
// encoding and compressing every series once, which the exposition does
// once per new snapshot that someone scrapes.
func BenchmarkContentionRender(b *testing.B) {
	for _, shape := range benchShapes {
		b.Run(shape.name, func(b *testing.B) {
			_, h, _ := newBenchFleet(b, 8, 64, shape.mig)
			b.ReportAllocs()
			var r *rendered
			for b.Loop() {
				h.renderMu.Lock()
				var err error
				r, err = h.render()
				h.renderMu.Unlock()
				if err != nil {
					b.Fatal(err)
				}
			}
			text, _ := r.text()
			b.ReportMetric(float64(len(text)), "bytes-plain")
			b.ReportMetric(float64(len(r.bodies[formatText].Load().gz)), "bytes-gzip")
		})
	}
}

// BenchmarkContentionScrapeHandler is the exporter's side of the same
// scrape alone (no client, no network, no gzip: the request does not ask
// for it).
func BenchmarkContentionScrapeHandler(b *testing.B) {
	for _, shape := range benchShapes {
		b.Run(shape.name, func(b *testing.B) {
			_, h, _ := newBenchFleet(b, 8, 64, shape.mig)
			req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
			durs := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			for b.Loop() {
				t0 := time.Now()
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatal(rec.Code)
				}
				durs = append(durs, time.Since(t0))
			}
			slices.Sort(durs)
			b.ReportMetric(float64(durs[len(durs)/2].Microseconds())/1000, "ms-median/scrape")
		})
	}
}
