package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpulens/gpulens/internal/testenv"
)

// The golden expositions (testdata/golden/*.txt) are what the exporter
// serves on a few simulated scenarios, in the style of node_exporter's
// e2e-output.txt: every family with its HELP and TYPE, every series with
// its labels, in the exporter's order. They are the one list of what the
// exporter serves: docs/metrics.md is checked against them in both
// directions (TestMetricsDocumented), and the rules and dashboards against
// live scrapes (alerts/).
//
// After a change to what the exporter serves, regenerate them with
//
//	go test ./cmd/gpulens-exporter -run Golden -update
//
// and review the diff.
//
// What makes a scrape reproducible: the seed (--sim.seed), the scenario's
// sim time at the scrape (--sim.start puts the exporter's start at a chosen
// sim time; the scrape comes a few seconds later, inside a window where the
// same tenants run and no event comes or goes), and a scrape only once
// every GPU has had several sampler cycles (and the probe its first run).
// What does not: the values that move with time (a utilisation, a counter,
// a timestamp, a duration), which depend on the exact moment of the
// scrape. The golden files pin the values of pinnedFamilies, the families
// whose value is a fact of the scenario (a GPU's identity, its memory
// size, its power limit, its modes); the other values are written "*" and
// only checked to be numbers in their range (a ratio within 0–1, a counter
// not negative). The Go runtime's go_* and process_* families are left
// out, as node_exporter's e2e test does.
var update = flag.Bool("update", false, "rewrite testdata/golden/*.txt from the exporter's scrapes")

// goldenCase is one simulated scenario scraped into testdata/golden/name.txt.
type goldenCase struct {
	name     string
	scenario string
	// simTime is the sim time at the exporter's start.
	simTime time.Duration
	gpus    int // GPUs up
	args    []string
	// ready, if set, must hold of a scrape besides the sampler cycles.
	ready func(s scrapeView) bool
}

// probeArgs: the probe every minute, with a GPU-time budget of 2 s instead
// of 250 ms. The simulated driver's clock never runs behind the real one (a
// host stall between two events counts as GPU time, as it does for a real
// GPU's synchronous copy), so on a loaded machine a 250 ms budget was once
// spent (465 ms) before the device copy, and the measurements after it were
// skipped: missing series, not the exposition this test is about. The
// series do not depend on the budget (the simulated figures are the same at
// 250 ms and 2 s); the budget's own enforcement is tested in
// internal/gpuprobe and collector.
var probeArgs = []string{"--collector.probe", "--collector.probe.interval=1m", "--collector.probe.budget=2s"}

var goldenCases = []goldenCase{
	// Eight busy GPUs, no tenants, no event in the first minutes (its
	// first random XID comes at 5 min with seed 1).
	{name: "dgx-h100", scenario: "dgx-h100", simTime: time.Minute, gpus: 8},
	// Tenants with pods (per-process series, contention, allocations): at
	// 3 min batch-train (2–5 min) has joined llm-serve on GPU 0. The probe
	// on: its series, stolen time included.
	{name: "noisy-neighbour", scenario: "noisy-neighbour", simTime: 3 * time.Minute, gpus: 2, args: probeArgs, ready: probed(2)},
	// MIG instances with a tenant each (cron-c runs 1–4 min).
	{name: "mig-mixed", scenario: "mig-mixed", simTime: 2 * time.Minute, gpus: 2},
	// The host's side of the GPU processes (CPU, threads, memory, I/O) and
	// its pressure: at 10 min the starved loader (until 30 min) runs on
	// GPU 0.
	{name: "starved-loader", scenario: "starved-loader", simTime: 10 * time.Minute, gpus: 2},
	// GPUs with prices (gpulens_*_price_usd_per_hour), MIG instances
	// among them; constant loads.
	{name: "mixed-fleet", scenario: "mixed-fleet", simTime: time.Minute, gpus: 7},
	// What only comes with events: XIDs, failing NVML calls; and a PCIe
	// board's fan.
	{name: "events", scenario: "testdata/golden-events.yaml", gpus: 1, ready: func(s scrapeView) bool {
		return s.has("gpulens_gpu_xid_errors_total") && s.has("gpulens_nvml_errors_total")
	}},
}

