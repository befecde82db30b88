package collector

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/gpulens/gpulens/internal/gpuprobe"
	"github.com/gpulens/gpulens/internal/testenv"
)

// fakeProber answers with fixed devices and results and records its calls.
type fakeProber struct {
	mu      sync.Mutex
	devs    []gpuprobe.DeviceInfo
	devErr  error
	results map[int]gpuprobe.Result
	errs    map[int]error
	// hang, when set, makes Probe block until it is closed, ignoring its
	// context (a driver call that never returns).
	hang     chan struct{}
	panicMsg string
	probed   []int
	cfgs     []gpuprobe.Config
	listings int
}

func (f *fakeProber) Devices(context.Context) ([]gpuprobe.DeviceInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listings++
	return f.devs, f.devErr
}

func (f *fakeProber) Probe(ctx context.Context, ordinal int, cfg gpuprobe.Config) (gpuprobe.Result, error) {
	f.mu.Lock()
	f.probed = append(f.probed, ordinal)
	f.cfgs = append(f.cfgs, cfg)
	hang, panicMsg := f.hang, f.panicMsg
	res, err := f.results[ordinal], f.errs[ordinal]
	f.mu.Unlock()
	if panicMsg != "" {
		panic(panicMsg)
	}
	if hang != nil {
		<-hang
		return gpuprobe.Result{}, ctx.Err()
	}
	return res, err
}

func (f *fakeProber) calls() (probed []int, listings int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.probed), f.listings
}

// fakeDirectory is a fixed set of NVML GPUs.
type fakeDirectory struct {
	mu       sync.Mutex
	gpus     []GPUIdentity
	complete bool
	asked    int // calls of GPUs
}

func (d *fakeDirectory) GPUs() ([]GPUIdentity, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.asked++
	return slices.Clone(d.gpus), d.complete
}

func (d *fakeDirectory) calls() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.asked
}

func (d *fakeDirectory) set(gpus []GPUIdentity, complete bool) {
	d.mu.Lock()
	d.gpus, d.complete = gpus, complete
	d.mu.Unlock()
}

// fakeTicker hands out one channel per period, which the test ticks.
type fakeTicker struct {
	mu sync.Mutex
	ch map[time.Duration]chan time.Time
}

func newFakeTicker() *fakeTicker { return &fakeTicker{ch: map[time.Duration]chan time.Time{}} }

func (t *fakeTicker) get(d time.Duration) chan time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ch[d] == nil {
		t.ch[d] = make(chan time.Time)
	}
	return t.ch[d]
}

func (t *fakeTicker) ticker(d time.Duration) (<-chan time.Time, func()) { return t.get(d), func() {} }

// The NVML GPUs of the tests: CUDA lists them in another order.
var testGPUs = []GPUIdentity{
	{GPU: "0", UUID: "GPU-00000000-0000-0000-0000-000000000000", PCIBusID: "00000000:18:00.0"},
	{GPU: "1", UUID: "GPU-11111111-1111-1111-1111-111111111111", PCIBusID: "00000000:2A:00.0"},
}

func staticOpener(p gpuprobe.Prober) OpenProber {
	return func() (gpuprobe.Prober, func() error, error) { return p, nil, nil }
}

