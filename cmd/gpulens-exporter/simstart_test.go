package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpulens/gpulens/internal/testenv"
)

// TestSimStart: --sim.start puts the simulated fleet where a shared
// timeline is (a tenant that joins 30 minutes in is there at once with a
// start an hour ago), and bad values are refused naming the flag.
func TestSimStart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"without a scenario", []string{"--sim.start=1767225600"}, "--sim.start needs --sim.scenario"},
		{"not a time", []string{"--sim.scenario=minimal", "--sim.start=soon"}, `--sim.start: "soon" is neither Unix seconds`},
		{"too old", []string{"--sim.scenario=minimal", "--sim.start=2000-01-01T00:00:00Z"}, "--sim.start: 2000-01-01T00:00:00Z is "},
		{"too far ahead", []string{"--sim.scenario=minimal", "--sim.start=" + time.Now().Add(2*time.Hour).UTC().Format(time.RFC3339)}, "in the future; at most 1h0m0s ahead"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out testenv.Log
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if code := run(ctx, append([]string{"--web.listen-address=127.0.0.1:0"}, tc.args...), &out); code != 2 || !strings.Contains(out.String(), tc.want) {
				t.Errorf("exit %d, output:\n%s\nwant exit 2 and %q", code, out.String(), tc.want)
			}
		})
	}

	scenario := filepath.Join(t.TempDir(), "late.yaml")
	if err := os.WriteFile(scenario, []byte(`name: late
devices:
  - model: h100-sxm5-80gb
tenants:
  - {name: late, gpu: 0, pid: 777, start: 30m, sm_util: 50, memory: 1024}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339Nano)
	addr := startExporter(t, "--sim.scenario="+scenario, "--sim.start="+start, "--sampler.interval=100ms")
	url := "http://" + addr + "/metrics"
	waitUp(t, http.DefaultClient, url, 1)
	fams := waitFamily(t, url, "gpulens_process_memory_used_bytes", 10*time.Second)
	f := fams["gpulens_process_memory_used_bytes"]
	if f == nil || len(f.series) != 1 || f.series[0].labels["pid"] != "777" || f.series[0].value != 1024<<20 {
		t.Fatalf("process memory series %+v; want pid 777 with 1 GiB, an hour into the timeline", f)
	}
}
