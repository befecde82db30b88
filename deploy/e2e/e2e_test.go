package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpulens/gpulens/internal/testenv"
	"github.com/gpulens/gpulens/loadgen/report"
)

// repoRoot is the module root, relative to this package's directory.
const repoRoot = "../.."

// forInTest replaces every `for:` of the shipped rules in this test: the
// shipped durations are minutes, the test lasts seconds. The expressions
// are the shipped ones (copyRules checks that nothing else changes).
const forInTest = "3s"

// The jobs of deploy/prometheus/prometheus.yml, each served by one program
// the test starts.
const (
	jobExporter = "gpulens-exporter"
	jobLoadgen  = "gpulens-loadgen"
	jobSim      = "gpulens-sim"
)

// wantAlerts are the alerts testdata/e2e.yaml must make fire, by GPU, and
// notFiring alerts that must stay silent on a GPU (the conditions hold on
// another one only).
var (
	wantAlerts = []struct{ name, gpu string }{
		{"GpulensGPUMemoryHeadroomLow", "1"},         // leak: under 5 % free from 20 s
		{"GpulensGPUMemoryExhaustionPredicted", "1"}, // leak: free memory falling
		{"GpulensGPUHighContention", "0"},            // the neighbour joins the serving GPU at 8 s
		{"GpulensGPUStolenTimeHigh", "3"},            // an invisible neighbour takes half of GPU 3 (probe)
	}
	notFiring = []struct{ name, gpu string }{
		{"GpulensGPUMemoryHeadroomLow", "0"},
		{"GpulensGPUMemoryExhaustionPredicted", "0"},
		{"GpulensGPUHighContention", "1"}, // one tenant, no contention
		{"GpulensGPUHighContention", "3"},
		{"GpulensGPUStolenTimeHigh", "0"}, // contention NVML sees, no time taken from the probe
		{"GpulensGPUProbeFailing", "3"},
	}
)

// needsHistory are the panels (file and title, as dashboardQueries names
// them) whose queries compare a 5-minute rate of a new series with an
// absolute threshold: Prometheus divides a new series' increase by the whole
// window, so they cannot return data before the series is about 5 minutes
// old, longer than this test runs. GpulensGPUInputBound and its recording
// rule are checked in compressed time by alerts/scenarios_test.go
// (starved-loader), and the panel's query against promqltest series by
// dashboards/promql_test.go.
var needsHistory = map[string]bool{
	`gpulens-fleet.json panel "Input-bound GPUs and causes"`: true,
}

