package gpusim

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func TestNoisyNeighbourTenants(t *testing.T) {
	t.Parallel()
	f, lib, clk := newTestFleet(t, mustLoad(t, "noisy-neighbour"), 1)
	d := handle(t, lib, 0)
	const mi = uint64(1 << 20)
	tests := []struct {
		at      time.Duration
		pids    []uint32
		usedMiB uint64
		minUtil uint32
		maxUtil uint32
		tenants []string
	}{
		{1 * time.Minute, []uint32{4242}, 30720, 20, 50, []string{"llm-serve"}},
		{3 * time.Minute, []uint32{4242, 5151}, 30720 + 40960, 85, 100, []string{"llm-serve", "batch-train"}},
		{5*time.Minute + time.Second, []uint32{4242}, 30720, 20, 50, []string{"llm-serve"}},
		{9 * time.Minute, []uint32{4242, 5158}, 30720 + 40960, 85, 100, []string{"llm-serve", "batch-train"}},
	}
	for _, tc := range tests {
		clk.Set(tc.at)
		procs, r := d.GetComputeRunningProcesses()
		if r != nvml.SUCCESS || len(procs) != len(tc.pids) {
			t.Fatalf("at %v: processes %+v, %v; want pids %v", tc.at, procs, r, tc.pids)
		}
		var sum uint64
		for i, p := range procs {
			if p.Pid != tc.pids[i] || p.GpuInstanceId != 0xFFFFFFFF || p.ComputeInstanceId != 0xFFFFFFFF {
				t.Errorf("at %v: process %d = %+v", tc.at, i, p)
			}
			sum += p.UsedGpuMemory
		}
		mem, _ := d.GetMemoryInfo_v2()
		if mem.Used != tc.usedMiB*mi || sum != mem.Used {
			t.Errorf("at %v: device used %d, processes %d; want %d MiB", tc.at, mem.Used, sum, tc.usedMiB)
		}
		u, _ := d.GetUtilizationRates()
		if u.Gpu < tc.minUtil || u.Gpu > tc.maxUtil {
			t.Errorf("at %v: util %d; want %d-%d", tc.at, u.Gpu, tc.minUtil, tc.maxUtil)
		}
		var names []string
		for _, p := range f.Processes() {
			if p.GPU == 0 {
				names = append(names, p.Tenant)
			}
		}
		if strings.Join(names, ",") != strings.Join(tc.tenants, ",") {
			t.Errorf("at %v: Processes() tenants on GPU 0 = %v; want %v", tc.at, names, tc.tenants)
		}
	}
	clk.Set(3 * time.Minute)
	var batch *Process
	for _, p := range f.Processes() {
		if p.PID == 5151 {
			p := p
			batch = &p
		}
	}
	uuid, _ := d.GetUUID()
	want := Process{PID: 5151, Name: "torchrun", Tenant: "batch-train", Type: "compute", Container: "trainer",
		Pod: "nightly-finetune-7f9c", Namespace: "research", GPU: 0, GPUUUID: uuid, UsedMemoryBytes: 40960 * mi,
		GpuInstanceID: 0xFFFFFFFF, ComputeInstanceID: 0xFFFFFFFF}
	if batch == nil || *batch != want {
		t.Errorf("batch process = %+v; want %+v", batch, want)
	}
	if g, _ := d.GetGraphicsRunningProcesses(); len(g) != 0 {
		t.Errorf("graphics processes %+v", g)
	}
}

func TestProcessUtilizationSamples(t *testing.T) {
	t.Parallel()
	_, lib, clk := newTestFleet(t, mustLoad(t, "noisy-neighbour"), 1)
	d := handle(t, lib, 0)
	clk.Set(3*time.Minute + 50*time.Millisecond)
	samples, r := d.GetProcessUtilization(0)
	// 10 s kept, one sample per 1/6 s period: 60 periods x 2 busy tenants.
	if r != nvml.SUCCESS || len(samples) != 120 {
		t.Fatalf("GetProcessUtilization(0) = %d samples, %v; want 120", len(samples), r)
	}
	startUs := uint64(epoch.UnixMicro())
	last := samples[len(samples)-1]
	if want := startUs + 180_000_000; last.TimeStamp != want {
		t.Errorf("newest timestamp %d; want %d (start + 180 s, the end of its period)", last.TimeStamp, want)
	}
	if first := samples[0].TimeStamp; first != startUs+170_166_667 {
		t.Errorf("oldest timestamp %d; want start + 170.166667 s (the end of the oldest period kept)", first)
	}
	for _, s := range samples {
		if s.Pid == 5151 && (s.SmUtil < 60 || s.SmUtil > 80 || s.MemUtil != 55) {
			t.Errorf("batch sample %+v; want sm 70±5, mem 55", s)
		}
	}
	// Only samples strictly newer than lastSeen come back.
	clk.Set(3*time.Minute + 450*time.Millisecond)
	newer, r := d.GetProcessUtilization(last.TimeStamp)
	if r != nvml.SUCCESS || len(newer) != 4 || newer[0].TimeStamp != last.TimeStamp+166_667 || newer[3].TimeStamp != last.TimeStamp+333_333 {
		t.Errorf("newer samples = %+v, %v; want 2 periods x 2 tenants", newer, r)
	}
	if _, r := d.GetProcessUtilization(newer[3].TimeStamp); r != nvml.ERROR_NOT_FOUND {
		t.Errorf("nothing newer: %v; want ERROR_NOT_FOUND", r)
	}
}

