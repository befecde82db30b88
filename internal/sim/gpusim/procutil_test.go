package gpusim

import (
	"fmt"
	"math"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpulens/gpulens/internal/gpuprobe"
)

// bySample groups samples by PID: timestamp (µs after epoch) → SM %.
func bySample(samples []nvml.ProcessUtilizationSample) map[uint32]map[uint64]uint32 {
	out := map[uint32]map[uint64]uint32{}
	for _, s := range samples {
		if out[s.Pid] == nil {
			out[s.Pid] = map[uint64]uint32{}
		}
		out[s.Pid][s.TimeStamp-uint64(epoch.UnixMicro())] = s.SmUtil
	}
	return out
}

// periodEnd is the µs after epoch at which the k-th period of p seconds
// ends (its samples' timestamp).
func periodEnd(k int, p float64) uint64 { return uint64(math.Round(float64(k) * p * 1e6)) }

// TestProcessSamplesArePeriodMeans: as the driver gives them, a process's
// sample is its mean utilisation over the sample period (1/6 s by default),
// stamped with the period's end; a process idle over a period has no sample
// (no 0 % samples: an idle tenant never has one, a bursty one leaves gaps);
// a tenant that starts, stops or restarts inside a period counts for the
// time it ran there, each PID apart. On the old simulator samples were 200
// ms apart, instantaneous, with 0 % samples for idle tenants.
func TestProcessSamplesArePeriodMeans(t *testing.T) {
	t.Parallel()
	_, lib, clk := newTestFleet(t, mustParse(t, `
devices:
  - model: h100-sxm5-80gb
  - model: h100-sxm5-80gb
    nvml: {process_sample_period: 1s}
tenants:
  - {name: steady, gpu: 0, pid: 100, sm_util: 60, memory_util: 30}
  # 90 % for 1/6 s of every second, from 0.9 s before each whole second.
  - name: bursty
    gpu: 0
    pid: 200
    sm_util: {shape: square, min: 0, max: 90, period: 1s, duty: 0.16666666666666666, phase: 100ms}
  - {name: late, gpu: 0, pid: 300, sm_util: 80, start: 10250ms, stop: 11100ms}
  - {name: idle, gpu: 0, pid: 400, sm_util: 0}
  - {name: restarts, gpu: 1, pid: 500, sm_util: 80, restart_every: 2500ms}
`), 1)
	d0, d1 := handle(t, lib, 0), handle(t, lib, 1)

	clk.Set(100 * time.Millisecond)
	if s, r := d0.GetProcessUtilization(0); r != nvml.ERROR_NOT_FOUND {
		t.Errorf("before the first period ends: %+v, %v; want ERROR_NOT_FOUND", s, r)
	}

	const p = defaultSamplePeriod
	clk.Set(time.Duration(periodEnd(72, p)) * time.Microsecond)
	samples, r := d0.GetProcessUtilization(0)
	if r != nvml.SUCCESS {
		t.Fatal(r)
	}
	got := bySample(samples)
	if _, ok := got[400]; ok {
		t.Errorf("the idle tenant has samples %v; an idle process has none", got[400])
	}
	// The driver keeps 10 s: periods 13..72 (ending 2 1/6 s .. 12 s).
	if len(got[100]) != 60 {
		t.Errorf("steady tenant: %d samples; want 60 (one per period of the last 10 s)", len(got[100]))
	}
	for k := 13; k <= 72; k++ {
		if v, ok := got[100][periodEnd(k, p)]; !ok || v != 60 {
			t.Errorf("steady tenant, period %d (ending %d µs): %d, %v; want 60", k, periodEnd(k, p), v, ok)
		}
	}
	for _, s := range samples {
		if s.Pid == 100 && s.MemUtil != 30 {
			t.Errorf("steady tenant's memory utilisation %d; want 30", s.MemUtil)
		}
		if i := slices.Index(samples, s); i > 0 && s.TimeStamp < samples[i-1].TimeStamp {
			t.Errorf("samples out of order at %d", i)
		}
	}
	// The burst [m − 0.1, m + 1/15) straddles the period ending at m:
	// 0.1 s of it in that period (90 × 0.6 = 54), 1/15 s in the next
	// (90 × 0.4 = 36), nothing in the four others.
	wantBursty := map[uint64]uint32{periodEnd(13, p): 36}
	for m := 3; m <= 12; m++ {
		wantBursty[periodEnd(6*m, p)] = 54
		if m < 12 {
			wantBursty[periodEnd(6*m+1, p)] = 36
		}
	}
	if fmt.Sprint(got[200]) != fmt.Sprint(wantBursty) {
		t.Errorf("bursty tenant's samples %v; want %v", got[200], wantBursty)
	}
	var sum float64
	for _, v := range got[200] {
		sum += float64(v) * p
	}
	// Gaps count as 0 %: over the 10 s kept, 90 % × 1/6.
	if mean := sum / (60 * p); math.Abs(mean-15) > 0.01 {
		t.Errorf("bursty tenant's samples average %.3f %% over 10 s; want 15 (90 %% × 1/6)", mean)
	}
	// late runs [10.25 s, 11.1 s): half of the period ending at 10 1/3 s,
	// 0.6 of the one ending at 11 1/6 s.
	wantLate := map[uint64]uint32{periodEnd(62, p): 40, periodEnd(63, p): 80, periodEnd(64, p): 80,
		periodEnd(65, p): 80, periodEnd(66, p): 80, periodEnd(67, p): 48}
	if fmt.Sprint(got[300]) != fmt.Sprint(wantLate) {
		t.Errorf("late tenant's samples %v; want %v", got[300], wantLate)
	}

	// Only samples newer than lastSeen; NOT_FOUND when none is.
	newer, r := d0.GetProcessUtilization(uint64(epoch.UnixMicro()) + periodEnd(71, p))
	if r != nvml.SUCCESS || len(newer) != 2 || newer[0].TimeStamp-uint64(epoch.UnixMicro()) != periodEnd(72, p) {
		t.Errorf("newer than period 71: %+v, %v; want the steady and the bursty tenant's of period 72", newer, r)
	}
	if s, r := d0.GetProcessUtilization(uint64(epoch.UnixMicro()) + periodEnd(72, p)); r != nvml.ERROR_NOT_FOUND {
		t.Errorf("nothing newer: %+v, %v; want ERROR_NOT_FOUND", s, r)
	}

	// A 1 s period; the restart at 2.5 s (new PID 507) splits one.
	clk.Set(4 * time.Second)
	s1, r := d1.GetProcessUtilization(0)
	got1 := bySample(s1)
	want1 := map[uint32]map[uint64]uint32{
		500: {1_000_000: 80, 2_000_000: 80, 3_000_000: 40},
		507: {3_000_000: 40, 4_000_000: 80},
	}
	if r != nvml.SUCCESS || fmt.Sprint(got1) != fmt.Sprint(want1) {
		t.Errorf("1 s periods with a restart at 2.5 s: %v, %v; want %v", got1, r, want1)
	}

}

