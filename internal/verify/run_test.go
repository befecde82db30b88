package verify

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/gpulens/gpulens/internal/clockevent"
	"github.com/gpulens/gpulens/internal/gpuprobe"
	"github.com/gpulens/gpulens/internal/testenv"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

type recordedSleeps struct{ d []time.Duration }

func (r *recordedSleeps) sleep(ctx context.Context, d time.Duration) error {
	r.d = append(r.d, d)
	return ctx.Err()
}

func testConfig() gpuprobe.Config {
	return gpuprobe.Config{MaxMemoryBytes: 1 << 30, GPUTimeBudget: 2 * time.Second, StolenWindow: time.Second,
		GapThreshold: 5 * time.Microsecond, MaxGaps: 256, FillStep: 1 << 30}
}

func twoGPUs() (*mock.Interface, *fakeProber) {
	lib := mockLibrary(mockGPU(uuid0, bus0, clockevent.SwPowerCap), mockGPU(uuid1, bus1, 0))
	dev1 := cudaH100(1, "GPU-not-as-nvml-says", "0000:2a:00.0") // matched by bus id
	p := &fakeProber{
		devs: []gpuprobe.DeviceInfo{cudaH100(0, uuid0, bus0), dev1},
		results: map[int][]gpuprobe.Result{
			0: {healthyResult(1), healthyResult(0.9), healthyResult(1.1)},
			1: {healthyResult(0.5)},
		},
	}
	return lib, p
}

func TestRunProbesEveryDeviceRepeatedly(t *testing.T) {
	lib, p := twoGPUs()
	sl := &recordedSleeps{}
	cfg := testConfig()
	clock := []time.Time{t0, t0.Add(40 * time.Second)}
	rep, err := Run(context.Background(), Sources{NVML: lib, Prober: p}, Options{
		Tool: "gpulens-verify", Version: "v0.test", Repeat: 3, Interval: 5 * time.Second, Probe: cfg, SelfPID: 1,
		Sleep: sl.sleep, SampleInterval: time.Hour,
		Now: func() time.Time { c := clock[0]; clock = clock[1:]; return c },
	})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(sl.d, []time.Duration{5 * time.Second, 5 * time.Second}) {
		t.Errorf("sleeps %v, want two of 5s between three rounds", sl.d)
	}
	if !reflect.DeepEqual(p.calls, []int{0, 1, 0, 1, 0, 1}) {
		t.Errorf("probe calls %v, want rounds over both devices", p.calls)
	}
	for _, c := range p.cfgs {
		if !reflect.DeepEqual(c, cfg) {
			t.Errorf("probe config %+v, want %+v", c, cfg)
		}
	}
	if rep.SchemaVersion != SchemaVersion || rep.Tool != "gpulens-verify" || !rep.Started.Equal(t0) || !rep.Finished.Equal(t0.Add(40*time.Second)) {
		t.Errorf("report header %+v", rep)
	}
	if len(rep.Devices) != 2 {
		t.Fatalf("%d devices", len(rep.Devices))
	}
	d0, d1 := rep.Devices[0], rep.Devices[1]
	if d0.MatchedBy != "uuid" || d1.MatchedBy != "pci_bus_id" || d1.NVML == nil || d1.NVML.UUID != uuid1 {
		t.Errorf("matching: %q, %q (%+v)", d0.MatchedBy, d1.MatchedBy, d1.NVML)
	}
	if len(d0.Runs) != 3 || len(d1.Runs) != 3 {
		t.Errorf("runs %d and %d, want 3 each", len(d0.Runs), len(d1.Runs))
	}
	want := healthyResult(1).BF16TensorFLOPS
	if st := d0.Figures.BF16TensorFLOPS; st == nil || st.N != 3 || st.Median != want || st.Min != healthyResult(0.9).BF16TensorFLOPS ||
		st.Max != healthyResult(1.1).BF16TensorFLOPS {
		t.Errorf("BF16 stat %+v, want median %g over 3", st, want)
	}
	// Sampled at the start and end of every probe (the hour-long interval
	// never ticks): 6 samples, each with the power cap set on GPU 0.
	l := d0.NVML.UnderLoad
	if l == nil || l.Samples != 6 || l.ReasonSamples["sw_power_cap"] != 6 || !reflect.DeepEqual(l.Reasons, []string{"sw_power_cap"}) ||
		l.PCIeGen != 5 || l.MaxPowerW != 650 {
		t.Errorf("under load %+v", l)
	}
	// A power cap at the default limit with every figure as expected is GPU
	// Boost at work.
	if c, _ := findCheck(d0.Checks, CheckThrottle); c.Status != StatusPass || !strings.Contains(c.Reason, "in 6 of 6 samples") ||
		!strings.Contains(c.Reason, "normal under a dense kernel") {
		t.Errorf("throttle %+v", c)
	}
	if c, _ := findCheck(d1.Checks, CheckBF16); c.Status != StatusFail {
		t.Errorf("device 1 at half speed: BF16 %+v", c)
	}
	if rep.Summary.ExitCode != ExitFail || rep.Summary.Fail == 0 {
		t.Errorf("summary %+v", rep.Summary)
	}
	// NVML's host view is kept whole.
	if rep.Host.NVML == nil || len(rep.Host.NVML.GPUs) != 2 || rep.Host.CUDADriverVersion != cuda124 {
		t.Errorf("host %+v", rep.Host)
	}
}

