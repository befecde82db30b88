package alerts

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"

	"github.com/gpulens/gpulens/internal/testenv"
)

// The DCGM consumer suite: the queries of the tools that read dcgm-exporter
// (testdata/dcgm-consumers/queries.yml, their origins and licences in the
// README beside it), run in one real Prometheus against gpulens's DCGM view
// of four simulated fleets, each answer compared with what dcgm-exporter
// would give.

var consumersDir = filepath.Join("testdata", "dcgm-consumers")

// consumerFleets are the suite's fleets, in the order they run.
var consumerFleets = []string{"hopper", "ampere", "mig", "faulty"}

type consumerSuite struct {
	Origins map[string]struct {
		Repository string `yaml:"repository"`
		File       string `yaml:"file"`
		Commit     string `yaml:"commit"`
		Licence    string `yaml:"licence"`
	} `yaml:"origins"`
	Labelsets map[string][]string `yaml:"labelsets"`
	Queries   []consumerQuery     `yaml:"queries"`
}

type consumerQuery struct {
	Name        string                       `yaml:"name"`
	Origin      string                       `yaml:"origin"`
	Expr        string                       `yaml:"expr"`
	HonorLabels bool                         `yaml:"honor_labels"`
	Expect      map[string]consumerExpection `yaml:"expect"`
}

type consumerExpection struct {
	Series  int                 `yaml:"series"`
	Labels  []string            `yaml:"labels"`
	Values  map[string][]string `yaml:"values"`
	Pending string              `yaml:"pending"`
}

// consumerPending names the differences a case may be marked with: what
// gpulens cannot serve or does not yet serve as dcgm-exporter does.
// README.md lists them.
var consumerPending = map[string]string{
	"gpulens-no-tensor-before-hopper": "NVML has no tensor-pipe activity before Hopper (no GPM): the view serves DCGM_FI_PROF_PIPE_TENSOR_ACTIVE from GPM only, with no fallback",
	"gpulens-lost-gpu-no-pod":         "a lost GPU keeps its XID series (79) but not the pod it was allocated to; dcgm-exporter, mapping pods from the kubelet, keeps it",
	"gpulens-no-power-mgmt-limit-max": "gpulens reads no power-management limit constraints: the counters file's DCGM_FI_DEV_POWER_MGMT_LIMIT_MAX is skipped",
}

// consumerIgnoredLabels are left out of the label comparison: dcgm-exporter
// writes Hostname before May 2026 and hostname after (docs/metrics.md).
// __name__ is the metric's name, not a label of the answer.
var consumerIgnoredLabels = map[string]bool{"Hostname": true, "hostname": true, "__name__": true}

func loadConsumerSuite(t *testing.T) *consumerSuite {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(consumersDir, "queries.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var s consumerSuite
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil {
		t.Fatalf("queries.yml: %v", err)
	}
	return &s
}

// TestConsumerSuiteFixture: every query names a known origin with a
// repository, file and licence, parses, and has an expectation for every
// fleet; every pending mark is a named difference.
func TestConsumerSuiteFixture(t *testing.T) {
	s := loadConsumerSuite(t)
	if len(s.Queries) < 20 {
		t.Errorf("%d queries", len(s.Queries))
	}
	origins := map[string]bool{}
	for _, q := range s.Queries {
		o, ok := s.Origins[q.Origin]
		if !ok || o.Repository == "" || o.File == "" || o.Licence == "" || o.Commit == "" {
			t.Errorf("%s: origin %q without repository, file, commit or licence", q.Name, q.Origin)
		}
		origins[q.Origin] = true
		if _, err := parser.NewParser(parser.Options{}).ParseExpr(consumerSubstitute(q.Expr, "GPU-x")); err != nil {
			t.Errorf("%s: %v", q.Name, err)
		}
		for _, f := range consumerFleets {
			e, ok := q.Expect[f]
			if !ok {
				t.Errorf("%s: no expectation for fleet %s", q.Name, f)
			}
			if e.Pending != "" && consumerPending[e.Pending] == "" {
				t.Errorf("%s on %s: pending %q is not a named difference", q.Name, f, e.Pending)
			}
			if e.Series > 0 && e.Labels == nil {
				t.Errorf("%s on %s: no labels", q.Name, f)
			}
		}
		if len(q.Expect) != len(consumerFleets) {
			t.Errorf("%s: expectations for %d fleets, want %v", q.Name, len(q.Expect), consumerFleets)
		}
	}
	for _, want := range []string{"nvidia-dashboard", "opencost", "opencost-device", "opencost-saturation", "openshift-console-plugin", "keda-openshift-docs", "prometheus-adapter"} {
		if !origins[want] {
			t.Errorf("no query from %s", want)
		}
	}
}

// consumerSubstitute replaces Grafana's variables (All: .+) and the
// OpenShift plugin's selected GPU.
func consumerSubstitute(expr, uuid string) string {
	return strings.NewReplacer(`"$instance"`, `".+"`, `"$gpu"`, `".+"`, `"$uuid"`, `"`+uuid+`"`).Replace(expr)
}

// consumerRestrict adds instance=<target> to every selector of expr, so that
// a query sees one fleet through one ServiceMonitor setting.
func consumerRestrict(expr, instance string) (string, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return "", err
	}
	m := labels.MustNewMatcher(labels.MatchEqual, "instance", instance)
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			vs.LabelMatchers = append(vs.LabelMatchers, m)
		}
		return nil
	})
	return e.String(), nil
}