// fmaRun launches one FMA kernel on the simulated driver's device 0 that
// takes work seconds of the whole GPU's FP32 rate, and returns when it has
// run (the driver's context stays open until done is called).
func fmaRun(t *testing.T, f *Fleet, work float64) (done func()) {
	t.Helper()
	drv := f.ProbeDriver()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(drv.Init())
	ctx, err := drv.CtxCreate(0)
	must(err)
	m, err := drv.ModuleLoadData(".version 7.0\n.target sm_52\n.address_size 64\n.visible .entry " + gpuprobe.KernelFMA + "(.param .u64 a)\n")
	must(err)
	fn, err := drv.ModuleGetFunction(m, gpuprobe.KernelFMA)
	must(err)
	const blocks, threads = 1024, 256
	out, err := drv.MemAlloc(4 * blocks * threads)
	must(err)
	iters := work * h100Probe.fp32TFLOPS * 1e12 / (blocks * threads * gpuprobe.FMAChains * 2)
	must(drv.LaunchKernel(fn, gpuprobe.Dim3{X: blocks, Y: 1, Z: 1}, gpuprobe.Dim3{X: threads, Y: 1, Z: 1}, 0, uint64(out), uint64(iters)))
	must(drv.CtxSynchronize())
	return func() { must(drv.CtxDestroy(ctx)) }
}

// kernelSpans is what the device recorded of the probe's kernels.
func kernelSpans(f *Fleet, i int) []span {
	return f.devices[i].probeKernels.within(0, math.Inf(1), nil)
}