func newTestProbe(t *testing.T, open OpenProber, dir GPUDirectory, clock *fakeClock, logs *bytes.Buffer) *ProbeCollector {
	t.Helper()
	opts := ProbeOptions{Interval: 5 * time.Minute, Config: gpuprobe.ExporterConfig(), Now: clock.Now}
	if logs != nil {
		opts.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	p, err := NewProbeCollector(open, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

const probeHelp = `# HELP gpulens_probe_d2h_bandwidth_bytes_per_second Device-to-host copy bandwidth into pinned memory measured by the last probe.
# TYPE gpulens_probe_d2h_bandwidth_bytes_per_second gauge
%s# HELP gpulens_probe_device_copy_bandwidth_bytes_per_second Device memory bandwidth of a copy kernel (bytes read plus written per second) measured by the last probe.
# TYPE gpulens_probe_device_copy_bandwidth_bytes_per_second gauge
%s# HELP gpulens_probe_device_info CUDA's view of the probed device, value 1: ordinal, name and compute capability.
# TYPE gpulens_probe_device_info gauge
%s# HELP gpulens_probe_duration_seconds Wall time of the device's last probe (context, JIT, allocations and measurements).
# TYPE gpulens_probe_duration_seconds gauge
%s# HELP gpulens_probe_errors_total Probe failures by measurement (h2d, fp32, ..., probe: the whole device probe, init: loading CUDA or listing devices) and error (a CUDA error name such as out_of_memory, deadline_exceeded, busy, unavailable, other).
# TYPE gpulens_probe_errors_total counter
%s# HELP gpulens_probe_fp32_flop_per_second FP32 FMA throughput measured by the last probe, in floating-point operations per second.
# TYPE gpulens_probe_fp32_flop_per_second gauge
%s# HELP gpulens_probe_gpu_time_seconds GPU time the timed kernels and copies of the device's last probe took (bounded by --collector.probe.budget).
# TYPE gpulens_probe_gpu_time_seconds gauge
%s# HELP gpulens_probe_h2d_bandwidth_bytes_per_second Host-to-device copy bandwidth from pinned memory measured by the last probe.
# TYPE gpulens_probe_h2d_bandwidth_bytes_per_second gauge
%s# HELP gpulens_probe_last_success_timestamp_seconds Unix time the device's last successful probe finished.
# TYPE gpulens_probe_last_success_timestamp_seconds gauge
%s# HELP gpulens_probe_launch_latency_seconds Round trip of an empty kernel (launch and synchronise) over the last probe's launches: stat=median or p99.
# TYPE gpulens_probe_launch_latency_seconds gauge
%s# HELP gpulens_probe_memory_free_bytes Device memory free as the probe's CUDA context sees it (cuMemGetInfo), after the context exists.
# TYPE gpulens_probe_memory_free_bytes gauge
%s# HELP gpulens_probe_memory_total_bytes Device memory total as CUDA reports it (cuMemGetInfo): a vGPU guest or MIG instance sees its share.
# TYPE gpulens_probe_memory_total_bytes gauge
%s# HELP gpulens_probe_runs_total Probes of the device attempted, failed ones included.
# TYPE gpulens_probe_runs_total counter
%s# HELP gpulens_probe_stolen_gap_seconds Length of the gaps the stolen-time kernel saw (stat=median, p90, max; 0 without gaps): the time slice other contexts got.
# TYPE gpulens_probe_stolen_gap_seconds gauge
%s# HELP gpulens_probe_stolen_time_ratio Share of the stolen-time windows the probe's kernel did not run (gaps in %%globaltimer; median over SMs per window, the windows weighted by length): GPU time given to other contexts. ~0 on a GPU that is yours alone.
# TYPE gpulens_probe_stolen_time_ratio gauge
%s# HELP gpulens_probe_tensor_flop_per_second Tensor-core mma.sync throughput (f32 accumulate) measured by the last probe, in floating-point operations per second.
# TYPE gpulens_probe_tensor_flop_per_second gauge
%s# HELP gpulens_probe_unexplained_stolen_time_unknown 1 when the last probe measured stolen time but the unexplained part is not known, by reason: no_process_utilization (the process collectors are off), mig, utilization_read_failed, samples_not_read (NVML not read a sample period past a window within the wait), no_samples_during_probe (NVML showed no sample at all while the probe ran and lost time: it does not see this GPU's contexts), no_windows.
# TYPE gpulens_probe_unexplained_stolen_time_unknown gauge
%s# HELP gpulens_probe_up 1 when the last probe of the CUDA device measured something, 0 when it failed as a whole (no libcuda, no device, deadline, busy); its figures are then absent.
# TYPE gpulens_probe_up gauge
%s`

// TestProbeExactExposition checks every series of two probed devices: a
// whole GPU that CUDA numbers differently from NVML (matched by UUID) and a
// MIG instance (matched by PCI bus id, in CUDA's 4-digit-domain format)
// whose bf16 measurement failed.
func TestProbeExactExposition(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	fp := &fakeProber{
		devs: []gpuprobe.DeviceInfo{
			{Ordinal: 0, Name: "NVIDIA H100 80GB HBM3", UUID: testGPUs[1].UUID, PCIBusID: "00000000:2A:00.0", ComputeCapability: "9.0", SMs: 132},
			{Ordinal: 1, Name: "NVIDIA A100-SXM4-40GB MIG 3g.20gb", UUID: "MIG-22222222-2222-2222-2222-222222222222", PCIBusID: "0000:18:00.0", ComputeCapability: "8.0", SMs: 42},
		},
		results: map[int]gpuprobe.Result{
			0: {
				Duration: 1500 * time.Millisecond, GPUTime: 240 * time.Millisecond,
				Memory:            &gpuprobe.MemoryResult{FreeBytes: 80_000_000_000, TotalBytes: 85_520_809_984},
				H2DBytesPerSecond: 25e9, D2HBytesPerSecond: 26e9, DeviceCopyBytesPerSecond: 3e12,
				FP32FLOPS: 6e13, FP16TensorFLOPS: 9e14, BF16TensorFLOPS: 9.5e14,
				LaunchLatency: 8 * time.Microsecond, LaunchLatencyP99: 20 * time.Microsecond,
				Stolen: &gpuprobe.StolenResult{Ratio: 0.25, GapMedian: 2 * time.Millisecond, GapP90: 3 * time.Millisecond, GapMax: 5 * time.Millisecond},
			},
			1: {
				Duration: time.Second, GPUTime: 200 * time.Millisecond,
				Memory:            &gpuprobe.MemoryResult{FreeBytes: 20_000_000_000, TotalBytes: 21_000_000_000},
				H2DBytesPerSecond: 20e9, D2HBytesPerSecond: 21e9, DeviceCopyBytesPerSecond: 7e11,
				FP32FLOPS: 8e12, FP16TensorFLOPS: 1.2e14,
				LaunchLatency: 10 * time.Microsecond, LaunchLatencyP99: 30 * time.Microsecond,
				Stolen: &gpuprobe.StolenResult{Ratio: 0},
				Errors: []gpuprobe.MeasurementError{{Measurement: gpuprobe.MeasureBF16, Err: "cuLaunchKernel: CUDA_ERROR_INVALID_PTX (218)", Code: 218}},
			},
		},
	}
	p := newTestProbe(t, staticOpener(fp), &fakeDirectory{gpus: testGPUs, complete: true}, clock, nil)
	p.RunOnce(context.Background())

	const mig = `gpu="0",uuid="MIG-22222222-2222-2222-2222-222222222222"`
	const whole = `gpu="1",uuid="GPU-11111111-1111-1111-1111-111111111111"`
	line := func(name, labels, extra, value string) string {
		pairs := strings.Split(labels, ",")
		if extra != "" {
			pairs = append(pairs, strings.Split(extra, ",")...)
		}
		slices.Sort(pairs) // the registry serves labels sorted by name
		return name + "{" + strings.Join(pairs, ",") + "} " + value + "\n"
	}
	both := func(name, extra, vMIG, vWhole string) string {
		return line(name, mig, extra, vMIG) + line(name, whole, extra, vWhole)
	}
	want := fmt.Sprintf(probeHelp,
		both("gpulens_probe_d2h_bandwidth_bytes_per_second", "", "2.1e+10", "2.6e+10"),
		both("gpulens_probe_device_copy_bandwidth_bytes_per_second", "", "7e+11", "3e+12"),
		line("gpulens_probe_device_info", mig, `compute_capability="8.0",cuda_ordinal="1",name="NVIDIA A100-SXM4-40GB MIG 3g.20gb"`, "1")+
			line("gpulens_probe_device_info", whole, `compute_capability="9.0",cuda_ordinal="0",name="NVIDIA H100 80GB HBM3"`, "1"),
		both("gpulens_probe_duration_seconds", "", "1", "1.5"),
		line("gpulens_probe_errors_total", mig, `error="invalid_ptx",measurement="bf16_tensor"`, "1"),
		both("gpulens_probe_fp32_flop_per_second", "", "8e+12", "6e+13"),
		both("gpulens_probe_gpu_time_seconds", "", "0.2", "0.24"),
		both("gpulens_probe_h2d_bandwidth_bytes_per_second", "", "2e+10", "2.5e+10"),
		both("gpulens_probe_last_success_timestamp_seconds", "", "1.7e+09", "1.7e+09"),
		both("gpulens_probe_launch_latency_seconds", `stat="median"`, "1e-05", "8e-06")+
			both("gpulens_probe_launch_latency_seconds", `stat="p99"`, "3e-05", "2e-05"),
		both("gpulens_probe_memory_free_bytes", "", "2e+10", "8e+10"),
		both("gpulens_probe_memory_total_bytes", "", "2.1e+10", "8.5520809984e+10"),
		both("gpulens_probe_runs_total", "", "1", "1"),
		both("gpulens_probe_stolen_gap_seconds", `stat="max"`, "0", "0.005")+
			both("gpulens_probe_stolen_gap_seconds", `stat="median"`, "0", "0.002")+
			both("gpulens_probe_stolen_gap_seconds", `stat="p90"`, "0", "0.003"),
		both("gpulens_probe_stolen_time_ratio", "", "0", "0.25"),
		line("gpulens_probe_tensor_flop_per_second", mig, `dtype="fp16"`, "1.2e+14")+
			line("gpulens_probe_tensor_flop_per_second", whole, `dtype="bf16"`, "9.5e+14")+
			line("gpulens_probe_tensor_flop_per_second", whole, `dtype="fp16"`, "9e+14"),
		both("gpulens_probe_unexplained_stolen_time_unknown", `reason="no_process_utilization"`, "1", "1"),
		both("gpulens_probe_up", "", "1", "1"),
	)
	got := exposition(t, p)
	if gotLines, wantLines := sortedLines(got), sortedLines(want); !slices.Equal(gotLines, wantLines) {
		for _, l := range wantLines {
			if !slices.Contains(gotLines, l) {
				t.Errorf("missing: %s", l)
			}
		}
		for _, l := range gotLines {
			if !slices.Contains(wantLines, l) {
				t.Errorf("unexpected: %s", l)
			}
		}
	}
	if problems, err := testutil.CollectAndLint(p); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
	if probed, _ := fp.calls(); !slices.Equal(probed, []int{0, 1}) {
		t.Errorf("probed ordinals %v, want [0 1]: every device in turn", probed)
	}
}

// exposition renders what c collects in the text format, labels in the
// order they are served.
func exposition(t *testing.T, c prometheus.Collector) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

func sortedLines(s string) []string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	slices.Sort(lines)
	return lines
}

func TestMatchGPU(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name           string
		dev            gpuprobe.DeviceInfo
		gpu, uuid      string
		ok             bool
		directoryEmpty bool
	}{
		{"by UUID", gpuprobe.DeviceInfo{UUID: testGPUs[1].UUID, PCIBusID: "00000000:18:00.0"}, "1", testGPUs[1].UUID, true, false},
		{"UUID case differs", gpuprobe.DeviceInfo{UUID: strings.ToLower(testGPUs[0].UUID)}, "0", testGPUs[0].UUID, true, false},
		{"by PCI bus id, CUDA format", gpuprobe.DeviceInfo{UUID: "GPU-99999999-9999-9999-9999-999999999999", PCIBusID: "0000:2a:00.0"}, "1", testGPUs[1].UUID, true, false},
		{"MIG instance keeps its UUID", gpuprobe.DeviceInfo{UUID: "MIG-abc", PCIBusID: "0000:18:00.0"}, "0", "MIG-abc", true, false},
		{"no UUID, PCI bus id", gpuprobe.DeviceInfo{PCIBusID: "00000000:18:00.0"}, "0", testGPUs[0].UUID, true, false},
		{"unknown device", gpuprobe.DeviceInfo{UUID: "GPU-unknown", PCIBusID: "0000:99:00.0"}, "", "GPU-unknown", false, false},
		{"malformed bus id", gpuprobe.DeviceInfo{UUID: "GPU-unknown", PCIBusID: "18:00.0"}, "", "GPU-unknown", false, false},
		{"NVML identities not read yet", gpuprobe.DeviceInfo{UUID: testGPUs[0].UUID, PCIBusID: "0000:18:00.0"}, "", testGPUs[0].UUID, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			gpus := testGPUs
			if tc.directoryEmpty {
				gpus = nil
			}
			gpu, uuid, ok := matchGPU(tc.dev, gpus)
			if gpu != tc.gpu || uuid != tc.uuid || ok != tc.ok {
				t.Errorf("matchGPU = (%q, %q, %v), want (%q, %q, %v)", gpu, uuid, ok, tc.gpu, tc.uuid, tc.ok)
			}
		})
	}
}