// consumerTarget is one fleet's exporter: the DCGM view on its own
// listener (scraped with honor_labels false) and at /dcgm/metrics on the
// main one (honor_labels true).
type consumerTarget struct {
	fleet, compat, main string
}

var consumerCompatAddress = regexp.MustCompile(`msg="serving the DCGM-compatible view" address=(\S+)`)

// consumerPromConfig scrapes every target as the Prometheus Operator
// scrapes dcgm-exporter's ServiceMonitor: the target labels come from the
// Kubernetes service discovery meta labels (given here as static labels)
// through the relabelling the operator generates, job = the Service name.
func consumerPromConfig(targets []consumerTarget) string {
	var b strings.Builder
	b.WriteString("global:\n  scrape_interval: 500ms\n  scrape_timeout: 500ms\nscrape_configs:\n")
	for _, honor := range []bool{false, true} {
		name, path := "dcgm-exporter", "/metrics"
		if honor {
			name, path = "dcgm-exporter-honor-labels", "/dcgm/metrics"
		}
		fmt.Fprintf(&b, "  - job_name: %s\n    honor_labels: %v\n    metrics_path: %s\n    static_configs:\n", name, honor, path)
		for _, tg := range targets {
			addr := tg.compat
			if honor {
				addr = tg.main
			}
			fmt.Fprintf(&b, "      - targets: [%q]\n        labels: {__meta_kubernetes_namespace: gpu-operator, __meta_kubernetes_service_name: dcgm-exporter, __meta_kubernetes_pod_name: dcgm-exporter-%s, __meta_kubernetes_pod_container_name: exporter, __meta_kubernetes_endpoint_port_name: metrics}\n", addr, tg.fleet)
		}
		b.WriteString(`    relabel_configs:
      - {source_labels: [__meta_kubernetes_namespace], target_label: namespace}
      - {source_labels: [__meta_kubernetes_service_name], target_label: service}
      - {source_labels: [__meta_kubernetes_pod_name], target_label: pod}
      - {source_labels: [__meta_kubernetes_pod_container_name], target_label: container}
      - {source_labels: [__meta_kubernetes_service_name], target_label: job}
      - {target_label: endpoint, replacement: metrics}
`)
	}
	return b.String()
}

