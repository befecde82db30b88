package verify

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpulens/gpulens/internal/clockevent"
	"github.com/gpulens/gpulens/internal/gpuprobe"
)

type want struct {
	id     string
	status Status
	has    []string // substrings of the reason
}

func findCheck(cs []Check, id string) (Check, bool) {
	for _, c := range cs {
		if c.ID == id {
			return c, true
		}
	}
	return Check{}, false
}

func TestHealthyDevicePassesEveryCheck(t *testing.T) {
	d, rep := healthyFixture().judge()
	wantIDs := []string{CheckModel, CheckVRAM, CheckVRAMFree, CheckVirt, CheckMIG, CheckComputeMode, CheckProcesses, CheckStolen,
		CheckH2D, CheckD2H, CheckDeviceCopy, CheckFP32, CheckFP16, CheckBF16, CheckLaunch, CheckVariability, CheckPCIe,
		CheckThrottle, CheckPowerLimit, CheckECCMode, CheckECCErrors, CheckRetirement, CheckProbeErrors}
	if len(d.Checks) != len(wantIDs) {
		t.Errorf("%d checks, want %d", len(d.Checks), len(wantIDs))
	}
	for i, id := range wantIDs {
		if i < len(d.Checks) && d.Checks[i].ID != id {
			t.Errorf("check %d is %s, want %s", i, d.Checks[i].ID, id)
		}
	}
	for _, c := range append(d.Checks, rep.Checks...) {
		if c.Status != StatusPass {
			t.Errorf("%s: %s: %s", c.ID, c.Status, c.Reason)
		}
	}
	if rep.Summary.ExitCode != ExitPass || rep.Summary.Verdict != StatusPass || rep.Summary.Fail+rep.Summary.Warn != 0 {
		t.Errorf("summary %+v, want all pass, exit 0", rep.Summary)
	}
	ans := map[string]Answer{}
	for _, a := range d.Answers {
		ans[a.ID] = a
	}
	for id, sub := range map[string]string{
		AnswerSharing:  "dedicated: the whole GPU, no hypervisor sharing it, no other process visible, no time taken by contexts NVML does not show (0.1 %)",
		AnswerVRAM:     "79.1 GiB free to a new context, of 79.6 GiB visible; the H100 SXM has 80 GiB",
		AnswerReserved: "yes: memory bandwidth 110 %, FP32 110 %, FP16 tensor 105 %, BF16 tensor 105 % of a healthy H100 SXM",
		AnswerLatency:  "no: 0.1 % of the GPU time stolen",
		AnswerFailure:  "ECC is on",
	} {
		if a := ans[id]; a.Status != StatusPass || !strings.Contains(a.Answer, sub) {
			t.Errorf("answer %s = %s %q, want pass containing %q", id, a.Status, a.Answer, sub)
		}
	}
	if len(rep.Answers) != 1 || !strings.Contains(rep.Answers[0].Answer, "driver 550.54.15; the driver supports CUDA 12.4") {
		t.Errorf("host answers %+v", rep.Answers)
	}
}