// probed: the probe has finished its first run on n devices, the
// unexplained stolen time (worked out once NVML's samples cover the run)
// included.
func probed(n int) func(scrapeView) bool {
	return func(s scrapeView) bool {
		return len(s.values("gpulens_probe_up")) == n && len(s.values("gpulens_probe_unexplained_stolen_time_ratio")) == n
	}
}

// pinnedFamilies are the families whose values the golden files pin: facts
// of the scenario that do not move with time. A family not listed has its
// values written "*" (a new family too, until it is added here).
var pinnedFamilies = map[string]bool{
	"gpulens_exporter_build_info":           true,
	"gpulens_gpu_up":                        true,
	"gpulens_gpu_info":                      true,
	"gpulens_gpu_memory_total_bytes":        true,
	"gpulens_gpu_memory_reserved_bytes":     true,
	"gpulens_gpu_power_limit_watts":         true,
	"gpulens_gpu_max_clock_hertz":           true,
	"gpulens_gpu_persistence_mode":          true,
	"gpulens_gpu_compute_mode":              true,
	"gpulens_gpu_mig_enabled":               true,
	"gpulens_gpu_remapped_rows":             true,
	"gpulens_gpu_remapping_pending":         true,
	"gpulens_gpu_remapping_failed":          true,
	"gpulens_gpm_supported":                 true,
	"gpulens_mig_instance_info":             true,
	"gpulens_mig_memory_total_bytes":        true,
	"gpulens_process_info":                  true,
	"gpulens_process_memory_used_bytes":     true,
	"gpulens_process_folded":                true,
	"gpulens_gpu_allocation_info":           true,
	"gpulens_scrape_collector_success":      true,
	"gpulens_probe_up":                      true,
	"gpulens_probe_device_info":             true,
	"gpulens_probe_memory_total_bytes":      true,
	"gpulens_probe_runs_total":              true,
	"gpulens_gpu_price_usd_per_hour":        true,
	"gpulens_mig_price_usd_per_hour":        true,
	"gpulens_host_cpus":                     true,
	"gpulens_process_threads":               true,
	"gpulens_process_resident_memory_bytes": true,
}

// buildLabels are the labels of gpulens_exporter_build_info, which depend
// on the build, not on the scenario; the golden files write them "*".
var buildLabels = regexp.MustCompile(`\b(goversion|goarch|goos|revision|version|branch|tags)="[^"]*"`)

// nonNegative are the units no quantity of theirs can be below 0 in.
var nonNegative = regexp.MustCompile(`_(bytes|seconds|watts|joules|hertz|usd|usd_per_hour)(_total)?$`)

func TestGolden(t *testing.T) {
	// Serial (its cases run in parallel with each other): each scrape pins
	// what the simulated fleet and the probe served at readiness; a busy
	// neighbour delays the sampler and the probe apart.
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			raw := goldenScrape(t, tc)
			checkValues(t, raw)
			got := normalise(raw)
			path := filepath.Join("testdata", "golden", tc.name+".txt")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (go test ./cmd/gpulens-exporter -run Golden -update writes it)", err)
			}
			if d := lineDiff(string(want), string(got)); d != "" {
				t.Errorf("scenario %s serves other series than %s (- golden, + served); if the change is meant, regenerate with\n\tgo test ./cmd/gpulens-exporter -run Golden -update\n%s", tc.scenario, path, d)
			}
		})
	}
}

// goldenScrape runs the exporter on the case's scenario and returns a
// scrape taken once every GPU is up, the GPUs have had samplerCycles cycles
// each on average, the case's ready condition holds, and a scrape two
// cycles per GPU earlier served the same.
func goldenScrape(t *testing.T, tc goldenCase) []byte {
	t.Helper()
	body, _ := goldenScrapeAt(t, tc)
	return body
}