// TestTenantUtilisationDropsUnderProbe: while the probe's kernels run they
// take turns with the busy tenant, whose NVML utilisation is then its
// share (half), not its demand (95 %); the probe's own process has samples
// with its share; a period the kernel covers in part reads the
// time-weighted mean. On the old simulator the tenant read 95 % throughout
// and the probe was "busy" for its context's whole life.
func TestTenantUtilisationDropsUnderProbe(t *testing.T) {
	t.Parallel()
	f, lib, clk := newTestFleet(t, mustParse(t, `
devices:
  - model: h100-sxm5-80gb
tenants:
  - {name: busy, gpu: 0, pid: 100, sm_util: 95, memory_util: 40}
`), 1)
	clk.Set(5 * time.Second)
	done := fmaRun(t, f, 0.5) // half a second of work at half the GPU: ~1 s
	done()
	spans := kernelSpans(f, 0)
	if len(spans) != 1 || math.Abs(spans[0].to-spans[0].from-1) > 0.02 || spans[0].from < 5 || spans[0].from > 5.01 {
		t.Fatalf("kernel spans %v; want one of ~1 s from 5 s", spans)
	}
	k := spans[0]
	clk.Set(8 * time.Second)
	samples, r := handle(t, lib, 0).GetProcessUtilization(uint64(epoch.Add(4 * time.Second).UnixMicro()))
	if r != nvml.SUCCESS {
		t.Fatal(r)
	}
	self := f.SelfPID()
	if self != uint32(os.Getpid()) {
		t.Errorf("SelfPID %d; want os.Getpid() %d in the host's PID namespace", self, os.Getpid())
	}
	const p = defaultSamplePeriod
	seen := map[uint64]bool{}
	for _, s := range samples {
		end := float64(s.TimeStamp-uint64(epoch.UnixMicro())) / 1e6
		covered := math.Max(0, math.Min(end, k.to)-math.Max(end-p, k.from)) / p
		seen[s.TimeStamp] = true
		switch s.Pid {
		case 100:
			want := 95*(1-covered) + 50*covered
			wantMem := 40*(1-covered) + 40*50.0/95*covered
			if math.Abs(float64(s.SmUtil)-want) > 0.51 || math.Abs(float64(s.MemUtil)-wantMem) > 0.51 {
				t.Errorf("tenant's sample at %.3f s (probe in %.2f of it): SM %d, memory %d; want %.1f, %.1f", end, covered, s.SmUtil, s.MemUtil, want, wantMem)
			}
		case self:
			if math.Abs(float64(s.SmUtil)-50*covered) > 0.51 || s.MemUtil != 0 {
				t.Errorf("probe's sample at %.3f s (probe in %.2f of it): SM %d; want %.1f", end, covered, s.SmUtil, 50*covered)
			}
		default:
			t.Errorf("sample of unknown pid %+v", s)
		}
	}
	var probeSamples, halved int
	for _, s := range samples {
		if s.Pid == self {
			probeSamples++
		}
		if s.Pid == 100 && s.SmUtil == 50 {
			halved++
		}
	}
	// ~1 s of kernel: 5 whole periods at least, 7 at most.
	if probeSamples < 6 || probeSamples > 7 || halved < 5 {
		t.Errorf("%d probe samples, %d tenant samples at 50 %%; want 6-7 and at least 5", probeSamples, halved)
	}
	if len(seen) != 24 {
		t.Errorf("%d periods with samples; want 24 (4 s of 1/6 s periods, the tenant busy in each)", len(seen))
	}
}

