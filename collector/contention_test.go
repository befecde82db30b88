package collector

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpulens/gpulens/internal/sim/gpusim"
)

// simEnv runs the sampler over a simulated fleet on a fake clock, with a
// fake procfs, attributor and pod allocations built from the fleet's
// processes (what /proc, the cgroup attributor and the kubelet would say).
type simEnv struct {
	t     *testing.T
	clock *fakeClock
	fleet *gpusim.Fleet
	s     *Sampler
	reg   *prometheus.Registry
	root  string
	attr  *simAttributor
}

type simAttributor struct{ m map[uint32]Attribution }

func (a *simAttributor) Attribute(pid uint32) Attribution { return a.m[pid] }

// simAllocations is the pod-resources view: every tenant's pod holds its
// device, running or not yet.
type simAllocations []Allocation

func (s simAllocations) Lookup(ids ...string) []Allocation { return fakeAllocations(s).Lookup(ids...) }

func newSimEnv(t *testing.T, scenario string, yaml []byte) *simEnv {
	t.Helper()
	var sc *gpusim.Scenario
	var err error
	if yaml != nil {
		sc, err = gpusim.Parse(yaml, scenario+".yaml")
	} else {
		sc, err = gpusim.Load(scenario)
	}
	if err != nil {
		t.Fatal(err)
	}
	fleet, lib, clock := startFleet(t, sc)
	env := &simEnv{t: t, clock: clock, fleet: fleet, root: t.TempDir(), attr: &simAttributor{m: map[uint32]Attribution{}}}
	s, err := NewSampler(lib, allCollectors(), false, Config{
		Interval: time.Second, DeviceTimeout: 5 * time.Second, Now: clock.Now, Simulated: true,
		Processes: ProcessOptions{ProcRoot: env.root, Attributor: env.attr, Allocations: &simAllocationsView{env}},
	})
	if err != nil {
		t.Fatal(err)
	}
	env.s = s
	env.reg = prometheus.NewPedanticRegistry()
	env.reg.MustRegister(s)
	return env
}

// simAllocationsView answers from the processes seen so far (a pod keeps
// its allocation between runs of its process).
type simAllocationsView struct{ env *simEnv }

func (v *simAllocationsView) Lookup(ids ...string) []Allocation {
	var out simAllocations
	seen := map[Allocation]bool{}
	for _, a := range v.env.attr.m {
		al := Allocation{Namespace: a.Namespace, Pod: a.Pod, Container: a.Container, DeviceID: a.JobID}
		if !seen[al] {
			seen[al] = true
			out = append(out, al)
		}
	}
	return out.Lookup(ids...)
}

// at moves the clock to sim time d, syncs procfs with the running
// processes and runs one sampler cycle.
func (e *simEnv) at(d time.Duration) map[string]float64 {
	e.t.Helper()
	e.clock.Advance(d - e.fleet.Elapsed())
	for _, p := range e.fleet.Processes() {
		if _, ok := e.attr.m[p.PID]; !ok {
			writeProc(e.t, e.root, int(p.PID), p.Name, []string{p.Name, "--tenant", p.Tenant}, 1000, uint64(p.PID))
			// JobID carries the device UUID for simAllocationsView.
			e.attr.m[p.PID] = Attribution{ContainerID: fmt.Sprintf("%064x", p.PID), Runtime: "containerd",
				Namespace: p.Namespace, Pod: p.Pod, Container: p.Container, JobID: p.GPUUUID}
		}
	}
	cycleAll(e.s)
	return series(e.t, e.reg)
}

func (e *simEnv) uuid(gpu int) string {
	if u := e.s.workers[gpu].uuid.Load(); u != nil {
		return *u
	}
	e.t.Fatalf("GPU %d has no UUID", gpu)
	return ""
}

// find returns the series of a family whose labels contain every fragment.
func find(got map[string]float64, family string, fragments ...string) map[string]float64 {
	out := map[string]float64{}
next:
	for k, v := range got {
		if !strings.HasPrefix(k, family+"{") {
			continue
		}
		for _, f := range fragments {
			if !strings.Contains(k, f) {
				continue next
			}
		}
		out[k] = v
	}
	return out
}

