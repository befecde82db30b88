package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpulens/gpulens/collector"
	"github.com/gpulens/gpulens/internal/gpuprobe"
	"github.com/gpulens/gpulens/internal/testenv"
)

func TestProbeFlagsNameTheCulprit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"zero interval", []string{"--collector.probe.interval=0s"}, []string{"--collector.probe.interval must be positive"}},
		{"jitter over half", []string{"--collector.probe.interval-jitter=0.7"}, []string{"--collector.probe.interval-jitter must be between 0 and 0.5, got 0.7"}},
		{"negative jitter", []string{"--collector.probe.interval-jitter=-0.1"}, []string{"--collector.probe.interval-jitter must be between 0 and 0.5"}},
		{"bad interval", []string{"--collector.probe.interval=often"}, []string{"--collector.probe.interval", `"often" is not a duration`}},
		{"negative budget", []string{"--collector.probe.budget=-1ms"}, []string{"--collector.probe.budget must be positive"}},
		{"budget over the cap", []string{"--collector.probe.budget=11s", "--collector.probe.interval=1h"}, []string{"--collector.probe.budget must be at most 10s", "gpulens-verify"}},
		{"budget over 5% of the interval", []string{"--collector.probe.budget=2s", "--collector.probe.interval=30s"}, []string{"--collector.probe.budget (2s) must be at most 1/20 of --collector.probe.interval (30s)"}},
		{"window not shorter than the budget", []string{"--collector.probe.stolen-window=250ms"}, []string{"--collector.probe.stolen-window (250ms) must be shorter than --collector.probe.budget (250ms)"}},
		{"zero window", []string{"--collector.probe.stolen-window=0s"}, []string{"--collector.probe.stolen-window must be positive"}},
		{"memory too small", []string{"--collector.probe.max-memory=1MiB"}, []string{"--collector.probe.max-memory must be at least 16MiB, got 1MiB"}},
		{"memory not a size", []string{"--collector.probe.max-memory=lots"}, []string{"--collector.probe.max-memory", `"lots" is not a byte size`}},
		{"memory negative", []string{"--collector.probe.max-memory=-5MiB"}, []string{"--collector.probe.max-memory"}},
		{"empty library", []string{"--cuda.library= "}, []string{"--cuda.library must not be empty"}},
		{"unknown schedule", []string{"--collector.probe.schedule=parallel"}, []string{`--collector.probe.schedule must be one of sequential, together, got "parallel"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out testenv.Log
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			code := run(ctx, append([]string{"--web.listen-address=127.0.0.1:0", "--sim.scenario=minimal", "--collector.probe"}, tc.args...), &out)
			if code != 2 {
				t.Errorf("exit code %d, want 2; output:\n%s", code, out.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("message does not say %q:\n%s", w, out.String())
				}
			}
		})
	}
}

func TestProbeFlagDefaults(t *testing.T) {
	t.Parallel()
	o, err := parseFlags([]string{"--collector.probe"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	f := o.probe
	if !f.enabled || f.interval != 5*time.Minute || f.jitter != 0.2 || f.budget != 250*time.Millisecond || f.stolenWindow != 100*time.Millisecond ||
		f.maxMemory != 2<<30 || f.cudaLibrary != "libcuda.so.1" {
		t.Errorf("defaults: %+v", f)
	}
	want := gpuprobe.ExporterConfig()
	if c := o.probeConfig; c.GPUTimeBudget != want.GPUTimeBudget || c.StolenWindow != want.StolenWindow || c.MaxMemoryBytes != want.MaxMemoryBytes || c.GapThreshold != want.GapThreshold {
		t.Errorf("default config %+v, want gpuprobe.ExporterConfig() %+v", c, want)
	}
	off, err := parseFlags(nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if off.probe.enabled {
		t.Errorf("the probe is on by default")
	}
	custom, err := parseFlags([]string{"--collector.probe.budget=500ms", "--collector.probe.stolen-window=200ms", "--collector.probe.max-memory=1GiB", "--collector.probe.interval=1m"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c := custom.probeConfig; c.GPUTimeBudget != 500*time.Millisecond || c.StolenWindow != 200*time.Millisecond || c.MaxMemoryBytes != 1<<30 {
		t.Errorf("flags not applied: %+v", c)
	}
}

// fixedGPUs is a GPUDirectory of one GPU.
type fixedGPUs []collector.GPUIdentity

func (g fixedGPUs) GPUs() ([]collector.GPUIdentity, bool) { return g, true }

// Without a loadable libcuda the probe reports itself down on every GPU,
// naming the flag in its log, instead of failing the exporter.
func TestProbeWithoutLibcuda(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	f := probeFlags{enabled: true, interval: time.Minute, budget: 250 * time.Millisecond, stolenWindow: 100 * time.Millisecond,
		maxMemory: 256 << 20, cudaLibrary: t.TempDir() + "/libcuda.so.1", schedule: collector.ProbeSequential}
	cfg, err := f.config()
	if err != nil {
		t.Fatal(err)
	}
	p, err := newProbe(f, cfg, func(popts gpuprobe.Options, together bool) collector.OpenProber {
		return libcudaProber(f.cudaLibrary, popts, together)
	}, nil, fixedGPUs{{GPU: "0", UUID: "GPU-0", PCIBusID: "00000000:18:00.0"}}, logger)
	if err != nil {
		t.Fatal(err)
	}
	p.RunOnce(context.Background())
	p.RunOnce(context.Background())
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(p)
	const want = `# HELP gpulens_probe_up 1 when the last probe of the CUDA device measured something, 0 when it failed as a whole (no libcuda, no device, deadline, busy); its figures are then absent.
# TYPE gpulens_probe_up gauge
gpulens_probe_up{gpu="0",uuid="GPU-0"} 0
# HELP gpulens_probe_runs_total Probes of the device attempted, failed ones included.
# TYPE gpulens_probe_runs_total counter
gpulens_probe_runs_total{gpu="0",uuid="GPU-0"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "gpulens_probe_up", "gpulens_probe_runs_total"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg, "gpulens_probe_errors_total"); err != nil || n != 1 {
		t.Errorf("%d errors_total series (%v), want 1 (init, unavailable)", n, err)
	}
	if !strings.Contains(logs.String(), "--cuda.library "+f.cudaLibrary) {
		t.Errorf("log does not name --cuda.library:\n%s", logs.String())
	}
}

// probeSeries waits until the exporter serves the probe's figures for
// every GPU it lists, the unexplained stolen time included, and returns
// the scrape.
func probeSeries(t *testing.T, url string) map[string]*familyView {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var fams map[string]*familyView
	testenv.Eventually(ctx, t, 50*time.Millisecond, "the probe's unexplained stolen time for every GPU at "+url, func() (bool, string) {
		fams = scrape(t, http.DefaultClient, url)
		gpus, probed := 0, 0
		if f := fams["gpulens_gpu_info"]; f != nil {
			gpus = len(f.series)
		}
		if f := fams["gpulens_probe_unexplained_stolen_time_ratio"]; f != nil {
			probed = len(f.series)
		}
		var unknown []string
		if f := fams["gpulens_probe_unexplained_stolen_time_unknown"]; f != nil {
			for _, s := range f.series {
				unknown = append(unknown, "GPU "+s.labels["gpu"]+": "+s.labels["reason"])
			}
		}
		return gpus > 0 && probed == gpus, fmt.Sprintf("%d GPUs, %d with the probe's unexplained stolen time (not known: %v)", gpus, probed, unknown)
	})
	return fams
}

// The simulated scenarios end to end: the probe sees the invisible
// neighbour of rented-timesliced (half the GPU, beside the renter's server
// at 30-50 %, which takes the probe's time too: stolen 0.75, a quarter of
// the copy bandwidth) and tells it apart from the server NVML shows
// (unexplained 0.5); nobody on rented-dedicated; on busy-neighbour before
// the neighbour joins, the tenant's own job takes half, all of it
// explained. Labelled like the NVML series.
func TestProbeOnSimulatedScenarios(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		scenario       string
		minStolen      float64
		maxStolen      float64
		minUnexplained float64
		maxUnexplained float64
		minDeviceCopy  float64 // bytes/s
		maxDeviceCopy  float64
		wantGapAtLeast float64 // seconds
	}{
		{"rented-dedicated", 0, 0.02, 0, 0.02, 2.4e12, 3.4e12, 0},
		{"rented-timesliced", 0.7, 0.8, 0.45, 0.55, 6e11, 8.5e11, 0.0015},
		{"busy-neighbour", 0.45, 0.55, 0, 0.05, 1.2e12, 1.7e12, 0.0015},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			addr := startExporter(t, "--sim.scenario="+tc.scenario, "--sampler.interval=100ms", "--collector.probe", "--collector.probe.interval=1m")
			fams := probeSeries(t, "http://"+addr+"/metrics")
			info := fams["gpulens_gpu_info"].series[0].labels
			one := func(name string) seriesView {
				t.Helper()
				f := fams[name]
				if f == nil || len(f.series) == 0 {
					t.Fatalf("%s missing", name)
				}
				s := f.series[0]
				if s.labels["gpu"] != info["gpu"] || s.labels["uuid"] != info["uuid"] {
					t.Errorf("%s labelled %v, NVML says gpu %s uuid %s", name, s.labels, info["gpu"], info["uuid"])
				}
				return s
			}
			if v := one("gpulens_probe_up").value; v != 1 {
				t.Errorf("gpulens_probe_up %v", v)
			}
			if v := one("gpulens_probe_stolen_time_ratio").value; v < tc.minStolen || v > tc.maxStolen {
				t.Errorf("stolen time ratio %.3f, want %.2f–%.2f", v, tc.minStolen, tc.maxStolen)
			}
			if v := one("gpulens_probe_unexplained_stolen_time_ratio").value; v < tc.minUnexplained || v > tc.maxUnexplained {
				t.Errorf("unexplained stolen time ratio %.3f, want %.2f–%.2f", v, tc.minUnexplained, tc.maxUnexplained)
			}
			if v := one("gpulens_probe_device_copy_bandwidth_bytes_per_second").value; v < tc.minDeviceCopy || v > tc.maxDeviceCopy {
				t.Errorf("device copy %.3g B/s, want %.3g–%.3g", v, tc.minDeviceCopy, tc.maxDeviceCopy)
			}
			for _, s := range fams["gpulens_probe_stolen_gap_seconds"].series {
				if s.labels["stat"] == "median" && s.value < tc.wantGapAtLeast {
					t.Errorf("median gap %.4fs, want at least %.4fs", s.value, tc.wantGapAtLeast)
				}
			}
			// The NVML collectors are unaffected.
			if fams["gpulens_gpu_up"] == nil || fams["gpulens_gpu_up"].series[0].value != 1 || fams["gpulens_gpu_memory_used_bytes"] == nil {
				t.Errorf("NVML series missing beside the probe")
			}
		})
	}
}
