package collector

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
)

var hostFamilies = []string{
	"gpulens_process_cpu_seconds_total", "gpulens_process_threads", "gpulens_process_resident_memory_bytes",
	"gpulens_process_io_read_bytes_total", "gpulens_process_io_written_bytes_total",
}

// countingOpener opens procfs files as an unprivileged exporter would: a
// file without read permission fails with EACCES whatever the test's user
// (root reads anything), and it counts the opens by path relative to root.
type countingOpener struct {
	root  string
	mu    sync.Mutex
	opens map[string]int
}

func (o *countingOpener) open(name string) (*os.File, error) {
	rel, _ := filepath.Rel(o.root, name)
	o.mu.Lock()
	o.opens[rel]++
	o.mu.Unlock()
	if st, err := os.Stat(name); err == nil && st.Mode().Perm()&0o444 == 0 {
		return nil, &fs.PathError{Op: "open", Path: name, Err: syscall.EACCES}
	}
	return os.Open(name)
}

func writeFile(t *testing.T, path, data string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// TestProcessHostExactValues: the CPU seconds (ticks / 100), threads,
// resident bytes (pages × 4096) and I/O bytes of the kept processes, with
// /proc/PID/io readable (100), absent (200, a kernel without I/O
// accounting) and unreadable (300, another user's process): the I/O series
// of those two are omitted, the others are there, and the collector does
// not fail. The folded process (400) has none. A process is read when first
// seen (cycle 2), then every 3rd cycle (UsageInterval 3 s at 1 s) by pid,
// when (cycle + pid) % 3 == 0: 300 on cycles 3 and 6, 200 on 4, 100 on 5;
// in between the values of its last read are served. Each file is opened
// once: it stays open between reads, and an io that failed is not tried
// again.
func TestProcessHostExactValues(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	for _, p := range []struct {
		pid  int
		comm string
	}{{100, "python3"}, {200, "torchrun"}, {300, "other-user"}, {400, "Xorg"}} {
		writeProc(t, root, p.pid, p.comm, []string{p.comm}, 1000, uint64(p.pid)*10)
	}
	dir := func(pid int) string { return filepath.Join(root, fmt.Sprint(pid)) }
	writeFile(t, filepath.Join(dir(100), "stat"), statLine(100, "python3", 1234, 56, 24, 1000, 3000), 0o644)
	writeFile(t, filepath.Join(dir(100), "io"), ioFile(4_096_000, 8192), 0o400)
	writeFile(t, filepath.Join(dir(200), "stat"), statLine(200, "torchrun", 250, 50, 8, 2000, 1000), 0o644)
	if err := os.Remove(filepath.Join(dir(200), "io")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir(300), "stat"), statLine(300, "other-user", 100, 0, 1, 3000, 10), 0o644)
	writeFile(t, filepath.Join(dir(300), "io"), ioFile(1, 1), 0o000)

	const gib = 1 << 30
	dev := newMockDevice(0)
	listed := false // no process in cycle 1, which reads the GPU's identity
	dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		if !listed {
			return nil, nvml.SUCCESS
		}
		return []nvml.ProcessInfo{
			{Pid: 100, UsedGpuMemory: 4 * gib, GpuInstanceId: noInstance, ComputeInstanceId: noInstance},
			{Pid: 200, UsedGpuMemory: 3 * gib, GpuInstanceId: noInstance, ComputeInstanceId: noInstance},
			{Pid: 300, UsedGpuMemory: 2 * gib, GpuInstanceId: noInstance, ComputeInstanceId: noInstance},
			{Pid: 400, UsedGpuMemory: 1 * gib, GpuInstanceId: noInstance, ComputeInstanceId: noInstance},
		}, nvml.SUCCESS
	}
	clock := newFakeClock()
	s, err := NewSampler(newMockLib(dev), allCollectors(), false, Config{
		Interval: time.Second, DeviceTimeout: 5 * time.Second, Now: clock.Now,
		Processes: ProcessOptions{ProcRoot: root, MaxPerGPU: 3, UsageInterval: 3 * time.Second, ClockTick: 100, PageSize: 4096},
	})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s)
	cycleAll(s)
	opener := &countingOpener{root: root, opens: map[string]int{}}
	usage := s.workers[0].state.usage
	usage.open = opener.open
	listed = true

	const gpu = "gpu=0,uuid=GPU-00000000-0000-0000-0000-000000000000,gpu_instance_id=,compute_instance_id=,namespace=,pod=,container="
	p100, p200, p300 := gpu+",pid=100,process_name=python3", gpu+",pid=200,process_name=torchrun", gpu+",pid=300,process_name=other-user"
	want := func(cpu100, cpu200 float64) map[string]float64 {
		return map[string]float64{
			"gpulens_process_cpu_seconds_total{" + p100 + ",mode=user}":   cpu100,
			"gpulens_process_cpu_seconds_total{" + p100 + ",mode=system}": 0.56,
			"gpulens_process_threads{" + p100 + "}":                       24,
			"gpulens_process_resident_memory_bytes{" + p100 + "}":         3000 * 4096,
			"gpulens_process_io_read_bytes_total{" + p100 + "}":           4_096_000,
			"gpulens_process_io_written_bytes_total{" + p100 + "}":        8192,
			"gpulens_process_cpu_seconds_total{" + p200 + ",mode=user}":   cpu200,
			"gpulens_process_cpu_seconds_total{" + p200 + ",mode=system}": 0.5,
			"gpulens_process_threads{" + p200 + "}":                       8,
			"gpulens_process_resident_memory_bytes{" + p200 + "}":         1000 * 4096,
			"gpulens_process_cpu_seconds_total{" + p300 + ",mode=user}":   1,
			"gpulens_process_cpu_seconds_total{" + p300 + ",mode=system}": 0,
			"gpulens_process_threads{" + p300 + "}":                       1,
			"gpulens_process_resident_memory_bytes{" + p300 + "}":         10 * 4096,
		}
	}
	// The user CPU seconds of 100 and 200 served after each cycle; after
	// cycle k their stat files say 100: 2000 + 1000 (k-2) ticks, 200:
	// 1000 (k-1).
	steps := []struct{ cpu100, cpu200 float64 }{
		{12.34, 2.5}, // cycle 2: first read of every process
		{12.34, 2.5}, // cycle 3: 300 only
		{12.34, 20},  // cycle 4: 200
		{40, 20},     // cycle 5: 100
		{40, 20},     // cycle 6: 300 only
	}
	for i, st := range steps {
		clock.Advance(time.Second)
		cycleAll(s)
		got := series(t, reg)
		diffSeries(t, fmt.Sprintf("cycle %d", i+2), familySeries(got, hostFamilies...), want(st.cpu100, st.cpu200))
		if v := got["gpulens_scrape_collector_success{collector=process}"]; v != 1 {
			t.Errorf("cycle %d: process collector success = %v, want 1 (an unreadable io is not an error)", i+2, v)
		}
		writeFile(t, filepath.Join(dir(100), "stat"), statLine(100, "python3", uint64(2000+1000*i), 56, 24, 1000, 3000), 0o644)
		writeFile(t, filepath.Join(dir(200), "stat"), statLine(200, "torchrun", uint64(1000*(i+1)), 50, 8, 2000, 1000), 0o644)
	}
	if usage.reads != 7 {
		t.Errorf("%d process reads over 5 cycles, want 7 (3 first reads, then 300, 200, 100, 300)", usage.reads)
	}
	wantOpens := map[string]int{"100/io": 1, "100/stat": 1, "200/io": 1, "200/stat": 1, "300/io": 1, "300/stat": 1}
	if fmt.Sprint(opener.opens) != fmt.Sprint(wantOpens) {
		t.Errorf("opens %v, want %v (each file once: kept open, or not tried again)", opener.opens, wantOpens)
	}
}