func TestVRAMLeakRestarts(t *testing.T) {
	t.Parallel()
	f, lib, clk := newTestFleet(t, mustLoad(t, "vram-leak"), 1)
	d := handle(t, lib, 0)
	tests := []struct {
		at      time.Duration
		pid     uint32
		maxFree float64 // ratio of total
		minFree float64
	}{
		{time.Second, 7000, 1, 0.9},
		{19*time.Minute + 59*time.Second, 7000, 0.05, 0.03},
		{20*time.Minute + time.Second, 7007, 1, 0.9},
		{40*time.Minute + time.Second, 7014, 1, 0.9},
	}
	for _, tc := range tests {
		clk.Set(tc.at)
		procs, _ := d.GetComputeRunningProcesses()
		mem, _ := d.GetMemoryInfo_v2()
		free := float64(mem.Free) / float64(mem.Total)
		if len(procs) != 1 || procs[0].Pid != tc.pid || free > tc.maxFree || free < tc.minFree {
			t.Errorf("at %v: procs %+v free %.3f; want pid %d, free in [%.2f, %.2f]", tc.at, procs, free, tc.pid, tc.minFree, tc.maxFree)
		}
		if p := f.Processes(); len(p) != 1 || p[0].PID != tc.pid {
			t.Errorf("at %v: Processes() = %+v", tc.at, p)
		}
	}
}

func TestMIGMixed(t *testing.T) {
	t.Parallel()
	_, lib, clk := newTestFleet(t, mustLoad(t, "mig-mixed"), 1)
	clk.Set(2 * time.Minute)
	d := handle(t, lib, 0)
	if c, p, r := d.GetMigMode(); r != nvml.SUCCESS || c != nvml.DEVICE_MIG_ENABLE || p != nvml.DEVICE_MIG_ENABLE {
		t.Fatalf("GetMigMode = %d %d %v", c, p, r)
	}
	if n, r := d.GetMaxMigDeviceCount(); r != nvml.SUCCESS || n != 7 {
		t.Errorf("GetMaxMigDeviceCount = %d, %v", n, r)
	}
	if ok, _ := d.IsMigDeviceHandle(); ok {
		t.Error("full GPU reports IsMigDeviceHandle")
	}
	if _, r := d.GetUtilizationRates(); r != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("GetUtilizationRates in MIG mode = %v; want ERROR_NOT_SUPPORTED", r)
	}
	const mi = uint64(1 << 20)
	tests := []struct {
		name  string
		gi    int
		total uint64
		used  uint64
	}{
		{"NVIDIA H100 80GB HBM3 MIG 3g.40gb", 1, 40960 * mi, 30000 * mi},
		{"NVIDIA H100 80GB HBM3 MIG 2g.20gb", 2, 20480 * mi, 12000 * mi},
		{"NVIDIA H100 80GB HBM3 MIG 1g.10gb", 3, 10240 * mi, 9000 * mi}, // cron-c runs 1m-4m
		{"NVIDIA H100 80GB HBM3 MIG 1g.10gb", 4, 10240 * mi, 0},
	}
	for i, tc := range tests {
		m, r := d.GetMigDeviceHandleByIndex(i)
		if r != nvml.SUCCESS {
			t.Fatalf("GetMigDeviceHandleByIndex(%d) = %v", i, r)
		}
		name, _ := m.GetName()
		uuid, _ := m.GetUUID()
		gi, _ := m.GetGpuInstanceId()
		ci, _ := m.GetComputeInstanceId()
		isMig, _ := m.IsMigDeviceHandle()
		parent, _ := m.GetDeviceHandleFromMigDeviceHandle()
		mem, _ := m.GetMemoryInfo_v2()
		if name != tc.name || !strings.HasPrefix(uuid, "MIG-") || gi != tc.gi || ci != 0 || !isMig || parent != d ||
			mem.Total != tc.total || mem.Used != tc.used || mem.Free != tc.total-tc.used {
			t.Errorf("MIG %d: %q %s gi %d ci %d mig %v parent ok %v mem %+v; want %+v", i, name, uuid, gi, ci, isMig, parent == d, mem, tc)
		}
	}
	if _, r := d.GetMigDeviceHandleByIndex(4); r != nvml.ERROR_NOT_FOUND {
		t.Errorf("GetMigDeviceHandleByIndex(4) = %v; want ERROR_NOT_FOUND", r)
	}
	procs, _ := d.GetComputeRunningProcesses()
	if len(procs) != 3 || procs[0] != (nvml.ProcessInfo{Pid: 3100, UsedGpuMemory: 30000 * mi, GpuInstanceId: 1, ComputeInstanceId: 0}) {
		t.Errorf("MIG processes = %+v", procs)
	}
}

