package gpuprobe_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpulens/gpulens/internal/gpuprobe"
	"github.com/gpulens/gpulens/internal/sim/simdriver"
)

// childModeEnv makes this test binary a probe child (TestMain): the
// ChildProber under test runs the binary itself, as the commands run
// their own program in gpuprobe.ChildCommand mode. Its value:
//
//	probe   probe with a simulated H100 in MIG mode (childDevices), which
//	        honours CUDA_VISIBLE_DEVICES as CUDA does
//	wedged  read the request and never answer (a child stuck in the driver
//	        beyond its own deadline)
//	garbage write something that is not a response and exit 3
//	unavailable
//	        probe, but context creation fails (CUDA_ERROR_DEVICE_UNAVAILABLE)
const childModeEnv = "GPULENS_TEST_PROBE_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childModeEnv); mode != "" {
		os.Exit(testChild(mode))
	}
	os.Exit(m.Run())
}

// childDevices: a whole H100 and three MIG instances of another, each with
// its share of the SMs and of the FP32 rate.
func childDevices() []simdriver.Device {
	gpu := h100()
	var out []simdriver.Device
	out = append(out, gpu)
	for i, sms := range []int{60, 32, 16} {
		m := h100()
		m.UUID = fmt.Sprintf("MIG-%d%d%d%d0000-0000-4000-8000-000000000000", i, i, i, i)
		m.PCIBusID = "00000000:19:00.0"
		m.Name = "NVIDIA H100 80GB HBM3 MIG"
		m.SMs = sms
		m.FP32FLOPS = gpu.FP32FLOPS * float64(sms) / 132
		m.TotalMemoryBytes = 10 * gib * uint64(1+i)
		out = append(out, m)
	}
	return out
}

func testChild(mode string) int {
	switch mode {
	case "wedged":
		_, _ = gpuprobe.ReadChildRequest(os.Stdin)
		time.Sleep(time.Hour) // killed by the parent long before
		return 1
	case "garbage":
		fmt.Println("not json")
		fmt.Fprintln(os.Stderr, "child: something broke")
		return 3
	}
	open := func() (gpuprobe.Driver, error) {
		drv := simdriver.New(childDevices(), simdriver.Options{Seed: 1, VisibleDevices: os.Getenv("CUDA_VISIBLE_DEVICES")})
		if mode == "unavailable" {
			drv.FailCall(simdriver.CallCtxCreate, gpuprobe.CUDAErrDeviceUnavail)
		}
		return drv, nil
	}
	return gpuprobe.RunChild(context.Background(), os.Stdin, os.Stdout, open, nil)
}

// childFreeMemory is NVML's free memory in the parent: 1 GiB on the first
// instance (too little for a probe), all of it on the others.
func childFreeMemory(d gpuprobe.DeviceInfo) (uint64, bool) {
	for i, c := range childDevices() {
		if c.UUID == d.UUID && i > 0 {
			if i == 1 {
				return gib, true
			}
			return c.TotalMemoryBytes, true
		}
	}
	return 0, false
}