// TestPIDNamespaceContainer: with the exporter in a container without the
// host's PID namespace, NVML lists its probe's context under a host PID
// that is not os.Getpid() (what getpid() and the container's /proc/self
// give), and tenants under their host PIDs, which the container's /proc
// does not show. The old simulator always listed os.Getpid().
func TestPIDNamespaceContainer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		host string
		pid  uint32
	}{
		{"host: {pid_namespace: container}", defaultSelfHostPID},
		{"host: {pid_namespace: container, self_host_pid: 777}", 777},
	} {
		f, lib, clk := newTestFleet(t, mustParse(t, tc.host+`
devices:
  - model: h100-sxm5-80gb
tenants:
  - {name: serve, gpu: 0, pid: 4242, sm_util: 95, host: {cpu: 1}}
`), 1)
		if f.SelfPID() != tc.pid || f.SelfPID() == uint32(os.Getpid()) || f.PIDNamespace() != PIDNamespaceContainer {
			t.Errorf("%s: SelfPID %d in namespace %s; want %d, not os.Getpid() %d", tc.host, f.SelfPID(), f.PIDNamespace(), tc.pid, os.Getpid())
		}
		clk.Set(5 * time.Second)
		if _, ok := f.ProcessUsage(4242); ok {
			t.Errorf("%s: the container's /proc shows the host's pid 4242", tc.host)
		}
		done := fmaRun(t, f, 0.25)
		procs, r := handle(t, lib, 0).GetComputeRunningProcesses()
		var pids []uint32
		for _, p := range procs {
			pids = append(pids, p.Pid)
		}
		want := []uint32{4242, tc.pid}
		slices.Sort(want)
		if r != nvml.SUCCESS || fmt.Sprint(pids) != fmt.Sprint(want) {
			t.Errorf("%s: compute processes %v, %v; want %v", tc.host, pids, r, want)
		}
		done()
		clk.Set(7 * time.Second)
		samples, _ := handle(t, lib, 0).GetProcessUtilization(0)
		got := bySample(samples)
		if len(got[tc.pid]) == 0 || len(got[uint32(os.Getpid())]) != 0 {
			t.Errorf("%s: samples by pid %v; want the probe's under %d", tc.host, got, tc.pid)
		}
	}
	// The host's namespace, by default: the probe is os.Getpid(), and /proc
	// shows the tenants.
	f, _, _ := newTestFleet(t, mustParse(t, `
devices: [{model: h100-sxm5-80gb}]
tenants: [{name: serve, gpu: 0, pid: 4242, sm_util: 95, host: {cpu: 1}}]
`), 1)
	if _, ok := f.ProcessUsage(4242); !ok || f.SelfPID() != uint32(os.Getpid()) || f.PIDNamespace() != PIDNamespaceHost {
		t.Errorf("host namespace: ProcessUsage %v, SelfPID %d, namespace %s", ok, f.SelfPID(), f.PIDNamespace())
	}
}

// TestMPSServerTakesTurns: the MPS clients' work runs in the MPS server's
// one context, which a probe that is not an MPS client takes turns with
// like any other context, the server's demand being its clients' total.
// NVML lists the server and, as recent drivers do, the clients as compute
// processes, the clients as MPS processes; the clients have utilisation
// samples (their share while the probe runs), the server none (its work is
// its clients'). On the old simulator MPS clients never paused the probe
// and type mps-server did not exist.
func TestMPSServerTakesTurns(t *testing.T) {
	t.Parallel()
	f, lib, clk := newTestFleet(t, mustParse(t, `
devices:
  - model: h100-sxm5-80gb
tenants:
  - {name: mps, gpu: 0, pid: 900, type: mps-server, process: nvidia-cuda-mps-server, memory: 256}
  - {name: c1, gpu: 0, pid: 901, type: mps, sm_util: 40, memory: 1024}
  - {name: c2, gpu: 0, pid: 902, type: mps, sm_util: 30, memory: 1024}
`), 1)
	d := handle(t, lib, 0)
	clk.Set(5 * time.Second)
	list := func(get func() ([]nvml.ProcessInfo, nvml.Return)) string {
		ps, r := get()
		var pids []uint32
		for _, p := range ps {
			pids = append(pids, p.Pid)
		}
		return fmt.Sprint(pids, r)
	}
	if got := list(d.GetComputeRunningProcesses); got != "[900 901 902] SUCCESS" {
		t.Errorf("compute processes %s; want the server and its clients", got)
	}
	if got := list(d.GetMPSComputeRunningProcesses); got != "[901 902] SUCCESS" {
		t.Errorf("MPS processes %s; want the clients", got)
	}
	// The server's context wants 0.7: the probe and it get half each.
	if share, slice := f.probeDevices()[0].Neighbour(epoch.Add(5 * time.Second)); math.Abs(share-0.5) > 1e-12 || slice != 2*time.Millisecond {
		t.Errorf("the probe loses %v in %v slices; want 0.5 in 2ms (the server's context takes its turn)", share, slice)
	}
	done := fmaRun(t, f, 0.5)
	done()
	k := kernelSpans(f, 0)[0]
	clk.Set(8 * time.Second)
	samples, r := d.GetProcessUtilization(0)
	if r != nvml.SUCCESS {
		t.Fatal(r)
	}
	for _, s := range samples {
		end := float64(s.TimeStamp-uint64(epoch.UnixMicro())) / 1e6
		inside := end-defaultSamplePeriod >= k.from && end <= k.to
		outside := end <= k.from || end-defaultSamplePeriod >= k.to
		var want uint32
		switch {
		case s.Pid == 900:
			t.Errorf("the MPS server has a sample %+v; its work is its clients'", s)
		case s.Pid == 901 && inside:
			want = 29 // 40 × 0.5/0.7
		case s.Pid == 902 && inside:
			want = 21 // 30 × 0.5/0.7
		case s.Pid == 901 && outside:
			want = 40
		case s.Pid == 902 && outside:
			want = 30
		case s.Pid == f.SelfPID() && inside:
			want = 50
		default:
			continue
		}
		if s.SmUtil != want {
			t.Errorf("pid %d at %.3f s (kernel %.3f-%.3f s): SM %d; want %d", s.Pid, end, k.from, k.to, s.SmUtil, want)
		}
	}
}