// goldenScrapeAt is goldenScrape, also returning the exporter's address
// (the exporter runs until the test ends).
func goldenScrapeAt(t *testing.T, tc goldenCase) ([]byte, string) {
	t.Helper()
	const samplerCycles = 4
	start := time.Now().Add(-tc.simTime).UTC().Format(time.RFC3339Nano)
	args := append([]string{"--sim.scenario=" + tc.scenario, "--sim.seed=1", "--sim.start=" + start, "--sampler.interval=100ms"}, tc.args...)
	p := testenv.RunFunc(t, "gpulens-exporter", func(ctx context.Context, log io.Writer) int {
		return run(ctx, append([]string{"--web.listen-address=127.0.0.1:0"}, args...), log)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr := p.MustAddress(ctx, t)
	url := "http://" + addr + "/metrics"
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var (
		prev       []byte  // the normalised form of a ready scrape
		prevCycles float64 // the sampler cycles then
	)
	for {
		body, err := testenv.Scrape(ctx, url, testenv.AcceptText)
		if err != nil {
			t.Fatal(err)
		}
		s := parseView(body)
		up := 0
		for _, v := range s.values("gpulens_gpu_up") {
			if v == 1 {
				up++
			}
		}
		cycles := s.values("gpulens_sampler_duration_seconds_count")
		if up == tc.gpus && len(cycles) == 1 && cycles[0] >= float64(samplerCycles*tc.gpus) && (tc.ready == nil || tc.ready(s)) {
			// The same series as a ready scrape two cycles per GPU
			// earlier: no GPU is still behind the others (a GPU's GPM
			// series need its second cycle).
			n := normalise(body)
			switch {
			case !bytes.Equal(n, prev):
				prev, prevCycles = n, cycles[0]
			case cycles[0] >= prevCycles+float64(2*tc.gpus):
				return body, addr
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("scenario %s: %d of %d GPUs up, sampler cycles %v, before %v; last scrape:\n%s", tc.scenario, up, tc.gpus, cycles, ctx.Err(), body)
		case <-tick.C:
		}
	}
}

// scrapeView is a text exposition's samples by series name.
type scrapeView map[string][]float64

func parseView(body []byte) scrapeView {
	s := scrapeView{}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		name, value := splitSample(line)
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name = name[:i]
		}
		v, _ := strconv.ParseFloat(value, 64)
		s[name] = append(s[name], v)
	}
	return s
}

func (s scrapeView) values(name string) []float64 { return s[name] }
func (s scrapeView) has(name string) bool         { return len(s[name]) > 0 }

// splitSample splits a sample line into the series (name and labels) and
// the value. Label values may contain spaces; the value follows the last.
func splitSample(line string) (series, value string) {
	i := strings.LastIndexByte(line, ' ')
	if i < 0 {
		return line, ""
	}
	return line[:i], line[i+1:]
}

// family is the family a sample of a text exposition belongs to, given the
// family of the last TYPE line (histogram and summary samples add suffixes).
func family(series, typed string) string {
	name := series
	if i := strings.IndexByte(name, '{'); i >= 0 {
		name = name[:i]
	}
	if name == typed {
		return name
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if strings.TrimSuffix(name, suffix) == typed {
			return typed
		}
	}
	return name
}

// normalise turns a scrape into its golden form: go_* and process_*
// families dropped, values of families not pinned written "*", build labels
// written "*". A comment line starts the file.
func normalise(body []byte) []byte {
	var out bytes.Buffer
	out.WriteString("# Generated by go test ./cmd/gpulens-exporter -run Golden -update: the exporter's scrape, values that move with time written \"*\".\n")
	var typed string
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		var name string
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "#" && (f[1] == "HELP" || f[1] == "TYPE") {
			name = f[2]
			if f[1] == "TYPE" {
				typed = name
			}
		} else if line == "" || line[0] == '#' {
			continue
		} else {
			series, value := splitSample(line)
			name = family(series, typed)
			if !pinnedFamilies[name] {
				value = "*"
			}
			if name == "gpulens_exporter_build_info" {
				series = buildLabels.ReplaceAllString(series, `$1="*"`)
			}
			line = series + " " + value
		}
		if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") {
			continue
		}
		out.WriteString(line + "\n")
	}
	return out.Bytes()
}

// checkValues checks every gpulens sample of a scrape: a number, not NaN;
// ratios within 0–1; counters, histogram series and quantities in bytes,
// seconds, watts, joules, hertz or USD not negative.
func checkValues(t *testing.T, body []byte) {
	t.Helper()
	types := map[string]string{}
	var typed string
	for _, line := range strings.Split(string(body), "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			types[f[2]], typed = f[3], f[2]
			continue
		}
		if line == "" || line[0] == '#' || !strings.HasPrefix(line, "gpulens_") {
			continue
		}
		series, value := splitSample(line)
		fam := family(series, typed)
		v, err := strconv.ParseFloat(value, 64)
		switch {
		case err != nil || math.IsNaN(v):
			t.Errorf("%s: value %q is not a number", series, value)
		case strings.HasSuffix(fam, "_ratio") && (v < 0 || v > 1):
			t.Errorf("%s = %v: a ratio out of 0–1", series, v)
		case v < 0 && (types[fam] == "counter" || types[fam] == "histogram" ||
			nonNegative.MatchString(fam)):
			t.Errorf("%s = %v: negative", series, v)
		}
	}
}