// gatherProbe returns the probe's series as "name{k=v,...}" -> value.
func gatherProbe(t *testing.T, p *ProbeCollector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(p)
	return series(t, reg)
}

const (
	gpu0 = "gpu=0,uuid=GPU-00000000-0000-0000-0000-000000000000"
	gpu1 = "gpu=1,uuid=GPU-11111111-1111-1111-1111-111111111111"
)

func wholeGPUs() []gpuprobe.DeviceInfo {
	return []gpuprobe.DeviceInfo{
		{Ordinal: 0, UUID: testGPUs[0].UUID, PCIBusID: "0000:18:00.0", ComputeCapability: "9.0", Name: "H100"},
		{Ordinal: 1, UUID: testGPUs[1].UUID, PCIBusID: "0000:2a:00.0", ComputeCapability: "9.0", Name: "H100"},
	}
}

// seriesKey is the key series() gives name with the labels of id ("gpu=0,uuid=...")
// and extra ("stat=p99"), sorted by label name.
func seriesKey(name, id string, extra ...string) string {
	ls := append(strings.Split(id, ","), extra...)
	slices.Sort(ls)
	return name + "{" + strings.Join(ls, ",") + "}"
}

// errKey is the series key of an errors_total series.
func errKey(errLabel, id, measurement string) string {
	return seriesKey("gpulens_probe_errors_total", id, "error="+errLabel, "measurement="+measurement)
}

