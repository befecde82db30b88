package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpulens/gpulens/internal/verify"
)

// TestScenarioTenantGPULeftAlone: on an EXCLUSIVE_PROCESS GPU in use and on
// a nearly full one, gpulens-verify creates no context and reports every
// probe figure as "not measured: <reason>".
func TestScenarioTenantGPULeftAlone(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ scenario, reason, detail string }{
		{"testdata/exclusive-process.yaml", "compute_mode_exclusive_process", "EXCLUSIVE_PROCESS"},
		{"testdata/nearly-full.yaml", "free_memory_low", "the probe needs 1.89 GiB (the 1.14 GiB it takes on this GPU, at most its budget 2 GiB, + 768 MiB for the context)"},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			jsonPath := filepath.Join(t.TempDir(), "report.json")
			_, stdout, stderr := runVerify(t, "--sim.scenario="+tc.scenario, "--repeat=2", "--interval=0s", "--output.json="+jsonPath)
			f, err := os.Open(jsonPath)
			if err != nil {
				t.Fatalf("no report: %v\n%s", err, stderr)
			}
			defer f.Close()
			rep, err := verify.ReadJSON(f)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Devices) != 1 {
				t.Fatalf("%d devices", len(rep.Devices))
			}
			d := rep.Devices[0]
			for _, r := range d.Runs {
				if r.Result != nil || r.Skipped == nil || r.Skipped.Reason != tc.reason {
					t.Errorf("run %+v, want skipped with %s", r, tc.reason)
				}
			}
			want := "not measured: " + tc.reason + " ("
			for _, id := range []string{verify.CheckStolen, verify.CheckBF16} {
				c := checkOf(t, rep, id)
				if !strings.HasPrefix(c.Reason, want) || !strings.Contains(c.Reason, tc.detail) {
					t.Errorf("%s: %q, want %q… with %q", id, c.Reason, want, tc.detail)
				}
			}
			if !strings.Contains(stdout, want) {
				t.Errorf("console output lacks %q:\n%s", want, stdout)
			}
		})
	}
}