// TestProcessHostPidReused: a pid whose start time changes (the process
// exited and another one got its pid) is not read as the old process: its
// host series are omitted in that cycle, and the next cycle reads the new
// process afresh (its identity too).
func TestProcessHostPidReused(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	writeProc(t, root, 100, "python3", []string{"python3"}, 1000, 500)
	dev := newMockDevice(0)
	dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return []nvml.ProcessInfo{{Pid: 100, UsedGpuMemory: 1 << 30, GpuInstanceId: noInstance, ComputeInstanceId: noInstance}}, nvml.SUCCESS
	}
	clock := newFakeClock()
	s, err := NewSampler(newMockLib(dev), allCollectors(), false, Config{
		Interval: time.Second, DeviceTimeout: 5 * time.Second, Now: clock.Now,
		Processes: ProcessOptions{ProcRoot: root, UsageInterval: time.Second, PageSize: 4096},
	})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s)
	key := func(k string) string {
		for n := range normalized(map[string]float64{k: 0}) {
			return n
		}
		return ""
	}
	old := key("gpulens_process_threads{gpu=0,uuid=GPU-00000000-0000-0000-0000-000000000000,gpu_instance_id=,compute_instance_id=,namespace=,pod=,container=,pid=100,process_name=python3}")
	reused := key("gpulens_process_threads{gpu=0,uuid=GPU-00000000-0000-0000-0000-000000000000,gpu_instance_id=,compute_instance_id=,namespace=,pod=,container=,pid=100,process_name=java}")
	cycleAll(s)
	if got := familySeries(series(t, reg), hostFamilies...); got[old] != 4 {
		t.Fatalf("cycle 1: %s = %v, want 4", old, got[old])
	}
	// pid 100 is now another program, started later.
	writeProc(t, root, 100, "java", []string{"java"}, 1000, 900)
	writeFile(t, filepath.Join(root, "100", "stat"), statLine(100, "java", 10, 5, 40, 900, 2000), 0o644)
	clock.Advance(time.Second)
	cycleAll(s)
	if got := familySeries(series(t, reg), hostFamilies...); len(got) != 0 {
		t.Errorf("cycle 2 (pid reused): host series %v, want none", got)
	}
	clock.Advance(time.Second)
	cycleAll(s)
	got := familySeries(series(t, reg), hostFamilies...)
	if got[reused] != 40 || len(got) != 6 {
		t.Errorf("cycle 3: %s = %v (of %d series), want 40 of 6: the new process, read afresh", reused, got[reused], len(got))
	}
}