func TestGPMMetrics(t *testing.T) {
	t.Parallel()
	sc := mustParse(t, `
devices:
  - {model: h100-sxm5-80gb, mig: [3g.40gb, 4g.40gb]}
  - {model: a100-sxm4-80gb, util: 50}
  - {model: h100-sxm5-80gb, util: {shape: ramp, min: 0, max: 100, period: 100s}, memory_util: 40}
tenants:
  - {name: a, gpu: 0, mig_instance: 0, sm_util: 80, memory_util: 30, memory: 1000}
  - {name: b, gpu: 0, mig_instance: 1, sm_util: 20, memory_util: 10, memory: 1000}
`)
	f, lib, clk := newTestFleet(t, sc, 1)
	if s, _ := handle(t, lib, 1).GpmQueryDeviceSupport(); s.IsSupportedDevice != 0 {
		t.Error("A100 reports GPM support")
	}
	if s, _ := handle(t, lib, 2).GpmQueryDeviceSupport(); s.IsSupportedDevice != 1 {
		t.Error("H100 lacks GPM support")
	}
	metrics := func(s1, s2 nvml.GpmSample) map[nvml.GpmMetricId]float64 {
		ids := []nvml.GpmMetricId{nvml.GPM_METRIC_SM_UTIL, nvml.GPM_METRIC_GRAPHICS_UTIL, nvml.GPM_METRIC_SM_OCCUPANCY,
			nvml.GPM_METRIC_ANY_TENSOR_UTIL, nvml.GPM_METRIC_DRAM_BW_UTIL, nvml.GPM_METRIC_FP64_UTIL}
		m := &nvml.GpmMetricsGetType{Version: nvml.GPM_METRICS_GET_VERSION, NumMetrics: uint32(len(ids)), Sample1: s1, Sample2: s2}
		for i, id := range ids {
			m.Metrics[i].MetricId = uint32(id)
		}
		if r := lib.GpmMetricsGet(m); r != nvml.SUCCESS {
			t.Fatalf("GpmMetricsGet = %v", r)
		}
		out := map[nvml.GpmMetricId]float64{}
		for i, id := range ids {
			if m.Metrics[i].NvmlReturn == uint32(nvml.SUCCESS) {
				out[id] = m.Metrics[i].Value
			}
		}
		return out
	}
	s1, _ := lib.GpmSampleAlloc()
	s2, _ := lib.GpmSampleAlloc()
	// The ramp's mean over [20 s, 60 s] is 40 %.
	d := handle(t, lib, 2)
	clk.Set(20 * time.Second)
	d.GpmSampleGet(s1)
	clk.Set(60 * time.Second)
	d.GpmSampleGet(s2)
	got := metrics(s1, s2)
	want := map[nvml.GpmMetricId]float64{nvml.GPM_METRIC_SM_UTIL: 40, nvml.GPM_METRIC_GRAPHICS_UTIL: 40,
		nvml.GPM_METRIC_SM_OCCUPANCY: 24, nvml.GPM_METRIC_ANY_TENSOR_UTIL: 18, nvml.GPM_METRIC_DRAM_BW_UTIL: 40}
	for id, w := range want {
		if g, ok := got[id]; !ok || g < w-1e-9 || g > w+1e-9 {
			t.Errorf("metric %d = %v; want %v", id, g, w)
		}
	}
	if _, ok := got[nvml.GPM_METRIC_FP64_UTIL]; ok || len(got) != len(want) {
		t.Errorf("unsupported metric reported: %v", got)
	}
	// Per MIG instance: the instance's own tenant.
	mig := handle(t, lib, 0)
	for gi, wantSM := range map[int]float64{1: 80, 2: 20} {
		clk.Set(time.Minute)
		if r := mig.GpmMigSampleGet(gi, s1); r != nvml.SUCCESS {
			t.Fatalf("GpmMigSampleGet(%d) = %v", gi, r)
		}
		clk.Set(2 * time.Minute)
		s2.MigGet(mig, gi)
		if g := metrics(s1, s2)[nvml.GPM_METRIC_SM_UTIL]; g != wantSM {
			t.Errorf("GPU instance %d SM_UTIL = %v; want %v", gi, g, wantSM)
		}
	}
	if r := handle(t, lib, 1).GpmSampleGet(s1); r != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("A100 GpmSampleGet = %v", r)
	}
	// Two samples at the same sim time (a fleet whose Start is still ahead
	// holds sim time at 0) give the activity of that instant; samples in
	// the wrong order are an error.
	clk.Set(30 * time.Second)
	d.GpmSampleGet(s1)
	d.GpmSampleGet(s2)
	if g := metrics(s1, s2)[nvml.GPM_METRIC_SM_UTIL]; g != 30 {
		t.Errorf("SM_UTIL between two samples at 30 s = %v; want the ramp's 30", g)
	}
	clk.Set(40 * time.Second)
	d.GpmSampleGet(s2)
	m := &nvml.GpmMetricsGetType{Version: nvml.GPM_METRICS_GET_VERSION, NumMetrics: 1, Sample1: s2, Sample2: s1}
	m.Metrics[0].MetricId = uint32(nvml.GPM_METRIC_SM_UTIL)
	if r := lib.GpmMetricsGet(m); r != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("GpmMetricsGet with the later sample first = %v; want ERROR_INVALID_ARGUMENT", r)
	}
	// The whole MIG GPU: each instance's load weighted by its slices, 3/7
	// of 80 % and 4/7 of 20 %.
	if g, want := f.devices[0].utilPct(90), (3*80.0+4*20.0)/7; math.Abs(g-want) > 1e-9 {
		t.Errorf("MIG GPU utilisation %v; want %v", g, want)
	}
	if g, want := f.devices[0].memUtilPct(90), (3*30.0+4*10.0)/7; math.Abs(g-want) > 1e-9 {
		t.Errorf("MIG GPU memory-bandwidth utilisation %v; want %v", g, want)
	}
}