func one(t *testing.T, got map[string]float64, family string, fragments ...string) float64 {
	t.Helper()
	m := find(got, family, fragments...)
	if len(m) != 1 {
		t.Fatalf("%s%v: %d series, want 1: %v", family, fragments, len(m), m)
	}
	for _, v := range m {
		return v
	}
	return 0
}

// TestNoisyNeighbourSimulated: the batch job joins GPU 0 at 2 min, leaves at
// 5 min. Within 30 s of sim time both processes show with their pods, the
// contention ratio is above 0.5 while both run and back to 0 once the
// neighbour has left.
func TestNoisyNeighbourSimulated(t *testing.T) {
	t.Parallel()
	env := newSimEnv(t, "noisy-neighbour", nil)
	_ = env.at(100 * time.Second)
	g0 := "uuid=" + env.uuid(0)

	got := env.at(110 * time.Second)
	if v := one(t, got, "gpulens_gpu_contention_ratio", g0); v != 0 {
		t.Errorf("lone tenant: contention %v, want 0", v)
	}
	if v := one(t, got, "gpulens_gpu_sharing_mode", g0, "mode=exclusive"); v != 1 {
		t.Errorf("lone tenant: sharing mode exclusive = %v, want 1", v)
	}
	if v := one(t, got, "gpulens_process_gpu_time_share_ratio", g0, "pid=4242"); math.Abs(v-1) > 1e-9 {
		t.Errorf("lone tenant: time share %v, want 1", v)
	}

	joined := time.Duration(0)
	for d := 120 * time.Second; d <= 150*time.Second; d += time.Second {
		got = env.at(d)
		serve := find(got, "gpulens_process_memory_used_bytes", g0, "pid=4242", "namespace=serving", "pod=vllm-llama-0", "container=vllm", "process_name=python3")
		batch := find(got, "gpulens_process_memory_used_bytes", g0, "pid=5151", "namespace=research", "pod=nightly-finetune-7f9c", "container=trainer", "process_name=torchrun")
		if len(serve) == 1 && len(batch) == 1 {
			joined = d
			for _, v := range batch {
				if v != 40960*1024*1024 {
					t.Errorf("batch-train memory %v, want 40 GiB", v)
				}
			}
			break
		}
	}
	if joined == 0 {
		t.Fatalf("the two tenants never showed with pod labels within 30 s of sim time: %v", find(got, "gpulens_process_memory_used_bytes", g0))
	}
	t.Logf("both tenants visible at sim time %v", joined)

	got = env.at(joined + 5*time.Second)
	if v := one(t, got, "gpulens_gpu_contention_ratio", g0); v <= 0.5 {
		t.Errorf("two tenants: contention %v, want > 0.5", v)
	} else {
		t.Logf("contention ratio with both tenants: %v", v)
	}
	if v := one(t, got, "gpulens_gpu_active_processes", g0); v != 2 {
		t.Errorf("two tenants: active processes %v, want 2", v)
	}
	if v := one(t, got, "gpulens_gpu_sharing_mode", g0, "mode=time_sliced"); v != 1 {
		t.Errorf("two tenants: sharing mode time_sliced = %v, want 1", v)
	}
	shares := find(got, "gpulens_process_gpu_time_share_ratio", g0)
	var sum float64
	for _, v := range shares {
		sum += v
	}
	if len(shares) != 2 || sum > 1+1e-9 || sum < 0.999 {
		t.Errorf("time shares %v sum to %v, want two shares summing to 1", shares, sum)
	}
	if b, s := one(t, got, "gpulens_process_gpu_time_share_ratio", g0, "pid=5151"), one(t, got, "gpulens_process_gpu_time_share_ratio", g0, "pid=4242"); b <= s {
		t.Errorf("the noisy neighbour's share %v should exceed the server's %v", b, s)
	}
	contended := one(t, got, "gpulens_gpu_contended_seconds_total", g0)
	if contended < 5 {
		t.Errorf("contended seconds %v after 5+ s of two saturating tenants", contended)
	}
	if v := one(t, got, "gpulens_gpu_contention_ratio", "gpu=1,"); v != 0 {
		t.Errorf("GPU 1 (one tenant): contention %v, want 0", v)
	}

	// The neighbour leaves at 5 min.
	_ = env.at(302 * time.Second)
	got = env.at(304 * time.Second)
	if v := one(t, got, "gpulens_gpu_contention_ratio", g0); v != 0 {
		t.Errorf("after the neighbour left: contention %v, want 0", v)
	}
	if v := one(t, got, "gpulens_gpu_active_processes", g0); v != 1 {
		t.Errorf("after the neighbour left: active processes %v, want 1", v)
	}
	if n := len(find(got, "gpulens_process_memory_used_bytes", g0)); n != 1 {
		t.Errorf("after the neighbour left: %d process series, want 1", n)
	}
	if v := one(t, got, "gpulens_gpu_contended_seconds_total", g0); v < contended {
		t.Errorf("contended seconds went down: %v < %v", v, contended)
	}
	// The batch pod's allocation stays (pod-resources), without a process.
	if v := one(t, got, "gpulens_gpu_allocation_info", g0, "pod=nightly-finetune-7f9c"); v != 1 {
		t.Errorf("allocation of the departed pod = %v, want 1", v)
	}
}