// TestStack runs the stack the way deploy/ ships it, on one machine and in
// about a minute: the exporter on the simulated fleet of testdata/e2e.yaml,
// `gpulens-loadgen sim`, `gpulens-loadgen run` against it, and the real
// Prometheus with deploy/prometheus/prometheus.yml and the alerts/ rules
// (with shortened `for:`). It checks that every target is up, that the
// leak and the noisy neighbour fire their alerts (and only on their GPU),
// that every dashboard query and variable returns data, and that the TTFT
// histogram Prometheus scraped from the load generator agrees with its
// JSON report, bucket by bucket, and that the latency percentiles
// Prometheus reads from the native histograms (the recording rules the
// dashboards show among them) are within 5 % of the report's exact ones.
func TestStack(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: starts Prometheus and the gpulens programs for about a minute")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bins := testenv.Binaries(t, "gpulens-exporter", "gpulens-loadgen", "prometheus")
	exporterBin, loadgenBin, promBin := bins[0], bins[1], bins[2]

	runCtx, runCancel := context.WithTimeout(ctx, 150*time.Second)
	defer runCancel()
	began := time.Now()

	exporter := testenv.Run(t, exporterBin, "--sim.scenario=testdata/e2e.yaml",
		"--web.listen-address=127.0.0.1:0", "--collector.probe", "--collector.probe.interval=5s")
	exporterAddr := exporter.MustAddress(runCtx, t)
	// The simulated server stands for llm-serve (pid 4242) on GPU 0 of the
	// simulated fleet: when batch-train joins it at 8 s, it slows down.
	sim := testenv.Run(t, loadgenBin, "sim", "--sim.listen-address=127.0.0.1:0",
		"--sim.model=gpulens-sim", "--sim.gpu.exporter-url=http://"+exporterAddr+"/metrics", "--sim.gpu=0",
		"--sim.gpu.pid=4242", "--sim.gpu.poll-interval=500ms")
	simAddr := sim.MustAddress(runCtx, t)

	reportPath := filepath.Join(dir, "report.json")
	loadgen := testenv.Run(t, loadgenBin, "run",
		"--target=http://"+simAddr+"/v1", "--model=gpulens-sim", "--scenario=e2e",
		"--rate=8", "--arrival=poisson", "--duration=45s", "--seed=7",
		"--input-tokens=fixed:64", "--output-tokens=fixed:24",
		"--cost.gpu-hourly-usd=2.5", "--exporter.url=http://"+exporterAddr+"/metrics",
		"--output="+reportPath, "--embed-requests", "--linger=10m",
		"--web.listen-address=127.0.0.1:0", "--no-progress")
	loadgenAddr := loadgen.MustAddress(runCtx, t)

	rulesDir := filepath.Join(dir, "rules")
	if err := os.Mkdir(rulesDir, 0o755); err != nil {
		t.Fatal(err)
	}
	ruleFiles, err := filepath.Glob(filepath.Join(repoRoot, "alerts", "*.rules.yml"))
	if err != nil || len(ruleFiles) == 0 {
		t.Fatalf("no rule files in alerts/: %v", err)
	}
	shortened := copyRules(t, ruleFiles, rulesDir, forInTest)
	t.Logf("rules from %v, for: set to %s on %d alerts", ruleFiles, forInTest, len(shortened))
	shipped, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "prometheus", "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := testConfig(shipped, rulesDir, map[string]string{
		jobExporter: exporterAddr, jobLoadgen: loadgenAddr, jobSim: simAddr,
	})
	if err != nil {
		t.Fatalf("deploy/prometheus/prometheus.yml: %v", err)
	}
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	prom := testenv.Run(t, promBin, "--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(dir, "tsdb"), "--web.listen-address=127.0.0.1:0")
	api := newPromClient(t, prom.MustAddress(runCtx, t))
	t.Logf("exporter %s, simulator %s, load generator %s, %s; started in %s",
		exporterAddr, simAddr, loadgenAddr, api.base, time.Since(began).Round(time.Millisecond))

	t.Run("targets up", func(t *testing.T) {
		var up map[string]float64
		ok := testenv.Poll(runCtx, 500*time.Millisecond, func() bool {
			res, err := api.query(runCtx, "up")
			if err != nil {
				return false
			}
			up = map[string]float64{}
			for _, s := range res {
				up[s.Metric["job"]] = s.Value
			}
			return up[jobExporter] == 1 && up[jobLoadgen] == 1 && up[jobSim] == 1 && len(up) == 3
		})
		if !ok {
			t.Fatalf("up by job = %v; want 1 for %s, %s and %s", up, jobExporter, jobLoadgen, jobSim)
		}
		t.Logf("every target up %s after start", time.Since(began).Round(time.Millisecond))
	})

	t.Run("alerts", func(t *testing.T) {
		key := func(name, gpu string) string { return name + "{gpu=" + gpu + "}" }
		firing := map[string]bool{}
		ok := testenv.Poll(runCtx, time.Second, func() bool {
			as, err := api.alerts(runCtx)
			if err != nil {
				return false
			}
			for _, a := range as {
				if a.State == "firing" && !firing[key(a.Labels["alertname"], a.Labels["gpu"])] {
					firing[key(a.Labels["alertname"], a.Labels["gpu"])] = true
					t.Logf("%s firing %s after start", key(a.Labels["alertname"], a.Labels["gpu"]), time.Since(began).Round(time.Second))
				}
			}
			for _, w := range wantAlerts {
				if !firing[key(w.name, w.gpu)] {
					return false
				}
			}
			return true
		})
		if !ok {
			t.Errorf("firing alerts = %v; want all of %v", firing, wantAlerts)
		}
		for _, n := range notFiring {
			if firing[key(n.name, n.gpu)] {
				t.Errorf("%s is firing; its condition does not hold on that GPU", key(n.name, n.gpu))
			}
		}
	})

	t.Run("dashboard queries", func(t *testing.T) {
		queries := dashboardQueries(t, filepath.Join(repoRoot, "dashboards"))
		if len(queries) < 50 {
			t.Fatalf("found %d dashboard queries; the dashboards have more", len(queries))
		}
		empty := map[string]string{}
		exempt := map[string]bool{}
		for _, q := range queries {
			if needsHistory[q.where] {
				exempt[q.where] = true
				continue
			}
			empty[dataProbe(q.expr)] = q.where
		}
		for where := range needsHistory {
			if !exempt[where] {
				t.Errorf("needsHistory names %s, which no dashboard has", where)
			}
		}
		testenv.Poll(runCtx, time.Second, func() bool {
			for expr := range empty {
				if res, err := api.query(runCtx, expr); err == nil && len(res) > 0 {
					delete(empty, expr)
				}
			}
			return len(empty) == 0
		})
		for expr, where := range empty {
			_, err := api.query(runCtx, expr)
			t.Errorf("%s: no data for %s (err %v)", where, expr, err)
		}
		t.Logf("%d dashboard queries and variables return data, %s after start", len(queries), time.Since(began).Round(time.Second))
		checkJoinedTables(runCtx, t, api, filepath.Join(repoRoot, "dashboards"))
	})

	t.Run("TTFT histogram matches the report", func(t *testing.T) {
		// The load generator lingers after its run (--linger) with its
		// report written, serving its final counts until Ctrl-C, so that
		// Prometheus scrapes every request of the report however slowly
		// the machine runs.
		testenv.Poll(runCtx, 100*time.Millisecond, func() bool {
			return strings.Contains(loadgen.Log(), lingerMsg) || loadgen.Exited()
		})
		if !strings.Contains(loadgen.Log(), lingerMsg) {
			t.Fatalf("the load generator did not finish its 45 s run and linger (exited %v: %v): %v", loadgen.Exited(), loadgen.Err(), runCtx.Err())
		}
		doc, err := report.Read(reportPath)
		if err != nil {
			t.Fatal(err)
		}
		if len(doc.Runs) != 1 || len(doc.Runs[0].Requests) == 0 {
			t.Fatalf("report has %d runs; want one with embedded requests", len(doc.Runs))
		}
		compareTTFT(runCtx, t, api, doc.Runs[0])
		comparePercentiles(runCtx, t, api, doc.Runs[0])
		checkNeighbourSlowsServer(runCtx, t, api, doc, began)
		// Ctrl-C ends the linger at once; the exit status is the run's. The
		// wait only stops a broken test from hanging.
		if err := loadgen.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-loadgen.Done():
		case <-time.After(time.Minute):
			t.Fatal("the load generator still lingers a minute after SIGTERM")
		}
		if loadgen.Err() != nil {
			t.Errorf("gpulens-loadgen run: %v", loadgen.Err())
		}
	})
	if exporter.Exited() || sim.Exited() || prom.Exited() {
		t.Errorf("a program exited during the test: exporter %v, simulator %v, prometheus %v", exporter.Err(), sim.Err(), prom.Err())
	}
	t.Logf("end-to-end run took %s", time.Since(began).Round(time.Second))
}