func TestFleetNodes(t *testing.T) {
	t.Parallel()
	sc := mustLoad(t, "fleet")
	if sc.DeviceCount() != 64 || len(sc.Nodes()) != 8 || sc.Nodes()[3] != "node-3" {
		t.Fatalf("fleet: %d devices, nodes %v", sc.DeviceCount(), sc.Nodes())
	}
	all, err := New(sc, Options{Seed: 9, Start: epoch})
	if err != nil {
		t.Fatal(err)
	}
	all.Interface().Init()
	seen := map[string]bool{}
	for _, node := range sc.Nodes() {
		f, err := New(sc, Options{Seed: 9, Start: epoch, Node: node})
		if err != nil {
			t.Fatal(err)
		}
		lib := f.Interface()
		lib.Init()
		if n, _ := lib.DeviceGetCount(); n != 8 {
			t.Errorf("node %s: %d devices; want 8", node, n)
		}
		for i := 0; i < 8; i++ {
			u, _ := handle(t, lib, i).GetUUID()
			seen[u] = true
		}
		lib.Shutdown()
	}
	if len(seen) != 64 {
		t.Errorf("%d distinct UUIDs over 8 nodes; want 64", len(seen))
	}
	for i := 0; i < 64; i++ {
		u, _ := handle(t, all.Interface(), i).GetUUID()
		if !seen[u] {
			t.Errorf("whole-fleet GPU %d UUID %s differs from its node view", i, u)
		}
	}
	if _, err := New(sc, Options{Node: "node-9"}); err == nil || !strings.Contains(err.Error(), `no node "node-9" (nodes: node-0,`) {
		t.Errorf("unknown node error = %v", err)
	}
}