var okResult = gpuprobe.Result{DeviceCopyBytesPerSecond: 3e12, Stolen: &gpuprobe.StolenResult{Ratio: 0.01}}

// TestProbeFailures: each way a probe fails is counted with its label,
// gpulens_probe_up goes to 0 and the device's figures disappear, while the
// other device keeps its figures.
func TestProbeFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		devErr    error
		probeErr  error
		panicMsg  string
		wantUp    map[string]float64
		wantError map[string]float64 // series key suffix -> count
	}{
		{
			name:     "CUDA error on one device",
			probeErr: &gpuprobe.CUDAError{Call: "cuCtxCreate_v2", Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY"},
			wantUp:   map[string]float64{gpu0: 1, gpu1: 0},
			wantError: map[string]float64{
				errKey("out_of_memory", gpu1, "probe"): 1,
			},
		},
		{
			name:      "busy",
			probeErr:  fmt.Errorf("probing device 1: %w", gpuprobe.ErrBusy),
			wantUp:    map[string]float64{gpu0: 1, gpu1: 0},
			wantError: map[string]float64{errKey("busy", gpu1, "probe"): 1},
		},
		{
			name:      "deadline",
			probeErr:  fmt.Errorf("stolen: %w", context.DeadlineExceeded),
			wantUp:    map[string]float64{gpu0: 1, gpu1: 0},
			wantError: map[string]float64{errKey("deadline_exceeded", gpu1, "probe"): 1},
		},
		{
			name:   "device listing fails",
			devErr: &gpuprobe.CUDAError{Call: "cuInit", Code: 100, Name: "CUDA_ERROR_NO_DEVICE"},
			wantUp: map[string]float64{gpu0: 0, gpu1: 0},
			wantError: map[string]float64{
				errKey("no_device", gpu0, "init"): 1,
				errKey("no_device", gpu1, "init"): 1,
			},
		},
		{
			name:     "panic",
			panicMsg: "index out of range",
			wantUp:   map[string]float64{gpu0: 0, gpu1: 0},
			wantError: map[string]float64{
				errKey("panic", gpu0, "probe"): 1,
				errKey("panic", gpu1, "probe"): 1,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			fp := &fakeProber{
				devs: wholeGPUs(), devErr: tc.devErr, panicMsg: tc.panicMsg,
				results: map[int]gpuprobe.Result{0: okResult, 1: okResult},
				errs:    map[int]error{1: tc.probeErr},
			}
			p := newTestProbe(t, staticOpener(fp), &fakeDirectory{gpus: testGPUs, complete: true}, clock, nil)
			p.RunOnce(context.Background())
			got := gatherProbe(t, p)
			for id, want := range tc.wantUp {
				if v, ok := got["gpulens_probe_up{"+id+"}"]; !ok || v != want {
					t.Errorf("gpulens_probe_up{%s} = %v (present %v), want %v", id, v, ok, want)
				}
				_, hasFigure := got["gpulens_probe_device_copy_bandwidth_bytes_per_second{"+id+"}"]
				if hasFigure != (want == 1) {
					t.Errorf("device copy bandwidth of %s present = %v with probe_up %v", id, hasFigure, want)
				}
				if v := got["gpulens_probe_runs_total{"+id+"}"]; v != 1 {
					t.Errorf("runs_total{%s} = %v, want 1", id, v)
				}
			}
			var errSeries []string
			for k := range got {
				if strings.HasPrefix(k, "gpulens_probe_errors_total") {
					errSeries = append(errSeries, k)
				}
			}
			if len(errSeries) != len(tc.wantError) {
				t.Errorf("error series %v, want %v", errSeries, tc.wantError)
			}
			for k, want := range tc.wantError {
				if got[k] != want {
					t.Errorf("%s = %v, want %v", k, got[k], want)
				}
			}
		})
	}
}