// TestMIGMixedSimulated: MIG instance series with memory and GPM activity,
// processes attributed to their instance, and the whole-GPU series still
// present.
func TestMIGMixedSimulated(t *testing.T) {
	t.Parallel()
	env := newSimEnv(t, "mig-mixed", nil)
	_ = env.at(90 * time.Second)
	got := env.at(91 * time.Second)
	g0 := "uuid=" + env.uuid(0)
	profiles := map[string]string{"1": "3g.40gb", "2": "2g.20gb", "3": "1g.10gb", "4": "1g.10gb"}
	info := find(got, "gpulens_mig_instance_info", g0)
	if len(info) != 4 {
		t.Fatalf("GPU 0: %d MIG instances, want 4: %v; errors %v", len(info), info, find(got, "gpulens_nvml_errors_total"))
	}
	for gi, prof := range profiles {
		if v := one(t, got, "gpulens_mig_instance_info", g0, "gpu_instance_id="+gi+",", "profile="+prof); v != 1 {
			t.Errorf("instance %s: info %v", gi, v)
		}
	}
	if n := len(find(got, "gpulens_mig_instance_info", "gpu=1,")); n != 2 {
		t.Errorf("GPU 1: %d MIG instances, want 2", n)
	}
	const mib = 1 << 20
	wantMem := map[string][2]float64{ // total, used (the instance's tenants)
		"1": {40960 * mib, 30000 * mib}, "2": {20480 * mib, 12000 * mib}, "3": {10240 * mib, 9000 * mib}, "4": {10240 * mib, 0},
	}
	for gi, w := range wantMem {
		total := one(t, got, "gpulens_mig_memory_total_bytes", g0, "gpu_instance_id="+gi+",")
		used := one(t, got, "gpulens_mig_memory_used_bytes", g0, "gpu_instance_id="+gi+",")
		if total != w[0] || used != w[1] {
			t.Errorf("instance %s memory total %v used %v, want %v %v", gi, total, used, w[0], w[1])
		}
	}
	// GPM per instance: chat-a (gi 1, 40-90 %) and cron-c (gi 3, 80 % from 1 min) are busy, gi 4 is empty.
	if v := one(t, got, "gpulens_mig_sm_activity_ratio", g0, "gpu_instance_id=1,"); v < 0.3 || v > 0.95 {
		t.Errorf("instance 1 SM activity %v, want within 0.3-0.95", v)
	}
	if v := one(t, got, "gpulens_mig_sm_activity_ratio", g0, "gpu_instance_id=3,"); v != 0.8 {
		t.Errorf("instance 3 SM activity %v, want 0.8", v)
	}
	if v := one(t, got, "gpulens_mig_sm_occupancy_ratio", g0, "gpu_instance_id=3,"); v != 0.48 {
		t.Errorf("instance 3 SM occupancy %v, want 0.48", v)
	}
	if v := one(t, got, "gpulens_mig_sm_activity_ratio", g0, "gpu_instance_id=4,"); v != 0 {
		t.Errorf("empty instance 4 SM activity %v, want 0", v)
	}
	for _, f := range []string{"gpulens_mig_tensor_activity_ratio", "gpulens_mig_dram_bandwidth_utilization_ratio", "gpulens_mig_graphics_activity_ratio"} {
		if n := len(find(got, f, g0)); n != 4 {
			t.Errorf("%s: %d series on GPU 0, want 4", f, n)
		}
	}
	// Saturation of instance 3: memory 9000/10240 MiB beats 80 % SM.
	if v := one(t, got, "gpulens_mig_saturation_ratio", g0, "gpu_instance_id=3,"); v != 9000.0/10240 {
		t.Errorf("instance 3 saturation %v, want %v", v, 9000.0/10240)
	}
	// Whole-GPU series stay.
	for _, f := range []string{"gpulens_gpu_memory_used_bytes", "gpulens_gpu_power_watts", "gpulens_gpu_sm_activity_ratio", "gpulens_gpu_dram_bandwidth_utilization_ratio", "gpulens_gpu_mig_enabled"} {
		if len(find(got, f, g0)) != 1 {
			t.Errorf("whole-GPU %s missing with MIG on", f)
		}
	}
	if v := one(t, got, "gpulens_gpm_supported", g0); v != 1 {
		t.Errorf("gpm_supported %v, want 1 on H100", v)
	}
	if v := one(t, got, "gpulens_gpu_sharing_mode", g0, "mode=mig"); v != 1 {
		t.Errorf("sharing mode mig = %v, want 1", v)
	}
	// Processes carry their instance; no per-process utilisation in MIG mode.
	if v := one(t, got, "gpulens_process_memory_used_bytes", g0, "gpu_instance_id=3,", "compute_instance_id=0,", "pid=3300", "pod=cron-c-28841"); v != 9000*mib {
		t.Errorf("cron-c memory %v", v)
	}
	if n := len(find(got, "gpulens_process_sm_utilization_ratio", g0)); n != 0 {
		t.Errorf("%d per-process SM series in MIG mode, want 0", n)
	}
	if v := one(t, got, "gpulens_gpu_allocation_info", g0, "pod=chat-a-0"); v != 1 {
		t.Errorf("MIG allocation info %v", v)
	}
	if k := find(got, "gpulens_gpu_allocation_info", g0, "pod=chat-a-0"); !strings.Contains(fmt.Sprint(k), "mig_uuid=MIG-") {
		t.Errorf("MIG allocation without mig_uuid: %v", k)
	}
	if v := got["gpulens_scrape_collector_success{collector=gpm}"]; v != 1 {
		t.Errorf("gpm collector success %v", v)
	}
}