// lingerMsg is what gpulens-loadgen logs once its run is over and its
// report written, when --linger keeps it serving /metrics.
const lingerMsg = "run finished; serving metrics until the linger ends"

// compareTTFT checks the load generator's TTFT histogram as Prometheus
// scraped it against the per-request records of its report, bucket by
// bucket. The load generator is lingering with its final counts: once a
// scrape has every successful request of the report (the poll only waits
// for Prometheus's next scrape), the two must agree exactly.
func compareTTFT(ctx context.Context, t *testing.T, api promClient, run report.Run) {
	t.Helper()
	const sel = `{job="gpulens-loadgen"}[10m])`
	one := func(q string) float64 {
		res, err := api.query(ctx, q)
		if err != nil || len(res) != 1 {
			t.Fatalf("%s = %v, %v; want one sample", q, res, err)
		}
		return res[0].Value
	}

	var ok []float64
	for _, r := range run.Requests {
		if r.ErrorClass == "" && r.FirstToken > 0 {
			ok = append(ok, (r.FirstToken - r.Intended).Seconds())
		}
	}
	if want := run.Summary.RequestsCompleted; len(ok) != want || want == 0 {
		t.Fatalf("report: %d successful requests with a first token; summary says %d completed", len(ok), want)
	}
	const countQ = `last_over_time(gpulens_loadgen_time_to_first_token_seconds_count` + sel
	var count float64
	testenv.Poll(ctx, 500*time.Millisecond, func() bool {
		res, err := api.query(ctx, countQ)
		if err == nil && len(res) == 1 {
			count = res[0].Value
		}
		return count == float64(len(ok))
	})
	if count != float64(len(ok)) {
		t.Fatalf("scraped TTFT count %v while the load generator lingers; the report has %d successful requests", count, len(ok))
	}
	sum := one(`last_over_time(gpulens_loadgen_time_to_first_token_seconds_sum` + sel)
	res, err := api.query(ctx, `last_over_time(gpulens_loadgen_time_to_first_token_seconds_bucket`+sel)
	if err != nil || len(res) == 0 {
		t.Fatalf("TTFT buckets: %v, %v", res, err)
	}
	buckets := map[float64]float64{}
	for _, s := range res {
		le, err := strconv.ParseFloat(s.Metric["le"], 64)
		if err != nil {
			t.Fatalf("bucket le=%q: %v", s.Metric["le"], err)
		}
		buckets[le] = s.Value
	}
	les := make([]float64, 0, len(buckets))
	for le := range buckets {
		les = append(les, le)
	}
	sort.Float64s(les)
	for _, le := range les {
		want := 0.0
		for _, v := range ok {
			if v <= le {
				want++
			}
		}
		if got := buckets[le]; got != want {
			t.Errorf("bucket le=%g: Prometheus %v, report %v", le, got, want)
		}
	}
	if !math.IsInf(les[len(les)-1], 1) || buckets[les[len(les)-1]] != count {
		t.Errorf("+Inf bucket %v != count %v", buckets[les[len(les)-1]], count)
	}
	var reportSum float64
	for _, v := range ok {
		reportSum += v
	}
	if math.Abs(sum-reportSum) > 1e-6 {
		t.Errorf("TTFT sum: Prometheus %.9f s, report %.9f s", sum, reportSum)
	}
	t.Logf("TTFT: all %d requests in the scrape, %d buckets equal to the report's records; report p50 %.4f s p99 %.4f s",
		len(ok), len(les), run.Summary.TTFT.P50, run.Summary.TTFT.P99)
}

