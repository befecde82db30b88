package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpulens/gpulens/internal/gpuprobe"
	"github.com/gpulens/gpulens/internal/sim/simdriver"
	"github.com/gpulens/gpulens/internal/verify"
)

// lateScenario is one H100 whose probe takes turns with its tenants, and a
// busy tenant that joins 30 minutes in: a fleet started now has it alone,
// one started an hour ago (--sim.start) is shared.
func lateScenario(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "late.yaml")
	if err := os.WriteFile(p, []byte(`name: late
devices:
  - model: h100-sxm5-80gb
    probe: {tenants: {slice: 2ms}}
tenants:
  - {name: late, gpu: 0, pid: 777, start: 30m, sm_util: 95, memory: 1024}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func unixSeconds(t time.Time) string { return fmt.Sprintf("%d.%09d", t.Unix(), t.Nanosecond()) }

func readBurnReport(t *testing.T, path string) burnReport {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep burnReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("%v:\n%s", err, b)
	}
	return rep
}

// TestBurnSimulated: the burn keeps the simulated GPU busy for its duration
// at the FP32 rate it gets: the whole H100's alone, half of it beside a busy
// tenant an hour into a shared timeline (--sim.start).
func TestBurnSimulated(t *testing.T) {
	// Serial: the simulated GPU is timed on the wall clock (bandwidth,
	// variability, stolen time); a busy neighbour reads as a GPU neighbour.
	late := lateScenario(t)
	for _, tc := range []struct {
		name   string
		args   []string
		flops  float64
		memory uint64
	}{
		{"alone", []string{"--sim.scenario=" + late, "--memory=2GiB"}, 60e12, 2 << 30},
		{"beside a tenant", []string{"--sim.scenario=" + late, "--sim.start=" + unixSeconds(time.Now().Add(-time.Hour)), "--memory=0"}, 30e12, 0},
		{"dedicated", []string{"--sim.scenario=rented-dedicated"}, 60e12, 1 << 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "burn.json")
			code, stdout, stderr := runVerify(t, append([]string{"burn", "--duration=2s", "--output.json=" + out}, tc.args...)...)
			if code != verify.ExitPass {
				t.Fatalf("exit %d:\n%s", code, stderr)
			}
			if !strings.Contains(stdout, "gpulens-verify burn: CUDA 0 · NVIDIA H100 80GB HBM3: 2.") || !strings.Contains(stdout, "TFLOP/s FP32") {
				t.Errorf("stdout:\n%s", stdout)
			}
			rep := readBurnReport(t, out)
			r := rep.Result
			if r == nil || rep.Error != "" || rep.Simulated == nil || rep.PID != os.Getpid() || rep.Tool != "gpulens-verify burn" {
				t.Fatalf("report %+v", rep)
			}
			if r.Duration < 2*time.Second || r.Duration > 2*time.Second+15*time.Millisecond || r.Launches < 190 || r.Launches > 210 {
				t.Errorf("%d launches over %v; want ~200 over 2 s", r.Launches, r.Duration)
			}
			if math.Abs(r.FP32FLOPS/tc.flops-1) > 0.03 || r.MemoryBytes != tc.memory || rep.Settings.MemoryBytes != tc.memory {
				t.Errorf("FP32 %.4g FLOP/s holding %d bytes; want %.4g and %d", r.FP32FLOPS, r.MemoryBytes, tc.flops, tc.memory)
			}
		})
	}
}

func TestBurnBadInput(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "no-such-folder", "b.json")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--duration must be positive and at most 1h0m0s, got 0s"},
		{[]string{"--duration=2h"}, "--duration must be positive and at most 1h0m0s, got 2h0m0s"},
		{[]string{"--duration=soon"}, `--duration: "soon" is not a duration`},
		{[]string{"--duration=1s", "--launch=100us"}, "--launch must be between 1ms and 1s and at most --duration (1s), got 100µs"},
		{[]string{"--duration=5ms", "--launch=10ms"}, "--launch must be between 1ms and 1s and at most --duration (5ms), got 10ms"},
		{[]string{"--duration=1s", "--memory=lots"}, `--memory: "lots" is not a byte size`},
		{[]string{"--duration=1s", "--memory=2048"}, `--memory: "2048" has no unit`},
		{[]string{"--duration=1s", "--memory=2G"}, `--memory: "2G": the unit "G" is ambiguous`},
		{[]string{"--duration=1s", "--device=-1"}, "--device must be a CUDA ordinal (0 or more), got -1"},
		{[]string{"--duration=1s", "--sim.start=1767225600"}, "--sim.start needs --sim.scenario"},
		{[]string{"--duration=1s", "--sim.scenario=validate", "--sim.start=yesterday"}, `--sim.start: "yesterday" is neither Unix seconds`},
		{[]string{"--duration=1s", "--output.json=" + missing}, "--output.json: folder"},
		{[]string{"--duration=1s", "--sim.scenario=no-such-scenario"}, "--sim.scenario"},
		{[]string{"--duration=1s", "--sim.scenario=validate", "--device=3"}, "no CUDA device 3 (1 visible)"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := runVerify(t, append([]string{"burn"}, tc.args...)...)
			wantCode := verify.ExitBadInput
			if strings.Contains(tc.want, "no CUDA device") {
				wantCode = verify.ExitFail // found once CUDA answers
			}
			if code != wantCode || stdout != "" || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stdout %q, stderr:\n%s\nwant exit %d and %q", code, stdout, stderr, wantCode, tc.want)
			}
		})
	}
}

// TestBurnNoLibcuda: without the CUDA library the burn fails (exit 1) and
// says so, in its report too.
func TestBurnNoLibcuda(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "burn.json")
	code, _, stderr := runVerify(t, "burn", "--duration=1s", "--cuda.library="+filepath.Join(t.TempDir(), "libcuda.so.1"), "--output.json="+out)
	if code != verify.ExitFail || !strings.Contains(stderr, "libcuda") {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	if rep := readBurnReport(t, out); rep.Result != nil || !strings.Contains(rep.Error, "libcuda") {
		t.Errorf("report %+v", rep)
	}
}

// TestBurnWatchdog: a CUDA call that never returns does not hold the
// command past --duration and the grace: it gives up, says why, and does
// not unload the library under the stuck call.
func TestBurnWatchdog(t *testing.T) {
	// Serial: it shortens the package variable burnGrace.
	old := burnGrace
	burnGrace = 20 * time.Millisecond
	t.Cleanup(func() { burnGrace = old })
	drv := simdriver.New([]simdriver.Device{{Name: "stuck", UUID: "GPU-1", SMs: 4, CCMajor: 9, TotalMemoryBytes: 1 << 30, FP32FLOPS: 1e12}}, simdriver.Options{})
	release := drv.HangCall(simdriver.CallLaunchKernel)
	t.Cleanup(release)
	out := filepath.Join(t.TempDir(), "burn.json")
	o := &burnOptions{cfg: gpuprobe.BurnConfig{Duration: 10 * time.Millisecond, Launch: time.Millisecond}, outputJSON: out}
	rep := &burnReport{SchemaVersion: 1}
	released := false
	var stdout, stderr bytes.Buffer
	code := burnWith(context.Background(), drv, o, rep, func() { released = true }, &stdout, &stderr)
	if code != verify.ExitFail || released || !strings.Contains(stderr.String(), "the GPU did not answer: a CUDA call was still running 20ms after the burn's 10ms ended") {
		t.Errorf("exit %d, released %v, stderr:\n%s", code, released, stderr.String())
	}
	if r := readBurnReport(t, out); !strings.Contains(r.Error, "did not answer") {
		t.Errorf("report %+v", r)
	}
}

// TestVerifySimStart: gpulens-verify --sim.start joins a shared timeline:
// an hour in, the late tenant is listed by NVML and takes half the probe's
// time; a fleet started now has neither.
func TestVerifySimStart(t *testing.T) {
	// Serial: the simulated GPU is timed on the wall clock (bandwidth,
	// variability, stolen time); a busy neighbour reads as a GPU neighbour.
	late := lateScenario(t)
	for _, tc := range []struct {
		name   string
		extra  []string
		stolen float64
		pids   []uint32
	}{
		{"started now", nil, 0, nil},
		{"an hour in", []string{"--sim.start=" + time.Now().Add(-time.Hour).UTC().Format(time.RFC3339Nano)}, 0.5, []uint32{777}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "report.json")
			args := append([]string{"--sim.scenario=" + late, "--interval=0s", "--probe.budget=200ms", "--probe.stolen-window=100ms", "--output.json=" + out}, tc.extra...)
			if code, _, stderr := runVerify(t, args...); code == verify.ExitBadInput {
				t.Fatalf("exit %d:\n%s", code, stderr)
			}
			f, err := os.Open(out)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			rep, err := verify.ReadJSON(f)
			if err != nil {
				t.Fatal(err)
			}
			d := rep.Devices[0]
			if s := d.Figures.StolenRatio; s == nil || s.N != 3 || math.Abs(s.Median-tc.stolen) > 0.05 {
				t.Errorf("stolen %+v; want %.2f over 3 runs; runs:\n%s", s, tc.stolen, describeRuns(d.Runs))
			}
			if p := d.NVML.Processes; p == nil || fmt.Sprint(p.PIDs) != fmt.Sprint(tc.pids) {
				t.Errorf("processes %+v; want pids %v", p, tc.pids)
			}
		})
	}
	code, _, stderr := runVerify(t, "--sim.start=1767225600")
	if code != verify.ExitBadInput || !strings.Contains(stderr, "--sim.start needs --sim.scenario") {
		t.Errorf("--sim.start alone: exit %d:\n%s", code, stderr)
	}
}

// describeRuns says what each probe run measured of the stolen time, or why
// it did not.
func describeRuns(runs []verify.ProbeRun) string {
	var b strings.Builder
	for i, r := range runs {
		fmt.Fprintf(&b, "  run %d: ", i+1)
		switch {
		case r.Error != "":
			fmt.Fprintf(&b, "error %s", r.Error)
		case r.Skipped != nil:
			fmt.Fprintf(&b, "skipped %+v", *r.Skipped)
		case r.Result.Stolen == nil:
			fmt.Fprintf(&b, "no stolen time; errors %+v", r.Result.Errors)
		default:
			fmt.Fprintf(&b, "stolen %+v; errors %+v", *r.Result.Stolen, r.Result.Errors)
		}
		b.WriteByte('\n')
	}
	return b.String()
}