func TestVerdictRules(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(f *fixture)
		want   []want
		exit   int
	}{
		{
			name: "vGPU guest with a quarter of the memory",
			change: func(f *fixture) {
				f.dev.CUDA.TotalMemoryBytes = 20 * gib
				f.dev.NVML.Virtualization = VirtVGPUGuest
				f.dev.NVML.Name = "NVIDIA H100XM-20C"
				f.eachResult(func(_ int, r *gpuprobe.Result) {
					r.Memory = &gpuprobe.MemoryResult{FreeBytes: 19 * gib, TotalBytes: 20 * gib}
				})
			},
			want: []want{
				{CheckVRAM, StatusFail, []string{"you see 20 GiB of the H100 SXM's 80 GiB: a vGPU profile or partition"}},
				{CheckVirt, StatusWarn, []string{"shared by a hypervisor"}},
				{CheckModel, StatusPass, []string{`"NVIDIA H100XM-20C" is an H100 SXM`}},
			},
			exit: ExitFail,
		},
		{
			name: "a tenth of the memory missing warns",
			change: func(f *fixture) {
				f.eachResult(func(_ int, r *gpuprobe.Result) { r.Memory.TotalBytes = 70 * gib; r.Memory.FreeBytes = 69 * gib })
			},
			want: []want{{CheckVRAM, StatusWarn, []string{"you see 70 GiB of the H100 SXM's 80 GiB (88 %)", "held back"}}},
			exit: ExitPass,
		},
		{
			name:   "expected VRAM met within the driver's reservation",
			change: func(f *fixture) { f.o.Expect.VRAMBytes = 80 * gib },
			want:   []want{{CheckVRAMExpected, StatusPass, []string{"you see 79.6 GiB; you expect 80 GiB"}}},
			exit:   ExitPass,
		},
		{
			name:   "expected VRAM not met",
			change: func(f *fixture) { f.o.Expect.VRAMBytes = 141 * gib },
			want:   []want{{CheckVRAMExpected, StatusFail, []string{"you see 79.6 GiB; you expect 141 GiB"}}},
			exit:   ExitFail,
		},
		{
			name:   "memory held by others",
			change: func(f *fixture) { f.eachResult(func(_ int, r *gpuprobe.Result) { r.Memory.FreeBytes = 40 * gib }) },
			want:   []want{{CheckVRAMFree, StatusWarn, []string{"40 GiB of 79.6 GiB free to a new context", "39.6 GiB held by others"}}},
			exit:   ExitPass,
		},
		{
			name: "fill test refused below what was reported free",
			change: func(f *fixture) {
				f.eachResult(func(_ int, r *gpuprobe.Result) {
					r.Memory.FillTested, r.Memory.UsableBytes, r.Memory.FillStopped = true, 30*gib, "out_of_memory"
				})
			},
			want: []want{{CheckVRAMFree, StatusWarn, []string{"allocated and touched 30 GiB (stopped: out_of_memory): less than reported free"}}},
			exit: ExitPass,
		},
		{
			name: "fill test stopped by its limit passes",
			change: func(f *fixture) {
				f.eachResult(func(_ int, r *gpuprobe.Result) {
					r.Memory.FillTested, r.Memory.UsableBytes, r.Memory.FillStopped = true, 8*gib, "limit"
				})
			},
			want: []want{{CheckVRAMFree, StatusPass, []string{"allocated and touched 8 GiB (stopped: limit)"}}},
			exit: ExitPass,
		},
		{
			name: "time-sliced neighbour",
			change: func(f *fixture) {
				f.eachResult(func(i int, r *gpuprobe.Result) {
					r.Stolen = &gpuprobe.StolenResult{Window: time.Second, Blocks: 132, Ratio: []float64{0.47, 0.48, 0.5}[i], MaxRatio: 0.52,
						Gaps: 120, GapMedian: 2 * time.Millisecond, GapP90: 2100 * time.Microsecond, GapMax: 4 * time.Millisecond}
					r.BF16TensorFLOPS *= 0.5
				})
			},
			want: []want{
				{CheckStolen, StatusFail, []string{"48 % of the watch window (median of 3 runs)", "gaps of 2 ms median, 2.1 ms p90, 4 ms max",
					"time-slicing with another context, in slices of about 2 ms"}},
				{CheckBF16, StatusFail, []string{"52 % of the 544 TFLOP/s", "48 % of the time stolen"}},
			},
			exit: ExitFail,
		},
		{
			name: "some stolen time warns",
			change: func(f *fixture) {
				f.eachResult(func(_ int, r *gpuprobe.Result) {
					r.Stolen = &gpuprobe.StolenResult{Window: time.Second, Ratio: 0.1, MaxRatio: 0.12, GapMedian: 50 * time.Microsecond}
				})
			},
			want: []want{{CheckStolen, StatusWarn, []string{"10 % of the watch window", "short preemptions"}}},
			exit: ExitPass,
		},
		{
			name: "an intermittent neighbour warns",
			change: func(f *fixture) {
				f.eachResult(func(i int, r *gpuprobe.Result) {
					r.Stolen = &gpuprobe.StolenResult{Window: time.Second, Ratio: []float64{0.45, 0, 0.01}[i], MaxRatio: 0.5}
				})
			},
			want: []want{{CheckStolen, StatusWarn, []string{"intermittent: 1 of 3 runs lost up to 45 %"}}},
			exit: ExitPass,
		},
		{
			name: "the tenant's own busy process explains the stolen time",
			change: func(f *fixture) {
				f.dev.NVML.Processes = &ProcessFacts{Count: 1, MemoryBytes: 10 * gib, PIDs: []uint32{4242}}
				for i := range f.dev.Runs {
					f.dev.Runs[i].Result.Stolen = &gpuprobe.StolenResult{Window: time.Second, Ratio: 0.5, MaxRatio: 0.51, GapMedian: 2 * time.Millisecond}
					f.dev.Runs[i].VisibleSM = map[string]float64{"4242": 0.97}
					f.dev.Runs[i].UnexplainedStolenRatio = new(float64)
				}
			},
			want: []want{
				{CheckStolen, StatusPass, []string{"50 % of the watch window went to the processes NVML shows busy (median of 3 runs), 0 % to contexts it does not show",
					"MPS clients beside an MPS client, and contexts on other MIG instances, never pause the probe"}},
				{CheckProcesses, StatusWarn, []string{"1 other process(es)"}},
			},
			exit: ExitPass,
		},
		{
			name: "a neighbour NVML does not show beside a busy visible process fails on its share",
			change: func(f *fixture) {
				for i := range f.dev.Runs {
					f.dev.Runs[i].Result.Stolen = &gpuprobe.StolenResult{Window: time.Second, Ratio: 0.7, MaxRatio: 0.71, GapMedian: 2 * time.Millisecond}
					u := 0.4
					f.dev.Runs[i].UnexplainedStolenRatio = &u
				}
			},
			want: []want{{CheckStolen, StatusFail, []string{"the GPU ran work of contexts NVML does not show for 40 % of the watch window (median of 3 runs) (70 % stolen in all; the processes NVML shows busy explain the rest)"}}},
			exit: ExitFail,
		},
		{
			name: "busy with no process visible",
			change: func(f *fixture) {
				u := uint32(85)
				f.dev.NVML.UtilizationPct = &u
			},
			want: []want{{CheckProcesses, StatusWarn, []string{"no process visible, yet NVML reports the GPU 85% busy: you are inside a VM or container, and that is somebody else"}}},
			exit: ExitPass,
		},
		{
			name: "busy and memory held with no process visible",
			change: func(f *fixture) {
				u := uint32(60)
				f.dev.NVML.UtilizationPct = &u
				f.dev.NVML.Memory.UsedBytes = 70 * gib
			},
			want: []want{{CheckProcesses, StatusWarn, []string{"NVML reports the GPU 60% busy and 70 GiB of its memory in use"}}},
			exit: ExitPass,
		},
		{
			name: "throttled: power cap seen and tensor throughput at half",
			change: func(f *fixture) {
				f.eachResult(func(_ int, r *gpuprobe.Result) {
					r.FP16TensorFLOPS *= 0.45
					r.BF16TensorFLOPS *= 0.45
					r.FP32FLOPS *= 0.7
				})
				l := f.dev.NVML.UnderLoad
				l.ClockEventReasons = clockevent.SwPowerCap
				l.Reasons = []string{"sw_power_cap"}
				l.ReasonSamples = map[string]int{"sw_power_cap": 20}
				l.MinSMClockMHz = 1110
				f.dev.NVML.Power.LimitW = 350
			},
			want: []want{
				{CheckBF16, StatusFail, []string{"47 % of the", "a healthy H100 SXM reaches (estimate)", "power cap (the board's power limit)", "power limit 350 W of 700 W"}},
				{CheckFP32, StatusWarn, []string{"77 % of the"}},
				{CheckThrottle, StatusWarn, []string{"power cap (the board's power limit) in 20 of 24 samples", "SM clock 1110–1980 MHz of max 1980 MHz"}},
				{CheckPowerLimit, StatusWarn, []string{"350 W of the default 700 W (50 %)"}},
			},
			exit: ExitFail,
		},
		{
			name: "a power cap at the default limit with healthy figures is GPU Boost",
			change: func(f *fixture) {
				l := f.dev.NVML.UnderLoad
				l.ClockEventReasons = clockevent.SwPowerCap | clockevent.GpuIdle
				l.Reasons = clockevent.Names(l.ClockEventReasons)
				l.ReasonSamples = map[string]int{"sw_power_cap": 12, "gpu_idle": 2}
			},
			want: []want{{CheckThrottle, StatusPass, []string{"power cap (the board's power limit) in 12 of 24 samples", "normal under a dense kernel"}}},
			exit: ExitPass,
		},
		{
			name: "a power cap with a low figure warns",
			change: func(f *fixture) {
				l := f.dev.NVML.UnderLoad
				l.ClockEventReasons = clockevent.SwPowerCap
				l.Reasons = clockevent.Names(l.ClockEventReasons)
				l.ReasonSamples = map[string]int{"sw_power_cap": 24}
				f.eachResult(func(_ int, r *gpuprobe.Result) { r.FP32FLOPS *= 0.7 })
			},
			want: []want{
				{CheckThrottle, StatusWarn, []string{"power cap (the board's power limit) in 24 of 24 samples"}},
				{CheckFP32, StatusWarn, []string{"seen under load: power cap"}},
			},
			exit: ExitPass,
		},
		{
			name: "thermal slowdown fails",
			change: func(f *fixture) {
				l := f.dev.NVML.UnderLoad
				l.ClockEventReasons = clockevent.HwThermalSlowdown | clockevent.SwPowerCap
				l.Reasons = clockevent.Names(l.ClockEventReasons)
				l.ReasonSamples = map[string]int{"hw_thermal_slowdown": 3, "sw_power_cap": 5}
			},
			want: []want{{CheckThrottle, StatusFail, []string{"hardware thermal slowdown (the GPU overheated) in 3 of 24 samples", "power cap (the board's power limit) in 5 of 24"}}},
			exit: ExitFail,
		},
		{
			name: "bandwidth at 70 % warns, unknown spec names no reference",
			change: func(f *fixture) {
				f.eachResult(func(_ int, r *gpuprobe.Result) {
					r.DeviceCopyBytesPerSecond = h100Spec().Expected().DeviceCopyBytesPerSecond * 0.7
				})
			},
			want: []want{{CheckDeviceCopy, StatusWarn, []string{"1.88 TB/s (median of 3, 1.88 TB/s–1.88 TB/s): 70 % of the 2.68 TB/s a healthy H100 SXM reaches"}}},
			exit: ExitPass,
		},
		{
			name: "an unknown model is not judged",
			change: func(f *fixture) {
				f.dev.NVML.Name = "NVIDIA RTX PRO 6000 Blackwell"
				f.dev.Name = f.dev.NVML.Name
				f.dev.CUDA.Name = f.dev.NVML.Name
			},
			want: []want{
				{CheckModel, StatusWarn, []string{"is not in the spec table", "pass --expect.gpu"}},
				{CheckBF16, StatusWarn, []string{"no reference: the model is not in the spec table"}},
				{CheckVRAM, StatusWarn, []string{"you see 79.6 GiB; no spec to compare it with"}},
			},
			exit: ExitPass,
		},
		{
			name:   "expected model differs",
			change: func(f *fixture) { f.o.Expect.GPU = "h100-pcie" },
			want: []want{
				{CheckModel, StatusFail, []string{`"NVIDIA H100 80GB HBM3" is an H100 SXM, not the H100 PCIe you expect`}},
				// Judged against what was paid for: an SXM beats the PCIe figures.
				{CheckBF16, StatusPass, []string{"a healthy H100 PCIe reaches"}},
			},
			exit: ExitFail,
		},
		{
			name:   "expected model matches",
			change: func(f *fixture) { f.o.Expect.GPU = "H100-SXM" },
			want:   []want{{CheckModel, StatusPass, []string{"is an H100 SXM, as expected"}}},
			exit:   ExitPass,
		},
		{
			name: "a MIG slice is judged against its share of the GPU",
			change: func(f *fixture) {
				f.dev.CUDA.UUID = "MIG-aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"
				f.dev.CUDA.SMs = 60
				f.dev.CUDA.TotalMemoryBytes = 40 * gib
				f.dev.MIG = &MIGInstance{UUID: f.dev.CUDA.UUID, Name: h100 + " MIG 3g.40gb", Profile: "3g.40gb", GPUInstanceID: 2, MemoryTotalBytes: 40 * gib}
				f.dev.NVML.MIGEnabled = boolp(true)
				f.dev.NVML.MIGInstances = []MIGInstance{*f.dev.MIG}
				f.eachResult(func(_ int, r *gpuprobe.Result) {
					r.Memory = &gpuprobe.MemoryResult{FreeBytes: 39 * gib, TotalBytes: 40 * gib}
					r.BF16TensorFLOPS *= 60.0 / 132
					r.FP16TensorFLOPS *= 60.0 / 132
					r.FP32FLOPS *= 60.0 / 132
					r.DeviceCopyBytesPerSecond *= 0.5
				})
			},
			want: []want{
				{CheckVRAM, StatusWarn, []string{"you see 40 GiB of the H100 SXM's 80 GiB: a MIG slice (3g.40gb)"}},
				{CheckMIG, StatusWarn, []string{"a MIG slice (3g.40gb)", "45 % of the SMs and 50 % of the memory"}},
				{CheckBF16, StatusPass, []string{"105 % of the", "a healthy H100 SXM slice of this size reaches"}},
				{CheckDeviceCopy, StatusPass, []string{"110 % of the"}},
			},
			exit: ExitPass,
		},
		{
			name:   "compute mode prohibited fails",
			change: func(f *fixture) { f.dev.NVML.ComputeMode = ComputeProhibited },
			want:   []want{{CheckComputeMode, StatusFail, []string{"prohibited: no CUDA context"}}},
			exit:   ExitFail,
		},
		{
			name:   "exclusive process passes",
			change: func(f *fixture) { f.dev.NVML.ComputeMode = ComputeExclusiveProcess },
			want:   []want{{CheckComputeMode, StatusPass, []string{"exclusive process"}}},
			exit:   ExitPass,
		},
		{
			name: "other processes are visible",
			change: func(f *fixture) {
				f.dev.NVML.Processes = &ProcessFacts{Count: 2, MemoryBytes: 10 * gib, PIDs: []uint32{10, 11}}
			},
			want: []want{{CheckProcesses, StatusWarn, []string{"2 other process(es) use this GPU (pid 10, 11; 10 GiB): it is shared, unless they are yours"}}},
			exit: ExitPass,
		},
		{
			name:   "memory in use by someone NVML cannot show",
			change: func(f *fixture) { f.dev.NVML.Memory.UsedBytes = 5 * gib },
			want:   []want{{CheckProcesses, StatusWarn, []string{"no process visible, yet 5 GiB", "inside a VM or container, and that is somebody else"}}},
			exit:   ExitPass,
		},
		{
			name:   "half the PCIe lanes fail",
			change: func(f *fixture) { f.dev.NVML.UnderLoad.PCIeWidth = 8; f.dev.NVML.PCIe.CurrentWidth = 8 },
			want:   []want{{CheckPCIe, StatusFail, []string{"Gen5 x8 under load (the link supports Gen5 x16): 8 of 16 lanes, 50 % of the host bandwidth"}}},
			exit:   ExitFail,
		},
		{
			name:   "a lower generation under load warns",
			change: func(f *fixture) { f.dev.NVML.UnderLoad.PCIeGen = 4 },
			want:   []want{{CheckPCIe, StatusWarn, []string{"Gen4 x16 under load (the link supports Gen5 x16): the link trained below"}}},
			exit:   ExitPass,
		},
		{
			name:   "a host that caps the link below the card warns",
			change: func(f *fixture) { f.dev.NVML.PCIe.MaxGen = 4; f.dev.NVML.UnderLoad.PCIeGen = 4 },
			want:   []want{{CheckPCIe, StatusWarn, []string{"the slot or host caps the link below the H100 SXM's Gen5"}}},
			exit:   ExitPass,
		},
		{
			name: "expected PCIe link not met",
			change: func(f *fixture) {
				f.o.Expect.PCIeGen, f.o.Expect.PCIeWidth = 5, 16
				f.dev.NVML.UnderLoad.PCIeGen = 4
			},
			want: []want{{CheckPCIeExpected, StatusFail, []string{"the link runs at Gen4 x16; you expect Gen5 x16"}}},
			exit: ExitFail,
		},
		{
			name:   "expected PCIe link met",
			change: func(f *fixture) { f.o.Expect.PCIeGen, f.o.Expect.PCIeWidth = 5, 16 },
			want:   []want{{CheckPCIeExpected, StatusPass, []string{"the link runs at Gen5 x16; you expect Gen5 x16"}}},
			exit:   ExitPass,
		},
		{
			name:   "ECC off warns",
			change: func(f *fixture) { f.dev.NVML.ECC = &ECCFacts{Enabled: false, PendingEnabled: true} },
			want: []want{
				{CheckECCMode, StatusWarn, []string{"ECC is off: memory errors go undetected (on after the next reset)"}},
				{CheckECCErrors, StatusWarn, []string{"not measured: ECC is off"}},
			},
			exit: ExitPass,
		},
		{
			name: "ECC not supported is not available",
			change: func(f *fixture) {
				f.dev.NVML.ECC = nil
				f.dev.NVML.NotAvailable = append(f.dev.NVML.NotAvailable, "GetEccMode")
			},
			want: []want{{CheckECCMode, StatusWarn, []string{"ECC not available (NVML GetEccMode: not supported)"}}},
			exit: ExitPass,
		},
		{
			name:   "uncorrected ECC errors fail",
			change: func(f *fixture) { f.dev.NVML.ECC.UncorrectedAggregate = u64(2) },
			want:   []want{{CheckECCErrors, StatusFail, []string{"2 over the GPU's life"}}},
			exit:   ExitFail,
		},
		{
			name:   "a pending row remap fails",
			change: func(f *fixture) { f.dev.NVML.RemappedRows = &RemappedRows{Uncorrectable: 1, Pending: true} },
			want:   []want{{CheckRetirement, StatusFail, []string{"a row remap is pending: the GPU needs a reset"}}},
			exit:   ExitFail,
		},
		{
			name:   "a failed row remap fails",
			change: func(f *fixture) { f.dev.NVML.RemappedRows = &RemappedRows{Failure: true} },
			want:   []want{{CheckRetirement, StatusFail, []string{"a row remap failed"}}},
			exit:   ExitFail,
		},
		{
			name:   "healed rows warn",
			change: func(f *fixture) { f.dev.NVML.RemappedRows = &RemappedRows{Uncorrectable: 3, Correctable: 1} },
			want:   []want{{CheckRetirement, StatusWarn, []string{"3 row(s) remapped after uncorrectable errors, 1 after correctable"}}},
			exit:   ExitPass,
		},
		{
			name: "retired pages fail (before Ampere)",
			change: func(f *fixture) {
				f.dev.NVML.RemappedRows = nil
				f.dev.NVML.RetiredPages = &RetiredPages{DoubleBit: 1}
			},
			want: []want{{CheckRetirement, StatusFail, []string{"1 page(s) retired (1 double-bit"}}},
			exit: ExitFail,
		},
		{
			name: "virtualization not supported is no vGPU",
			change: func(f *fixture) {
				f.dev.NVML.Virtualization = ""
				f.dev.NVML.NotAvailable = []string{"GetVirtualizationMode"}
			},
			want: []want{{CheckVirt, StatusPass, []string{"no vGPU"}}},
			exit: ExitPass,
		},
		{
			name: "virtualization error is not measured",
			change: func(f *fixture) {
				f.dev.NVML.Virtualization = ""
				f.dev.NVML.Errors = []CallError{{Call: "GetVirtualizationMode", Err: "ERROR_UNKNOWN"}}
			},
			want: []want{{CheckVirt, StatusWarn, []string{"not measured: NVML GetVirtualizationMode: ERROR_UNKNOWN"}}},
			exit: ExitPass,
		},
		{
			name: "MIG not supported is the whole GPU",
			change: func(f *fixture) {
				f.dev.NVML.MIGEnabled = nil
				f.dev.NVML.NotAvailable = []string{"GetMigMode"}
			},
			want: []want{{CheckMIG, StatusPass, []string{"MIG not supported on this GPU: the whole GPU"}}},
			exit: ExitPass,
		},
		{
			name: "a MIG mode error is not measured, even if the call is also listed not available",
			change: func(f *fixture) {
				f.dev.NVML.MIGEnabled = nil
				f.dev.NVML.NotAvailable = []string{"GetMigMode"}
				f.dev.NVML.Errors = []CallError{{Call: "GetMigMode", Err: "ERROR_UNKNOWN"}}
			},
			want: []want{{CheckMIG, StatusWarn, []string{"not measured: NVML GetMigMode: ERROR_UNKNOWN"}}},
			exit: ExitPass,
		},
		{
			name:   "passthrough is dedicated",
			change: func(f *fixture) { f.dev.NVML.Virtualization = VirtPassthrough },
			want:   []want{{CheckVirt, StatusPass, []string{"passthrough: the whole GPU is given to this VM"}}},
			exit:   ExitPass,
		},
		{
			name: "slow launches warn",
			change: func(f *fixture) {
				f.eachResult(func(_ int, r *gpuprobe.Result) { r.LaunchLatency = 250 * time.Microsecond })
			},
			want: []want{{CheckLaunch, StatusWarn, []string{"250 µs (median)", "a slow path"}}},
			exit: ExitPass,
		},
		{
			name: "throughput that varies between runs warns",
			change: func(f *fixture) {
				f.eachResult(func(i int, r *gpuprobe.Result) { r.BF16TensorFLOPS *= []float64{1, 0.7, 1}[i] })
			},
			want: []want{{CheckVariability, StatusWarn, []string{"BF16 tensor varies by 20 % between runs"}}},
			exit: ExitPass,
		},
		{
			name: "a failed measurement is not measured and a probe error",
			change: func(f *fixture) {
				f.eachResult(func(_ int, r *gpuprobe.Result) {
					r.BF16TensorFLOPS = 0
					r.Errors = []gpuprobe.MeasurementError{{Measurement: gpuprobe.MeasureBF16, Err: "cuLaunchKernel: CUDA_ERROR_LAUNCH_FAILED (719)", Code: 719}}
				})
			},
			want: []want{
				{CheckBF16, StatusWarn, []string{"not measured: bf16_tensor: cuLaunchKernel: CUDA_ERROR_LAUNCH_FAILED (719)"}},
				{CheckProbeErrors, StatusWarn, []string{"3 measurement error(s): run 1: bf16_tensor: cuLaunchKernel"}},
			},
			exit: ExitPass,
		},
		{
			name: "strict turns warnings into a failing exit",
			change: func(f *fixture) {
				f.o.Strict = true
				f.dev.NVML.Virtualization = VirtVGPUGuest
			},
			want: []want{{CheckVirt, StatusWarn, []string{"vGPU guest"}}},
			exit: ExitFail,
		},
		{
			name: "without NVML the NVML checks are not measured",
			change: func(f *fixture) {
				f.dev.NVML = nil
				f.host.NVML = nil
				f.host.NVMLError = "ERROR_LIBRARY_NOT_FOUND"
			},
			want: []want{
				{CheckVirt, StatusWarn, []string{"not measured: NVML: ERROR_LIBRARY_NOT_FOUND"}},
				{CheckThrottle, StatusWarn, []string{"not measured: NVML: ERROR_LIBRARY_NOT_FOUND"}},
				{CheckECCMode, StatusWarn, []string{"not measured: NVML"}},
				{CheckBF16, StatusPass, nil},
				{CheckNVML, StatusWarn, []string{"not measured: NVML: ERROR_LIBRARY_NOT_FOUND"}},
				{CheckDriver, StatusWarn, []string{"not measured"}},
				{CheckCUDAVersion, StatusPass, []string{"CUDA 12.4"}},
			},
			exit: ExitPass,
		},
		{
			name: "without libcuda the probe checks are not measured",
			change: func(f *fixture) {
				f.host.CUDAError = "opening libcuda.so.1: cannot open shared object file"
				f.host.CUDADevices = nil
				f.host.CUDADriverVersion = 0
				f.dev.CUDA = nil
				f.dev.Runs = nil
				f.dev.Label = "NVML GPU 0"
				f.dev.NVML.UnderLoad = nil
			},
			want: []want{
				{CheckH2D, StatusWarn, []string{"not measured: CUDA: opening libcuda.so.1"}},
				{CheckStolen, StatusWarn, []string{"not measured: CUDA: opening libcuda.so.1"}},
				{CheckThrottle, StatusWarn, []string{"the GPU was never under load"}},
				{CheckVRAM, StatusPass, []string{"you see 80 GiB of the H100 SXM's 80 GiB"}},
				{CheckVirt, StatusPass, nil},
				{CheckCUDA, StatusWarn, []string{"not measured: CUDA: opening libcuda.so.1"}},
				{CheckCUDAVersion, StatusPass, []string{"CUDA 12.4"}},
				{CheckDeviceCount, StatusPass, []string{"NVML sees 1 device(s)"}},
			},
			exit: ExitPass,
		},
		{
			name:   "driver older than needed",
			change: func(f *fixture) { f.o.Expect.Driver = "560" },
			want:   []want{{CheckDriver, StatusFail, []string{"driver 550.54.15 is older than the 560 you need"}}},
			exit:   ExitFail,
		},
		{
			name:   "driver new enough",
			change: func(f *fixture) { f.o.Expect.Driver = "550.54" },
			want:   []want{{CheckDriver, StatusPass, []string{"driver 550.54.15 (you need 550.54 or newer)"}}},
			exit:   ExitPass,
		},
		{
			name:   "CUDA older than needed",
			change: func(f *fixture) { f.o.Expect.CUDA = "12.6" },
			want:   []want{{CheckCUDAVersion, StatusFail, []string{"supports CUDA 12.4, older than the 12.6 you need"}}},
			exit:   ExitFail,
		},
		{
			name:   "fewer devices than expected",
			change: func(f *fixture) { f.o.Expect.Devices = 8 },
			want:   []want{{CheckDeviceCount, StatusFail, []string{"CUDA sees 1 device(s); you expect 8"}}},
			exit:   ExitFail,
		},
		{
			name: "CUDA sees fewer devices than NVML lists",
			change: func(f *fixture) {
				f.host.NVML.DeviceCount = 2
				f.host.NVML.GPUs = append(f.host.NVML.GPUs, healthyFacts())
			},
			want: []want{{CheckDeviceCount, StatusPass, []string{"CUDA sees 1 of the 2 GPU(s) or MIG devices NVML lists"}}},
			exit: ExitPass,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := healthyFixture()
			tc.change(f)
			d, rep := f.judge()
			all := append(append([]Check(nil), d.Checks...), rep.Checks...)
			for _, w := range tc.want {
				c, ok := findCheck(all, w.id)
				if !ok {
					t.Errorf("no %s check", w.id)
					continue
				}
				if c.Status != w.status {
					t.Errorf("%s = %s (%s), want %s", w.id, c.Status, c.Reason, w.status)
				}
				for _, h := range w.has {
					if !strings.Contains(c.Reason, h) {
						t.Errorf("%s reason %q lacks %q", w.id, c.Reason, h)
					}
				}
			}
			if rep.Summary.ExitCode != tc.exit {
				t.Errorf("exit %d, want %d (summary %+v)", rep.Summary.ExitCode, tc.exit, rep.Summary)
			}
			// Every check not named stays as in the healthy fixture
			// unless it depends on what changed; at least the checks must
			// all have a title and a reason.
			for _, c := range all {
				if c.Title == "" || c.Reason == "" || (c.Status != StatusPass && c.Status != StatusWarn && c.Status != StatusFail) {
					t.Errorf("malformed check %+v", c)
				}
			}
		})
	}
}