// TestVGPUGuestNVML: a vGPU guest whose driver answers NOT_SUPPORTED for
// per-process utilisation, and NOT_FOUND for its process lists on a busy
// GPU, as some do; the GPU's own utilisation still shows the load. The
// old simulator had no such setting.
func TestVGPUGuestNVML(t *testing.T) {
	t.Parallel()
	_, lib, clk := newTestFleet(t, mustParse(t, `
devices:
  - model: h100-sxm5-80gb
    virtualization: vgpu-guest
    vgpu_memory_mib: 20480
    nvml: {process_utilization: not_supported, running_processes: not_found}
  - model: h100-sxm5-80gb
    virtualization: vgpu-guest
    nvml: {process_utilization: not_supported}
tenants:
  - {name: a, gpu: 0, pid: 10, sm_util: 80, memory: 1024}
  - {name: b, gpu: 1, pid: 11, sm_util: 80, memory: 1024}
`), 1)
	clk.Set(10 * time.Second)
	d0, d1 := handle(t, lib, 0), handle(t, lib, 1)
	for i, d := range []nvml.Device{d0, d1} {
		if s, r := d.GetProcessUtilization(0); r != nvml.ERROR_NOT_SUPPORTED {
			t.Errorf("GPU %d: GetProcessUtilization = %+v, %v; want ERROR_NOT_SUPPORTED", i, s, r)
		}
		if u, r := d.GetUtilizationRates(); r != nvml.SUCCESS || u.Gpu != 80 {
			t.Errorf("GPU %d: utilisation %+v, %v; want 80 %% (busy)", i, u, r)
		}
	}
	for name, get := range map[string]func() ([]nvml.ProcessInfo, nvml.Return){
		"compute": d0.GetComputeRunningProcesses, "graphics": d0.GetGraphicsRunningProcesses, "mps": d0.GetMPSComputeRunningProcesses,
	} {
		if ps, r := get(); r != nvml.ERROR_NOT_FOUND {
			t.Errorf("GPU 0 %s processes %+v, %v; want ERROR_NOT_FOUND", name, ps, r)
		}
	}
	if ps, r := d1.GetComputeRunningProcesses(); r != nvml.SUCCESS || len(ps) != 1 || ps[0].Pid != 11 {
		t.Errorf("GPU 1 compute processes %+v, %v; want pid 11", ps, r)
	}
}

// TestKernelSpanLog: back-to-back and overlapping kernels merge into one
// span; the log keeps at most probeKernelKeep spans, none ending more than
// probeKernelHorizon before the latest.
func TestKernelSpanLog(t *testing.T) {
	t.Parallel()
	var l spanLog
	l.add(1, 2)
	l.add(2, 3)
	l.add(5, 6)
	l.add(2.5, 5.5)
	l.add(7, 7) // empty
	if got := l.within(0, 10, nil); fmt.Sprint(got) != "[{1 6}]" {
		t.Errorf("spans %v; want [{1 6}]", got)
	}
	if got := l.within(2, 4, nil); fmt.Sprint(got) != "[{2 4}]" {
		t.Errorf("spans within [2, 4) %v; want [{2 4}]", got)
	}
	for i := range 2 * probeKernelKeep {
		x := 10 + float64(i)*0.01
		l.add(x, x+0.005)
	}
	if got := l.within(0, math.Inf(1), nil); len(got) != probeKernelKeep || got[0].from != 10+float64(probeKernelKeep)*0.01 {
		t.Errorf("%d spans from %v; want the last %d", len(got), got[0], probeKernelKeep)
	}
	l.add(1000, 1001)
	if got := l.within(0, math.Inf(1), nil); len(got) != 1 {
		t.Errorf("%d spans after one 60 s later; want only it", len(got))
	}
}

