package collector

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpulens/gpulens/internal/gpuprobe"
	"github.com/gpulens/gpulens/internal/sim/gpusim"
)

// probeSafetyEnv samples a simulated scenario (memory and MIG collectors)
// and builds the continuous probe over its simulated CUDA driver, fed by
// the sampler's NVML snapshot as the exporter wires it.
func probeSafetyEnv(t *testing.T, yml string) (*Sampler, *ProbeCollector) {
	t.Helper()
	sc, err := gpusim.Parse([]byte(yml), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	clock := newFakeClock()
	fleet, err := gpusim.New(sc, gpusim.Options{Seed: 1, Start: clock.Now(), Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	lib := fleet.Interface()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	t.Cleanup(func() { lib.Shutdown() })
	s, err := NewSampler(lib, []NamedCollector{
		{Name: "memory", Collector: newMemoryCollector()},
		{Name: "mig", Collector: newMIGCollector()},
	}, false, Config{Interval: time.Second, DeviceTimeout: 5 * time.Second, Now: clock.Now, Simulated: true})
	if err != nil {
		t.Fatal(err)
	}
	cycleAll(s)
	pr := gpuprobe.New(fleet.ProbeDriver(), gpuprobe.Options{FreeMemory: func(d gpuprobe.DeviceInfo) (uint64, bool) { return s.FreeMemory(d.UUID) }})
	p, err := NewProbeCollector(staticOpener(pr), s, ProbeOptions{Interval: 5 * time.Minute, Config: gpuprobe.ExporterConfig(), Now: clock.Now, NVML: s})
	if err != nil {
		t.Fatal(err)
	}
	return s, p
}

// TestProbeSkipsTenantGPUs: on an EXCLUSIVE_PROCESS GPU in use, a
// PROHIBITED one and a nearly full one the probe creates no context and
// counts why; on the others it measures and reports its context's memory.
// Every MIG instance but the one CUDA shows the process is counted as not
// visible.
func TestProbeSkipsTenantGPUs(t *testing.T) {
	t.Parallel()
	s, p := probeSafetyEnv(t, `
devices:
  - {count: 1, model: h100-sxm5-80gb, memory_used: 10}
  - {count: 1, model: h100-sxm5-80gb, memory_used: 10, compute_mode: exclusive_process}
  - {count: 1, model: h100-sxm5-80gb, memory_used: 99.5}
  - {count: 1, model: h100-sxm5-80gb, compute_mode: prohibited}
  - {count: 1, model: h100-sxm5-80gb, mig: [3g.40gb, 2g.20gb, 1g.10gb]}
`)
	for range 2 {
		p.RunOnce(context.Background())
	}
	got := gatherProbe(t, p)
	uuid := func(gpu int) string { return *s.workers[gpu].uuid.Load() }
	id := func(gpu int) string { return fmt.Sprintf("gpu=%d,uuid=%s", gpu, uuid(gpu)) }
	for gpu, reason := range map[int]string{
		1: gpuprobe.SkipComputeModeExclusiveProcess,
		2: gpuprobe.SkipFreeMemoryLow,
		3: gpuprobe.SkipComputeModeProhibited,
	} {
		if v := got[seriesKey("gpulens_probe_skipped_total", id(gpu), "reason="+reason)]; v != 2 {
			t.Errorf("GPU %d: skipped_total{reason=%s} = %v, want 2 (two runs)", gpu, reason, v)
		}
		if v := got["gpulens_probe_up{"+id(gpu)+"}"]; v != 0 {
			t.Errorf("GPU %d: probe_up = %v, want 0", gpu, v)
		}
		if _, ok := got["gpulens_probe_context_memory_bytes{"+id(gpu)+"}"]; ok {
			t.Errorf("GPU %d: a context memory figure for a GPU never touched", gpu)
		}
	}
	if v := got["gpulens_probe_up{"+id(0)+"}"]; v != 1 {
		t.Fatalf("GPU 0 not measured: %v", got)
	}
	if v := got["gpulens_probe_context_memory_bytes{"+id(0)+"}"]; v != 520<<20 {
		t.Errorf("GPU 0 context memory = %v, want 520 MiB (the simulated H100's)", v)
	}
	// MIG: CUDA shows the process the first instance only.
	migs := s.MIGInstances()
	if len(migs) != 3 {
		t.Fatalf("MIG instances from the snapshot: %+v, want 3", migs)
	}
	if v := got["gpulens_probe_up{gpu=4,uuid="+migs[0].UUID+"}"]; v != 1 {
		t.Errorf("the visible MIG instance was not measured: up = %v", v)
	}
	for _, m := range migs[1:] {
		if v := got[seriesKey("gpulens_probe_skipped_total", "gpu=4,uuid="+m.UUID, "reason="+gpuprobe.SkipMIGInstanceNotVisible)]; v != 2 {
			t.Errorf("MIG %s: skipped_total{reason=mig_instance_not_visible} = %v, want 2", m.UUID, v)
		}
	}
	if free, ok := s.FreeMemory(migs[2].UUID); !ok || free != 10*1024<<20 {
		t.Errorf("free memory of the 1g.10gb instance = %d, %v; want 10 GiB", free, ok)
	}
}