type fakeUsage map[uint32]ProcessUsage

func (f fakeUsage) ProcessUsage(pid uint32) (ProcessUsage, bool) {
	u, ok := f[pid]
	return u, ok
}

// TestProcessHostFromSource: a ProcessUsageSource (the simulated fleet's)
// replaces procfs: its values as they are, I/O omitted where it says so,
// nothing for a process it does not know.
func TestProcessHostFromSource(t *testing.T) {
	t.Parallel()
	dev := newMockDevice(0)
	dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return []nvml.ProcessInfo{
			{Pid: 7, UsedGpuMemory: 3 << 30, GpuInstanceId: noInstance, ComputeInstanceId: noInstance},
			{Pid: 8, UsedGpuMemory: 2 << 30, GpuInstanceId: noInstance, ComputeInstanceId: noInstance},
			{Pid: 9, UsedGpuMemory: 1 << 30, GpuInstanceId: noInstance, ComputeInstanceId: noInstance},
		}, nvml.SUCCESS
	}
	src := fakeUsage{
		7: {UserSeconds: 90, SystemSeconds: 10, Threads: 24, ResidentBytes: 8 << 30, IO: true, ReadBytes: 5e9, WrittenBytes: 1e6},
		8: {UserSeconds: 1.5, SystemSeconds: 0.25, Threads: 2, ResidentBytes: 1 << 30},
	}
	attr := &fakeAttributor{m: map[uint32]Attribution{
		7: {ProcessName: "train", Namespace: "research", Pod: "train-0", Container: "trainer"},
		8: {ProcessName: "serve"},
	}}
	s, err := NewSampler(newMockLib(dev), allCollectors(), false, Config{
		Interval: time.Second, DeviceTimeout: 5 * time.Second, Now: newFakeClock().Now,
		Processes: ProcessOptions{ProcRoot: os.DevNull, Usage: src, Attributor: attr},
	})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s)
	cycleAll(s)
	const g = "gpu=0,uuid=GPU-00000000-0000-0000-0000-000000000000,gpu_instance_id=,compute_instance_id="
	p7 := g + ",pid=7,process_name=train,namespace=research,pod=train-0,container=trainer"
	p8 := g + ",pid=8,process_name=serve,namespace=,pod=,container="
	diffSeries(t, "source", familySeries(series(t, reg), hostFamilies...), map[string]float64{
		"gpulens_process_cpu_seconds_total{" + p7 + ",mode=user}":   90,
		"gpulens_process_cpu_seconds_total{" + p7 + ",mode=system}": 10,
		"gpulens_process_threads{" + p7 + "}":                       24,
		"gpulens_process_resident_memory_bytes{" + p7 + "}":         8 << 30,
		"gpulens_process_io_read_bytes_total{" + p7 + "}":           5e9,
		"gpulens_process_io_written_bytes_total{" + p7 + "}":        1e6,
		"gpulens_process_cpu_seconds_total{" + p8 + ",mode=user}":   1.5,
		"gpulens_process_cpu_seconds_total{" + p8 + ",mode=system}": 0.25,
		"gpulens_process_threads{" + p8 + "}":                       2,
		"gpulens_process_resident_memory_bytes{" + p8 + "}":         1 << 30,
	})
}