// TestNVMLSettingsErrors: the nvml section, host.pid_namespace and the MPS
// server are validated with errors naming the field.
func TestNVMLSettingsErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ yml, want string }{
		{"devices:\n  - model: h100-sxm5-80gb\n    nvml: {process_sample_period: 5ms}\n",
			"x.yaml:3: devices[0].nvml.process_sample_period: process_sample_period 5ms must be between 10ms and 5s"},
		{"devices:\n  - model: h100-sxm5-80gb\n    nvml: {process_sample_period: often}\n",
			`x.yaml:3: devices[0].nvml.process_sample_period: invalid duration "often" (use Go syntax such as 500ms, 30s, 5m, 1h30m)`},
		{"devices:\n  - model: h100-sxm5-80gb\n    nvml: {process_utilization: partly}\n",
			`x.yaml:3: devices[0].nvml.process_utilization: unknown process_utilization "partly" (one of not_supported, supported)`},
		{"devices:\n  - model: h100-sxm5-80gb\n    nvml: {running_processes: hidden}\n",
			`x.yaml:3: devices[0].nvml.running_processes: unknown running_processes "hidden" (one of listed, not_found)`},
		{"devices:\n  - model: h100-sxm5-80gb\n    nvml: {sample_period: 1s}\n",
			`x.yaml:3: devices[0].nvml.sample_period: unknown field "sample_period" (known fields: process_sample_period, process_utilization, running_processes)`},
		{"host: {pid_namespace: vm}\ndevices: [{model: h100-sxm5-80gb}]\n",
			`x.yaml:1: host.pid_namespace: unknown pid_namespace "vm" (one of container, host)`},
		{"host: {self_host_pid: 5}\ndevices: [{model: h100-sxm5-80gb}]\n",
			"x.yaml:1: host.self_host_pid: self_host_pid needs pid_namespace: container (in the host's namespace NVML lists this process's own PID)"},
		{"host: {pid_namespace: container, self_host_pid: 5000000}\ndevices: [{model: h100-sxm5-80gb}]\n",
			"x.yaml:1: host.self_host_pid: self_host_pid 5000000 must be between 1 and 4194304"},
		{"host: {pid_namespace: container, self_host_pid: 42}\ndevices: [{model: h100-sxm5-80gb}]\ntenants: [{name: a, gpu: 0, pid: 42}]\n",
			"x.yaml:1: host.self_host_pid: self_host_pid 42 is tenants[0]'s pid"},
		{"devices: [{model: h100-sxm5-80gb}]\ntenants: [{name: s, gpu: 0, type: mps-server, sm_util: 50}]\n",
			"x.yaml:2: tenants[0].sm_util: an mps-server's utilisation is its clients' (give the type: mps tenants sm_util and memory_util)"},
		{"devices: [{model: h100-sxm5-80gb}]\ntenants:\n  - {name: s, gpu: 0, type: mps-server}\n  - {name: t, gpu: 0, type: mps-server}\n",
			"x.yaml:4: tenants[1].type: gpu 0 already has an mps-server (tenants[0]): one MPS server per GPU or MIG instance"},
		{"devices: [{model: h100-sxm5-80gb}]\ntenants: [{name: s, gpu: 0, type: server}]\n",
			`x.yaml:2: tenants[0].type: unknown type "server" (one of compute, graphics, mps, mps-server)`},
	} {
		_, err := Parse([]byte(tc.yml), "x.yaml")
		if err == nil || err.Error() != tc.want {
			t.Errorf("Parse(%q) error:\n%v\nwant:\n%s", tc.yml, err, tc.want)
		}
	}
	sc := mustParse(t, "devices:\n  - model: h100-sxm5-80gb\n  - model: h100-sxm5-80gb\n    nvml: {process_sample_period: 1s}\n")
	if p0, p1 := sc.devices[0].nvml.samplePeriod, sc.devices[1].nvml.samplePeriod; p0 != 1.0/6 || p1 != 1 {
		t.Errorf("sample periods %v, %v; want 1/6 (the default) and 1", p0, p1)
	}
}

