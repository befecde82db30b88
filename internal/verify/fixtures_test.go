package verify

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/gpulens/gpulens/internal/clockevent"
	"github.com/gpulens/gpulens/internal/gpuprobe"
	"github.com/gpulens/gpulens/internal/gpuspec"
)

const (
	gib     = 1 << 30
	mib     = 1 << 20
	h100    = "NVIDIA H100 80GB HBM3"
	uuid0   = "GPU-11111111-2222-4333-8444-555555555555"
	uuid1   = "GPU-66666666-7777-4888-9999-aaaaaaaaaaaa"
	bus0    = "00000000:18:00.0"
	bus1    = "00000000:2A:00.0"
	cuda124 = 12040
)

func h100Spec() gpuspec.Spec {
	s, err := gpuspec.ByKey("h100-sxm")
	if err != nil {
		panic(err)
	}
	return s
}

// healthyResult is a probe of a healthy, dedicated H100 SXM: every figure
// at scale × what a healthy card reaches.
func healthyResult(scale float64) gpuprobe.Result {
	e := h100Spec().Expected()
	return gpuprobe.Result{
		Device:   cudaH100(0, uuid0, bus0),
		Started:  time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
		Duration: 2500 * time.Millisecond, GPUTime: 2 * time.Second,
		Memory:                   &gpuprobe.MemoryResult{FreeBytes: 79*gib + 100*mib, TotalBytes: 79*gib + 647*mib},
		H2DBytesPerSecond:        e.H2DBytesPerSecond * 1.05 * scale,
		D2HBytesPerSecond:        e.D2HBytesPerSecond * 1.02 * scale,
		DeviceCopyBytesPerSecond: e.DeviceCopyBytesPerSecond * 1.1 * scale,
		FP32FLOPS:                e.FP32FLOPS * 1.1 * scale,
		FP16TensorFLOPS:          e.FP16TensorFLOPS * 1.05 * scale,
		BF16TensorFLOPS:          e.BF16TensorFLOPS * 1.05 * scale,
		LaunchLatency:            8 * time.Microsecond,
		LaunchLatencyP99:         15 * time.Microsecond,
		Stolen: &gpuprobe.StolenResult{Window: time.Second, Threshold: 5 * time.Microsecond, TimerResolution: 32 * time.Nanosecond,
			Blocks: 132, Ratio: 0.001, MaxRatio: 0.002, Gaps: 3, GapMedian: 6 * time.Microsecond, GapP90: 9 * time.Microsecond, GapMax: 12 * time.Microsecond},
	}
}

func cudaH100(ordinal int, uuid, bus string) gpuprobe.DeviceInfo {
	return gpuprobe.DeviceInfo{Ordinal: ordinal, Name: h100, UUID: uuid, PCIBusID: bus, ComputeCapability: "9.0", SMs: 132,
		TotalMemoryBytes: 79*gib + 647*mib, DriverVersion: cuda124}
}

func u64(v uint64) *uint64 { return &v }
func boolp(v bool) *bool   { return &v }

// healthyFacts is NVML's view of a healthy, dedicated H100 SXM.
func healthyFacts() GPUFacts {
	return GPUFacts{
		Index: 0, Name: h100, UUID: uuid0, PCIBusID: bus0,
		Virtualization: VirtNone, MIGEnabled: boolp(false),
		Memory:       &MemoryFacts{TotalBytes: 80 * gib, ReservedBytes: 512 * mib, UsedBytes: 4 * mib, FreeBytes: 80*gib - 516*mib},
		ComputeMode:  ComputeDefault,
		ECC:          &ECCFacts{Enabled: true, PendingEnabled: true, UncorrectedVolatile: u64(0), UncorrectedAggregate: u64(0)},
		RemappedRows: &RemappedRows{},
		PCIe:         &PCIeLink{CurrentGen: 1, MaxGen: 5, CurrentWidth: 16, MaxWidth: 16},
		Power:        &PowerLimits{LimitW: 700, DefaultW: 700, EnforcedW: 700},
		Processes:    &ProcessFacts{},
		UnderLoad: &LoadSamples{Samples: 24, PCIeGen: 5, PCIeWidth: 16, MinSMClockMHz: 1755, MaxSMClockMHz: 1980, MaxPowerW: 650,
			ClockEventReasons: clockevent.GpuIdle, Reasons: []string{"gpu_idle"}, ReasonSamples: map[string]int{"gpu_idle": 2}},
		MaxSMClockMHz: 1980,
	}
}