// lineDiff lists the lines only in want ("-") and only in got ("+"), in
// their order; empty when the texts are equal.
func lineDiff(want, got string) string {
	if want == got {
		return ""
	}
	count := func(s string) map[string]int {
		m := map[string]int{}
		for _, l := range strings.Split(s, "\n") {
			m[l]++
		}
		return m
	}
	w, g := count(want), count(got)
	var b strings.Builder
	for _, l := range strings.Split(want, "\n") {
		if g[l] > 0 {
			g[l]--
			continue
		}
		fmt.Fprintf(&b, "- %s\n", l)
	}
	for _, l := range strings.Split(got, "\n") {
		if w[l] > 0 {
			w[l]--
			continue
		}
		fmt.Fprintf(&b, "+ %s\n", l)
	}
	if b.Len() == 0 {
		return "(same lines in another order)\n"
	}
	return b.String()
}

// docOnly are the families docs/metrics.md documents that no golden
// scenario serves, with the reason.
var docOnly = map[string]string{
	"gpulens_probe_errors_total":                    "appears with the probe's first failure; the simulated CUDA devices do not fail",
	"gpulens_probe_skipped_total":                   "appears with the probe's first skip (exclusive or prohibited compute mode, low free memory, a MIG instance not visible); the golden scenarios with the probe have none",
	"gpulens_probe_not_reported_total":              "appears with the first figure a too small --collector.probe.max-memory cannot serve; the default fits every simulated GPU",
	"gpulens_probe_unexplained_stolen_time_unknown": "present only while the unexplained stolen time is not known (process collectors off, MIG, NVML's samples not read in time or absent); the golden scenarios with the probe judge every window (collector/unexplained_test.go serves it)",
	// Only MIG instances probed by children have them; the golden MIG
	// scenarios run without the probe (TestProbeMeasuresEveryMIGInstanceOfDemo
	// checks them on the demo scenario).
	"gpulens_probe_child_cpu_seconds_total":         "only on MIG instances probed by child processes",
	"gpulens_probe_child_max_resident_memory_bytes": "only on MIG instances probed by child processes",
}

var docFamily = regexp.MustCompile("(?m)^\\| `(gpulens_[a-z0-9_]+)`")

// Every family docs/metrics.md documents is in a golden exposition (or in
// docOnly), and every gpulens family a golden exposition holds is documented.
func TestMetricsDocumented(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range docFamily.FindAllStringSubmatch(string(raw), -1) {
		documented[m[1]] = true
	}
	served := map[string][]string{} // family → golden files
	files, err := filepath.Glob(filepath.Join("testdata", "golden", "*.txt"))
	if err != nil || len(files) != len(goldenCases) {
		t.Fatalf("golden files %v (%v); want one per case of goldenCases", files, err)
	}
	for _, f := range files {
		body, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(body), "\n") {
			if f2 := strings.Fields(line); len(f2) == 4 && f2[1] == "TYPE" && strings.HasPrefix(f2[2], "gpulens_") {
				served[f2[2]] = append(served[f2[2]], filepath.Base(f))
			}
		}
	}
	if len(documented) < 10 || len(served) < 10 {
		t.Fatalf("%d families documented, %d served: the parsing is broken", len(documented), len(served))
	}
	for _, name := range sortedNames(documented) {
		if _, ok := docOnly[name]; !ok && served[name] == nil {
			t.Errorf("docs/metrics.md documents %s, which no golden exposition (testdata/golden) serves: renamed or gone?", name)
		}
	}
	for _, name := range sortedNames(served) {
		if !documented[name] {
			t.Errorf("%s (served in %s) is not documented in docs/metrics.md", name, strings.Join(served[name], ", "))
		}
	}
	for name, why := range docOnly {
		switch {
		case !documented[name]:
			t.Errorf("docOnly lists %s (%s), which docs/metrics.md does not document", name, why)
		case served[name] != nil:
			t.Errorf("docOnly lists %s, which %s now serves: drop it from docOnly", name, strings.Join(served[name], ", "))
		}
	}
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