// TestProbeSamplesWaitForLaggingKernels: the simulated CUDA driver's
// virtual clock can lag the fleet's while a probe context is open (it
// leaves its own emulation time out, which a loaded machine stretches),
// so a kernel is recorded after NVML could already have reported its
// period. Periods after the context's latest kernel are held back until
// it closes: the probe's share shows in the samples however late its
// kernels were recorded. Before, a read in between reported those periods
// without it, for good (the probe's windows then had no sample at all).
func TestProbeSamplesWaitForLaggingKernels(t *testing.T) {
	t.Parallel()
	f, d, h, clk := busyTenantFleet(t)
	clk.Set(10 * time.Second)
	d.probeContext(-1)(true, simAt(10))
	clk.Set(11500 * time.Millisecond)
	// Read while the kernels of [10 s, 13 s) are not yet recorded (within
	// probeReportHold of the context's last news).
	first, _ := h.GetProcessUtilization(0)
	var seen uint64
	for _, s := range first {
		seen = max(seen, s.TimeStamp)
	}
	d.probeKernel(simAt(10), simAt(13))
	d.probeContext(-1)(false, simAt(13))
	clk.Set(14 * time.Second)
	rest, _ := h.GetProcessUtilization(seen)
	self := f.SelfPID()
	var probe []nvml.ProcessUtilizationSample
	for _, s := range append(first, rest...) {
		if s.Pid == self {
			probe = append(probe, s)
		}
	}
	if len(probe) != 3 {
		t.Fatalf("the probe's samples over its kernels [10 s, 13 s): %+v; want one per period (3)", probe)
	}
	for _, s := range probe {
		if s.SmUtil < 40 || s.SmUtil > 60 {
			t.Errorf("the probe's sample %+v: want its share beside the busy tenant (~50 %%)", s)
		}
	}
}

// TestPeriodMemoMatchesRecomputing: GetProcessUtilization memoises the
// periods it computed (periodMemo); a read gives exactly what computing
// every period again gives, a kernel recorded into periods already read
// included (a second reader with an older lastSeen, the probe's estimator
// beside the sampler, then sees the probe's share in them).
func TestPeriodMemoMatchesRecomputing(t *testing.T) {
	t.Parallel()
	const scenario = `
devices:
  - {model: h100-sxm5-80gb, nvml: {process_sample_period: 1s}}
tenants:
  - {name: busy, gpu: 0, pid: 100, sm_util: 95, memory: 1024}
  - {name: bursty, gpu: 0, pid: 101, sm_util: {shape: square, min: 0, max: 60, period: 3s, duty: 0.5}, memory: 1024}
`
	at := func(s float64) time.Time { return epoch.Add(time.Duration(s * float64(time.Second))) }
	run := func(readEarly bool) []nvml.ProcessUtilizationSample {
		f, lib, clk := newTestFleet(t, mustParse(t, scenario), 1)
		d := f.devices[0]
		h := handle(t, lib, 0)
		clk.Set(9 * time.Second)
		if readEarly {
			// The sampler reads periods 1-9 before the kernel is recorded
			// (no context open: nothing holds them back).
			if s, r := h.GetProcessUtilization(0); r != nvml.SUCCESS || len(s) == 0 {
				t.Fatalf("first read: %d samples, %v", len(s), r)
			}
		}
		d.probeKernel(at(6.5), at(8))
		clk.Set(12 * time.Second)
		s, r := h.GetProcessUtilization(0)
		if r != nvml.SUCCESS {
			t.Fatal(r)
		}
		return s
	}
	fresh, memoised := run(false), run(true)
	if !slices.Equal(fresh, memoised) {
		t.Errorf("after an earlier read the samples differ from computing them afresh:\n got  %+v\n want %+v", memoised, fresh)
	}
	var probe int
	for _, s := range memoised {
		if s.Pid != 100 && s.Pid != 101 {
			probe++
		}
	}
	if probe != 2 {
		t.Errorf("%d samples of the probe's process; want 2 (periods 7 and 8 hold its kernel)", probe)
	}
}

