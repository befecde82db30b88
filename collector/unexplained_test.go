package collector

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpulens/gpulens/internal/gpuprobe"
)

// TestUnexplainedStolen: the visible processes explain at most the probe's
// own share each, and at most their SM utilisation; the rest is
// unexplained, never below 0 nor above the raw ratio.
func TestUnexplainedStolen(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		raw     float64
		visible map[uint32]float64
		want    float64
	}{
		{"alone", 0, nil, 0},
		{"invisible neighbour, nobody listed", 0.5, nil, 0.5},
		{"one busy tenant", 0.5, map[uint32]float64{1: 0.97}, 0},
		{"one tenant seen under contention", 0.5, map[uint32]float64{1: 0.48}, 0.02},
		{"two busy tenants", 2.0 / 3, map[uint32]float64{1: 0.9, 2: 0.5}, 0},
		{"light tenant takes what it needs", 0.2, map[uint32]float64{1: 0.2}, 0},
		{"busy tenant and a neighbour of 0.4", 0.7, map[uint32]float64{1: 0.95}, 0.4},
		{"light tenant and a neighbour of 0.3", 0.5, map[uint32]float64{1: 0.2}, 0.3},
		{"idle tenant and a neighbour", 0.4, map[uint32]float64{1: 0}, 0.4},
		{"visible work beyond the stolen time", 0.1, map[uint32]float64{1: 0.5, 2: 0.5}, 0},
		{"nonsense sample", 0.3, map[uint32]float64{1: -1}, 0.3},
	} {
		if got := unexplainedStolen(tc.raw, tc.visible); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: unexplained(%v, %v) = %v, want %v", tc.name, tc.raw, tc.visible, got, tc.want)
		}
	}
}

// TestActivityLog: per-process time-weighted means over the samples that
// overlap a span (widened by a second when none does, else the last second
// of samples before it), coverage by the last read, and nothing kept beyond
// activityKeep.
func TestActivityLog(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	us := func(d time.Duration) uint64 { return uint64(t0.Add(d).UnixMicro()) }
	var l activityLog
	if _, known, _ := l.activity(t0, t0.Add(time.Second)); known {
		t.Fatal("an empty log claims to know")
	}
	none := func(uint32) bool { return false }
	l.record([]interval{
		{pid: 1, start: us(0), end: us(200 * time.Millisecond), sm: 1},
		{pid: 1, start: us(200 * time.Millisecond), end: us(400 * time.Millisecond), sm: 0.5},
		{pid: 2, start: us(0), end: us(400 * time.Millisecond), sm: 0.3},
		{pid: 3, start: us(0), end: us(400 * time.Millisecond), sm: 0.9},
	}, func(pid uint32) bool { return pid == 3 }, t0.Add(500*time.Millisecond))
	a, known, covered := l.activity(t0.Add(100*time.Millisecond), t0.Add(300*time.Millisecond))
	if !known || !covered || len(a.SM) != 2 || math.Abs(a.SM[1]-0.75) > 1e-9 || math.Abs(a.SM[2]-0.3) > 1e-9 {
		t.Errorf("activity over [100ms, 300ms] = %v, known %v, covered %v; want pid 1 0.75, pid 2 0.3 (pid 3 skipped), covered", a.SM, known, covered)
	}
	if _, _, covered := l.activity(t0, t0.Add(600*time.Millisecond)); covered {
		t.Error("a span ending after the last read is covered")
	}
	// No sample overlaps [1.2 s, 1.3 s]: the samples within a second count.
	if a, _, _ := l.activity(t0.Add(1200*time.Millisecond), t0.Add(1300*time.Millisecond)); len(a.SM) != 2 || math.Abs(a.SM[1]-0.5) > 1e-9 || math.Abs(a.SM[2]-0.3) > 1e-9 {
		t.Errorf("widened activity = %v; want pid 1 0.5 and pid 2 0.3 from the samples within a second", a.SM)
	}
	// Seconds after the newest sample: the last second of samples.
	if a, _, _ := l.activity(t0.Add(3*time.Second), t0.Add(4*time.Second)); len(a.SM) != 2 || math.Abs(a.SM[1]-0.75) > 1e-9 || math.Abs(a.SM[2]-0.3) > 1e-9 {
		t.Errorf("activity seconds after the last sample = %v; want the last second's: pid 1 0.75, pid 2 0.3", a.SM)
	}
	// Seconds before the first sample: the first second of samples.
	if a, _, _ := l.activity(t0.Add(-3*time.Second), t0.Add(-2*time.Second)); len(a.SM) != 2 || math.Abs(a.SM[1]-0.75) > 1e-9 {
		t.Errorf("activity before the first sample = %v; want the first second's", a.SM)
	}
	l.record(nil, none, t0.Add(activityKeep+time.Second))
	if len(l.ivs) != 0 {
		t.Errorf("%d intervals kept past activityKeep", len(l.ivs))
	}
}

// catchUp is the sampler as the probe's activity source on a fake clock: a
// span NVML's samples do not cover yet moves the clock past it and runs a
// sampler cycle (what the exporter's sampler goroutine does meanwhile).
type catchUp struct{ env *simEnv }