// TestProbeHangIsAbandoned: a driver call that ignores its deadline is
// abandoned after the deadline and a grace period; the next run does not
// call the prober again while it is stuck, and recovers once it returns.
func TestProbeHangIsAbandoned(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	hang := make(chan struct{})
	fp := &fakeProber{devs: wholeGPUs()[:1], results: map[int]gpuprobe.Result{0: okResult}, hang: hang}
	p := newTestProbe(t, staticOpener(fp), &fakeDirectory{gpus: testGPUs, complete: true}, clock, nil)
	// The calls that answer (the listing, the last run's probe) race the
	// wall-clock deadline on their goroutines: long enough for a loaded
	// machine to start them; the hung call waits it out once.
	p.timeout, p.grace = 2*time.Second, 10*time.Millisecond

	p.RunOnce(context.Background())
	got := gatherProbe(t, p)
	if got["gpulens_probe_up{"+gpu0+"}"] != 0 || got[errKey("deadline_exceeded", gpu0, "probe")] != 1 {
		t.Fatalf("after a hung probe: %v", got)
	}
	// Still stuck: the next run fails fast without calling the prober.
	p.RunOnce(context.Background())
	got = gatherProbe(t, p)
	if got[errKey("busy", gpu0, "init")] != 1 {
		t.Errorf("second run while stuck: want one busy error on init (the device listing is not called): %v", got)
	}
	if probed, listings := fp.calls(); len(probed) != 1 || listings != 1 {
		t.Errorf("prober called %d times to probe and %d to list while stuck, want 1 and 1", len(probed), listings)
	}
	// The driver returns: the stuck call finishes and the next run works.
	fp.mu.Lock()
	fp.hang = nil
	fp.mu.Unlock()
	stuck := p.lastCall // the abandoned Probe call (the busy run made none)
	close(hang)
	<-stuck
	p.RunOnce(context.Background())
	got = gatherProbe(t, p)
	if got["gpulens_probe_up{"+gpu0+"}"] != 1 || got["gpulens_probe_runs_total{"+gpu0+"}"] != 3 {
		t.Errorf("after the driver returned: up %v runs %v, want 1 and 3", got["gpulens_probe_up{"+gpu0+"}"], got["gpulens_probe_runs_total{"+gpu0+"}"])
	}
}