// fixture is a device and host to judge, built healthy and then changed.
type fixture struct {
	dev  Device
	host Host
	o    Options
}

func healthyFixture() *fixture {
	facts := healthyFacts()
	info := cudaH100(0, uuid0, bus0)
	var runs []ProbeRun
	for _, scale := range []float64{1, 0.99, 1.01} {
		r := healthyResult(scale)
		runs = append(runs, ProbeRun{Result: &r})
	}
	return &fixture{
		dev: Device{Label: "CUDA 0", Name: h100, UUID: uuid0, PCIBusID: bus0, CUDA: &info, NVML: &facts, MatchedBy: "uuid", Runs: runs},
		host: Host{
			NVML:              &NVMLHost{DriverVersion: "550.54.15", CUDADriverVersion: cuda124, DeviceCount: 1, GPUs: []GPUFacts{healthyFacts()}},
			CUDADevices:       []gpuprobe.DeviceInfo{info},
			CUDADriverVersion: cuda124,
		},
		o: Options{Repeat: 3},
	}
}

// judge evaluates the fixture's device as Run does.
func (f *fixture) judge() (Device, *Report) {
	d := f.dev
	d.Figures = aggregate(d.Runs)
	spec, from := chooseSpec(&d, f.o.Expect.GPU)
	if spec != nil {
		d.Spec = &SpecRef{Key: spec.Key, Model: spec.Model, From: from, Estimated: spec.Estimated()}
	}
	rep := &Report{Host: f.host, Settings: Settings{Repeat: f.o.Repeat, Strict: f.o.Strict, Expect: f.o.Expect}}
	ev := &deviceEval{d: &d, spec: spec, o: f.o, rep: rep, probed: f.host.CUDAError == ""}
	d.Checks = ev.checks()
	d.Answers = ev.answers()
	d.Verdict = StatusPass
	for _, c := range d.Checks {
		d.Verdict = Worse(d.Verdict, c.Status)
	}
	rep.Devices = []Device{d}
	rep.Checks = hostChecks(rep, f.o)
	rep.Answers = hostAnswers(rep)
	rep.summarise()
	return d, rep
}

// eachResult changes every run's result.
func (f *fixture) eachResult(change func(i int, r *gpuprobe.Result)) {
	for i := range f.dev.Runs {
		r := *f.dev.Runs[i].Result
		change(i, &r)
		f.dev.Runs[i].Result = &r
	}
}

// ---- fakes for Run ----

// fakeProber returns canned results per ordinal, one per call in order
// (the last one repeats).
type fakeProber struct {
	mu      sync.Mutex
	devs    []gpuprobe.DeviceInfo
	devErr  error
	results map[int][]gpuprobe.Result
	errs    map[int]error
	calls   []int
	block   chan struct{} // when set, Probe waits for it or ctx
	cfgs    []gpuprobe.Config
}

func (p *fakeProber) Devices(ctx context.Context) ([]gpuprobe.DeviceInfo, error) {
	return p.devs, p.devErr
}

func (p *fakeProber) Probe(ctx context.Context, ordinal int, cfg gpuprobe.Config) (gpuprobe.Result, error) {
	p.mu.Lock()
	n := 0
	for _, c := range p.calls {
		if c == ordinal {
			n++
		}
	}
	p.calls = append(p.calls, ordinal)
	p.cfgs = append(p.cfgs, cfg)
	block := p.block
	p.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return gpuprobe.Result{}, ctx.Err()
		}
	}
	if err := p.errs[ordinal]; err != nil {
		return gpuprobe.Result{}, err
	}
	rs := p.results[ordinal]
	if len(rs) == 0 {
		return gpuprobe.Result{}, fmt.Errorf("no result for device %d", ordinal)
	}
	return rs[min(n, len(rs)-1)], nil
}

