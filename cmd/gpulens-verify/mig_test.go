package main

import (
	"context"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/gpulens/gpulens/internal/gpuprobe"
	"github.com/gpulens/gpulens/internal/verify"
)

// TestMain lets this test binary stand for gpulens-verify's binary as its
// own probe child: gpulens-verify re-runs os.Executable() (here, the test
// binary) as `probe-child` for each MIG instance CUDA does not show it.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == gpuprobe.ChildCommand {
		os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestScenarioEveryMIGInstance: on two H100s in MIG mode (mig-mixed: 4 + 2
// instances) this process's CUDA shows one instance; gpulens-verify used to
// report that one alone. Every instance NVML lists is now probed, the
// others by probe children: six devices, each measured, with FP32 in
// proportion to its multiprocessors (over 1 - stolen: the tenants take
// turns with the probe), and the device count counts them.
func TestScenarioEveryMIGInstance(t *testing.T) {
	code, stdout, rep := scenarioReport(t, "mig-mixed", "--repeat=1")
	if len(rep.Devices) != 6 {
		t.Fatalf("%d devices, want the 6 MIG instances (exit %d):\n%s", len(rep.Devices), code, stdout)
	}
	children := 0
	var perSM []float64
	for _, d := range rep.Devices {
		if d.ProbeChild {
			children++
		}
		if d.MIG == nil || d.CUDA == nil || d.CUDA.UUID != d.MIG.UUID {
			t.Errorf("%s: MIG %+v, CUDA %+v; want the instance as CUDA saw it", d.Label, d.MIG, d.CUDA)
			continue
		}
		if len(d.Runs) != 1 || d.Runs[0].Result == nil || d.Runs[0].Result.Stolen == nil {
			t.Errorf("%s: runs %+v, want one measured", d.Label, d.Runs)
			continue
		}
		r := d.Runs[0].Result
		if d.ProbeChild != (r.Child != nil) {
			t.Errorf("%s: probed by a child %v, child usage %+v", d.Label, d.ProbeChild, r.Child)
		}
		perSM = append(perSM, r.FP32FLOPS/(1-r.Stolen.Ratio)/float64(d.CUDA.SMs))
	}
	if children != 5 {
		t.Errorf("%d devices probed by children, want 5 (every instance but the one CUDA shows)", children)
	}
	for i, v := range perSM {
		if math.Abs(v/perSM[0]-1) > 0.05 {
			t.Errorf("device %d: FP32 per SM %.4g, the first's %.4g: not in proportion to its SMs", i, v, perSM[0])
		}
	}
	counted := false
	for _, c := range rep.Checks {
		if c.ID == verify.CheckDeviceCount {
			counted = true
			if !strings.Contains(c.Reason, "CUDA and NVML both see 6") {
				t.Errorf("device count: %s", c.Reason)
			}
		}
	}
	if !counted {
		t.Errorf("no device count check")
	}
}