func (c catchUp) VisibleActivity(gpu string, from, to time.Time) (VisibleActivity, bool, bool) {
	if d := to.Sub(c.env.clock.Now()); d >= 0 {
		c.env.at(c.env.fleet.Elapsed() + d + time.Second)
	}
	return c.env.s.VisibleActivity(gpu, from, to)
}

// probeOverSim runs the exporter's probe once over the env's simulated
// CUDA driver at sim time at, with the env's sampler as its activity source.
func probeOverSim(t *testing.T, env *simEnv, at time.Duration) map[string]float64 {
	t.Helper()
	env.s.KeepActivity()
	env.at(at - 2*time.Second)
	env.at(at)
	pr := gpuprobe.New(env.fleet.ProbeDriver(), gpuprobe.Options{})
	p, err := NewProbeCollector(staticOpener(pr), env.s, ProbeOptions{
		Interval: 5 * time.Minute, Config: gpuprobe.ExporterConfig(), Now: env.clock.Now, Activity: catchUp{env},
	})
	if err != nil {
		t.Fatal(err)
	}
	p.RunOnce(context.Background())
	return gatherProbe(t, p)
}

// stolenScenario: one GPU per case of docs/metrics.md's stolen time.
const stolenScenario = `
devices:
  - {model: h100-sxm5-80gb}                                   # 0 busy tenant
  - {model: h100-sxm5-80gb, probe: {neighbour: {share: 0.4}}}  # 1 busy tenant, neighbour
  - {model: h100-sxm5-80gb, probe: {neighbour: {share: 0.4}}}  # 2 idle tenant, neighbour
  - {model: h100-sxm5-80gb, util: 60}                         # 3 busy, nobody listed
  - {model: h100-sxm5-80gb, probe: {neighbour: {share: 0.3}}}  # 4 light tenant, neighbour
  - {model: h100-sxm5-80gb}                                   # 5 two busy tenants
  - {model: h100-sxm5-80gb, probe: {neighbour: {share: 0.5, start: 60s}}}  # 6 busy tenant, neighbour joins
  - {model: h100-sxm5-80gb}                                   # 7 an MPS client
tenants:
  - {name: t0, gpu: 0, pid: 100, sm_util: 95}
  - {name: t1, gpu: 1, pid: 101, sm_util: 95}
  - {name: t2, gpu: 2, pid: 102, sm_util: 0}
  - {name: t4, gpu: 4, pid: 104, sm_util: 20}
  - {name: t5a, gpu: 5, pid: 105, sm_util: 90}
  - {name: t5b, gpu: 5, pid: 106, sm_util: 50}
  - {name: t6, gpu: 6, pid: 107, sm_util: {shape: sine, min: 85, max: 99, period: 20s, noise: 3}}
  - {name: t7, gpu: 7, pid: 108, type: mps, sm_util: 90}
`

// TestProbeUnexplainedSimulated runs the sampler and the probe over a
// simulated fleet where every busy context takes the probe's time: GPUs busy
// only with processes NVML lists read ~0 unexplained whatever their raw
// stolen time, and an invisible neighbour (or busy time nobody is listed
// for) reads its share ±0.05 whether the tenant is busy, light or idle.
func TestProbeUnexplainedSimulated(t *testing.T) {
	t.Parallel()
	type want struct{ raw, unexplained float64 }
	check := func(t *testing.T, got map[string]float64, gpu int, w want) {
		t.Helper()
		raw := one(t, got, "gpulens_probe_stolen_time_ratio", fmt.Sprintf("gpu=%d,", gpu))
		un := one(t, got, "gpulens_probe_unexplained_stolen_time_ratio", fmt.Sprintf("gpu=%d,", gpu))
		if math.Abs(raw-w.raw) > 0.05 || math.Abs(un-w.unexplained) > 0.05 {
			t.Errorf("GPU %d: stolen %.3f, unexplained %.3f; want %.2f and %.2f ±0.05", gpu, raw, un, w.raw, w.unexplained)
		}
		t.Logf("GPU %d: stolen %.3f, unexplained %.3f", gpu, raw, un)
	}
	env := newSimEnv(t, "stolen", []byte(stolenScenario))
	got := probeOverSim(t, env, 30*time.Second)
	for gpu, w := range map[int]want{
		0: {0.5, 0},
		1: {0.7, 0.4}, // the neighbour's 0.4, then half of the rest each
		2: {0.4, 0.4},
		3: {0.5, 0.5}, // 60 % busy, an equal turn: half
		4: {0.5, 0.3}, // the light tenant takes its 0.2, the probe the rest
		5: {2.0 / 3, 0},
		6: {0.5, 0}, // the neighbour joins at 60 s
		7: {0, 0},   // MPS clients never pause the probe
	} {
		check(t, got, gpu, w)
	}
	got = probeOverSim(t, env, 90*time.Second)
	check(t, got, 6, want{0.75, 0.5})
	check(t, got, 0, want{0.5, 0})
}