// TestProbeLibraryMissing: without libcuda every NVML GPU reports probe_up
// 0 and an init error per run, the failure is logged once, the library is
// retried every run, and the probe recovers when it appears.
func TestProbeLibraryMissing(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	var logs bytes.Buffer
	fp := &fakeProber{devs: wholeGPUs(), results: map[int]gpuprobe.Result{0: okResult, 1: okResult}}
	opens, available := 0, false
	open := func() (gpuprobe.Prober, func() error, error) {
		opens++
		if !available {
			return nil, nil, errors.New("gpuprobe: dlopen libcuda.so.1: cannot open shared object file")
		}
		return fp, nil, nil
	}
	p := newTestProbe(t, open, &fakeDirectory{gpus: testGPUs, complete: true}, clock, &logs)
	for range 3 {
		p.RunOnce(context.Background())
		clock.Advance(5 * time.Minute)
	}
	got := gatherProbe(t, p)
	for _, id := range []string{gpu0, gpu1} {
		if v, ok := got["gpulens_probe_up{"+id+"}"]; !ok || v != 0 {
			t.Errorf("probe_up{%s} = %v (present %v), want 0", id, v, ok)
		}
		if v := got[errKey("unavailable", id, "init")]; v != 3 {
			t.Errorf("init errors of %s = %v, want 3", id, v)
		}
		if _, ok := got["gpulens_probe_last_success_timestamp_seconds{"+id+"}"]; ok {
			t.Errorf("%s has a last-success timestamp without any success", id)
		}
	}
	if opens != 3 {
		t.Errorf("library opened %d times in 3 runs, want 3 (retry every run)", opens)
	}
	if n := strings.Count(logs.String(), "CUDA unavailable"); n != 1 {
		t.Errorf("the missing library was logged %d times, want once:\n%s", n, logs.String())
	}

	available = true
	p.RunOnce(context.Background())
	p.RunOnce(context.Background())
	got = gatherProbe(t, p)
	for _, id := range []string{gpu0, gpu1} {
		if got["gpulens_probe_up{"+id+"}"] != 1 || got["gpulens_probe_runs_total{"+id+"}"] != 5 ||
			got[errKey("unavailable", id, "init")] != 3 ||
			got["gpulens_probe_last_success_timestamp_seconds{"+id+"}"] != float64(clock.Now().Unix()) {
			t.Errorf("after recovery %s: %v", id, got)
		}
	}
	if opens != 4 {
		t.Errorf("library opened %d times, want 4: once more, then kept", opens)
	}
	if !strings.Contains(logs.String(), "CUDA devices available again") {
		t.Errorf("recovery not logged:\n%s", logs.String())
	}
}

