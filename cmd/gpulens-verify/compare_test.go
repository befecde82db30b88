package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpulens/gpulens/internal/testenv"
	"github.com/gpulens/gpulens/internal/verify"
)

// verifyExit runs the gpulens-verify program with args and returns its exit
// status, standard output and error.
func verifyExit(t *testing.T, bin string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stdout, stderr, err := testenv.Output(ctx, nil, bin, args...)
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), string(stdout), string(stderr)
	case err != nil:
		t.Fatalf("%v\n%s", err, stderr)
	}
	return 0, string(stdout), string(stderr)
}

func readComparison(t *testing.T, path string) *verify.Comparison {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var c verify.Comparison
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if c.SchemaVersion != verify.CompareSchemaVersion || c.Tool != verify.CompareTool {
		t.Errorf("schema %d, tool %q", c.SchemaVersion, c.Tool)
	}
	return &c
}

// figureVerdicts are a pair's verdicts by figure.
func figureVerdicts(dc verify.DeviceComparison) map[string]verify.CompareVerdict {
	m := map[string]verify.CompareVerdict{}
	for _, f := range dc.Figures {
		m[f.ID] = f.Verdict
	}
	return m
}

// TestCompareSimulatedReports: the program writes reports of the simulated
// fleet (a dedicated H100; the same H100 time-sliced with a neighbour; a
// DGX of eight) and compares them as a pipeline would, gating on the exit
// status.
func TestCompareSimulatedReports(t *testing.T) {
	// Serial: the simulated GPU is timed on the wall clock (bandwidth,
	// variability, stolen time); a busy neighbour reads as a GPU neighbour.
	bin := testenv.Binary(t, "gpulens-verify")
	dir := t.TempDir()
	report := func(scenario string) string {
		p := filepath.Join(dir, scenario+".json")
		code, _, stderr := verifyExit(t, bin, "--sim.scenario="+scenario, "--repeat=3", "--interval=0s", "--output.json="+p)
		if code == verify.ExitBadInput {
			t.Fatalf("%s: exit %d\n%s", scenario, code, stderr)
		}
		return p
	}
	dedicated, timesliced, dgx := report("rented-dedicated"), report("rented-timesliced"), report("dgx-h100")

	// Today the "dedicated" GPU is time-sliced: worse, exit 1.
	out, page := filepath.Join(dir, "cmp.json"), filepath.Join(dir, "cmp.html")
	code, stdout, stderr := verifyExit(t, bin, "compare", dedicated, timesliced, "--output.json="+out, "--output.html="+page)
	if code != verify.ExitFail {
		t.Fatalf("exit %d, want 1\n%s\n%s", code, stdout, stderr)
	}
	c := readComparison(t, out)
	rc := c.Comparisons[0]
	if !rc.SameHost || len(rc.Devices) != 1 || rc.Devices[0].MatchedBy != verify.MatchedByUUID {
		t.Fatalf("not matched as the same GPU: %+v", rc)
	}
	v := figureVerdicts(rc.Devices[0])
	// The neighbour takes half the GPU time and NVML's visible process a
	// quarter: kernels run at a quarter, 75 % stolen, 50 % unexplained.
	for _, id := range []string{"device_copy_bytes_per_second", "fp32_flops", "fp16_tensor_flops", "bf16_tensor_flops", "stolen_ratio", "stolen_max_ratio", "unexplained_stolen_ratio"} {
		if v[id] != verify.VerdictWorse {
			t.Errorf("%s: %s, want worse", id, v[id])
		}
	}
	// Copy engines are not time-sliced, the memory is the same.
	for _, id := range []string{"h2d_bytes_per_second", "d2h_bytes_per_second", "memory_total_bytes"} {
		if v[id] == verify.VerdictWorse || v[id] == verify.VerdictBetter {
			t.Errorf("%s: %s, want no difference", id, v[id])
		}
	}
	if c.Summary.ExitCode != verify.ExitFail || c.Summary.Verdict != verify.VerdictWorse {
		t.Errorf("summary %+v", c.Summary)
	}
	for _, want := range []string{"Baseline: " + dedicated, "Compared: " + timesliced, "The same host: GPUs matched by UUID", "(exit 1)"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("console lacks %q:\n%s", want, stdout)
		}
	}
	if html, err := os.ReadFile(page); err != nil || !strings.Contains(string(html), `<tr class="worse" data-figure="fp32_flops">`) {
		t.Errorf("HTML: %v\n%.500s", err, html)
	}

	// The other way round the same figures are better: exit 0.
	code, stdout, _ = verifyExit(t, bin, "compare", timesliced, dedicated, "--output.json="+out)
	if code != verify.ExitPass {
		t.Fatalf("reversed: exit %d\n%s", code, stdout)
	}
	v = figureVerdicts(readComparison(t, out).Comparisons[0].Devices[0])
	for _, id := range []string{"fp32_flops", "bf16_tensor_flops", "unexplained_stolen_ratio"} {
		if v[id] != verify.VerdictBetter {
			t.Errorf("reversed %s: %s, want better", id, v[id])
		}
	}

	// A report against itself: every figure the same.
	code, stdout, _ = verifyExit(t, bin, "compare", dedicated, dedicated, "--output.json="+out)
	if code != verify.ExitPass {
		t.Fatalf("itself: exit %d\n%s", code, stdout)
	}
	s := readComparison(t, out).Summary
	if s.Verdict != verify.VerdictSame || s.Same < 10 || s.Worse+s.Better+s.Inconclusive+s.Missing+s.UnmatchedDevices != 0 {
		t.Errorf("itself: %+v", s)
	}

	// One GPU against the same one time-sliced and against a DGX of eight
	// busy ones (whose GPU 0 has the same simulated UUID), with tolerances
	// wide enough for a neighbour: the figures within them are the same;
	// the seven GPUs without a match are listed, not compared.
	code, stdout, _ = verifyExit(t, bin, "compare", dedicated, timesliced, dgx, "--compare.tolerance=90%", "--compare.ratio-tolerance=0.8", "--output.json="+out)
	if code != verify.ExitPass {
		t.Fatalf("tolerant: exit %d\n%s", code, stdout)
	}
	c = readComparison(t, out)
	if len(c.Comparisons) != 2 || c.Summary.UnmatchedDevices != 7 || len(c.Comparisons[1].OnlyInOther) != 7 || len(c.Comparisons[1].Devices) != 1 {
		t.Fatalf("dgx: %d comparisons, %d unmatched, %+v", len(c.Comparisons), c.Summary.UnmatchedDevices, c.Comparisons[1].OnlyInOther)
	}
	for _, rc := range c.Comparisons {
		v := figureVerdicts(rc.Devices[0])
		for _, id := range []string{"fp32_flops", "unexplained_stolen_ratio"} {
			if v[id] != verify.VerdictSame {
				t.Errorf("%s, tolerant: %s %s, want same", rc.Other.File, id, v[id])
			}
		}
	}
	if !strings.Contains(stdout, "Only in the other report (not compared): CUDA 7 · NVIDIA H100 80GB HBM3") {
		t.Errorf("console does not list the unmatched GPUs:\n%s", stdout)
	}
}

