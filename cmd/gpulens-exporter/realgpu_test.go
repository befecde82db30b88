package main

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// TestSimulatedH200MatchesRealScrape compares the exporter on a simulated
// H200 with one process against the scrape of a real H200 under a torch
// workload (docs/real-gpu.md): every gpulens family the real GPU produced
// must be produced by the simulator too, with the same label names, so that
// tests, dashboards and alerts built on the simulator see what a real GPU
// gives them; and the simulator must not invent families that a real,
// non-MIG, error-free GPU lacks.
func TestSimulatedH200MatchesRealScrape(t *testing.T) {
	t.Parallel()
	f, err := os.Open(filepath.Join("..", "..", "docs", "real-gpu", "h200-smoke-scrape.prom"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	real := parseScrape(t, f)

	scenario := filepath.Join(t.TempDir(), "h200.yaml")
	if err := os.WriteFile(scenario, []byte(`name: one-h200
description: one H200 running one process, like the real-GPU smoke run
devices:
  - count: 1
    model: h200-sxm5-141gb
tenants:
  - name: torch
    gpu: 0
    pid: 483
    process: python3
    sm_util: 99
    memory_util: 25
    memory: 5226
`), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := startExporter(t, "--sim.scenario="+scenario, "--sampler.interval=100ms")
	waitUp(t, http.DefaultClient, "http://"+addr+"/metrics", 1)
	// Process utilisation and GPM metrics need two samples.
	waitFamily(t, "http://"+addr+"/metrics", "gpulens_process_sm_utilization_ratio", 10*time.Second)
	sim := waitFamily(t, "http://"+addr+"/metrics", "gpulens_gpu_sm_activity_ratio", 10*time.Second)

	// Families a simulated GPU has and this real one could not: the
	// simulator's own, and the XID counter, which a real GPU exposes only
	// once an XID event happened.
	simOnly := []string{"gpulens_sim_", "gpulens_gpu_xid_errors_total"}
	for _, name := range sortedKeys(real) {
		if !strings.HasPrefix(name, "gpulens_") {
			continue
		}
		s, ok := sim[name]
		if !ok {
			t.Errorf("real H200 family %s is missing from the simulated H200", name)
			continue
		}
		if want, got := labelNames(real[name]), labelNames(s); !slices.Equal(want, got) {
			t.Errorf("%s: real label names %v, simulated %v", name, want, got)
		}
	}
	for _, name := range sortedKeys(sim) {
		if !strings.HasPrefix(name, "gpulens_") || real[name] != nil {
			continue
		}
		if slices.ContainsFunc(simOnly, func(p string) bool { return strings.HasPrefix(name, p) }) {
			continue
		}
		t.Errorf("simulated H200 family %s is not in the real H200 scrape", name)
	}
}

func sortedKeys(m map[string]*familyView) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// labelNames is the sorted union of the label names of a family's series.
func labelNames(f *familyView) []string {
	set := map[string]bool{}
	for _, s := range f.series {
		for k := range s.labels {
			set[k] = true
		}
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