func TestAnswersSayWhatSharesTheGPU(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(f *fixture)
		id     string
		status Status
		has    string
	}{
		{"time-sliced", func(f *fixture) {
			f.eachResult(func(_ int, r *gpuprobe.Result) {
				r.Stolen = &gpuprobe.StolenResult{Window: time.Second, Ratio: 0.5, MaxRatio: 0.5, GapMedian: 2 * time.Millisecond}
			})
		}, AnswerSharing, StatusFail, "shared: time-sliced with a neighbour you cannot see, which took 50 % of the GPU time in slices of about 2 ms"},
		{"vgpu", func(f *fixture) { f.dev.NVML.Virtualization = VirtVGPUGuest }, AnswerSharing, StatusWarn, "shared: by a hypervisor (NVIDIA vGPU guest)"},
		{"mig", func(f *fixture) {
			f.dev.MIG = &MIGInstance{Profile: "1g.10gb", Name: h100 + " MIG 1g.10gb"}
		}, AnswerSharing, StatusWarn, "partitioned: a MIG slice (1g.10gb) of an H100 SXM"},
		{"passthrough", func(f *fixture) { f.dev.NVML.Virtualization = VirtPassthrough }, AnswerSharing, StatusPass, "dedicated: the whole GPU, passed through to this VM"},
		{"throttled", func(f *fixture) {
			f.eachResult(func(_ int, r *gpuprobe.Result) { r.BF16TensorFLOPS *= 0.4 })
		}, AnswerReserved, StatusFail, "no: BF16 tensor 42 % of a healthy card"},
		{"ecc errors", func(f *fixture) { f.dev.NVML.ECC.UncorrectedVolatile = u64(1) }, AnswerFailure, StatusFail, "1 since the driver loaded"},
		{"vram", func(f *fixture) {
			f.eachResult(func(_ int, r *gpuprobe.Result) {
				r.Memory = &gpuprobe.MemoryResult{TotalBytes: 20 * gib, FreeBytes: 19 * gib}
			})
		}, AnswerVRAM, StatusFail, "19 GiB free to a new context, of 20 GiB visible; the H100 SXM has 80 GiB (you see 20 GiB"},
		{"noisy", func(f *fixture) {
			f.eachResult(func(i int, r *gpuprobe.Result) { r.DeviceCopyBytesPerSecond *= []float64{1, 0.6, 1}[i] })
		}, AnswerLatency, StatusWarn, "likely: 0.1 % of the GPU time stolen; device memory bandwidth varies"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := healthyFixture()
			tc.change(f)
			d, _ := f.judge()
			for _, a := range d.Answers {
				if a.ID != tc.id {
					continue
				}
				if a.Status != tc.status || !strings.Contains(a.Answer, tc.has) {
					t.Errorf("%s = %s %q, want %s containing %q", a.ID, a.Status, a.Answer, tc.status, tc.has)
				}
				return
			}
			t.Errorf("no answer %s", tc.id)
		})
	}
}

