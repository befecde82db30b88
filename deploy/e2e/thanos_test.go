package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpulens/gpulens/internal/promrules"
	"github.com/prometheus/common/model"

	"go.yaml.in/yaml/v3"

	"github.com/gpulens/gpulens/internal/testenv"
)

// thanosEnv turns TestThanosGlobalView on.
const thanosEnv = "GPULENS_THANOS"

// thanosCluster is one cluster of the global view: its simulated fleet and
// the shipped Prometheus configuration that scrapes it.
type thanosCluster struct {
	name, scenario, usd string
	api                 promClient
}

// TestThanosGlobalView runs the two-cluster global view of
// deploy/compose/compose.thanos.yaml on the real engine: two Prometheus
// servers, each with the shipped rules and its cluster's shipped
// configuration (deploy/compose/prometheus.cluster-{a,b}.yml), each behind
// a Thanos sidecar, and Thanos Query over both. The fleet and cost
// dashboards' key queries (GPUs up and by cluster, the busy ratio, the
// spend and the dollars per namespace), asked of Thanos Query, must equal
// what the two clusters answer themselves, summed (or, for the mean busy
// ratio, weighted by their GPUs), at the same instant.
func TestThanosGlobalView(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: starts two Prometheus servers, two Thanos sidecars and Thanos Query")
	}
	// A cold build of Thanos is many minutes of two cores: make test-thanos
	// builds it (bin/thanos) and sets this; make test does not.
	if os.Getenv(thanosEnv) == "" {
		t.Skipf("opt-in: needs Thanos, built by make test-thanos (or set %s=1 to build it here)", thanosEnv)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bins := testenv.Binaries(t, "gpulens-exporter", "prometheus", "thanos")
	exporterBin, promBin, thanosBin := bins[0], bins[1], bins[2]

	rulesDir := filepath.Join(dir, "rules")
	if err := os.Mkdir(rulesDir, 0o755); err != nil {
		t.Fatal(err)
	}
	ruleFiles, err := filepath.Glob(filepath.Join(repoRoot, "alerts", "*.rules.yml"))
	if err != nil || len(ruleFiles) == 0 {
		t.Fatalf("no rule files in alerts/: %v", err)
	}
	copyRules(t, ruleFiles, rulesDir, forInTest)
	// Groups of their own interval (the cost rules: 1m) evaluate every
	// second too, as the test's global interval: their first evaluation
	// would otherwise come up to a minute after the start.
	var copies []string
	for _, f := range ruleFiles {
		copies = append(copies, filepath.Join(rulesDir, filepath.Base(f)))
	}
	if err := promrules.CopyFiles(copies, rulesDir, promrules.SetIntervals(model.Duration(time.Second))); err != nil {
		t.Fatal(err)
	}

	clusters := []*thanosCluster{
		{name: "a", scenario: "demo", usd: "2.5"},
		{name: "b", scenario: "mixed-fleet", usd: "4"},
	}
	var endpoints []string
	for _, c := range clusters {
		exp := testenv.Run(t, exporterBin, "--sim.scenario="+c.scenario, "--cost.gpu-hourly-usd="+c.usd,
			"--web.listen-address=127.0.0.1:0")
		expAddr := exp.MustAddress(ctx, t)
		shipped, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "compose", "prometheus.cluster-"+c.name+".yml"))
		if err != nil {
			t.Fatal(err)
		}
		if got := externalCluster(t, shipped); got != c.name {
			t.Fatalf("prometheus.cluster-%s.yml: external label cluster=%q, want %q", c.name, got, c.name)
		}
		cfg, err := testConfig(shipped, rulesDir, map[string]string{jobExporter: expAddr})
		if err != nil {
			t.Fatalf("prometheus.cluster-%s.yml: %v", c.name, err)
		}
		cfgPath := filepath.Join(dir, "prometheus-"+c.name+".yml")
		if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
			t.Fatal(err)
		}
		tsdb := filepath.Join(dir, "tsdb-"+c.name)
		prom := testenv.Run(t, promBin, "--config.file="+cfgPath, "--storage.tsdb.path="+tsdb,
			"--storage.tsdb.min-block-duration=2h", "--storage.tsdb.max-block-duration=2h",
			"--web.listen-address=127.0.0.1:0")
		c.api = newPromClient(t, prom.MustAddress(ctx, t))
		grpc, httpAddr := freeLoopback(t), freeLoopback(t)
		testenv.Run(t, thanosBin, "sidecar", "--tsdb.path="+tsdb, "--prometheus.url="+c.api.base,
			"--grpc-address="+grpc, "--http-address="+httpAddr)
		endpoints = append(endpoints, grpc)
	}
	queryAddr := freeLoopback(t)
	args := []string{"query", "--http-address=" + queryAddr, "--grpc-address=" + freeLoopback(t)}
	for _, e := range endpoints {
		args = append(args, "--endpoint="+e)
	}
	testenv.Run(t, thanosBin, args...)
	global := newPromClient(t, queryAddr)

	// Every record the queries read exists in both clusters, and Thanos
	// Query sees both.
	ready := []string{
		"gpulens_gpu_up", "gpu:gpulens_gpu_busy:ratio_rate5m", "cluster:gpulens_gpus_cost:usd_per_hour",
		"namespace:gpulens_allocated_gpus_cost:usd_per_hour",
	}
	var missing string
	ok := testenv.Poll(ctx, 500*time.Millisecond, func() bool {
		for _, m := range ready {
			for _, c := range clusters {
				if s, err := c.api.query(ctx, m); err != nil || len(s) == 0 {
					missing = "cluster " + c.name + ": " + m
					return false
				}
			}
			s, err := global.query(ctx, "count by (cluster) ("+m+")")
			if err != nil || len(s) != len(clusters) {
				missing = fmt.Sprintf("Thanos Query: %s: %v %v", m, s, err)
				return false
			}
		}
		return true
	})
	if !ok {
		t.Fatalf("not ready: %s", missing)
	}
	q := func(board, title, ref string) string {
		return substitute(panelExpr(t, filepath.Join(repoRoot, "dashboards", board+".json"), title, ref))
	}
	sums := []struct{ what, expr string }{
		{"fleet: GPUs up", q("gpulens-fleet", "GPUs up", "A")},
		{"cost: spend per hour", q("gpulens-cost", "Spend per hour", "A")},
		{"GPUs by cluster", "sum by (cluster) (gpulens_gpu_up)"},
		{"dollars per namespace (allocation)", "sum by (namespace) (" + q("gpulens-cost", "Cost per namespace by allocation", "A") + ")"},
		{"dollars per namespace (use)", "sum by (namespace) (" + q("gpulens-cost", "Cost per namespace by use", "A") + ")"},
		{"cost: per namespace and cluster", q("gpulens-cost", "Cost per namespace by allocation", "A")},
		{"busy GPU-seconds per second", "sum(gpu:gpulens_gpu_busy:ratio_rate5m)"},
	}
	mean := q("gpulens-fleet", "Mean utilisation (5m)", "A")

	// Each comparison at one instant a few seconds past, the clusters asked
	// before and after Thanos Query: a rule evaluation of that instant that
	// a busy machine delayed would change their answer in between, and
	// that instant is tried again with a later one.
	var problems []string
	ok = testenv.Poll(ctx, time.Second, func() bool {
		problems = nil
		at := time.Now().Add(-5 * time.Second)
		for _, s := range sums {
			clustersSum := func() map[string]float64 {
				out := map[string]float64{}
				for _, c := range clusters {
					for k, v := range instantAt(ctx, t, c.api, s.expr, at) {
						out[k] += v
					}
				}
				return out
			}
			want := clustersSum()
			got := instantAt(ctx, t, global, s.expr, at)
			if again := clustersSum(); !reflect.DeepEqual(again, want) {
				problems = append(problems, s.what+": the clusters' answers changed while asked")
				return false
			}
			if p := compareClose(s.what, s.expr, got, want); p != "" {
				problems = append(problems, p)
			}
		}
		// The fleet's mean utilisation: the mean over both clusters' GPUs.
		var sum, n float64
		for _, c := range clusters {
			m := instantAt(ctx, t, c.api, mean, at)[""]
			k := instantAt(ctx, t, c.api, "count(gpu:gpulens_gpu_busy:ratio_rate5m)", at)[""]
			sum, n = sum+m*k, n+k
		}
		if p := compareClose("fleet: mean utilisation", mean, instantAt(ctx, t, global, mean, at), map[string]float64{"": sum / n}); p != "" {
			problems = append(problems, p)
		}
		return len(problems) == 0
	})
	if !ok {
		t.Fatalf("Thanos Query does not answer the sum of the clusters:\n%s", strings.Join(problems, "\n"))
	}
	t.Logf("%d dashboard queries through Thanos Query equal the sum of clusters a and b", len(sums)+1)
}