func TestRunDevicesSubset(t *testing.T) {
	lib, p := twoGPUs()
	rep, err := Run(context.Background(), Sources{NVML: lib, Prober: p}, Options{Repeat: 2, Probe: testConfig(), Devices: []int{1}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Devices) != 1 || rep.Devices[0].Label != "CUDA 1" || !reflect.DeepEqual(p.calls, []int{1, 1}) {
		t.Errorf("devices %d, calls %v", len(rep.Devices), p.calls)
	}

	_, err = Run(context.Background(), Sources{NVML: lib, Prober: p}, Options{Repeat: 1, Probe: testConfig(), Devices: []int{5}})
	var bad *BadInputError
	if !errors.As(err, &bad) || !strings.Contains(err.Error(), "--devices: CUDA has no device 5 (it sees devices 0, 1)") {
		t.Errorf("err = %v, want a BadInputError naming --devices", err)
	}
	if _, err := Run(context.Background(), Sources{Prober: p}, Options{Repeat: 0}); !errors.As(err, &bad) {
		t.Errorf("repeat 0: err = %v", err)
	}
}

func TestRunMIGDeviceMatchesItsInstance(t *testing.T) {
	parent := mockGPU(uuid0, bus0, 0)
	parent.GetMigModeFunc = func() (int, int, nvml.Return) { return nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS }
	parent.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 1, nvml.SUCCESS }
	parent.GetMigDeviceHandleByIndexFunc = func(int) (nvml.Device, nvml.Return) {
		return &mock.Device{
			GetUUIDFunc:              func() (string, nvml.Return) { return "MIG-bbbb", nvml.SUCCESS },
			GetNameFunc:              func() (string, nvml.Return) { return h100 + " MIG 1g.10gb", nvml.SUCCESS },
			GetGpuInstanceIdFunc:     func() (int, nvml.Return) { return 9, nvml.SUCCESS },
			GetComputeInstanceIdFunc: func() (int, nvml.Return) { return 0, nvml.SUCCESS },
			GetMemoryInfoFunc:        func() (nvml.Memory, nvml.Return) { return nvml.Memory{Total: 10 * gib}, nvml.SUCCESS },
		}, nvml.SUCCESS
	}
	info := cudaH100(0, "MIG-bbbb", bus0)
	info.SMs, info.TotalMemoryBytes = 16, 10*gib
	res := healthyResult(16.0 / 132)
	res.Memory = &gpuprobe.MemoryResult{TotalBytes: 10 * gib, FreeBytes: 9 * gib}
	p := &fakeProber{devs: []gpuprobe.DeviceInfo{info}, results: map[int][]gpuprobe.Result{0: {res}}}
	rep, err := Run(context.Background(), Sources{NVML: mockLibrary(parent), Prober: p}, Options{Repeat: 1, Probe: testConfig()})
	if err != nil {
		t.Fatal(err)
	}
	d := rep.Devices[0]
	if d.MatchedBy != "mig_uuid" || d.MIG == nil || d.MIG.Profile != "1g.10gb" || d.Spec == nil || d.Spec.Key != "h100-sxm" {
		t.Fatalf("device %+v", d)
	}
	if c, _ := findCheck(d.Checks, CheckMIG); c.Status != StatusWarn || !strings.Contains(c.Reason, "1g.10gb") {
		t.Errorf("mig check %+v", c)
	}
	if c, _ := findCheck(rep.Checks, CheckDeviceCount); c.Status != StatusPass || c.Reason != "CUDA and NVML both see 1" {
		t.Errorf("device count %+v", c)
	}
}

