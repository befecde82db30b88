package gpusim

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpulens/gpulens/internal/gpuprobe"
)

// TestValidateScenario walks the validate scenario's three phases and
// checks that the host's view (NVML's processes and utilisation samples)
// and the tenant's view (the real probe over the simulated driver: stolen
// time, FLOP/s) describe the same contention, as
// scripts/real-gpu-validate.sh --sim asserts end to end.
func TestValidateScenario(t *testing.T) {
	t.Parallel()
	type want struct {
		pids   []uint32
		sm     []uint32 // the processes' utilisation samples at that time
		stolen float64  // the probe's stolen ratio
	}
	tests := []struct {
		at   time.Duration
		want want
	}{
		// The script starts each phase's programs 2 s into it and waits
		// for them at most until its end: each phase must hold from its
		// start + 2 s to its last instant.
		{2 * time.Second, want{stolen: 0}},
		{58 * time.Second, want{stolen: 0}},
		{62 * time.Second, want{pids: []uint32{4101}, sm: []uint32{97}, stolen: 0.5}},
		{118 * time.Second, want{pids: []uint32{4101}, sm: []uint32{97}, stolen: 0.5}},
		{122 * time.Second, want{pids: []uint32{4101, 4102}, sm: []uint32{48, 48}, stolen: 2.0 / 3}},
		{178 * time.Second, want{pids: []uint32{4101, 4102}, sm: []uint32{48, 48}, stolen: 2.0 / 3}},
		{182 * time.Second, want{stolen: 0}},
	}
	for _, tc := range tests {
		t.Run(tc.at.String(), func(t *testing.T) {
			f, lib, clk := newTestFleet(t, mustLoad(t, "validate"), 1)
			clk.Set(tc.at)
			d := handle(t, lib, 0)
			procs, r := d.GetComputeRunningProcesses()
			if r != nvml.SUCCESS || len(procs) != len(tc.want.pids) {
				t.Fatalf("processes = %+v, %v; want pids %v", procs, r, tc.want.pids)
			}
			for i, p := range procs {
				if p.Pid != tc.want.pids[i] || p.UsedGpuMemory != 2560*mib {
					t.Errorf("process %d = %+v; want pid %d with 2560 MiB", i, p, tc.want.pids[i])
				}
			}
			samples, r := d.GetProcessUtilization(uint64(epoch.Add(tc.at).UnixMicro()) - 300_000)
			if len(tc.want.pids) == 0 {
				if r != nvml.ERROR_NOT_FOUND {
					t.Errorf("utilisation samples %+v, %v; want ERROR_NOT_FOUND", samples, r)
				}
			} else {
				if r != nvml.SUCCESS || len(samples) == 0 {
					t.Fatalf("utilisation samples %+v, %v", samples, r)
				}
				for _, s := range samples {
					for i, pid := range tc.want.pids {
						if s.Pid == pid && s.SmUtil != tc.want.sm[i] {
							t.Errorf("pid %d SM %d%%; want %d%%", pid, s.SmUtil, tc.want.sm[i])
						}
					}
				}
			}

			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cfg := gpuprobe.DefaultConfig()
			cfg.GPUTimeBudget, cfg.StolenWindow = 200*time.Millisecond, 100*time.Millisecond
			res, err := gpuprobe.New(f.ProbeDriver(), gpuprobe.Options{}).Probe(ctx, 0, cfg)
			if err != nil || len(res.Errors) > 0 {
				t.Fatalf("probe: %v, %+v", err, res.Errors)
			}
			s := res.Stolen
			if s == nil || math.Abs(s.Ratio-tc.want.stolen) > 0.05 {
				t.Fatalf("stolen = %+v; want %.2f", s, tc.want.stolen)
			}
			if tc.want.stolen > 0 && !within(float64(s.GapMedian), float64(2*time.Millisecond), 0.1) {
				t.Errorf("gap median %v; want ~2ms", s.GapMedian)
			}
			if want := h100Probe.fp32TFLOPS * 1e12 * (1 - tc.want.stolen); !within(res.FP32FLOPS, want, 0.05) {
				t.Errorf("FP32 %.4g FLOP/s; want %.4g (the probe's share of the GPU)", res.FP32FLOPS, want)
			}
		})
	}
}