const a100MIG = `
name: a100-mig
devices:
  - count: 1
    model: a100-sxm4-80gb
    mig: [3g.39gb, 3g.39gb]
tenants:
  - {name: job, gpu: 0, mig_instance: 0, pid: 900, sm_util: 50, memory: 1000}
`

// TestGPMUnsupportedA100: no GPM series, gpm_supported 0, MIG memory only.
func TestGPMUnsupportedA100(t *testing.T) {
	t.Parallel()
	env := newSimEnv(t, "a100-mig", []byte(a100MIG))
	_ = env.at(10 * time.Second)
	got := env.at(11 * time.Second)
	g0 := "uuid=" + env.uuid(0)
	if v := one(t, got, "gpulens_gpm_supported", g0); v != 0 {
		t.Errorf("gpm_supported %v, want 0", v)
	}
	for k := range got {
		if strings.Contains(k, "_activity_ratio{") || strings.Contains(k, "_occupancy_ratio{") ||
			strings.HasPrefix(k, "gpulens_gpu_dram_") || strings.HasPrefix(k, "gpulens_mig_dram_") || strings.HasPrefix(k, "gpulens_mig_saturation") {
			t.Errorf("GPM series on A100: %s", k)
		}
	}
	if n := len(find(got, "gpulens_mig_memory_used_bytes", g0)); n != 2 {
		t.Errorf("%d MIG memory series, want 2", n)
	}
	if v := one(t, got, "gpulens_mig_memory_used_bytes", g0, "gpu_instance_id=1,"); v != 1000*(1<<20) {
		t.Errorf("instance 1 used %v", v)
	}
	for _, c := range []string{"gpm", "mig", "process", "contention"} {
		if v := got["gpulens_scrape_collector_success{collector="+c+"}"]; v != 1 {
			t.Errorf("collector %s success %v, want 1", c, v)
		}
	}
	if _, err := os.Stat(filepath.Join(env.root, "900")); err != nil {
		t.Errorf("fake procfs not written: %v", err)
	}
}