// mockGPU is a go-nvml mock of a healthy H100 SXM; tests change its funcs.
func mockGPU(uuid, bus string, reasons uint64) *mock.Device {
	var busID [32]int8
	for i, c := range bus {
		busID[i] = int8(c)
	}
	return &mock.Device{
		GetNameFunc:    func() (string, nvml.Return) { return h100, nvml.SUCCESS },
		GetUUIDFunc:    func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
		GetPciInfoFunc: func() (nvml.PciInfo, nvml.Return) { return nvml.PciInfo{BusId: busID}, nvml.SUCCESS },
		GetVirtualizationModeFunc: func() (nvml.GpuVirtualizationMode, nvml.Return) {
			return nvml.GPU_VIRTUALIZATION_MODE_NONE, nvml.SUCCESS
		},
		GetMigModeFunc: func() (int, int, nvml.Return) { return nvml.DEVICE_MIG_DISABLE, nvml.DEVICE_MIG_DISABLE, nvml.SUCCESS },
		GetMemoryInfo_v2Func: func() (nvml.Memory_v2, nvml.Return) {
			return nvml.Memory_v2{Total: 80 * gib, Reserved: 512 * mib, Used: 4 * mib, Free: 80*gib - 516*mib}, nvml.SUCCESS
		},
		GetComputeModeFunc: func() (nvml.ComputeMode, nvml.Return) { return nvml.COMPUTEMODE_DEFAULT, nvml.SUCCESS },
		GetEccModeFunc: func() (nvml.EnableState, nvml.EnableState, nvml.Return) {
			return nvml.FEATURE_ENABLED, nvml.FEATURE_ENABLED, nvml.SUCCESS
		},
		GetTotalEccErrorsFunc:         func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) { return 0, nvml.SUCCESS },
		GetRemappedRowsFunc:           func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, nvml.SUCCESS },
		GetCurrPcieLinkGenerationFunc: func() (int, nvml.Return) { return 5, nvml.SUCCESS },
		GetMaxPcieLinkGenerationFunc:  func() (int, nvml.Return) { return 5, nvml.SUCCESS },
		GetCurrPcieLinkWidthFunc:      func() (int, nvml.Return) { return 16, nvml.SUCCESS },
		GetMaxPcieLinkWidthFunc:       func() (int, nvml.Return) { return 16, nvml.SUCCESS },
		GetPowerManagementLimitFunc:   func() (uint32, nvml.Return) { return 700000, nvml.SUCCESS },
		GetPowerManagementDefaultLimitFunc: func() (uint32, nvml.Return) {
			return 700000, nvml.SUCCESS
		},
		GetEnforcedPowerLimitFunc: func() (uint32, nvml.Return) { return 700000, nvml.SUCCESS },
		GetMaxClockInfoFunc:       func(nvml.ClockType) (uint32, nvml.Return) { return 1980, nvml.SUCCESS },
		GetClockInfoFunc:          func(nvml.ClockType) (uint32, nvml.Return) { return 1980, nvml.SUCCESS },
		GetPowerUsageFunc:         func() (uint32, nvml.Return) { return 650000, nvml.SUCCESS },
		GetCurrentClocksEventReasonsFunc: func() (uint64, nvml.Return) {
			return reasons, nvml.SUCCESS
		},
		GetComputeRunningProcessesFunc:    func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS },
		GetGraphicsRunningProcessesFunc:   func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS },
		GetMPSComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS },
		GetUtilizationRatesFunc:           func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, nvml.SUCCESS },
		GetProcessUtilizationFunc: func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
			return nil, nvml.ERROR_NOT_FOUND
		},
	}
}

func mockLibrary(devs ...nvml.Device) *mock.Interface {
	return &mock.Interface{
		SystemGetDriverVersionFunc:     func() (string, nvml.Return) { return "550.54.15", nvml.SUCCESS },
		SystemGetCudaDriverVersionFunc: func() (int, nvml.Return) { return cuda124, nvml.SUCCESS },
		DeviceGetCountFunc:             func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < 0 || i >= len(devs) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return devs[i], nvml.SUCCESS
		},
	}
}