// consumerCompare returns "" when got is what e expects, else the difference.
func consumerCompare(got []promSample, e consumerExpection) string {
	var diffs []string
	if len(got) != e.Series {
		diffs = append(diffs, fmt.Sprintf("%d series, want %d", len(got), e.Series))
	}
	want := slices.Clone(e.Labels)
	sort.Strings(want)
	values := map[string]map[string]bool{}
	for _, s := range got {
		var names []string
		for k, v := range s.metric {
			if v != "" && !consumerIgnoredLabels[k] {
				names = append(names, k)
			}
			if _, ok := e.Values[k]; ok {
				if values[k] == nil {
					values[k] = map[string]bool{}
				}
				values[k][v] = true
			}
		}
		sort.Strings(names)
		if !slices.Equal(names, want) {
			diffs = append(diffs, fmt.Sprintf("series %v: labels %v, want %v", s.metric, names, want))
		}
	}
	for k, w := range e.Values {
		var g []string
		for v := range values[k] {
			g = append(g, v)
		}
		sort.Strings(g)
		if !slices.Equal(g, w) {
			diffs = append(diffs, fmt.Sprintf("%s values %v, want %v", k, g, w))
		}
	}
	return strings.Join(diffs, "; ")
}

// TestDCGMConsumers runs the suite: one exporter per fleet with the DCGM
// view on its own listener and the suite's counters file, one Prometheus
// scraping each of them twice (honorLabels false and true), and every
// query on every fleet compared with dcgm-exporter's answer. It waits for
// each answer with a deadline (no fixed phases).
func TestDCGMConsumers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs four exporters and Prometheus")
	}
	suite := loadConsumerSuite(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bins := testenv.Binaries(t, "gpulens-exporter", "prometheus")
	dir := t.TempDir()
	counters := filepath.Join(consumersDir, "counters.csv")
	var targets []consumerTarget
	procs := map[string]*testenv.Process{}
	for _, fleet := range consumerFleets {
		p := testenv.RunEnv(t, []string{"NODE_NAME=node-" + fleet}, bins[0], "--sim.scenario="+filepath.Join(consumersDir, "fleets", fleet+".yaml"),
			"--sampler.interval=250ms", "--web.listen-address=127.0.0.1:0",
			"--compat.dcgm.listen-address=127.0.0.1:0", "--compat.dcgm.counters-file="+counters)
		procs[fleet] = p
	}
	for _, fleet := range consumerFleets {
		p := procs[fleet]
		main := p.MustAddress(ctx, t)
		var compat string
		if !testenv.Poll(ctx, 50*time.Millisecond, func() bool {
			m := consumerCompatAddress.FindStringSubmatch(p.Log())
			if m != nil {
				compat = m[1]
			}
			return m != nil
		}) {
			t.Fatalf("%s: no DCGM listener logged:\n%s", fleet, p.Log())
		}
		targets = append(targets, consumerTarget{fleet, compat, main})
	}
	// The faulty fleet's GPU 1 is lost at 1 s: no scrape may see it before.
	testenv.Eventually(ctx, t, 100*time.Millisecond, "GPU 1 of the faulty fleet down", func() (bool, string) {
		body, err := testenv.Scrape(ctx, "http://"+targets[3].main+"/metrics", "")
		return err == nil && strings.Contains(string(body), `gpulens_gpu_up{gpu="1"`) && regexp.MustCompile(`gpulens_gpu_up\{gpu="1"[^}]*\} 0`).Match(body), string(body)
	})
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(consumerPromConfig(targets)), 0o644); err != nil {
		t.Fatal(err)
	}
	prom := testenv.Run(t, bins[1], "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address=127.0.0.1:0")
	addr := prom.MustAddress(ctx, t)

	instance := func(tg consumerTarget, honor bool) string {
		if honor {
			return tg.main
		}
		return tg.compat
	}
	// $uuid: the UUID of each fleet's GPU 0, once it is scraped.
	uuids := map[string]string{}
	for _, tg := range targets {
		testenv.Eventually(ctx, t, 250*time.Millisecond, tg.fleet+": GPU 0's UUID", func() (bool, string) {
			r, err := promQuery(ctx, addr, fmt.Sprintf(`group by (UUID) (DCGM_FI_DEV_FB_USED{gpu="0",instance=%q})`, tg.compat), time.Now())
			if err != nil || len(r) != 1 {
				return false, fmt.Sprint(r, err)
			}
			uuids[tg.fleet] = r[0].metric["UUID"]
			return true, ""
		})
	}

	type result struct {
		query consumerQuery
		fleet string
		e     consumerExpection
		expr  string
		diff  string
	}
	var cases []*result
	for _, q := range suite.Queries {
		for _, tg := range targets {
			expr, err := consumerRestrict(consumerSubstitute(q.Expr, uuids[tg.fleet]), instance(tg, q.HonorLabels))
			if err != nil {
				t.Fatalf("%s: %v", q.Name, err)
			}
			cases = append(cases, &result{query: q, fleet: tg.fleet, e: q.Expect[tg.fleet], expr: expr, diff: "not run"})
		}
	}
	// Wait until every unmarked case answers as expected (or the deadline);
	// the marked ones are then read once, on the same data.
	check := func(c *result) {
		r, err := promQuery(ctx, addr, c.expr, time.Now())
		if err != nil {
			c.diff = err.Error()
			return
		}
		c.diff = consumerCompare(r, c.e)
	}
	// The answers settle within a few scrapes (two GPM samples, one
	// window); a minute bounds a case that never does.
	pctx, pcancel := context.WithTimeout(ctx, time.Minute)
	defer pcancel()
	testenv.Poll(pctx, 500*time.Millisecond, func() bool {
		done := true
		for _, c := range cases {
			if c.e.Pending == "" && c.diff != "" {
				check(c)
				done = done && c.diff == ""
			}
		}
		return done
	})
	for _, c := range cases {
		if c.e.Pending != "" {
			check(c)
		}
		t.Run(c.query.Name+"/"+c.fleet, func(t *testing.T) {
			switch {
			case c.e.Pending == "" && c.diff != "":
				t.Errorf("%s\n  (dcgm-exporter would give %d series with labels %v)\n  %s", c.expr, c.e.Series, c.e.Labels, c.diff)
			case c.e.Pending != "" && c.diff == "":
				t.Errorf("marked pending %s (%s) but the view now answers as dcgm-exporter would: remove the mark in queries.yml", c.e.Pending, consumerPending[c.e.Pending])
			case c.e.Pending != "":
				t.Skipf("pending %s: %s\n  %s\n  differs: %s", c.e.Pending, consumerPending[c.e.Pending], c.expr, c.diff)
			}
		})
	}
	if t.Failed() {
		for _, tg := range targets {
			l := procs[tg.fleet].Log()
			t.Logf("%s exporter log tail:\n%s", tg.fleet, l[max(0, len(l)-3000):])
		}
	}
}