// compareClose compares two query results series by series, to 1e-9 of
// the value (Thanos sums in another order than the clusters' own answers),
// and returns the difference, or "" when they are equal and not all zero.
func compareClose(what, expr string, got, want map[string]float64) string {
	if len(want) == 0 || len(got) != len(want) {
		return fmt.Sprintf("%s (%s): Thanos Query %v, the clusters %v", what, expr, got, want)
	}
	nonzero := false
	for k, w := range want {
		g, ok := got[k]
		if !ok || math.Abs(g-w) > 1e-9*math.Max(1, math.Abs(w)) {
			return fmt.Sprintf("%s (%s) {%s}: Thanos Query %v, the clusters %v", what, expr, k, g, w)
		}
		nonzero = nonzero || w != 0
	}
	if !nonzero {
		return fmt.Sprintf("%s (%s): every value is 0, which proves nothing: %v", what, expr, want)
	}
	return ""
}

// instantAt runs an instant query at ts and returns its values by label set.
func instantAt(ctx context.Context, t *testing.T, c promClient, expr string, ts time.Time) map[string]float64 {
	t.Helper()
	v, _, _, err := c.api.Query(ctx, expr, ts)
	if err != nil {
		t.Fatalf("%s: %s: %v", c.base, expr, err)
	}
	vec, ok := v.(model.Vector)
	if !ok {
		t.Fatalf("%s: %s: result type %q", c.base, expr, v.Type())
	}
	out := map[string]float64{}
	for _, s := range vec {
		out[labelKey(labels(s.Metric))] = float64(s.Value)
	}
	return out
}