// query is one PromQL expression of a dashboard, with where it comes from.
type query struct {
	expr, where string
}

var (
	grafanaBuiltins = strings.NewReplacer(
		"$__rate_interval", "1m", "${__rate_interval}", "1m",
		"$__interval_ms", "15000", "$__interval", "15s",
		"$__range_ms", "3600000", "$__range_s", "3600", "$__range", "1h",
	)
	dashboardVar = regexp.MustCompile(`\$\{[A-Za-z_][A-Za-z0-9_]*(:[a-z]+)?\}|\$[A-Za-z_][A-Za-z0-9_]*`)
	labelValues  = regexp.MustCompile(`^\s*label_values\(\s*(.+)\s*,\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*$`)
)

// substitute makes a dashboard expression a query for "All" of every
// variable: Grafana's intervals become durations, $var becomes .* (the
// dashboards use variables only in =~ matchers).
func substitute(expr string) string {
	return dashboardVar.ReplaceAllString(grafanaBuiltins.Replace(expr), ".*")
}

// dashboardQueries lists the PromQL of every panel target and every
// label_values variable of the dashboards in dir.
func dashboardQueries(t *testing.T, dir string) []query {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in %s: %v", dir, err)
	}
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var out []query
	seen := map[string]bool{}
	add := func(expr, where string) {
		expr = substitute(expr)
		if !seen[expr] {
			seen[expr] = true
			out = append(out, query{expr, where})
		}
	}
	for _, f := range files {
		var d struct {
			Panels     []json.RawMessage `json:"panels"`
			Templating struct {
				List []struct {
					Name  string          `json:"name"`
					Type  string          `json:"type"`
					Query json.RawMessage `json:"query"`
				} `json:"list"`
			} `json:"templating"`
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		var walk func(raw []json.RawMessage)
		walk = func(raw []json.RawMessage) {
			for _, r := range raw {
				var p panel
				if err := json.Unmarshal(r, &p); err != nil {
					t.Fatalf("%s: panel: %v", f, err)
				}
				for _, tg := range p.Targets {
					if tg.Expr != "" {
						add(tg.Expr, fmt.Sprintf("%s panel %q", filepath.Base(f), p.Title))
					}
				}
				walk(p.Panels)
			}
		}
		walk(d.Panels)
		for _, v := range d.Templating.List {
			if v.Type != "query" {
				continue
			}
			var q string
			if json.Unmarshal(v.Query, &q) != nil {
				var obj struct {
					Query string `json:"query"`
				}
				if err := json.Unmarshal(v.Query, &obj); err != nil {
					t.Fatalf("%s: variable %s: query %s", f, v.Name, v.Query)
				}
				q = obj.Query
			}
			m := labelValues.FindStringSubmatch(q)
			if m == nil {
				t.Fatalf("%s: variable %s: %q is not label_values(expr, label)", f, v.Name, q)
			}
			add(m[1], fmt.Sprintf("%s variable %s", filepath.Base(f), v.Name))
		}
	}
	return out
}