func TestRunProbeFailures(t *testing.T) {
	lib, p := twoGPUs()
	p.errs = map[int]error{1: &gpuprobe.CUDAError{Call: "cuCtxCreate_v2", Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY"}}
	rep, err := Run(context.Background(), Sources{NVML: lib, Prober: p}, Options{Repeat: 2, Probe: testConfig()})
	if err != nil {
		t.Fatal(err)
	}
	d := rep.Devices[1]
	if len(d.Runs) != 2 || d.Runs[0].Error != "cuCtxCreate_v2: CUDA_ERROR_OUT_OF_MEMORY (2)" {
		t.Fatalf("runs %+v", d.Runs)
	}
	if c, _ := findCheck(d.Checks, CheckProbeErrors); c.Status != StatusFail || !strings.Contains(c.Reason, "no probe of this device completed: run 1: cuCtxCreate_v2") {
		t.Errorf("probe errors %+v", c)
	}
	if c, _ := findCheck(d.Checks, CheckStolen); c.Status != StatusWarn || !strings.Contains(c.Reason, "not measured: every probe failed: cuCtxCreate_v2") {
		t.Errorf("stolen %+v", c)
	}
	if c, _ := findCheck(d.Checks, CheckThrottle); c.Status != StatusWarn || !strings.Contains(c.Reason, "never under load") {
		t.Errorf("throttle %+v", c)
	}
	if rep.Summary.ExitCode != ExitFail {
		t.Errorf("exit %d", rep.Summary.ExitCode)
	}
}

func TestRunProbeDeadline(t *testing.T) {
	lib, p := twoGPUs()
	p.block = make(chan struct{}) // never released: every probe hangs
	rep, err := Run(context.Background(), Sources{NVML: lib, Prober: p}, Options{Repeat: 1, Probe: testConfig(), Devices: []int{0},
		ProbeTimeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if e := rep.Devices[0].Runs[0].Error; !strings.Contains(e, "probe did not finish within 20ms") {
		t.Errorf("run error %q", e)
	}
}

func TestRunCancelled(t *testing.T) {
	lib, p := twoGPUs()
	ctx, cancel := context.WithCancel(context.Background())
	_, err := Run(ctx, Sources{NVML: lib, Prober: p}, Options{Repeat: 3, Interval: time.Second, Probe: testConfig(),
		Sleep: func(context.Context, time.Duration) error { cancel(); return context.Canceled }})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

func TestRunWithOneSourceMissing(t *testing.T) {
	lib, p := twoGPUs()
	rep, err := Run(context.Background(), Sources{NVML: lib, CUDAError: "opening libcuda.so.1: not found"}, Options{Repeat: 3, Probe: testConfig()})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Devices) != 2 || rep.Devices[0].Label != "NVML GPU 0" || rep.Devices[0].CUDA != nil || len(rep.Devices[0].Runs) != 0 {
		t.Fatalf("devices %+v", rep.Devices)
	}
	if c, _ := findCheck(rep.Devices[0].Checks, CheckBF16); c.Reason != "not measured: CUDA: opening libcuda.so.1: not found" {
		t.Errorf("bf16 %+v", c)
	}
	if _, ok := findCheck(rep.Devices[0].Checks, CheckProbeErrors); ok {
		t.Error("probe_errors judged without CUDA")
	}
	if rep.Summary.Fail != 0 || rep.Summary.ExitCode != ExitPass || rep.Summary.Warn == 0 {
		t.Errorf("summary %+v: warnings only", rep.Summary)
	}

	rep, err = Run(context.Background(), Sources{NVMLError: "ERROR_LIBRARY_NOT_FOUND", Prober: p}, Options{Repeat: 1, Probe: testConfig()})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Devices) != 2 || rep.Devices[0].NVML != nil || len(rep.Devices[0].Runs) != 1 {
		t.Fatalf("devices %+v", rep.Devices)
	}
	if c, _ := findCheck(rep.Devices[0].Checks, CheckECCMode); c.Reason != "not measured: NVML: ERROR_LIBRARY_NOT_FOUND" {
		t.Errorf("ecc %+v", c)
	}

	rep, err = Run(context.Background(), Sources{NVMLError: "ERROR_LIBRARY_NOT_FOUND", CUDAError: "no libcuda"}, Options{Repeat: 1})
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := findCheck(rep.Checks, CheckGPUsSeen); c.Status != StatusFail ||
		c.Reason != "no GPU to verify: NVML: ERROR_LIBRARY_NOT_FOUND; CUDA: no libcuda" || rep.Summary.ExitCode != ExitFail {
		t.Errorf("gpus seen %+v, summary %+v", c, rep.Summary)
	}

	p.devErr, p.calls = errors.New("cuInit: CUDA_ERROR_NO_DEVICE (100)"), nil
	rep, err = Run(context.Background(), Sources{NVML: lib, Prober: p}, Options{Repeat: 1})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Host.CUDAError != "listing CUDA devices: cuInit: CUDA_ERROR_NO_DEVICE (100)" || len(rep.Devices) != 2 || len(p.calls) != 0 {
		t.Errorf("host %+v, calls %v", rep.Host, p.calls)
	}
}

func TestSamplerIgnoresIdleClocks(t *testing.T) {
	dev := mockGPU(uuid0, bus0, 0)
	reasons := []uint64{clockevent.GpuIdle, clockevent.SwPowerCap, 0}
	clocks := []uint32{345, 1410, 1755}
	gens := []int{1, 5, 5}
	i := 0
	dev.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return reasons[i], nvml.SUCCESS }
	dev.GetClockInfoFunc = func(nvml.ClockType) (uint32, nvml.Return) { return clocks[i], nvml.SUCCESS }
	dev.GetCurrPcieLinkGenerationFunc = func() (int, nvml.Return) { return gens[i], nvml.SUCCESS }
	dev.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
	s := newSampler(dev)
	for i = range reasons {
		s.sample()
	}
	got := s.result()
	want := &LoadSamples{Samples: 3, ClockEventReasons: clockevent.GpuIdle | clockevent.SwPowerCap, Reasons: []string{"gpu_idle", "sw_power_cap"},
		ReasonSamples: map[string]int{"gpu_idle": 1, "sw_power_cap": 1}, MinSMClockMHz: 1410, MaxSMClockMHz: 1755, PCIeGen: 5, PCIeWidth: 16}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("samples\n got %+v\nwant %+v", got, want)
	}
}

// TestRunExplainsPerWindow: the unexplained stolen time comes from NVML's
// samples over the probe's windows, with this process as NVML's process
// list showed it (Result.NVMLPID, a host PID getpid() does not give) left
// out: a neighbour of 0.5 beside nobody else reads 0.5. Before, the probe's
// own samples (its share, 0.5) counted as a tenant's and the split read 0.
// Samples not yet covering the last window are read again after a sample
// period; NOT_SUPPORTED gives the raw basis and no split. The sampler reads
// the samples as the probe starts and ends too (twice; once when NVML
// answers NOT_SUPPORTED, which stops it).
func TestRunExplainsPerWindow(t *testing.T) {
	const hostPID = 3141593
	start := time.Now().Add(-10 * time.Second)
	res := halfStolen(start, hostPID)
	period := time.Second / 6
	var samples []nvml.ProcessUtilizationSample
	for ts := start.Add(-time.Second); ts.Before(start.Add(2 * time.Second)); ts = ts.Add(period) {
		if ts.After(start) && ts.Before(start.Add(500*time.Millisecond)) {
			samples = append(samples, nvml.ProcessUtilizationSample{Pid: hostPID, TimeStamp: uint64(ts.UnixMicro()), SmUtil: 50})
		}
	}
	for _, tc := range []struct {
		name         string
		ret          nvml.Return
		basis        string
		split        bool
		want         float64
		readsAt      []time.Time
		samplerReads int
	}{
		{"samples", nvml.SUCCESS, gpuprobe.BasisVisible, true, 0.5, []time.Time{start.Add(time.Second)}, 2},
		{"read again", nvml.SUCCESS, gpuprobe.BasisVisible, true, 0.5, []time.Time{start.Add(300 * time.Millisecond), start.Add(time.Second)}, 2},
		{"not supported", nvml.ERROR_NOT_SUPPORTED, gpuprobe.BasisRaw, false, 0.5, []time.Time{start.Add(time.Second)}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lib := mockLibrary(mockGPU(uuid0, bus0, 0))
			dev, _ := lib.DeviceGetHandleByIndex(0)
			reads := 0
			dev.(*mock.Device).GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
				reads++
				return samples, tc.ret
			}
			clock := tc.readsAt
			sl := &recordedSleeps{}
			p := &fakeProber{devs: []gpuprobe.DeviceInfo{cudaH100(0, uuid0, bus0)}, results: map[int][]gpuprobe.Result{0: {res}}}
			rep, err := Run(context.Background(), Sources{NVML: lib, Prober: p}, Options{Repeat: 1, Probe: testConfig(), SelfPID: 1,
				Sleep: sl.sleep, SampleInterval: time.Hour, Now: func() time.Time { return t0 },
				NVMLNow: func() time.Time { c := clock[0]; clock = clock[1:]; return c }})
			if err != nil {
				t.Fatal(err)
			}
			run := rep.Devices[0].Runs[0]
			u := run.Unexplained
			if u == nil || u.Basis != tc.basis || math.Abs(u.Ratio-tc.want) > 0.01 || (run.UnexplainedStolenRatio != nil) != tc.split || reads != tc.samplerReads+len(tc.readsAt) {
				t.Fatalf("unexplained %+v, split %v after %d reads; want basis %s, %.2f, split %v after %d", u, run.UnexplainedStolenRatio, reads, tc.basis, tc.want, tc.split, tc.samplerReads+len(tc.readsAt))
			}
			if len(tc.readsAt) > 1 && (len(sl.d) != 1 || sl.d[0] < period) {
				t.Errorf("waited %v, want one sample period", sl.d)
			}
		})
	}
}