// labelKey writes a label set in a fixed order; __name__ is dropped.
func labelKey(m map[string]string) string {
	var parts []string
	for k, v := range m {
		if k != "__name__" {
			parts = append(parts, k+"="+strconv.Quote(v))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// panelExpr returns the expression of target ref of the panel titled title.
func panelExpr(t *testing.T, path, title, ref string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr  string `json:"expr"`
				RefID string `json:"refId"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			if p.Title == title && tg.RefID == ref {
				return tg.Expr
			}
		}
	}
	t.Fatalf("%s: no panel %q with target %s", path, title, ref)
	return ""
}

// externalCluster returns the configuration's external cluster label.
func externalCluster(t *testing.T, cfg []byte) string {
	t.Helper()
	var c struct {
		Global struct {
			ExternalLabels map[string]string `yaml:"external_labels"`
		} `yaml:"global"`
		ScrapeConfigs []struct {
			StaticConfigs []struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(cfg, &c); err != nil {
		t.Fatal(err)
	}
	// The rules group by the series' own cluster label: every target must
	// carry the external one.
	for _, sc := range c.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			if st.Labels["cluster"] != c.Global.ExternalLabels["cluster"] {
				t.Errorf("a target's cluster label %q differs from the external label %q", st.Labels["cluster"], c.Global.ExternalLabels["cluster"])
			}
		}
	}
	return c.Global.ExternalLabels["cluster"]
}

// freeLoopback returns a loopback address whose port is free now (Thanos
// logs the address it was given, not the port a :0 got).
func freeLoopback(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
