package collector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpulens/gpulens/internal/gpuprobe"
	"github.com/gpulens/gpulens/internal/sim/gpusim"
)

// wedgedChildEnv makes this test binary a probe child that reads its
// request and never answers (TestMain): a child stuck beyond its own
// deadline, which the parent must kill.
const wedgedChildEnv = "GPULENS_TEST_WEDGED_PROBE_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(wedgedChildEnv) != "" {
		_, _ = gpuprobe.ReadChildRequest(os.Stdin)
		time.Sleep(time.Hour) // killed by the parent long before
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// inProcessChildren does in this process what a probe child does in its
// own (gpuprobe.ServeChild over the fleet's driver as
// CUDA_VISIBLE_DEVICES=<uuid> shows it, with the parent's NVML free
// memory), and reports a child's cost: the collector's side of the
// children, without processes.
type inProcessChildren struct {
	fleet *gpusim.Fleet
	nvml  NVMLView
	mu    sync.Mutex
	calls []string
}

// childCPU is the CPU time each simulated child reports.
const childCPU = 40 * time.Millisecond

func (c *inProcessChildren) ProbeInstance(ctx context.Context, uuid string, cfg gpuprobe.Config) (gpuprobe.Result, error) {
	c.mu.Lock()
	c.calls = append(c.calls, uuid)
	n := len(c.calls)
	c.mu.Unlock()
	req := gpuprobe.ChildRequest{UUID: uuid, Config: cfg}
	req.FreeBeforeBytes, req.FreeKnown = c.nvml.FreeMemory(uuid)
	resp := gpuprobe.ServeChild(ctx, c.fleet.ProbeDriverVisible(uuid), req, nil)
	if resp.Error != nil {
		return gpuprobe.Result{}, errors.New(resp.Error.Message)
	}
	res := *resp.Result
	res.Child = &gpuprobe.ChildUsage{PID: 40000 + n, UserCPU: childCPU * 3 / 4, SystemCPU: childCPU / 4, MaxRSSBytes: uint64(60+n) << 20}
	return res, nil
}

func (c *inProcessChildren) called() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.calls...)
}