func TestParseStat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		line string
		want procStat
		ok   bool
	}{
		{"fixture", statLine(42, "python3", 1234, 56, 24, 777, 3000), procStat{utime: 1234, stime: 56, threads: 24, starttime: 777, rss: 3000}, true},
		{"name with spaces and parentheses", statLine(42, "a) (b c", 7, 8, 9, 10, 11), procStat{utime: 7, stime: 8, threads: 9, starttime: 10, rss: 11}, true},
		{"no parenthesis", "42 python3 S 1", procStat{}, false},
		{"truncated before rss", "42 (x) S 1 2 3 0 -1 0 0 0 0 0 5 6 0 0 20 0 4 0 99", procStat{}, false},
		{"not a number", strings.Replace(statLine(42, "x", 1, 2, 3, 4, 5), " 3 0 4 ", " x 0 4 ", 1), procStat{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseStat([]byte(tc.line))
			if ok != tc.ok || (ok && got != tc.want) {
				t.Errorf("parseStat(%q) = %+v, %v; want %+v, %v", tc.line, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestParseIO(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		in        string
		read, wrt uint64
		ok        bool
	}{
		{"full file", ioFile(123, 456), 123, 456, true},
		{"no trailing newline", "read_bytes: 5\nwrite_bytes: 6", 5, 6, true},
		{"write_bytes missing", "rchar: 1\nread_bytes: 5\n", 0, 0, false},
		{"garbage", "read_bytes: -1\nwrite_bytes: 2\n", 0, 0, false},
		{"overflow", "read_bytes: 18446744073709551616\nwrite_bytes: 2\n", 0, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, w, ok := parseIO([]byte(tc.in))
			if ok != tc.ok || (ok && (r != tc.read || w != tc.wrt)) {
				t.Errorf("parseIO = %d, %d, %v; want %d, %d, %v", r, w, ok, tc.read, tc.wrt, tc.ok)
			}
		})
	}
}

// mutableAllocations is an AllocationSource the test changes between cycles.
type mutableAllocations struct{ a fakeAllocations }

func (m *mutableAllocations) Lookup(ids ...string) []Allocation { return m.a.Lookup(ids...) }

// TestProcessSeriesRelabelled: the label pairs built once per process follow
// its labels: when the kubelet allocates the GPU to a pod after the first
// cycle, every series of the process (the host series too, from the same
// reading, between two reads) carries the pod from the next cycle on, and
// none keeps the old labels.
func TestProcessSeriesRelabelled(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	writeProc(t, root, 100, "python3", []string{"python3"}, 1000, 500)
	dev := newMockDevice(0)
	dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return []nvml.ProcessInfo{{Pid: 100, UsedGpuMemory: 1 << 30, GpuInstanceId: noInstance, ComputeInstanceId: noInstance}}, nvml.SUCCESS
	}
	allocs := &mutableAllocations{}
	clock := newFakeClock()
	s, err := NewSampler(newMockLib(dev), allCollectors(), false, Config{
		Interval: time.Second, DeviceTimeout: 5 * time.Second, Now: clock.Now,
		Processes: ProcessOptions{ProcRoot: root, Allocations: allocs, PageSize: 4096},
	})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s)
	const g = "gpu=0,uuid=GPU-00000000-0000-0000-0000-000000000000,gpu_instance_id=,compute_instance_id=,pid=100,process_name=python3"
	want := func(pod string) map[string]float64 {
		l := g + ",namespace=,pod=,container="
		if pod != "" {
			l = g + ",namespace=ml,pod=" + pod + ",container=main"
		}
		return map[string]float64{
			"gpulens_process_memory_used_bytes{" + l + "}":                                                            1 << 30,
			"gpulens_process_cpu_seconds_total{" + l + ",mode=user}":                                                  0.1,
			"gpulens_process_cpu_seconds_total{" + l + ",mode=system}":                                                0.05,
			"gpulens_process_threads{" + l + "}":                                                                      4,
			"gpulens_process_resident_memory_bytes{" + l + "}":                                                        2000 * 4096,
			"gpulens_process_io_read_bytes_total{" + l + "}":                                                          4096,
			"gpulens_process_io_written_bytes_total{" + l + "}":                                                       8192,
			"gpulens_process_info{" + l + ",type=compute,container_id=,container_runtime=,cmdline=python3,user=1000}": 1,
		}
	}
	families := append([]string{"gpulens_process_memory_used_bytes", "gpulens_process_info"}, hostFamilies...)
	cycleAll(s)
	diffSeries(t, "cycle 1, no pod", familySeries(series(t, reg), families...), want(""))
	allocs.a = fakeAllocations{{Namespace: "ml", Pod: "train-0", Container: "main", DeviceID: "GPU-00000000-0000-0000-0000-000000000000"}}
	clock.Advance(time.Second)
	cycleAll(s)
	diffSeries(t, "cycle 2, allocated", familySeries(series(t, reg), families...), want("train-0"))
	if n := s.workers[0].state.usage.reads; n != 1 {
		t.Errorf("%d reads in 2 cycles, want 1 (the second cycle relabels the first reading)", n)
	}
}