// TestExporterLeavesItselfOut: NVML lists the exporter's own process (its
// probe's context) with memory and SM activity; the process, sharing-mode,
// contention and time-share series are exactly those of the same GPU
// without it.
func TestExporterLeavesItselfOut(t *testing.T) {
	t.Parallel()
	base := `
devices:
  - {model: h100-sxm5-80gb}
  - {model: h100-sxm5-80gb}
tenants:
  - {name: serve, gpu: 0, pid: 4242, process: python3, sm_util: 70, memory: 20480}
`
	self := fmt.Sprintf("  - {name: self%%[1]d, gpu: %%[1]d, pid: %d, process: gpulens-exporter, sm_util: 40, memory: 512}\n", os.Getpid())
	families := []string{"gpulens_process_", "gpulens_gpu_sharing_mode", "gpulens_gpu_active_processes",
		"gpulens_gpu_contention_ratio", "gpulens_gpu_contended_seconds_total"}
	pick := func(got map[string]float64) map[string]float64 {
		out := map[string]float64{}
		for k, v := range got {
			for _, f := range families {
				if strings.HasPrefix(k, f) {
					out[k] = v
				}
			}
		}
		return out
	}
	without := newSimEnv(t, "without", []byte(base))
	with := newSimEnv(t, "with", []byte(base+fmt.Sprintf(self, 0)+fmt.Sprintf(self, 1)))
	for _, at := range []time.Duration{10 * time.Second, 20 * time.Second, 30 * time.Second} {
		w, g := pick(without.at(at)), pick(with.at(at))
		if len(w) == 0 {
			t.Fatal("no process series")
		}
		diffSeries(t, fmt.Sprintf("at %v", at), g, w)
	}
	got := pick(with.at(40 * time.Second))
	if v := one(t, got, "gpulens_gpu_sharing_mode", "gpu=0,", "mode=exclusive"); v != 1 {
		t.Errorf("GPU 0 (serve and the exporter) sharing mode exclusive = %v, want 1", v)
	}
	if v := one(t, got, "gpulens_gpu_sharing_mode", "gpu=1,", "mode=idle"); v != 1 {
		t.Errorf("GPU 1 (the exporter alone) sharing mode idle = %v, want 1", v)
	}
	for k := range got {
		if strings.Contains(k, fmt.Sprintf("pid=%d,", os.Getpid())) {
			t.Errorf("the exporter's own process is reported: %s", k)
		}
	}
}

// TestProbeRunChangesNoProcessSeries: the simulated driver makes NVML list
// the probe's own context (this process) while it exists, as a real driver
// does; sampled in the middle of a probe and just after, the process,
// sharing-mode, contention and time-share series are exactly those of the
// same fleet without a probe.
func TestProbeRunChangesNoProcessSeries(t *testing.T) {
	t.Parallel()
	const fleet = `
devices:
  - {model: h100-sxm5-80gb}
  - {model: h100-sxm5-80gb}
tenants:
  - {name: serve, gpu: 0, pid: 4242, process: python3, sm_util: 70, memory: 20480}
`
	families := []string{"gpulens_process_", "gpulens_gpu_sharing_mode", "gpulens_gpu_active_processes",
		"gpulens_gpu_contention_ratio", "gpulens_gpu_contended_seconds_total", "gpulens_process_gpu_time_share_ratio"}
	pick := func(got map[string]float64) map[string]float64 {
		out := map[string]float64{}
		for k, v := range got {
			for _, f := range families {
				if strings.HasPrefix(k, f) {
					out[k] = v
				}
			}
		}
		return out
	}
	for gpu := range 2 {
		t.Run(fmt.Sprintf("gpu %d", gpu), func(t *testing.T) {
			probed := newSimEnv(t, "probed", []byte(fleet))
			ref := newSimEnv(t, "ref", []byte(fleet))
			probed.at(10 * time.Second)
			ref.at(10 * time.Second)
			cfg := gpuprobe.ExporterConfig()
			cfg.GPUTimeBudget, cfg.StolenWindow = time.Second, 800*time.Millisecond // a window several NVML samples long
			res, err := gpuprobe.New(probed.fleet.ProbeDriver(), gpuprobe.Options{}).Probe(context.Background(), gpu, cfg)
			if err != nil {
				t.Fatal(err)
			}
			mid := probed.fleet.Elapsed() + res.Started.Add(res.Duration/2).Sub(probed.clock.Now())
			end := probed.fleet.Elapsed() + res.Started.Add(res.Duration).Sub(probed.clock.Now())
			probed.clock.Advance(mid - probed.fleet.Elapsed())
			d, _ := probed.fleet.Interface().DeviceGetHandleByIndex(gpu)
			procs, _ := d.GetComputeRunningProcesses()
			listed := false
			for _, p := range procs {
				listed = listed || p.Pid == uint32(os.Getpid())
			}
			if !listed {
				t.Fatalf("NVML does not list the probe's context (pid %d) in the middle of the probe: %+v", os.Getpid(), procs)
			}
			for _, at := range []time.Duration{mid, end + time.Second, end + 2*time.Second} {
				diffSeries(t, fmt.Sprintf("at %v", at), pick(probed.at(at)), pick(ref.at(at)))
			}
		})
	}
}