// TestProbeSamplesWaitForTheDriversLag: a probe driver whose calls took 5 s
// of emulation (a loaded host; simdriver.Options.Lag) queues its next
// kernels up to 5 s behind the fleet's clock, beyond probeReportHold: the
// periods since its context's latest kernel are held back by the lag too.
// Before, a read 4 s after the context opened reported periods the kernels
// recorded later fell into, without the probe's share, for good.
func TestProbeSamplesWaitForTheDriversLag(t *testing.T) {
	t.Parallel()
	f, d, h, clk := busyTenantFleet(t)
	lag := f.lags.tracker()
	clk.Set(10 * time.Second)
	d.probeContext(-1)(true, simAt(10))
	lag(5 * time.Second)
	clk.Set(14 * time.Second)
	first, _ := h.GetProcessUtilization(0)
	var seen uint64
	for _, s := range first {
		seen = max(seen, s.TimeStamp)
	}
	if want := uint64(simAt(10).UnixMicro()); seen > want {
		t.Errorf("first read reports up to %d µs; want at most the context's start (%d): the driver's lag holds the rest", seen, want)
	}
	d.probeKernel(simAt(10), simAt(13))
	d.probeContext(-1)(false, simAt(13))
	lag(0)
	clk.Set(16 * time.Second)
	rest, _ := h.GetProcessUtilization(seen)
	var probe int
	for _, s := range append(first, rest...) {
		if s.Pid == f.SelfPID() {
			probe++
			if s.SmUtil < 40 || s.SmUtil > 60 {
				t.Errorf("the probe's sample %+v: want its share beside the busy tenant (~50 %%)", s)
			}
		}
	}
	if probe != 3 {
		t.Errorf("%d samples of the probe over its kernels [10 s, 13 s); want one per period (3)", probe)
	}
	if f.lags.max() != 0 {
		t.Errorf("lag %v after the driver said 0", f.lags.max())
	}
	if got := f.ProbeEmulated(); got != 5*time.Second {
		t.Errorf("ProbeEmulated %v; want the lag's growth, 5s, kept after it went back to 0", got)
	}
}

// TestHeldPeriodsStayInTheBuffer: the probe driver lags the fleet by more
// than the driver's buffer (10 s; a loaded host), so its last kernels'
// periods are held back until its context closes (reportedUntil). The
// buffer keeps them procSampleWindow from then, as it keeps every period
// from when it is published. Before, they fell out of the buffer the
// moment the hold ended: no reader saw the probe's last kernel (its last
// stolen-time window had no sample after it).
func TestHeldPeriodsStayInTheBuffer(t *testing.T) {
	t.Parallel()
	f, d, h, clk := busyTenantFleet(t)
	lag := f.lags.tracker()
	clk.Set(10 * time.Second)
	d.probeContext(-1)(true, simAt(10))
	lag(14 * time.Second)
	clk.Set(24 * time.Second)
	d.probeKernel(simAt(10), simAt(12.5)) // recorded 14 s late
	var seen uint64
	read := func() []nvml.ProcessUtilizationSample {
		s, r := h.GetProcessUtilization(seen)
		if r != nvml.SUCCESS && r != nvml.ERROR_NOT_FOUND {
			t.Fatal(r)
		}
		for _, x := range s {
			seen = max(seen, x.TimeStamp)
		}
		return s
	}
	got := read() // periods up to 12 s, the kernel's last whole one
	clk.Set(25 * time.Second)
	d.probeContext(-1)(false, simAt(12.5))
	lag(0)
	got = append(got, read()...)
	clk.Set(30 * time.Second)
	all, _ := h.GetProcessUtilization(0) // the whole buffer
	for name, samples := range map[string][]nvml.ProcessUtilizationSample{"read as they came": got, "the whole buffer": all} {
		var probe []float64
		for _, s := range samples {
			if s.Pid == f.SelfPID() {
				probe = append(probe, float64(s.TimeStamp-uint64(epoch.UnixMicro()))/1e6)
			}
		}
		if want := []float64{11, 12, 13}; !slices.Equal(probe, want) {
			t.Errorf("%s: the probe's samples end at %v s; want %v (its kernel ran [10 s, 12.5 s))", name, probe, want)
		}
	}
}

// busyTenantFleet is one H100 with 1 s NVML sample periods and a tenant
// (PID 100) at 95 % SM, for the probe-sample tests.
func busyTenantFleet(t *testing.T) (*Fleet, *device, nvml.Device, *testClock) {
	t.Helper()
	sc := mustParse(t, `
devices:
  - {model: h100-sxm5-80gb, nvml: {process_sample_period: 1s}}
tenants:
  - {name: busy, gpu: 0, pid: 100, sm_util: 95, memory: 1024}
`)
	f, lib, clk := newTestFleet(t, sc, 1)
	return f, f.devices[0], handle(t, lib, 0), clk
}

// simAt is s seconds after epoch.
func simAt(s float64) time.Time { return epoch.Add(time.Duration(s * float64(time.Second))) }
