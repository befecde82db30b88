package collector

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpulens/gpulens/internal/gpuprobe"
	"github.com/gpulens/gpulens/internal/sim/gpusim"
)

// probeSafetyEnv samples a simulated scenario (memory and MIG collectors)
// and builds the continuous probe over its simulated CUDA driver, fed by
// the sampler's NVML snapshot as the exporter wires it.
func probeSafetyEnv(t *testing.T, yml string) (*Sampler, *ProbeCollector) {
	t.Helper()
	s, p, _ := probeSafetyEnvAt(t, yml)
	cycleAll(s)
	return s, p
}

// probeSafetyEnvAt is probeSafetyEnv before the sampler's first cycle, with
// the clock of the fleet, the sampler and the probe.
func probeSafetyEnvAt(t *testing.T, yml string) (*Sampler, *ProbeCollector, *fakeClock) {
	t.Helper()
	sc, err := gpusim.Parse([]byte(yml), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	fleet, lib, clock := startFleet(t, sc)
	s, err := NewSampler(lib, []NamedCollector{
		{Name: "memory", Collector: newMemoryCollector()},
		{Name: "mig", Collector: newMIGCollector()},
	}, false, Config{Interval: time.Second, DeviceTimeout: 5 * time.Second, Now: clock.Now, Simulated: true})
	if err != nil {
		t.Fatal(err)
	}
	pr := gpuprobe.New(fleet.ProbeDriver(), gpuprobe.Options{FreeMemory: func(d gpuprobe.DeviceInfo) (uint64, bool) { return s.FreeMemory(d.UUID) }})
	p, err := NewProbeCollector(staticOpener(pr), s, ProbeOptions{Interval: 5 * time.Minute, Config: gpuprobe.ExporterConfig(), Now: clock.Now, NVML: s})
	if err != nil {
		t.Fatal(err)
	}
	return s, p, clock
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

// TestProbeFirstRunAfterFirstSample: the sampler's workers read each GPU's
// identity, then sample it, then publish; a probe that started in between
// found every identity but no free memory in the snapshot, created its
// context on a GPU whose free memory it had not read, and reported no
// context memory. Run waits for the first published sample of every GPU
// (at most IdentityWait; past it the probe runs on the unknown-free-memory
// path and says so).
func TestProbeFirstRunAfterFirstSample(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		publish bool // the sampler publishes its first cycle during the wait
		// want: the first run's context memory (0: absent) and free memory
		// known before it.
		wantCtx   float64
		wantLog   string
		wantNoLog string
	}{
		{name: "first sample published", publish: true, wantCtx: 520 << 20, wantNoLog: "starting before"},
		{name: "no sample within the wait", wantLog: "starting before the sampler's first reading of every GPU"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, p, clock := probeSafetyEnvAt(t, `devices: [{count: 1, model: h100-sxm5-80gb, memory_used: 10}]`)
			var logs syncBuffer
			p.logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
			// The window of deviceWorker.run between cycle (identity read,
			// GPU sampled) and publish.
			for _, w := range s.workers {
				w.cycle()
			}
			if _, complete := s.GPUs(); !complete {
				t.Fatal("the cycle read no identity")
			}
			if _, known := s.FreeMemory(*s.workers[0].uuid.Load()); known {
				t.Fatal("free memory known before the first publish")
			}
			ticker := newFakeTicker()
			p.tick = ticker.ticker
			ran := make(chan struct{})
			p.afterRun = func() { ran <- struct{}{} }
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan struct{})
			go func() { p.Run(ctx); close(done) }()
			defer func() { cancel(); <-done }()
			poll := func() {
				t.Helper()
				select {
				case ticker.get(firstSamplePoll) <- time.Time{}:
				case <-ran:
					t.Fatalf("the probe ran before the sampler's first sample: %v", gatherProbe(t, p))
				}
			}
			// Identities known, no sample: the probe keeps waiting.
			poll()
			poll()
			if tc.publish {
				s.publish()
			} else {
				clock.Advance(p.opts.FirstSampleWait)
			}
			// The probe may have seen the change on the last poll already;
			// else it sees it on the next one.
			for polls := 0; ; polls++ {
				select {
				case ticker.get(firstSamplePoll) <- time.Time{}:
					if polls > 0 {
						t.Fatalf("the probe still waits %d polls after the sampler's first sample", polls+1)
					}
					continue
				case <-ran:
				}
				break
			}
			got := gatherProbe(t, p)
			id := fmt.Sprintf("gpu=0,uuid=%s", *s.workers[0].uuid.Load())
			if v := got["gpulens_probe_up{"+id+"}"]; v != 1 {
				t.Fatalf("GPU 0 not measured: %v", got)
			}
			if v, ok := got["gpulens_probe_context_memory_bytes{"+id+"}"]; v != tc.wantCtx || ok != (tc.wantCtx > 0) {
				t.Errorf("context memory = %v (present %v), want %v", v, ok, tc.wantCtx)
			}
			if l := logs.String(); !strings.Contains(l, tc.wantLog) || (tc.wantNoLog != "" && strings.Contains(l, tc.wantNoLog)) {
				t.Errorf("logs %q: want %q, not %q", l, tc.wantLog, tc.wantNoLog)
			}
		})
	}
}

// syncBuffer is a bytes.Buffer that a logger may write while a test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