// TestConsumerCompare: the comparison fails on a wrong count, a missing or
// extra label and a wrong value, and the restriction reaches every
// selector of a query.
func TestConsumerCompare(t *testing.T) {
	e := consumerExpection{Series: 2, Labels: []string{"pod", "UUID"}, Values: map[string][]string{"pod": {"a", "b"}}}
	good := []promSample{
		{metric: map[string]string{"__name__": "x", "pod": "a", "UUID": "u0", "Hostname": "n"}},
		{metric: map[string]string{"pod": "b", "UUID": "u1"}},
	}
	if d := consumerCompare(good, e); d != "" {
		t.Errorf("matching answer: %s", d)
	}
	for name, got := range map[string][]promSample{
		"one series":    good[:1],
		"extra label":   {good[0], {metric: map[string]string{"pod": "b", "UUID": "u1", "GPU_I_ID": "1"}}},
		"missing label": {good[0], {metric: map[string]string{"pod": "b"}}},
		"wrong value":   {good[0], {metric: map[string]string{"pod": "c", "UUID": "u1"}}},
	} {
		if d := consumerCompare(got, e); d == "" {
			t.Errorf("%s: no difference found", name)
		}
	}
	r, err := consumerRestrict(`sum(a{x="1"}) / (sum(rate(b[1m])) + c)`, "h:1")
	if err != nil {
		t.Fatal(err)
	}
	if want := `sum(a{instance="h:1",x="1"}) / (sum(rate(b{instance="h:1"}[1m])) + c{instance="h:1"})`; r != want {
		t.Errorf("restricted:\n%s\nwant\n%s", r, want)
	}
}