// TestCompareBadInput: anything but two or more reports of this schema
// version, and bad flags, exit 2 naming the file and field or the flag,
// before any output.
func TestCompareBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.json", `{"schema_version": 1, "tool": "gpulens-verify", "devices": []}`)
	future := write("future.json", `{"schema_version": 2, "tool": "gpulens-verify", "devices": []}`)
	burn := write("burn.json", `{"schema_version": 1, "tool": "gpulens-verify burn"}`)
	prom := write("metrics.txt", "# HELP gpulens_up 1\n")
	missing := filepath.Join(dir, "no-such.json")
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"compare"}, []string{"required argument 'reports' not provided"}},
		{[]string{"compare", good}, []string{"compare needs at least two reports", "got 1"}},
		{[]string{"compare", good, future}, []string{future + `: field "schema_version" is 2; this gpulens-verify reads version 1`}},
		{[]string{"compare", burn, good}, []string{burn + `: not a gpulens-verify JSON report: field "tool" is "gpulens-verify burn"`}},
		{[]string{"compare", good, prom}, []string{prom + ": not a gpulens-verify JSON report"}},
		{[]string{"compare", good, missing}, []string{"reading " + missing}},
		{[]string{"compare", good, good, "--compare.tolerance=lots"}, []string{"--compare.tolerance", `"lots" is not a share`}},
		{[]string{"compare", good, good, "--compare.ratio-tolerance=-1%"}, []string{"--compare.ratio-tolerance", "must be between 0 and 1000%"}},
		{[]string{"compare", good, good, "--output.json=" + filepath.Join(dir, "no-such", "c.json")}, []string{"--output.json: folder", "does not exist"}},
		{[]string{"compare", good, good, "--output.json=" + good}, []string{"the output " + good + " is one of the reports compared"}},
		{[]string{"compare", good, good, "--output.json=" + filepath.Join(dir, "c"), "--output.html=" + filepath.Join(dir, "c")}, []string{"name the same file"}},
	} {
		t.Run(strings.Join(tc.args[1:], " "), func(t *testing.T) {
			code, stdout, stderr := runVerify(t, tc.args...)
			if code != verify.ExitBadInput {
				t.Errorf("exit %d, want 2", code)
			}
			if stdout != "" {
				t.Errorf("output before the input was checked:\n%s", stdout)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
		})
	}
	// The good report compared with itself: nothing to compare, exit 0.
	if code, stdout, stderr := runVerify(t, "compare", good, good); code != verify.ExitPass || !strings.Contains(stdout, "Verdict: INCONCLUSIVE — 0 worse") {
		t.Errorf("exit %d\n%s\n%s", code, stdout, stderr)
	}
}
