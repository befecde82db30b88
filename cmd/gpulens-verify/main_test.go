package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpulens/gpulens/internal/verify"
)

func runVerify(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestBadInputExitsTwoNamingTheFlag(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "no-such-folder", "r.json")
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--expect.gpu=h999"}, []string{"--expect.gpu", `unknown GPU model "h999"`, "valid keys:", "h100-sxm", "h200", "l4"}},
		{[]string{"--repeat=-1"}, []string{"--repeat must be at least 1, got -1"}},
		{[]string{"--repeat=0"}, []string{"--repeat must be at least 1"}},
		{[]string{"--interval=-1s"}, []string{"--interval must not be negative"}},
		{[]string{"--interval=soon"}, []string{"--interval", `"soon" is not a duration`}},
		{[]string{"--expect.vram=0GiB"}, []string{"--expect.vram", "must be positive"}},
		{[]string{"--expect.vram=80"}, []string{"--expect.vram", `"80" has no unit`}},
		{[]string{"--expect.vram=80G"}, []string{"--expect.vram", `the unit "G" is ambiguous: write 80GiB (binary) or 80GB (decimal)`}},
		{[]string{"--expect.vram=80 parsecs"}, []string{"--expect.vram", "unknown unit"}},
		{[]string{"--expect.pcie=gen9x16"}, []string{"--expect.pcie", "is not a PCIe link"}},
		{[]string{"--expect.driver=latest"}, []string{"--expect.driver", "is not a dotted version"}},
		{[]string{"--expect.cuda=twelve"}, []string{"--expect.cuda", "is not a CUDA version"}},
		{[]string{"--expect.devices=0"}, []string{"--expect.devices must be at least 1, got 0"}},
		{[]string{"--devices=0,x"}, []string{"--devices", "is not a list of CUDA ordinals"}},
		{[]string{"--devices=1,1"}, []string{"--devices", "ordinal 1 is listed twice"}},
		{[]string{"--probe.budget=0s"}, []string{"--probe.budget must be positive"}},
		{[]string{"--probe.stolen-window=3s"}, []string{"--probe.stolen-window must be positive and shorter than --probe.budget (2s), got 3s"}},
		{[]string{"--probe.max-memory=1KiB"}, []string{"probe settings", "MaxMemoryBytes must be at least"}},
		{[]string{"--vram.fill-limit=10GiB"}, []string{"--vram.fill-limit needs --vram.fill"}},
		{[]string{"--output.json=" + missing}, []string{"--output.json", "does not exist"}},
		{[]string{"--sim.scenario=no-such-scenario"}, []string{"--sim.scenario"}},
		{[]string{"--no-such-flag"}, []string{"unknown long flag '--no-such-flag'"}},
		// Impossible on this host, found once CUDA lists its devices.
		{[]string{"--sim.scenario=rented-dedicated", "--devices=3", "--interval=0s"}, []string{"--devices: CUDA has no device 3 (it sees devices 0)"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := runVerify(t, tc.args...)
			if code != verify.ExitBadInput {
				t.Errorf("exit %d, want %d", code, verify.ExitBadInput)
			}
			if stdout != "" {
				t.Errorf("a report was printed:\n%s", stdout)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
		})
	}
}