// TestProbeSkipsTensorBeforeAmpere: GPUs older than compute capability 8.0
// are probed without the tensor measurements; newer ones with them.
func TestProbeSkipsTensorBeforeAmpere(t *testing.T) {
	t.Parallel()
	fp := &fakeProber{devs: []gpuprobe.DeviceInfo{
		{Ordinal: 0, UUID: testGPUs[0].UUID, ComputeCapability: "7.5"},
		{Ordinal: 1, UUID: testGPUs[1].UUID, ComputeCapability: "8.6"},
	}}
	p := newTestProbe(t, staticOpener(fp), &fakeDirectory{gpus: testGPUs, complete: true}, newFakeClock(), nil)
	p.RunOnce(context.Background())
	if len(fp.cfgs) != 2 {
		t.Fatalf("%d probes, want 2", len(fp.cfgs))
	}
	if s := fp.cfgs[0].Skip; !slices.Contains(s, gpuprobe.MeasureFP16) || !slices.Contains(s, gpuprobe.MeasureBF16) {
		t.Errorf("Turing (7.5) probed with Skip %v, want the tensor measurements skipped", s)
	}
	if s := fp.cfgs[1].Skip; len(s) != 0 {
		t.Errorf("Ampere (8.6) probed with Skip %v, want none", s)
	}
	if fp.cfgs[0].GPUTimeBudget != gpuprobe.ExporterConfig().GPUTimeBudget {
		t.Errorf("budget %s, want the configured %s", fp.cfgs[0].GPUTimeBudget, gpuprobe.ExporterConfig().GPUTimeBudget)
	}
}