// reanswer answers the device's questions again from d's checks after
// change rewrote them, as Run would have from such checks.
func (f *fixture) reanswer(d Device, change func(c *Check)) map[string]Answer {
	d.Checks = append([]Check(nil), d.Checks...)
	for i := range d.Checks {
		change(&d.Checks[i])
	}
	spec, _ := chooseSpec(&d, f.o.Expect.GPU)
	rep := &Report{Host: f.host, Settings: Settings{Repeat: f.o.Repeat, Strict: f.o.Strict, Expect: f.o.Expect}}
	ev := &deviceEval{d: &d, spec: spec, o: f.o, rep: rep, probed: f.host.CUDAError == ""}
	ans := map[string]Answer{}
	for _, a := range ev.answers() {
		ans[a.ID] = a
	}
	return ans
}

// The answers read what a check measured from its fields: rewording a
// reason (another language, a clearer sentence) changes no answer's
// figures or verdict.
func TestAnswersReadCheckFieldsNotReasons(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(f *fixture)
		reword func(c *Check)
		id     string
		status Status
		has    []string
		hasNot []string
	}{
		{
			name:   "figure shares come from Share, not from the reason's percentages",
			change: func(f *fixture) { f.eachResult(func(_ int, r *gpuprobe.Result) { r.BF16TensorFLOPS *= 0.4 }) },
			reword: func(c *Check) { c.Reason = "reworded" },
			id:     AnswerReserved, status: StatusFail,
			has: []string{"no: BF16 tensor 42 % of a healthy card (memory bandwidth 110 %, FP32 110 %, FP16 tensor 105 %)"},
		},
		{
			name:   "a figure with no Share is unjudged even if its reason quotes a share",
			change: func(f *fixture) {},
			reword: func(c *Check) {
				if c.ID == CheckFP32 {
					c.Share, c.Reason = nil, "99 % of the usual"
				}
			},
			id: AnswerReserved, status: StatusPass,
			has: []string{"FP32 unjudged"}, hasNot: []string{"FP32 99"},
		},
		{
			name:   "a check marked not measured is not measured, whatever its reason says",
			change: func(f *fixture) {},
			reword: func(c *Check) {
				if c.ID == CheckStolen {
					c.Status, c.NotMeasured, c.Reason = StatusWarn, true, "the watch kernel did not run"
				}
			},
			id: AnswerLatency, status: StatusWarn,
			has: []string{"unknown: 0.1 % of the GPU time stolen"},
		},
		{
			name:   "a measured check whose reason begins like a missing one is measured",
			change: func(f *fixture) {},
			reword: func(c *Check) {
				if c.ID == CheckProcesses {
					c.Reason = notMeasuredPrefix + "reworded"
				}
			},
			id: AnswerSharing, status: StatusPass,
			has: []string{"dedicated: the whole GPU, no hypervisor sharing it, no other process visible"},
		},
		{
			name: "a not-measured variability check adds nothing to the neighbours answer",
			change: func(f *fixture) {
				f.eachResult(func(i int, r *gpuprobe.Result) { r.DeviceCopyBytesPerSecond *= []float64{1, 0.6, 1}[i] })
			},
			reword: func(c *Check) {
				if c.ID == CheckVariability {
					c.Status, c.NotMeasured, c.Reason = StatusWarn, true, "device memory bandwidth varies (reworded)"
				}
			},
			id: AnswerLatency, status: StatusWarn,
			has: []string{"no: 0.1 % of the GPU time stolen; kernel round trip"}, hasNot: []string{"varies"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := healthyFixture()
			tc.change(f)
			d, _ := f.judge()
			a, ok := f.reanswer(d, tc.reword)[tc.id]
			if !ok {
				t.Fatalf("no answer %s", tc.id)
			}
			if a.Status != tc.status {
				t.Errorf("%s = %s %q, want %s", tc.id, a.Status, a.Answer, tc.status)
			}
			for _, h := range tc.has {
				if !strings.Contains(a.Answer, h) {
					t.Errorf("%s %q lacks %q", tc.id, a.Answer, h)
				}
			}
			for _, h := range tc.hasNot {
				if strings.Contains(a.Answer, h) {
					t.Errorf("%s %q has %q", tc.id, a.Answer, h)
				}
			}
		})
	}
}