// scenarioReport runs gpulens-verify on a simulated scenario with short
// settings and returns its exit code, console output and JSON report.
func scenarioReport(t *testing.T, scenario string, extra ...string) (int, string, *verify.Report) {
	t.Helper()
	dir := t.TempDir()
	jsonPath, htmlPath := filepath.Join(dir, "report.json"), filepath.Join(dir, "report.html")
	repeat := "--repeat=3"
	for _, e := range extra {
		if strings.HasPrefix(e, "--repeat=") {
			repeat = e // kingpin refuses a flag given twice
		}
	}
	args := []string{"--sim.scenario=" + scenario, repeat, "--interval=0s", "--output.json=" + jsonPath, "--output.html=" + htmlPath}
	for _, e := range extra {
		if e != repeat {
			args = append(args, e)
		}
	}
	code, stdout, stderr := runVerify(t, args...)
	f, err := os.Open(jsonPath)
	if err != nil {
		t.Fatalf("no JSON report (exit %d): %v\n%s", code, err, stderr)
	}
	defer f.Close()
	rep, err := verify.ReadJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(htmlPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range rep.Devices {
		for _, c := range d.Checks {
			if !strings.Contains(string(page), `data-check="`+c.ID+`"`) {
				t.Errorf("HTML lacks check %s", c.ID)
			}
		}
	}
	if rep.Summary.ExitCode != code {
		t.Errorf("report says exit %d, the command exited %d", rep.Summary.ExitCode, code)
	}
	if rep.Simulated == nil || rep.Simulated.Scenario != scenario {
		t.Errorf("report not marked simulated: %+v", rep.Simulated)
	}
	return code, stdout, rep
}

func checkOf(t *testing.T, rep *verify.Report, id string) verify.Check {
	t.Helper()
	if len(rep.Devices) != 1 {
		t.Fatalf("%d devices, want 1", len(rep.Devices))
	}
	for _, c := range rep.Devices[0].Checks {
		if c.ID == id {
			return c
		}
	}
	t.Fatalf("no check %s", id)
	return verify.Check{}
}

func expectCheck(t *testing.T, rep *verify.Report, id string, status verify.Status, has ...string) {
	t.Helper()
	c := checkOf(t, rep, id)
	if c.Status != status {
		t.Errorf("%s = %s (%s), want %s", id, c.Status, c.Reason, status)
	}
	for _, h := range has {
		if !strings.Contains(c.Reason, h) {
			t.Errorf("%s reason %q lacks %q", id, c.Reason, h)
		}
	}
}

func TestScenarioDedicated(t *testing.T) {
	// Serial: the simulated GPU is timed on the wall clock (bandwidth,
	// variability, stolen time); a busy neighbour reads as a GPU neighbour.
	code, stdout, rep := scenarioReport(t, "rented-dedicated")
	if code != verify.ExitPass {
		t.Fatalf("exit %d, want 0:\n%s", code, stdout)
	}
	// The GPU is alone and at spec: every check passes, none warns.
	for _, c := range append(rep.Checks, rep.Devices[0].Checks...) {
		if c.Status != verify.StatusPass {
			t.Errorf("%s: %s: %s", c.ID, c.Status, c.Reason)
		}
	}
	expectCheck(t, rep, verify.CheckStolen, verify.StatusPass, "no other context took turns with the probe")
	expectCheck(t, rep, verify.CheckBF16, verify.StatusPass, "a healthy H100 SXM reaches")
	expectCheck(t, rep, verify.CheckVRAM, verify.StatusPass, "of the H100 SXM's 80 GiB")
	for _, want := range []string{"SIMULATED GPUs (scenario rented-dedicated, seed 1)", "Shared, partitioned or dedicated?",
		"How much VRAM is usable?", "Are compute and memory bandwidth reserved?   yes:", "Do neighbours affect latency?                no:",
		"Are CUDA and the driver what you need?", "What happens when the GPU fails?", "Verdict: ", "(exit 0)"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("console output lacks %q", want)
		}
	}

	// Nothing warns, so --strict passes too; a wrong model fails.
	if code, _, _ := scenarioReport(t, "rented-dedicated", "--strict", "--repeat=1"); code != verify.ExitPass {
		t.Errorf("--strict: exit %d, want 0", code)
	}
	code, _, rep = scenarioReport(t, "rented-dedicated", "--expect.gpu=h200", "--repeat=1")
	if code != verify.ExitFail {
		t.Errorf("--expect.gpu=h200 on an H100: exit %d, want 1", code)
	}
	expectCheck(t, rep, verify.CheckModel, verify.StatusFail, "is an H100 SXM, not the H200 you expect")
	expectCheck(t, rep, verify.CheckVRAM, verify.StatusFail, "you see 79.5 GiB of the H200's 141 GiB")

	// Expectations the host meets pass.
	code, _, rep = scenarioReport(t, "rented-dedicated", "--repeat=1", "--expect.gpu=h100-sxm", "--expect.vram=80GiB",
		"--expect.pcie=gen5x16", "--expect.driver=550", "--expect.cuda=12.4", "--expect.devices=1")
	if code != verify.ExitPass {
		t.Errorf("met expectations: exit %d", code)
	}
	for _, id := range []string{verify.CheckModel, verify.CheckVRAMExpected, verify.CheckPCIeExpected} {
		expectCheck(t, rep, id, verify.StatusPass)
	}
}