// TestProbeSchedule: Run waits for the NVML identities, probes at once,
// then once per tick, and stops with its context.
func TestProbeSchedule(t *testing.T) {
	t.Parallel()
	fp := &fakeProber{devs: wholeGPUs(), results: map[int]gpuprobe.Result{0: okResult, 1: okResult}}
	dir := &fakeDirectory{gpus: testGPUs[:1]}
	ticker := newFakeTicker()
	p := newTestProbe(t, staticOpener(fp), dir, newFakeClock(), nil)
	p.tick = ticker.ticker
	runs := make(chan struct{})
	p.afterRun = func() { runs <- struct{}{} }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()

	// Identities incomplete: Run polls and does not probe yet. The
	// directory is completed only once Run has looked at it after the
	// tick (its first look, then the tick's): completed earlier, Run would
	// take the first tick as ready and never read the second (a deadlock,
	// seen under load).
	ticker.get(50 * time.Millisecond) <- time.Time{}
	wait, cancelWait := context.WithTimeout(context.Background(), time.Minute)
	defer cancelWait()
	testenv.Eventually(wait, t, time.Millisecond, "Run to read the directory after the first tick", func() (bool, string) {
		n := dir.calls()
		return n >= 2, fmt.Sprintf("%d reads", n)
	})
	if probed, listings := fp.calls(); len(probed) != 0 || listings != 0 {
		t.Fatalf("probed before the NVML identities were known: %v", probed)
	}
	dir.set(testGPUs, true)
	ticker.get(50 * time.Millisecond) <- time.Time{}
	<-runs
	if probed, _ := fp.calls(); !slices.Equal(probed, []int{0, 1}) {
		t.Fatalf("first run probed %v, want [0 1]", probed)
	}
	if got := gatherProbe(t, p); got["gpulens_probe_up{"+gpu1+"}"] != 1 {
		t.Errorf("GPU 1 not labelled from NVML after the wait: %v", got)
	}
	for i := 2; i <= 3; i++ {
		ticker.get(5 * time.Minute) <- time.Time{}
		<-runs
		if probed, _ := fp.calls(); len(probed) != 2*i {
			t.Fatalf("after %d ticks: %d probes, want %d", i-1, len(probed), 2*i)
		}
	}
	cancel()
	<-done
}

// TestProbeFailureKeepsOtherCollectors: a failing probe only shows in its
// own series; the sampler's metrics are served as before.
func TestProbeFailureKeepsOtherCollectors(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	s, _ := newTestSampler(t, newMockLib(newMockDevice(0)), clock.Now, false)
	cycleAll(s)
	if gpus, complete := s.GPUs(); !complete || len(gpus) != 1 || gpus[0] != (GPUIdentity{GPU: "0", UUID: "GPU-00000000-0000-0000-0000-000000000000", PCIBusID: "00000000:18:00.0"}) {
		t.Fatalf("Sampler.GPUs() = %v, %v", gpus, complete)
	}
	fp := &fakeProber{devs: wholeGPUs()[:1], errs: map[int]error{0: &gpuprobe.CUDAError{Call: "cuCtxCreate_v2", Code: 999, Name: "CUDA_ERROR_UNKNOWN"}}}
	p := newTestProbe(t, staticOpener(fp), s, clock, nil)
	live := prometheus.NewRegistry()
	live.MustRegister(s.Live(), p)
	exp := NewExposition(s, live, ExpositionOptions{Now: clock.Now})
	p.RunOnce(context.Background())
	got := parseText(t, get(t, exp, nil).Body.Bytes())
	for k, want := range map[string]float64{
		"gpulens_gpu_up{" + gpu0 + "}":                  1,
		"gpulens_gpu_memory_used_bytes{" + gpu0 + "}":   42949672960,
		"gpulens_gpu_temperature_celsius{" + gpu0 + "}": 61,
		"gpulens_probe_up{" + gpu0 + "}":                0,
		errKey("unknown", gpu0, "probe"):                1,
	} {
		if v, ok := got[k]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", k, v, ok, want)
		}
	}
}

func TestNewProbeCollectorRejectsBadOptions(t *testing.T) {
	t.Parallel()
	bad := gpuprobe.ExporterConfig()
	bad.StolenWindow = time.Second
	for name, opts := range map[string]ProbeOptions{
		"zero interval":    {Config: gpuprobe.ExporterConfig()},
		"negative timeout": {Interval: time.Minute, Timeout: -time.Second, Config: gpuprobe.ExporterConfig()},
		"invalid config":   {Interval: time.Minute, Config: bad},
	} {
		if _, err := NewProbeCollector(staticOpener(&fakeProber{}), &fakeDirectory{}, opts); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