// probingFlag is a fakeProber that tells, while Probe runs, whether it runs,
// and waits in Probe until NVML's samples were read meanwhile.
type probingFlag struct {
	*fakeProber
	running    atomic.Bool
	readDuring chan struct{}
}

func (p *probingFlag) Probe(ctx context.Context, ordinal int, cfg gpuprobe.Config) (gpuprobe.Result, error) {
	p.running.Store(true)
	defer p.running.Store(false)
	select {
	case <-p.readDuring:
	case <-ctx.Done():
		return gpuprobe.Result{}, ctx.Err()
	}
	return p.fakeProber.Probe(ctx, ordinal, cfg)
}

// TestRunKeepsSamplesReadDuringProbe: NVML's per-process samples are read
// while the probe runs, and explain counts them beside the driver's buffer:
// a probe stretched by a loaded host can outlast the buffer (here: it is
// empty after the probe), and before, every window was then
// no_samples_during_probe (the simulated validation failed so beside a
// second make test).
func TestRunKeepsSamplesReadDuringProbe(t *testing.T) {
	const hostPID = 4242
	start := time.Now().Add(-10 * time.Second)
	res := halfStolen(start, hostPID)
	period := time.Second / 6
	var samples []nvml.ProcessUtilizationSample
	for ts := start.Add(period); ts.Before(start.Add(time.Second)); ts = ts.Add(period) {
		samples = append(samples,
			nvml.ProcessUtilizationSample{Pid: hostPID, TimeStamp: uint64(ts.UnixMicro()), SmUtil: 50},
			nvml.ProcessUtilizationSample{Pid: 777, TimeStamp: uint64(ts.UnixMicro()), SmUtil: 50})
	}
	lib := mockLibrary(mockGPU(uuid0, bus0, 0))
	dev, _ := lib.DeviceGetHandleByIndex(0)
	p := &probingFlag{fakeProber: &fakeProber{devs: []gpuprobe.DeviceInfo{cudaH100(0, uuid0, bus0)}, results: map[int][]gpuprobe.Result{0: {res}}},
		readDuring: make(chan struct{}, 1)}
	var lastSeen []uint64
	var mu sync.Mutex
	dev.(*mock.Device).GetProcessUtilizationFunc = func(seen uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		mu.Lock()
		defer mu.Unlock()
		lastSeen = append(lastSeen, seen)
		if !p.running.Load() {
			return nil, nvml.ERROR_NOT_FOUND // the buffer has none left
		}
		select {
		case p.readDuring <- struct{}{}:
		default:
		}
		var out []nvml.ProcessUtilizationSample
		for _, s := range samples {
			if s.TimeStamp > seen {
				out = append(out, s)
			}
		}
		if len(out) == 0 {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return out, nvml.SUCCESS
	}
	clock := start.Add(2 * time.Second)
	rep, err := Run(context.Background(), Sources{NVML: lib, Prober: p}, Options{Repeat: 1, Probe: testConfig(), SelfPID: 1,
		Sleep: (&recordedSleeps{}).sleep, SampleInterval: time.Millisecond, Now: func() time.Time { return t0 },
		NVMLNow: func() time.Time { clock = clock.Add(time.Second); return clock }})
	if err != nil {
		t.Fatal(err)
	}
	run := rep.Devices[0].Runs[0]
	u := run.Unexplained
	if u == nil || u.Basis != gpuprobe.BasisVisible || run.UnexplainedStolenRatio == nil || math.Abs(*run.UnexplainedStolenRatio) > 0.01 {
		t.Fatalf("unexplained %+v; want basis %s, 0 unexplained (the visible tenant 777 took the stolen half)", u, gpuprobe.BasisVisible)
	}
	if got := run.VisibleSM["777"]; math.Abs(got-0.5) > 0.01 {
		t.Errorf("visible SM %v; want 777 at 0.5", run.VisibleSM)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lastSeen) < 3 || lastSeen[0] != 0 || slices.Max(lastSeen) != samples[len(samples)-1].TimeStamp {
		t.Errorf("reads with lastSeen %v; want the first of the whole buffer and later ones after the newest sample read (%d)", lastSeen, samples[len(samples)-1].TimeStamp)
	}
}

// TestProbeDeadlineLeavesEmulationOut: with Sources.Emulated (the simulated
// driver's emulation time), a probe's deadline moves later by what the
// simulator spent emulating, checked each time it passes; with nothing
// emulated it passes as context.WithTimeout's does and says
// DeadlineExceeded (gpuprobe labels it deadline_exceeded). Before, a
// loaded host's emulation of the simulated GPU ran the probe into its
// 30.8 s wall-clock deadline under -race (TestVerifySimStart beside a
// second make test).
func TestProbeDeadlineLeavesEmulationOut(t *testing.T) {
	t.Parallel()
	const timeout = 50 * time.Millisecond
	wait, stop := context.WithTimeout(context.Background(), time.Minute)
	defer stop()

	// Nothing emulated: the deadline passes.
	began := time.Now()
	ctx, cancel := probeDeadline(context.Background(), timeout, func() time.Duration { return 3 * time.Second })
	defer cancel()
	select {
	case <-ctx.Done():
	case <-wait.Done():
		t.Fatal("the deadline never passed")
	}
	if took := time.Since(began); took < timeout || !errors.Is(ctx.Err(), context.DeadlineExceeded) || gpuprobe.ErrorLabel(ctx.Err()) != gpuprobe.LabelDeadline {
		t.Errorf("done after %s with %v; want after at least %s with DeadlineExceeded", took, ctx.Err(), timeout)
	}

	// A minute emulated at each look: the deadline keeps moving.
	var mu sync.Mutex
	looks := 0
	ctx, cancel = probeDeadline(context.Background(), timeout, func() time.Duration {
		mu.Lock()
		defer mu.Unlock()
		looks++
		return time.Duration(looks) * time.Minute
	})
	testenv.Eventually(wait, t, timeout, "the deadline looked at the emulated time again when it passed", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return looks >= 2, fmt.Sprint(looks, " looks")
	})
	if err := ctx.Err(); err != nil {
		t.Errorf("after %d looks with a minute more emulated each: %v; want the deadline moved", looks, err)
	}
	cancel()
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Errorf("cancelled: %v", ctx.Err())
	}
}

// halfStolen is a healthy result of the probe as NVML's PID pid, half its
// time stolen in four 25 ms windows 70 ms apart from start.
func halfStolen(start time.Time, pid uint32) gpuprobe.Result {
	res := healthyResult(1)
	res.NVMLPID = pid
	st := *res.Stolen
	st.Ratio, st.Windows = 0.5, nil
	for i := range 4 {
		from := start.Add(time.Duration(i) * 70 * time.Millisecond)
		st.Windows = append(st.Windows, gpuprobe.StolenWindow{Start: from, End: from.Add(25 * time.Millisecond), Window: 25 * time.Millisecond, Ratio: 0.5})
	}
	res.Stolen = &st
	return res
}