func TestScenarioVGPU(t *testing.T) {
	// Serial: the simulated GPU is timed on the wall clock (bandwidth,
	// variability, stolen time); a busy neighbour reads as a GPU neighbour.
	code, stdout, rep := scenarioReport(t, "rented-vgpu")
	if code != verify.ExitFail {
		t.Fatalf("exit %d, want 1:\n%s", code, stdout)
	}
	expectCheck(t, rep, verify.CheckVRAM, verify.StatusFail, "you see 19.9 GiB of the H100 SXM's 80 GiB: a vGPU profile or partition")
	expectCheck(t, rep, verify.CheckVirt, verify.StatusWarn, "vGPU guest: shared by a hypervisor")
	expectCheck(t, rep, verify.CheckStolen, verify.StatusPass)
	if !strings.Contains(stdout, "FAIL  How much VRAM is usable?") || !strings.Contains(stdout, "shared: by a hypervisor (NVIDIA vGPU guest)") {
		t.Errorf("console output does not answer the memory and sharing questions:\n%s", stdout)
	}
}

func TestScenarioThrottled(t *testing.T) {
	// Serial: the simulated GPU is timed on the wall clock (bandwidth,
	// variability, stolen time); a busy neighbour reads as a GPU neighbour.
	code, stdout, rep := scenarioReport(t, "rented-throttled")
	if code != verify.ExitFail {
		t.Fatalf("exit %d, want 1:\n%s", code, stdout)
	}
	expectCheck(t, rep, verify.CheckThrottle, verify.StatusFail, "thermal slowdown (the GPU is hot)", "power cap (the board's power limit)")
	expectCheck(t, rep, verify.CheckPowerLimit, verify.StatusWarn, "340 W of the default 700 W")
	for _, id := range []string{verify.CheckDeviceCopy, verify.CheckFP32, verify.CheckBF16} {
		expectCheck(t, rep, id, verify.StatusWarn, "a healthy H100 SXM reaches", "power limit 340 W of 700 W")
	}
	expectCheck(t, rep, verify.CheckStolen, verify.StatusPass)
	if !strings.Contains(stdout, "FAIL  Are compute and memory bandwidth reserved?   no:") {
		t.Errorf("console output does not say compute is not reserved:\n%s", stdout)
	}
}

func TestScenarioTimesliced(t *testing.T) {
	// Serial: the simulated GPU is timed on the wall clock (bandwidth,
	// variability, stolen time); a busy neighbour reads as a GPU neighbour.
	code, stdout, rep := scenarioReport(t, "rented-timesliced")
	if code != verify.ExitFail {
		t.Fatalf("exit %d, want 1:\n%s", code, stdout)
	}
	expectCheck(t, rep, verify.CheckStolen, verify.StatusFail, "for 50 % of the watch window (median of 3 runs)",
		"time-slicing with another context, in slices of about 2 ms")
	for _, id := range []string{verify.CheckDeviceCopy, verify.CheckBF16} {
		expectCheck(t, rep, id, verify.StatusFail, "50 % of the time stolen")
	}
	// The copy engines are not time-sliced in the model.
	expectCheck(t, rep, verify.CheckH2D, verify.StatusPass)
	if !strings.Contains(stdout, "FAIL  Do neighbours affect latency?                yes: 75 % of the GPU time stolen, 50 % by contexts NVML does not show") {
		t.Errorf("console output does not answer the neighbours question:\n%s", stdout)
	}
}

func TestNoGPUAtAll(t *testing.T) {
	t.Parallel()
	// No NVML on this machine and no libcuda at that path: the report
	// still comes, says what it could not measure, and fails.
	code, stdout, stderr := runVerify(t, "--cuda.library="+filepath.Join(t.TempDir(), "libcuda.so.1"), "--repeat=1", "--interval=0s")
	if code != verify.ExitFail {
		t.Fatalf("exit %d, want 1\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"not measured: CUDA: gpuprobe: loading the CUDA driver library", "no GPU to verify", "(exit 1)"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
}
