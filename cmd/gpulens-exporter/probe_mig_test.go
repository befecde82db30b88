package main

import (
	"bytes"
	"context"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpulens/gpulens/internal/gpuprobe"
	"github.com/gpulens/gpulens/internal/sim/gpusim"
	"github.com/gpulens/gpulens/internal/testenv"
)

// TestMain lets this test binary stand for the exporter's binary as its
// own probe child: the exporter re-runs os.Executable() (here, the test
// binary) as `probe-child` for each MIG instance CUDA does not show it.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == gpuprobe.ChildCommand {
		os.Exit(run(context.Background(), os.Args[1:], os.Stderr))
	}
	os.Exit(m.Run())
}

// TestProbeMeasuresEveryMIGInstanceOfDemo: on the demo scenario, GPU 4's
// MIG instances (3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb) are each measured:
// gpulens_probe_up 1 (before, only the instance CUDA shows the exporter
// was; the others were skipped as mig_instance_not_visible), FP32 and
// tensor figures in proportion to their multiprocessors (the first
// instance's measured in process, the others' by probe children on the
// same simulated timeline), the memory of their profile, and the
// children's cost.
func TestProbeMeasuresEveryMIGInstanceOfDemo(t *testing.T) {
	t.Parallel()
	start := time.Now().UTC().Format(time.RFC3339Nano)
	addr := startExporter(t, append([]string{"--sim.scenario=demo", "--sim.start=" + start, "--sampler.interval=200ms"}, probeArgs...)...)
	fleet, err := gpusim.New(mustLoad(t, "demo"), gpusim.Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	// The instances and their multiprocessors, as CUDA shows each one to
	// the process it is visible to.
	var uuids []string
	for _, d := range probeDevices(t, fleet, "") {
		if strings.HasPrefix(d.UUID, "MIG-") {
			uuids = append(uuids, d.UUID)
		}
	}
	if len(uuids) != 1 {
		t.Fatalf("the exporter's own CUDA shows %d MIG instances, want 1", len(uuids))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var fams map[string]*familyView
	migUp := func() (ok bool, seen string) {
		body, err := testenv.Scrape(ctx, "http://"+addr+"/metrics", testenv.AcceptText)
		if err != nil {
			return false, err.Error()
		}
		fams = parseScrape(t, bytes.NewReader(body))
		up := 0
		var sb strings.Builder
		for _, s := range seriesOf(fams, "gpulens_probe_up") {
			if s.labels["gpu"] == "4" {
				sb.WriteString(s.labels["uuid"] + "=" + strconv.FormatFloat(s.value, 'g', -1, 64) + " ")
				if s.value == 1 {
					up++
				}
			}
		}
		return up == 4, sb.String()
	}
	testenv.Eventually(ctx, t, 100*time.Millisecond, "every MIG instance of GPU 4 measured", migUp)
	// Each device's figures; a busy tenant's turns (the probe tenants
	// time-slice with the probe) take the stolen ratio of its kernels'
	// time, so the rates are compared per multiprocessor once divided by
	// 1 - stolen.
	type fig struct{ fp32, bf16, stolen, mem, childCPU float64 }
	got := map[string]*fig{}
	for name, set := range map[string]func(*fig, float64){
		"gpulens_probe_fp32_flop_per_second":        func(f *fig, v float64) { f.fp32 = v },
		"gpulens_probe_stolen_time_ratio":           func(f *fig, v float64) { f.stolen = v },
		"gpulens_probe_memory_total_bytes":          func(f *fig, v float64) { f.mem = v },
		"gpulens_probe_child_cpu_seconds_total":     func(f *fig, v float64) { f.childCPU = v },
		"gpulens_probe_tensor_flop_per_second/bf16": func(f *fig, v float64) { f.bf16 = v },
	} {
		family, dtype, _ := strings.Cut(name, "/")
		for _, s := range seriesOf(fams, family) {
			if dtype != "" && s.labels["dtype"] != dtype {
				continue
			}
			if got[s.labels["uuid"]] == nil {
				got[s.labels["uuid"]] = &fig{}
			}
			set(got[s.labels["uuid"]], s.value)
		}
	}
	// The reference: the whole H100 (132 SMs) with the least stolen time.
	var ref *fig
	for uuid, f := range got {
		if strings.HasPrefix(uuid, "GPU-") && f.fp32 > 0 && (ref == nil || f.stolen < ref.stolen) {
			ref = f
		}
	}
	perSM := func(rate, stolen, sms float64) float64 { return rate / (1 - stolen) / sms }
	instances := 0
	for uuid, f := range got {
		if !strings.HasPrefix(uuid, "MIG-") {
			continue
		}
		instances++
		d := probeDevices(t, fleet, uuid)
		if len(d) != 1 || d[0].UUID != uuid {
			t.Fatalf("CUDA_VISIBLE_DEVICES=%s shows %v", uuid, d)
		}
		sms := float64(d[0].SMs)
		if f.mem <= 0 || math.Abs(f.mem/float64(d[0].TotalMemoryBytes)-1) > 0.05 {
			t.Errorf("%s: memory total %v, want about %d", uuid, f.mem, d[0].TotalMemoryBytes)
		}
		if r := perSM(f.fp32, f.stolen, sms) / perSM(ref.fp32, ref.stolen, 132); math.Abs(r-1) > 0.05 {
			t.Errorf("%s (%v SMs): FP32 %.4g (stolen %.2f) is %.3f per SM of a whole H100's, want 1", uuid, sms, f.fp32, f.stolen, r)
		}
		if r := perSM(f.bf16, f.stolen, sms) / perSM(ref.bf16, ref.stolen, 132); math.Abs(r-1) > 0.05 {
			t.Errorf("%s (%v SMs): BF16 %.4g (stolen %.2f) is %.3f per SM of a whole H100's, want 1", uuid, sms, f.bf16, f.stolen, r)
		}
		if (uuid == uuids[0]) != (f.childCPU == 0) {
			t.Errorf("%s: child CPU %v s; want some for the instances measured by children, none for the visible one", uuid, f.childCPU)
		}
	}
	if instances != 4 {
		t.Errorf("figures for %d MIG instances, want 4", instances)
	}
	for _, s := range seriesOf(fams, "gpulens_probe_skipped_total") {
		if s.labels["gpu"] == "4" {
			t.Errorf("GPU 4 instance %s skipped: %v", s.labels["uuid"], s.labels["reason"])
		}
	}
}

func mustLoad(t *testing.T, name string) *gpusim.Scenario {
	t.Helper()
	sc, err := gpusim.Load(name)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// probeDevices are the CUDA devices of fleet a process with
// CUDA_VISIBLE_DEVICES=visible sees.
func probeDevices(t *testing.T, fleet *gpusim.Fleet, visible string) []gpuprobe.DeviceInfo {
	t.Helper()
	devs, err := gpuprobe.New(fleet.ProbeDriverVisible(visible), gpuprobe.Options{}).Devices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return devs
}

func seriesOf(fams map[string]*familyView, name string) []seriesView {
	if f := fams[name]; f != nil {
		return f.series
	}
	return nil
}