func f64(v float64) *float64 { return &v }

// Each check carries what it measured: the value, its unit, what it was
// compared with and the share its verdict was taken on.
func TestChecksCarryTheirFigures(t *testing.T) {
	e := h100Spec().Expected()
	spec := h100Spec()
	type data struct {
		notMeasured            bool
		value, expected, share *float64
		unit                   string
	}
	for _, tc := range []struct {
		name   string
		change func(f *fixture)
		want   map[string]data
	}{
		{
			name:   "healthy",
			change: func(f *fixture) {},
			want: map[string]data{
				CheckBF16:       {value: f64(e.BF16TensorFLOPS * 1.05), unit: UnitFLOPS, expected: f64(e.BF16TensorFLOPS), share: f64(1.05)},
				CheckDeviceCopy: {value: f64(e.DeviceCopyBytesPerSecond * 1.1), unit: UnitBytesPerSecond, expected: f64(e.DeviceCopyBytesPerSecond), share: f64(1.1)},
				CheckVRAM:       {value: f64(79*gib + 647*mib), unit: UnitBytes, expected: f64(float64(spec.MemoryBytes)), share: f64(float64(79*gib+647*mib) / float64(spec.MemoryBytes))},
				CheckVRAMFree:   {value: f64(79*gib + 100*mib), unit: UnitBytes, expected: f64(79*gib + 647*mib), share: f64(float64(79*gib+100*mib) / float64(79*gib+647*mib))},
				CheckStolen:     {value: f64(0.001), unit: UnitRatio},
				CheckLaunch:     {value: f64(8e-6), unit: UnitSeconds},
				CheckPCIe:       {value: f64(16), unit: UnitLanes, expected: f64(16), share: f64(1)},
				CheckPowerLimit: {value: f64(700), unit: UnitWatts, expected: f64(700), share: f64(1)},
				CheckECCMode:    {},
			},
		},
		{
			name: "figures scaled by the GPU time visible processes left",
			change: func(f *fixture) {
				// Half the window went to the processes NVML shows busy:
				// half the raw figure is a full share of the time left.
				f.eachResult(func(_ int, r *gpuprobe.Result) {
					r.BF16TensorFLOPS = e.BF16TensorFLOPS * 0.5
					r.Stolen = &gpuprobe.StolenResult{Window: time.Second, Ratio: 0.5, MaxRatio: 0.51, GapMedian: 2 * time.Millisecond}
				})
				for i := range f.dev.Runs {
					f.dev.Runs[i].UnexplainedStolenRatio = new(float64)
				}
			},
			want: map[string]data{
				CheckBF16: {value: f64(e.BF16TensorFLOPS * 0.5), unit: UnitFLOPS, expected: f64(e.BF16TensorFLOPS), share: f64(1)},
			},
		},
		{
			name: "stolen time not measured",
			change: func(f *fixture) {
				f.eachResult(func(_ int, r *gpuprobe.Result) { r.Stolen = nil })
			},
			want: map[string]data{CheckStolen: {notMeasured: true}},
		},
		{
			name: "no probe at all",
			change: func(f *fixture) {
				f.host.CUDAError = "CUDA_ERROR_NO_DEVICE"
				f.dev.Runs = nil
			},
			want: map[string]data{
				CheckBF16:     {notMeasured: true},
				CheckVRAMFree: {notMeasured: true},
				CheckStolen:   {notMeasured: true},
				CheckPCIe:     {value: f64(16), unit: UnitLanes, expected: f64(16), share: f64(1)},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := healthyFixture()
			tc.change(f)
			d, rep := f.judge()
			near := func(got, want *float64) bool {
				if got == nil || want == nil {
					return got == nil && want == nil
				}
				return *got == *want || (*want != 0 && abs(*got / *want - 1) < 1e-9)
			}
			str := func(p *float64) string {
				if p == nil {
					return "nil"
				}
				return fmt.Sprint(*p)
			}
			for id, w := range tc.want {
				c, ok := findCheck(d.Checks, id)
				if !ok {
					t.Errorf("no %s check", id)
					continue
				}
				if c.NotMeasured != w.notMeasured || c.Unit != w.unit || !near(c.Value, w.value) || !near(c.Expected, w.expected) || !near(c.Share, w.share) {
					t.Errorf("%s: not_measured %v value %s %q expected %s share %s; want %v %s %q %s %s (%s)", id,
						c.NotMeasured, str(c.Value), c.Unit, str(c.Expected), str(c.Share),
						w.notMeasured, str(w.value), w.unit, str(w.expected), str(w.share), c.Reason)
				}
			}
			// The reason still says so for people, and only when it is so.
			for _, c := range append(d.Checks, rep.Checks...) {
				if c.NotMeasured != strings.HasPrefix(c.Reason, notMeasuredPrefix) {
					t.Errorf("%s: not_measured %v but reason %q", c.ID, c.NotMeasured, c.Reason)
				}
			}
		})
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