func childProber(t *testing.T, mode string) *gpuprobe.ChildProber {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The parent's own CUDA_VISIBLE_DEVICES must not reach the child.
	env := append(os.Environ(), childModeEnv+"="+mode, "CUDA_VISIBLE_DEVICES=0")
	c, err := gpuprobe.NewChildProber(gpuprobe.ChildOptions{
		Path: self, Env: env,
		FreeMemory: childFreeMemory,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestChildProberMeasuresInstance: a child with CUDA_VISIBLE_DEVICES set to
// an instance the parent's CUDA does not show probes that instance (its SMs,
// its FP32 share), with the free memory the parent read, and reports what
// it cost.
func TestChildProberMeasuresInstance(t *testing.T) {
	t.Parallel()
	devs := childDevices()
	want := devs[3] // the third instance: a parent sees only the first
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	res, err := childProber(t, "probe").ProbeInstance(ctx, want.UUID, gpuprobe.ExporterConfig())
	if err != nil {
		t.Fatal(err)
	}
	if res.Skipped != nil {
		t.Fatalf("skipped: %+v", res.Skipped)
	}
	if res.Device.UUID != want.UUID || res.Device.SMs != want.SMs || res.Device.Ordinal != 0 {
		t.Errorf("probed %s (%d SMs, ordinal %d), want %s (%d SMs, ordinal 0)", res.Device.UUID, res.Device.SMs, res.Device.Ordinal, want.UUID, want.SMs)
	}
	if r := res.FP32FLOPS / want.FP32FLOPS; r < 0.9 || r > 1.02 {
		t.Errorf("FP32 %.3g FLOP/s, want about the instance's %.3g (ratio %.3f)", res.FP32FLOPS, want.FP32FLOPS, r)
	}
	if res.FreeBeforeBytes != want.TotalMemoryBytes || res.ContextMemoryBytes != h100ContextBytes {
		t.Errorf("free before %d, context memory %d; want the parent's figure %d and %d", res.FreeBeforeBytes, res.ContextMemoryBytes, want.TotalMemoryBytes, h100ContextBytes)
	}
	if res.GPUTime <= 0 || res.GPUTime > gpuprobe.ExporterConfig().GPUTimeBudget*11/10 {
		t.Errorf("GPU time %s, want within the budget", res.GPUTime)
	}
	u := res.Child
	if u == nil || u.PID <= 0 || u.PID == os.Getpid() || u.MaxRSSBytes == 0 || u.Killed {
		t.Fatalf("child usage %+v, want its pid, a peak RSS and not killed", u)
	}
	if err := syscall.Kill(u.PID, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the child %d still exists: %v", u.PID, err)
	}
}

// TestChildProberSkips: the safety checks hold in the child: free memory
// below what the probe needs (the parent's figure: 1 GiB) is a skip before
// any context, and
// an instance the child does not see either (not in this container) is
// mig_instance_not_visible.
func TestChildProberSkips(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := childProber(t, "probe")
	res, err := c.ProbeInstance(ctx, childDevices()[1].UUID, gpuprobe.ExporterConfig())
	if err != nil || res.Skipped == nil || res.Skipped.Reason != gpuprobe.SkipFreeMemoryLow || res.ContextMemoryBytes != 0 {
		t.Errorf("low free memory: %+v, %v; want a free_memory_low skip without a context", res.Skipped, err)
	}
	res, err = c.ProbeInstance(ctx, "MIG-99999999-0000-4000-8000-000000000000", gpuprobe.ExporterConfig())
	if err != nil || res.Skipped == nil || res.Skipped.Reason != gpuprobe.SkipMIGInstanceNotVisible {
		t.Errorf("unknown instance: %+v, %v; want a mig_instance_not_visible skip", res.Skipped, err)
	}
}

// TestChildProberKillsAtDeadline: a child that never answers is killed at
// the caller's deadline, and the error is deadline_exceeded and says so.
func TestChildProberKillsAtDeadline(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	res, err := childProber(t, "wedged").ProbeInstance(ctx, childDevices()[2].UUID, gpuprobe.ExporterConfig())
	if gpuprobe.ErrorLabel(err) != gpuprobe.LabelDeadline || !strings.Contains(fmt.Sprint(err), "killed at its deadline") {
		t.Fatalf("err %v (label %s), want a kill at the deadline", err, gpuprobe.ErrorLabel(err))
	}
	if res.Child == nil || !res.Child.Killed || res.Child.PID <= 0 {
		t.Fatalf("usage %+v, want the killed child's", res.Child)
	}
	if err := syscall.Kill(res.Child.PID, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the child %d still exists: %v", res.Child.PID, err)
	}
}

// TestChildProberFailedChild: a child that gives no response is
// child_failed, with the end of its log.
func TestChildProberFailedChild(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, err := childProber(t, "garbage").ProbeInstance(ctx, childDevices()[2].UUID, gpuprobe.ExporterConfig())
	if gpuprobe.ErrorLabel(err) != gpuprobe.LabelChildFailed || !strings.Contains(fmt.Sprint(err), "child: something broke") || !strings.Contains(fmt.Sprint(err), "exit status 3") {
		t.Errorf("err %v (label %s), want child_failed with the exit status and the log's last line", err, gpuprobe.ErrorLabel(err))
	}
}

// TestChildErrorKeepsLabel: an error a child reports keeps its label and
// its CUDA error in the parent.
func TestChildErrorKeepsLabel(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, err := childProber(t, "unavailable").ProbeInstance(ctx, childDevices()[2].UUID, gpuprobe.ExporterConfig())
	var ce *gpuprobe.CUDAError
	if gpuprobe.ErrorLabel(err) != "devices_unavailable" || !errors.As(err, &ce) || ce.Call != simdriver.CallCtxCreate {
		t.Errorf("err %v (label %s), want the child's cuCtxCreate error", err, gpuprobe.ErrorLabel(err))
	}
}

// TestChildProberHonoursVisible: where this process's CUDA_VISIBLE_DEVICES
// is set, only the MIG instances it names get a child; the others are
// skipped as not visible, without a child.
func TestChildProberHonoursVisible(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	devs := childDevices()
	c, err := gpuprobe.NewChildProber(gpuprobe.ChildOptions{Path: self, Env: append(os.Environ(), childModeEnv+"=probe"),
		Visible: devs[1].UUID + ", " + strings.ToLower(devs[3].UUID), FreeMemory: childFreeMemory})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	res, err := c.ProbeInstance(ctx, devs[2].UUID, gpuprobe.ExporterConfig())
	if err != nil || res.Skipped == nil || res.Skipped.Reason != gpuprobe.SkipMIGInstanceNotVisible || res.Child != nil {
		t.Errorf("an instance CUDA_VISIBLE_DEVICES leaves out: %+v, child %+v, %v; want a skip without a child", res.Skipped, res.Child, err)
	}
	res, err = c.ProbeInstance(ctx, devs[3].UUID, gpuprobe.ExporterConfig())
	if err != nil || res.Skipped != nil || res.Child == nil || res.Device.UUID != devs[3].UUID {
		t.Errorf("an instance it names: %+v, %v; want it measured by a child", res.Skipped, err)
	}
}