// migProbeEnv samples a scenario (memory, MIG and compute-mode collectors)
// and builds the probe over its simulated driver as the exporter wires it,
// with instances (given the fleet and the sampler) reaching the MIG
// instances CUDA does not show.
func migProbeEnv(t *testing.T, yml string, instances func(*gpusim.Fleet, NVMLView) InstanceProber, mod func(*ProbeOptions)) (*Sampler, *ProbeCollector) {
	t.Helper()
	sc, err := gpusim.Parse([]byte(yml), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	fleet, lib, clock := startFleet(t, sc)
	s, err := NewSampler(lib, []NamedCollector{
		{Name: "memory", Collector: newMemoryCollector()},
		{Name: "mig", Collector: newMIGCollector()},
		{Name: "mode", Collector: newModeCollector()},
	}, false, Config{Interval: time.Second, DeviceTimeout: 5 * time.Second, Now: clock.Now, Simulated: true})
	if err != nil {
		t.Fatal(err)
	}
	cycleAll(s)
	pr := gpuprobe.New(fleet.ProbeDriver(), gpuprobe.Options{FreeMemory: func(d gpuprobe.DeviceInfo) (uint64, bool) { return s.FreeMemory(d.UUID) }})
	opts := ProbeOptions{Interval: 5 * time.Minute, Config: gpuprobe.ExporterConfig(), Now: clock.Now, NVML: s, Instances: instances(fleet, s)}
	if mod != nil {
		mod(&opts)
	}
	p, err := NewProbeCollector(staticOpener(pr), s, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s, p
}

// demoMIG is the demo scenario's MIG layout beside a whole H100.
const demoMIG = `
devices:
  - {count: 1, model: h100-sxm5-80gb}
  - {count: 1, model: h100-sxm5-80gb, mig: [3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb]}
`

// TestProbeMeasuresEveryMIGInstance: CUDA shows the exporter one MIG
// instance; the three others used to be counted as mig_instance_not_visible
// with no figures. Each is now measured in a child of its own (one after
// the other, after the devices CUDA shows): gpulens_probe_up 1, FP32 and
// device-copy figures scaled to its share of the SMs and of the memory,
// the memory its context sees, and what its children cost.
func TestProbeMeasuresEveryMIGInstance(t *testing.T) {
	t.Parallel()
	var children *inProcessChildren
	var fleet *gpusim.Fleet
	s, p := migProbeEnv(t, demoMIG, func(f *gpusim.Fleet, nv NVMLView) InstanceProber {
		fleet = f
		children = &inProcessChildren{fleet: f, nvml: nv}
		return children
	}, nil)
	for range 2 {
		p.RunOnce(context.Background())
	}
	got := gatherProbe(t, p)
	whole := fmt.Sprintf("gpu=0,uuid=%s", *s.workers[0].uuid.Load())
	if got["gpulens_probe_up{"+whole+"}"] != 1 {
		t.Fatalf("the whole GPU was not measured: %v", got)
	}
	fp32 := got["gpulens_probe_fp32_flop_per_second{"+whole+"}"]
	migs := s.MIGInstances()
	// The profiles' memory, of the H100's 80 GiB; their multiprocessors
	// (of its 132) as CUDA shows each instance to the process it is
	// visible to.
	memGiB := []float64{40, 20, 10, 10}
	if len(migs) != len(memGiB) {
		t.Fatalf("MIG instances %+v, want %d", migs, len(memGiB))
	}
	for i, m := range migs {
		devs, err := gpuprobe.New(fleet.ProbeDriverVisible(m.UUID), gpuprobe.Options{}).Devices(context.Background())
		if err != nil || len(devs) != 1 {
			t.Fatalf("CUDA_VISIBLE_DEVICES=%s: %v, %v", m.UUID, devs, err)
		}
		sms := float64(devs[0].SMs)
		id := "gpu=1,uuid=" + m.UUID
		if v := got["gpulens_probe_up{"+id+"}"]; v != 1 {
			t.Errorf("instance %d (%s): up = %v, want 1", i, m.UUID, v)
			continue
		}
		for k := range got {
			if strings.HasPrefix(k, "gpulens_probe_skipped_total{") && strings.Contains(k, m.UUID) {
				t.Errorf("instance %d: %s = %v, want no skip", i, k, got[k])
			}
		}
		if r, w := got["gpulens_probe_fp32_flop_per_second{"+id+"}"]/fp32, sms/132; math.Abs(r/w-1) > 0.03 {
			t.Errorf("instance %d: FP32 is %.3f of the whole GPU's, want its SM share %.3f", i, r, w)
		}
		if total := got["gpulens_probe_memory_total_bytes{"+id+"}"]; math.Abs(total/(memGiB[i]*(1<<30))-1) > 0.05 {
			t.Errorf("instance %d: memory total %.0f, want about %.0f GiB", i, total, memGiB[i])
		}
		cpu, haveCPU := got["gpulens_probe_child_cpu_seconds_total{"+id+"}"]
		if i == 0 {
			if haveCPU {
				t.Errorf("the visible instance (probed in process) has a child CPU figure")
			}
			continue
		}
		if math.Abs(cpu-2*childCPU.Seconds()) > 1e-9 || got["gpulens_probe_child_max_resident_memory_bytes{"+id+"}"] == 0 {
			t.Errorf("instance %d: child CPU %v s (want %v: two runs), peak RSS %v", i, cpu, 2*childCPU.Seconds(), got["gpulens_probe_child_max_resident_memory_bytes{"+id+"}"])
		}
	}
	// Children for the three instances CUDA does not show, in NVML's
	// order, once a run.
	var wantCalls []string
	for range 2 {
		for _, m := range migs[1:] {
			wantCalls = append(wantCalls, m.UUID)
		}
	}
	if c := children.called(); strings.Join(c, ",") != strings.Join(wantCalls, ",") {
		t.Errorf("children for %v, want %v", c, wantCalls)
	}
}

// TestProbeMIGPrecheck: an instance whose free memory (NVML's) is below the
// probe's need, or on a GPU whose compute mode is not DEFAULT, is skipped
// with its reason without starting a child; a child that runs sees the
// same safety checks.
func TestProbeMIGPrecheck(t *testing.T) {
	t.Parallel()
	var children *inProcessChildren
	s, p := migProbeEnv(t, `
devices:
  - {count: 1, model: h100-sxm5-80gb, mig: [3g.40gb, 2g.20gb, 1g.10gb]}
  - {count: 1, model: h100-sxm5-80gb, mig: [3g.40gb, 3g.40gb], compute_mode: exclusive_process}
tenants:
  - {name: full, gpu: 0, mig_instance: 2, pid: 3300, process: python3, sm_util: 50, memory: 9800}
`, func(f *gpusim.Fleet, nv NVMLView) InstanceProber {
		children = &inProcessChildren{fleet: f, nvml: nv}
		return children
	}, nil)
	p.RunOnce(context.Background())
	got := gatherProbe(t, p)
	migs := s.MIGInstances()
	if len(migs) != 5 {
		t.Fatalf("MIG instances %+v, want 5", migs)
	}
	skipped := func(m GPUIdentity, reason string) float64 {
		return got[seriesKey("gpulens_probe_skipped_total", "gpu="+m.GPU+",uuid="+m.UUID, "reason="+reason)]
	}
	if got["gpulens_probe_up{gpu=0,uuid="+migs[1].UUID+"}"] != 1 {
		t.Errorf("the 2g.20gb instance was not measured")
	}
	if v := skipped(migs[2], gpuprobe.SkipFreeMemoryLow); v != 1 {
		t.Errorf("the full 1g.10gb instance: skipped_total{reason=free_memory_low} = %v, want 1", v)
	}
	// GPU 1's first instance is the one CUDA shows (a second MIG GPU's
	// instances are all hidden: one MIG instance per process).
	if v := skipped(migs[4], gpuprobe.SkipComputeModeExclusiveProcess); v != 1 {
		t.Errorf("GPU 1's instance: skipped_total{reason=compute_mode_exclusive_process} = %v, want 1", v)
	}
	for _, c := range children.called() {
		if c == migs[2].UUID || c == migs[3].UUID || c == migs[4].UUID {
			t.Errorf("a child was started for %s, which NVML says to leave alone", c)
		}
	}
	if c := children.called(); len(c) != 1 || c[0] != migs[1].UUID {
		t.Errorf("children for %v, want one, for %s", c, migs[1].UUID)
	}
}

// TestProbeMIGChildKilledAtDeadline: a probe child that never answers is
// killed at the probe's deadline and counted as a probe error
// (deadline_exceeded), the instance has gpulens_probe_up 0, what the
// killed child cost is counted, and the log says it was killed.
func TestProbeMIGChildKilledAtDeadline(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	s, p := migProbeEnv(t, demoMIG, func(*gpusim.Fleet, NVMLView) InstanceProber {
		c, err := gpuprobe.NewChildProber(gpuprobe.ChildOptions{Path: self, Env: append(os.Environ(), wedgedChildEnv+"=1")})
		if err != nil {
			t.Fatal(err)
		}
		return childDeadline{c, 2 * time.Second}
	}, func(o *ProbeOptions) {
		// The children's deadline is 2 s (childDeadline); the collector's
		// is long enough for the instance probed in process under -race
		// on a loaded machine (with a 2 s one for both, that probe missed
		// it at load 30: "not measured").
		o.Timeout = time.Minute
		o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	p.grace = time.Minute // the kill, not the collector's abandonment, ends the call
	p.RunOnce(context.Background())
	got := gatherProbe(t, p)
	migs := s.MIGInstances()
	for _, m := range migs[1:] {
		id := "gpu=1,uuid=" + m.UUID
		if v := got[errKey(gpuprobe.LabelDeadline, id, ProbeMeasurementProbe)]; v != 1 {
			t.Errorf("%s: errors_total{measurement=probe,error=deadline_exceeded} = %v, want 1", m.UUID, v)
		}
		if v, ok := got["gpulens_probe_up{"+id+"}"]; !ok || v != 0 {
			t.Errorf("%s: up = %v (%v), want 0", m.UUID, v, ok)
		}
		if _, ok := got["gpulens_probe_child_max_resident_memory_bytes{"+id+"}"]; !ok {
			t.Errorf("%s: the killed child's cost is not counted", m.UUID)
		}
	}
	if got["gpulens_probe_up{gpu=1,uuid="+migs[0].UUID+"}"] != 1 {
		t.Errorf("the instance probed in process was not measured")
	}
	if !strings.Contains(logs.String(), "killed at its deadline") {
		t.Errorf("log does not say the child was killed:\n%s", logs.String())
	}
}

// childDeadline gives each child of its InstanceProber a deadline of its
// own, shorter than the collector's.
type childDeadline struct {
	InstanceProber
	d time.Duration
}

func (c childDeadline) ProbeInstance(ctx context.Context, uuid string, cfg gpuprobe.Config) (gpuprobe.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, c.d)
	defer cancel()
	return c.InstanceProber.ProbeInstance(ctx, uuid, cfg)
}
