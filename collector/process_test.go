package collector

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
)

// writeProc writes the procfs files the process collector reads.
func writeProc(t testing.TB, root string, pid int, comm string, args []string, uid int, starttime uint64) {
	t.Helper()
	dir := filepath.Join(root, fmt.Sprint(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"stat":    statLine(pid, comm, 10, 5, 4, starttime, 2000),
		"comm":    comm + "\n",
		"cmdline": strings.Join(args, "\x00") + "\x00",
		"status":  fmt.Sprintf("Name:\t%s\nUid:\t%d\t%d\t%d\t%d\nGid:\t0\t0\t0\t0\n", comm, uid, uid, uid, uid),
		"io":      ioFile(4096, 8192),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// statLine is a /proc/PID/stat line with the given CPU times (clock
// ticks), threads, start time (ticks after boot) and resident pages.
func statLine(pid int, comm string, utime, stime, threads, starttime, rss uint64) string {
	return fmt.Sprintf("%d (%s) S 1 %d %d 0 -1 4194560 1000 0 0 0 %d %d 0 0 20 0 %d 0 %d 100000000 %d 18446744073709551615 1 1 0 0 0 0 0 16781312 17642 0 0 0 17 3 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
		pid, comm, pid, pid, utime, stime, threads, starttime, rss)
}

// ioFile is a /proc/PID/io with the given storage bytes.
func ioFile(read, written uint64) string {
	return fmt.Sprintf("rchar: 123456\nwchar: 654321\nsyscr: 100\nsyscw: 50\nread_bytes: %d\nwrite_bytes: %d\ncancelled_write_bytes: 0\n", read, written)
}

type fakeAttributor struct {
	m     map[uint32]Attribution
	calls int
}

func (f *fakeAttributor) Attribute(pid uint32) Attribution {
	f.calls++
	return f.m[pid]
}

type fakeAllocations []Allocation

func (f fakeAllocations) Lookup(ids ...string) []Allocation {
	var out []Allocation
	for _, a := range f {
		for _, id := range ids {
			if a.DeviceID == id {
				out = append(out, a)
			}
		}
	}
	return out
}

// familySeries keeps the series of the named families (prefix match on
// "family{").
func familySeries(got map[string]float64, families ...string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range got {
		for _, f := range families {
			if strings.HasPrefix(k, f+"{") {
				out[k] = v
			}
		}
	}
	return out
}

func diffSeries(t *testing.T, step string, got, want map[string]float64) {
	t.Helper()
	want = normalized(want)
	for k, v := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("%s: missing %s", step, k)
		} else if g != v {
			t.Errorf("%s: %s = %v, want %v", step, k, g, v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected %s = %v", step, k, v)
		}
	}
}

var processFamilies = []string{
	"gpulens_process_memory_used_bytes", "gpulens_process_sm_utilization_ratio", "gpulens_process_memory_bandwidth_utilization_ratio",
	"gpulens_process_encoder_utilization_ratio", "gpulens_process_decoder_utilization_ratio", "gpulens_process_sm_busy_seconds_total",
	"gpulens_process_info", "gpulens_process_folded", "gpulens_gpu_allocation_info", "gpulens_gpu_sharing_mode",
	"gpulens_gpu_active_processes", "gpulens_gpu_contention_ratio", "gpulens_gpu_contended_seconds_total",
	"gpulens_process_gpu_time_share_ratio",
}

// TestProcessCollectorExactValues covers merging of the process lists,
// sample aggregation through the sampler (lastSeen), procfs reads (one per
// process, a process that vanished before procfs was read), attribution,
// pod allocations, and folding past the cap with exact sums.
func TestProcessCollectorExactValues(t *testing.T) {
	t.Parallel()
	const uuid = "GPU-00000000-0000-0000-0000-000000000000"
	const gib = 1 << 30
	root := t.TempDir()
	writeProc(t, root, 100, "python3", []string{"python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "llama"}, 1000, 12345)
	writeProc(t, root, 200, "jupyter", []string{"jupyter", "lab"}, 1001, 222)
	writeProc(t, root, 400, "Xorg", []string{"/usr/lib/xorg/Xorg", ":0"}, 0, 444)
	// pid 300 exited between the NVML read and the procfs read: no directory.

	clock := newFakeClock()
	clock.Advance(time.Second) // now = t0 + 1 s in µs
	dev := newMockDevice(0)
	dev.GetComputeModeFunc = func() (nvml.ComputeMode, nvml.Return) { return nvml.COMPUTEMODE_DEFAULT, nvml.SUCCESS }
	dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return []nvml.ProcessInfo{
			{Pid: 100, UsedGpuMemory: 3 * gib, GpuInstanceId: noInstance, ComputeInstanceId: noInstance},
			{Pid: 300, UsedGpuMemory: 2 * gib, GpuInstanceId: noInstance, ComputeInstanceId: noInstance},
			{Pid: 200, UsedGpuMemory: 1 * gib, GpuInstanceId: noInstance, ComputeInstanceId: noInstance},
		}, nvml.SUCCESS
	}
	dev.GetGraphicsRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return []nvml.ProcessInfo{
			{Pid: 400, UsedGpuMemory: gib / 2, GpuInstanceId: noInstance, ComputeInstanceId: noInstance},
			{Pid: 100, UsedGpuMemory: 3 * gib, GpuInstanceId: noInstance, ComputeInstanceId: noInstance}, // also compute
		}, nvml.SUCCESS
	}
	var lastSeen []uint64
	dev.GetProcessUtilizationFunc = func(since uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		lastSeen = append(lastSeen, since)
		switch len(lastSeen) {
		case 1:
			return []nvml.ProcessUtilizationSample{
				{Pid: 100, TimeStamp: t0 + 500_000, SmUtil: 50, MemUtil: 50, EncUtil: 25},
				{Pid: 100, TimeStamp: t0 + 1_000_000, SmUtil: 50, MemUtil: 50, EncUtil: 25},
				{Pid: 300, TimeStamp: t0 + 500_000, SmUtil: 25},
				{Pid: 300, TimeStamp: t0 + 1_000_000, SmUtil: 25},
				{Pid: 200, TimeStamp: t0 + 500_000, SmUtil: 25, DecUtil: 50},
				{Pid: 200, TimeStamp: t0 + 1_000_000, SmUtil: 25, DecUtil: 50},
			}, nvml.SUCCESS
		default:
			return []nvml.ProcessUtilizationSample{
				{Pid: 300, TimeStamp: t0 + 1_000_000, SmUtil: 100}, // already read
				{Pid: 100, TimeStamp: t0 + 1_500_000, SmUtil: 100},
				{Pid: 100, TimeStamp: t0 + 2_000_000, SmUtil: 100},
			}, nvml.SUCCESS
		}
	}
	attr := &fakeAttributor{m: map[uint32]Attribution{
		100: {ContainerID: strings.Repeat("ab", 32), Runtime: "containerd", PodUID: "1234-5678"},
	}}
	allocs := fakeAllocations{{Namespace: "serving", Pod: "vllm-0", Container: "vllm", DeviceID: uuid}}
	s, err := NewSampler(newMockLib(dev), allCollectors(), false, Config{
		Interval: time.Second, DeviceTimeout: 5 * time.Second, Now: clock.Now,
		Processes: ProcessOptions{ProcRoot: root, MaxPerGPU: 2, Attributor: attr, Allocations: allocs},
	})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s)

	const gpu = "gpu=0,uuid=" + uuid
	p100 := gpu + ",gpu_instance_id=,compute_instance_id=,pid=100,process_name=python3,namespace=serving,pod=vllm-0,container=vllm"
	p300 := gpu + ",gpu_instance_id=,compute_instance_id=,pid=300,process_name=,namespace=serving,pod=vllm-0,container=vllm"
	other := gpu + ",gpu_instance_id=,compute_instance_id=,pid=other,process_name=,namespace=,pod=,container="
	common := map[string]float64{
		"gpulens_process_memory_used_bytes{" + p100 + "}":  3 * gib,
		"gpulens_process_memory_used_bytes{" + p300 + "}":  2 * gib,
		"gpulens_process_memory_used_bytes{" + other + "}": 1.5 * gib, // pids 200 and 400
		"gpulens_process_info{" + p100 + ",type=compute,container_id=" + strings.Repeat("ab", 32) +
			",container_runtime=containerd,cmdline=python3 -m vllm.entrypoints.openai.api_server --model llama,user=1000}": 1,
		"gpulens_process_info{" + p300 + ",type=compute,container_id=,container_runtime=,cmdline=,user=}": 1,
		"gpulens_process_folded{" + gpu + "}": 2,
		"gpulens_gpu_allocation_info{" + gpu + ",mig_uuid=,namespace=serving,pod=vllm-0,container=vllm}": 1,
		"gpulens_gpu_sharing_mode{" + gpu + ",mode=exclusive}":                                           0,
		"gpulens_gpu_sharing_mode{" + gpu + ",mode=time_sliced}":                                         1,
		"gpulens_gpu_sharing_mode{" + gpu + ",mode=mps}":                                                 0,
		"gpulens_gpu_sharing_mode{" + gpu + ",mode=mig}":                                                 0,
		"gpulens_gpu_sharing_mode{" + gpu + ",mode=idle}":                                                0,
	}
	steps := []map[string]float64{
		{
			// (t0, t0+1s]: 100 at 50 %, 300 and 200 at 25 %: busy 1 s, all contended.
			"gpulens_process_sm_utilization_ratio{" + p100 + "}":                0.5,
			"gpulens_process_sm_utilization_ratio{" + p300 + "}":                0.25,
			"gpulens_process_sm_utilization_ratio{" + other + "}":               0.25,
			"gpulens_process_memory_bandwidth_utilization_ratio{" + p100 + "}":  0.5,
			"gpulens_process_memory_bandwidth_utilization_ratio{" + p300 + "}":  0,
			"gpulens_process_memory_bandwidth_utilization_ratio{" + other + "}": 0,
			"gpulens_process_encoder_utilization_ratio{" + p100 + "}":           0.25,
			"gpulens_process_encoder_utilization_ratio{" + p300 + "}":           0,
			"gpulens_process_encoder_utilization_ratio{" + other + "}":          0,
			"gpulens_process_decoder_utilization_ratio{" + p100 + "}":           0,
			"gpulens_process_decoder_utilization_ratio{" + p300 + "}":           0,
			"gpulens_process_decoder_utilization_ratio{" + other + "}":          0.5,
			"gpulens_process_sm_busy_seconds_total{" + p100 + "}":               0.5,
			"gpulens_process_sm_busy_seconds_total{" + p300 + "}":               0.25,
			"gpulens_process_sm_busy_seconds_total{" + other + "}":              0.25,
			"gpulens_gpu_active_processes{" + gpu + "}":                         3,
			"gpulens_gpu_contention_ratio{" + gpu + "}":                         1,
			"gpulens_gpu_contended_seconds_total{" + gpu + "}":                  1,
			"gpulens_process_gpu_time_share_ratio{" + p100 + "}":                0.5,
			"gpulens_process_gpu_time_share_ratio{" + p300 + "}":                0.25,
			"gpulens_process_gpu_time_share_ratio{" + other + "}":               0.25,
		},
		{
			// (t0+1s, t0+2s]: 100 alone at 100 %.
			"gpulens_process_sm_utilization_ratio{" + p100 + "}":                1,
			"gpulens_process_sm_utilization_ratio{" + p300 + "}":                0,
			"gpulens_process_sm_utilization_ratio{" + other + "}":               0,
			"gpulens_process_memory_bandwidth_utilization_ratio{" + p100 + "}":  0,
			"gpulens_process_memory_bandwidth_utilization_ratio{" + p300 + "}":  0,
			"gpulens_process_memory_bandwidth_utilization_ratio{" + other + "}": 0,
			"gpulens_process_encoder_utilization_ratio{" + p100 + "}":           0,
			"gpulens_process_encoder_utilization_ratio{" + p300 + "}":           0,
			"gpulens_process_encoder_utilization_ratio{" + other + "}":          0,
			"gpulens_process_decoder_utilization_ratio{" + p100 + "}":           0,
			"gpulens_process_decoder_utilization_ratio{" + p300 + "}":           0,
			"gpulens_process_decoder_utilization_ratio{" + other + "}":          0,
			"gpulens_process_sm_busy_seconds_total{" + p100 + "}":               1.5,
			"gpulens_process_sm_busy_seconds_total{" + p300 + "}":               0.25,
			"gpulens_process_sm_busy_seconds_total{" + other + "}":              0.25,
			"gpulens_gpu_active_processes{" + gpu + "}":                         1,
			"gpulens_gpu_contention_ratio{" + gpu + "}":                         0,
			"gpulens_gpu_contended_seconds_total{" + gpu + "}":                  1,
			"gpulens_process_gpu_time_share_ratio{" + p100 + "}":                1,
			"gpulens_process_gpu_time_share_ratio{" + p300 + "}":                0,
			"gpulens_process_gpu_time_share_ratio{" + other + "}":               0,
		},
	}
	for i, step := range steps {
		cycleAll(s)
		for k, v := range common {
			step[k] = v
		}
		got := series(t, reg)
		diffSeries(t, fmt.Sprintf("cycle %d", i+1), familySeries(got, processFamilies...), step)
		if v := got["gpulens_scrape_collector_success{collector=process}"]; v != 1 {
			t.Errorf("cycle %d: process collector success = %v, want 1 (a vanished process is not an error)", i+1, v)
		}
		clock.Advance(time.Second)
	}
	if want := []uint64{t0, t0 + 1_000_000}; fmt.Sprint(lastSeen) != fmt.Sprint(want) {
		t.Errorf("GetProcessUtilization lastSeen arguments %v, want %v (now - interval first, then the newest timestamp)", lastSeen, want)
	}
	if attr.calls != 4 {
		t.Errorf("attributor called %d times over 2 cycles, want 4 (once per process)", attr.calls)
	}
	if n := s.workers[0].state.procs.cache.reads; n != 4 {
		t.Errorf("procfs read %d times over 2 cycles, want 4 (once per process)", n)
	}
}

func TestPodOf(t *testing.T) {
	t.Parallel()
	const g, m = "GPU-a", "MIG-b"
	allocs := []Allocation{
		{Namespace: "ns1", Pod: "whole", Container: "c1", DeviceID: g},
		{Namespace: "ns2", Pod: "mig", Container: "c2", DeviceID: m},
	}
	shared := []Allocation{
		{Namespace: "ns1", Pod: "a", Container: "c", DeviceID: g},
		{Namespace: "ns1", Pod: "b", Container: "c", DeviceID: g},
	}
	twoContainers := []Allocation{
		{Namespace: "ns1", Pod: "a", Container: "c1", DeviceID: g},
		{Namespace: "ns1", Pod: "a", Container: "c2", DeviceID: g},
	}
	tests := []struct {
		name           string
		attr           Attribution
		allocs         []Allocation
		dev            string
		ns, pod, contr string
	}{
		{"whole GPU, one pod", Attribution{}, allocs, g, "ns1", "whole", "c1"},
		{"MIG device", Attribution{}, allocs, m, "ns2", "mig", "c2"},
		{"no allocation", Attribution{}, nil, g, "", "", ""},
		{"time-sliced: several pods, unknown", Attribution{PodUID: "u"}, shared, g, "", "", ""},
		{"attributor knows the pod", Attribution{Namespace: "x", Pod: "y", Container: "z"}, shared, g, "x", "y", "z"},
		{"one pod, two containers", Attribution{}, twoContainers, g, "ns1", "a", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ns, pod, c := podOf(tc.attr, tc.allocs, tc.dev)
			if ns != tc.ns || pod != tc.pod || c != tc.contr {
				t.Errorf("got %q/%q/%q, want %q/%q/%q", ns, pod, c, tc.ns, tc.pod, tc.contr)
			}
		})
	}
}