// TestProbeTenantsShare: by default the probe takes turns with the tenants
// that have SM activity (idle or stopped ones take nothing, a light one no
// more than its utilisation, MPS clients through their server's context), composed with an
// invisible neighbour; per MIG instance, only that instance's tenants
// count; a GPU busy with nobody listed takes its busy share.
func TestProbeTenantsShare(t *testing.T) {
	t.Parallel()
	f, _, _ := newTestFleet(t, mustParse(t, `
devices:
  - model: h100-sxm5-80gb
    probe:
      tenants: {slice: 1ms}
      neighbour: {share: 0.5, slice: 4ms, start: 100s}
  - model: h100-sxm5-80gb
    mig: [3g.40gb, 3g.40gb]
    probe:
      tenants: {}
  - model: h100-sxm5-80gb
  - model: h100-sxm5-80gb
  - model: h100-sxm5-80gb
    util: 30
  - model: h100-sxm5-80gb
    util: 99
tenants:
  - {name: a, gpu: 0, sm_util: 90, start: 10s}
  - {name: b, gpu: 0, sm_util: 40, start: 20s}
  - {name: idle, gpu: 0, sm_util: 0}
  - {name: c, gpu: 0, sm_util: 70, start: 30s, stop: 40s}
  - {name: m0, gpu: 1, mig_instance: 0, sm_util: 50}
  - {name: m0b, gpu: 1, mig_instance: 0, sm_util: 50, start: 50s}
  - {name: other, gpu: 2, sm_util: 99}
  - {name: light, gpu: 3, sm_util: 20}
  - {name: heavy, gpu: 3, sm_util: 95, start: 10s}
  - {name: mps-client, gpu: 3, type: mps, sm_util: 90, start: 20s}
`), 1)
	devs := f.probeDevices()
	if len(devs) != 7 {
		t.Fatalf("%d CUDA devices; want 7", len(devs))
	}
	at := func(d time.Duration) time.Time { return epoch.Add(d) }
	for _, tc := range []struct {
		dev   int
		at    time.Duration
		share float64
		slice time.Duration
	}{
		{0, 0, 0, 0}, // only the idle tenant
		{0, 15 * time.Second, 0.5, time.Millisecond},     // a
		{0, 25 * time.Second, 2.0 / 3, time.Millisecond}, // a, b
		{0, 35 * time.Second, 0.75, time.Millisecond},    // a, b, c
		{0, 45 * time.Second, 2.0 / 3, time.Millisecond}, // c stopped
		// The neighbour takes half; the other half is split three ways.
		{0, 100 * time.Second, 1 - 0.5/3, time.Millisecond},
		{1, 10 * time.Second, 0.5, 2 * time.Millisecond},     // MIG 0: m0 (default slice)
		{1, 60 * time.Second, 2.0 / 3, 2 * time.Millisecond}, // MIG 0: m0, m0b
		{2, 60 * time.Second, 0, 0},                          // MIG 1: nobody
		{3, 0, 0.5, 2 * time.Millisecond},                    // no probe section: other
		{4, 0, 0.2, 2 * time.Millisecond},                    // light takes its 20 %
		// light 20 %, probe and heavy 40 % each.
		{4, 15 * time.Second, 0.6, 2 * time.Millisecond},
		// The MPS client's work runs in the MPS server's context, which
		// takes turns with the probe's like any other: light 20 %, the
		// probe, heavy and the server a third of the rest each.
		{4, 25 * time.Second, 1 - 0.8/3, 2 * time.Millisecond},
		// Busy with nobody listed: an unnamed context.
		{5, 0, 0.3, 2 * time.Millisecond},
		{6, 0, 0.5, 2 * time.Millisecond},
	} {
		share, slice := devs[tc.dev].Neighbour(at(tc.at))
		if math.Abs(share-tc.share) > 1e-12 || slice != tc.slice {
			t.Errorf("device %d at %v: neighbour %v, %v; want %v, %v", tc.dev, tc.at, share, slice, tc.share, tc.slice)
		}
	}

	// The share is capped like a neighbour's.
	f2, _, _ := newTestFleet(t, mustParse(t, `
devices:
  - model: h100-sxm5-80gb
    probe: {tenants: {}, neighbour: {share: 0.9}}
tenants:
  - {name: a, gpu: 0, sm_util: 90}
`), 1)
	if share, _ := f2.probeDevices()[0].Neighbour(at(time.Second)); share != maxNeighbourShare {
		t.Errorf("share %v; want the cap %v", share, maxNeighbourShare)
	}

	for _, tc := range []struct{ yml, want string }{
		{"    probe: {tenants: {slice: 10us}}\n", "x.yaml:4: devices[0].probe.tenants.slice: slice 10us must be between 50µs and 1s"},
		{"    probe: {tenants: {slice: soon}}\n", `x.yaml:4: devices[0].probe.tenants.slice: invalid duration "soon" (use Go syntax such as 500ms, 30s, 5m, 1h30m)`},
		{"    probe: {tenants: {share: 1}}\n", `x.yaml:4: devices[0].probe.tenants.share: unknown field "share" (known fields: slice)`},
	} {
		_, err := Parse([]byte("devices:\n  - count: 1\n    model: h100-sxm5-80gb\n"+tc.yml), "x.yaml")
		if err == nil || err.Error() != tc.want {
			t.Errorf("Parse error:\n%v\nwant:\n%s", err, tc.want)
		}
	}
}
