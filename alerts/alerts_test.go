package alerts

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"

	"github.com/gpulens/gpulens/alerts/promcheck"
	"github.com/gpulens/gpulens/collector"
	"github.com/gpulens/gpulens/dashboards"
	"github.com/gpulens/gpulens/internal/sim/gpusim"
	"github.com/gpulens/gpulens/internal/testenv"
)

// ruleFiles are the shipped rule files: every *.rules.yml of this folder.
var ruleFiles = func() []string {
	files, err := filepath.Glob("*.rules.yml")
	if err != nil {
		panic(err)
	}
	return files
}()

const runbookPrefix = "https://github.com/gpulens/gpulens/blob/main/docs/runbooks.md#"

func loadRules(t *testing.T) (records []rulefmt.Rule, alerts []rulefmt.Rule) {
	t.Helper()
	for _, f := range ruleFiles {
		groups, errs := rulefmt.ParseFile(f, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
		if len(errs) > 0 {
			t.Fatal(errors.Join(errs...))
		}
		for _, g := range groups.Groups {
			for _, r := range g.Rules {
				if r.Alert != "" {
					alerts = append(alerts, r)
				} else {
					records = append(records, r)
				}
			}
		}
	}
	return records, alerts
}

// anchors returns the GitHub anchors of docs/runbooks.md's level-2
// headings and, for each, the section's text.
func anchors(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile("../docs/runbooks.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	var cur string
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		line := sc.Text()
		if h, ok := strings.CutPrefix(line, "## "); ok {
			cur = githubAnchor(h)
			out[cur] = ""
			continue
		}
		if cur != "" {
			out[cur] += line + "\n"
		}
	}
	return out
}

// githubAnchor is GitHub's heading slug: lower case, punctuation other than
// '-' and '_' dropped, spaces to '-'.
func githubAnchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9'):
			b.WriteRune(r)
		}
	}
	return b.String()
}

var stateAlert = regexp.MustCompile(`== [01]\s*$`)

var recordName = regexp.MustCompile(`^[a-z_]+:[a-z0-9_]+:[a-z0-9_]+$`)

func TestRuleConventions(t *testing.T) {
	records, alerts := loadRules(t)
	if len(alerts) < 14 {
		t.Errorf("%d alerts, want at least 14", len(alerts))
	}
	for _, r := range records {
		if !recordName.MatchString(r.Record) {
			t.Errorf("recording rule %s: name is not level:metric:operations", r.Record)
		}
	}
	sections := anchors(t)
	linked := map[string]bool{}
	seen := map[string]bool{}
	for _, a := range alerts {
		if seen[a.Alert] {
			t.Errorf("alert %s defined twice", a.Alert)
		}
		seen[a.Alert] = true
		switch a.Labels["severity"] {
		case "critical", "warning", "info":
		default:
			t.Errorf("alert %s: severity %q, want critical, warning or info", a.Alert, a.Labels["severity"])
		}
		if a.Annotations["summary"] == "" {
			t.Errorf("alert %s: no summary", a.Alert)
		}
		d := a.Annotations["description"]
		if !strings.Contains(d, "$labels.") {
			t.Errorf("alert %s: description %q should name the labels", a.Alert, d)
		}
		// A state alert (x == 0, x == 1) has no value worth quoting.
		if !stateAlert.MatchString(a.Expr) && !strings.Contains(d, "$value") {
			t.Errorf("alert %s: description %q should quote the (humanized) value", a.Alert, d)
		}
		u := a.Annotations["runbook_url"]
		anchor, ok := strings.CutPrefix(u, runbookPrefix)
		if !ok {
			t.Errorf("alert %s: runbook_url %q does not start with %s", a.Alert, u, runbookPrefix)
			continue
		}
		if anchor != strings.ToLower(a.Alert) {
			t.Errorf("alert %s: runbook anchor %q, want %q", a.Alert, anchor, strings.ToLower(a.Alert))
		}
		linked[anchor] = true
		body, ok := sections[anchor]
		if !ok {
			t.Errorf("alert %s: docs/runbooks.md has no section ## %s", a.Alert, a.Alert)
			continue
		}
		for _, part := range []string{"**Meaning.**", "**Confirm.**", "**Act.**"} {
			if !strings.Contains(body, part) {
				t.Errorf("runbook section %s lacks %s", a.Alert, part)
			}
		}
	}
	for anchor := range sections {
		if strings.HasPrefix(anchor, "gpulens") && !linked[anchor] {
			t.Errorf("docs/runbooks.md section #%s belongs to no alert", anchor)
		}
	}
}

// promtool test files, as far as the coverage check reads them.
type testFile struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		Name          string `yaml:"name"`
		AlertRuleTest []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
		PromQLExprTest []struct {
			Expr string `yaml:"expr"`
		} `yaml:"promql_expr_test"`
	} `yaml:"tests"`
}

// Every alert has a firing and a non-firing case; every recording rule is
// the expression of a promql_expr_test.
func TestPromtoolTestsCoverEveryRule(t *testing.T) {
	records, alerts := loadRules(t)
	files, err := filepath.Glob("tests/*.test.yml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no promtool test files: %v", err)
	}
	firing, quiet, exprs := map[string]int{}, map[string]int{}, map[string]bool{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var tf testFile
		if err := yaml.Unmarshal(raw, &tf); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, g := range tf.Tests {
			for _, a := range g.AlertRuleTest {
				if len(a.ExpAlerts) > 0 {
					firing[a.Alertname]++
				} else {
					quiet[a.Alertname]++
				}
			}
			for _, e := range g.PromQLExprTest {
				exprs[strings.TrimSpace(e.Expr)] = true
			}
		}
	}
	for _, a := range alerts {
		if firing[a.Alert] == 0 {
			t.Errorf("alert %s has no firing test case", a.Alert)
		}
		if quiet[a.Alert] == 0 {
			t.Errorf("alert %s has no non-firing test case", a.Alert)
		}
	}
	for _, r := range records {
		if !exprs[r.Record] {
			t.Errorf("recording rule %s has no promql_expr_test", r.Record)
		}
	}
}

// promtool returns the path of the pinned promtool binary (tools/go.mod),
// from the test harness (skipped under -short).
func promtool(t *testing.T) string {
	t.Helper()
	return testenv.Binary(t, "promtool")
}

// promtool test rules must fail, naming the alert, when an expected result
// is wrong, and pass on the same test when it is right.
func TestPromtoolCatchesWrongExpectation(t *testing.T) {
	bin := promtool(t)
	dir := t.TempDir()
	for _, f := range ruleFiles {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const test = `rule_files: [gpulens-recording.rules.yml, gpulens-alerts.rules.yml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'gpulens_gpu_up{instance="n0",gpu="3",uuid="GPU-3"}'
        values: '1 1 1 0+0x7'
    alert_rule_test:
      - eval_time: 6m
        alertname: GpulensGPULost
        exp_alerts:
          - exp_labels: {severity: %s, instance: n0, gpu: '3', uuid: GPU-3}
            exp_annotations:
              summary: 'GPU 3 on n0 is lost or unreadable'
              description: 'For 2 minutes, the exporter on n0 failed to read GPU 3 (GPU-3) at least once a minute: it fell off the bus, hangs, or every NVML call fails.'
              runbook_url: '` + runbookPrefix + `gpulensgpulost'
    promql_expr_test:
      - expr: gpulens:ttft_slo_objective:ratio
        eval_time: 1m
        exp_samples: [{labels: 'gpulens:ttft_slo_objective:ratio', value: %s}]
`
	tests := []struct {
		name, severity, objective string
		wantFail                  []string
	}{
		{"right", "critical", "0.99", nil},
		{"wrong alert label", "warning", "0.99", []string{"alertname: GpulensGPULost", `severity="warning"`}},
		{"wrong recorded value", "critical", "0.95", []string{`expr: "gpulens:ttft_slo_objective:ratio"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".test.yml")
			if err := os.WriteFile(f, fmt.Appendf(nil, test, tc.severity, tc.objective), 0o644); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			out, err := testenv.CombinedOutput(ctx, nil, bin, "test", "rules", f)
			if tc.wantFail == nil {
				if err != nil {
					t.Fatalf("promtool failed on a correct test: %v\n%s", err, out)
				}
				return
			}
			if err == nil {
				t.Fatalf("promtool passed a wrong expectation:\n%s", out)
			}
			for _, w := range tc.wantFail {
				if !strings.Contains(string(out), w) {
					t.Errorf("promtool output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// liveKnown scrapes the simulated exporter on every built-in scenario and
// testdata/xid.yaml, and the load generator against its simulated server,
// and returns every series name they serve.
func liveKnown(t *testing.T) promcheck.Known {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bins := testenv.Binaries(t, "gpulens-exporter", "gpulens-loadgen")
	exporterBin, loadgenBin := bins[0], bins[1]
	scenarios := append(gpusim.BuiltinNames(), "testdata/xid.yaml")
	var (
		mu      sync.Mutex
		known   = promcheck.Known{}
		errs    []error
		wg      sync.WaitGroup
		limiter = make(chan struct{}, 4)
	)
	record := func(what string, body []byte, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err == nil {
			err = known.AddExposition(bytes.NewReader(body))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
	}
	for _, sc := range scenarios {
		wg.Go(func() {
			limiter <- struct{}{}
			defer func() { <-limiter }()
			body, err := testenv.ScrapeExporter(ctx, exporterBin, sc, 1500*time.Millisecond)
			record("exporter scenario "+sc, body, err)
		})
	}
	wg.Go(func() {
		limiter <- struct{}{}
		defer func() { <-limiter }()
		body, err := testenv.ScrapeLoadgen(ctx, loadgenBin, 2*time.Second)
		record("load generator", body, err)
	})
	wg.Wait()
	if len(errs) > 0 {
		t.Fatal(errors.Join(errs...))
	}
	known.Add(promcheck.PrometheusSeries...)
	if err := known.AddRuleFiles(ruleFiles...); err != nil {
		t.Fatal(err)
	}
	described := describedMetrics()
	for name, why := range notInSimulation {
		if known[name] {
			t.Logf("%s now appears in a live scrape: drop it from notInSimulation", name)
			continue
		}
		if !described[name] {
			t.Errorf("notInSimulation lists %s (%s), which no exporter collector describes", name, why)
			continue
		}
		known.Add(name)
	}
	return known
}

// notInSimulation are exporter metrics the simulated exporter cannot serve;
// each must still be described by a collector.
var notInSimulation = map[string]string{
	"gpulens_probe_errors_total": "appears with the probe's first failure; the simulated CUDA devices do not fail",
}

var fqNameRe = regexp.MustCompile(`fqName: "([^"]+)"`)

// describedMetrics returns the names every exporter collector describes.
func describedMetrics() map[string]bool {
	ch := make(chan *prometheus.Desc, 1024)
	for _, f := range collector.Factories() {
		f.New().Describe(ch)
	}
	collector.DescribeProbe(ch)
	close(ch)
	out := map[string]bool{}
	for d := range ch {
		if m := fqNameRe.FindStringSubmatch(d.String()); m != nil {
			out[m[1]] = true
		}
	}
	return out
}

// Every expression of the rules and dashboards names only metrics that a
// live gpulens component serves, that a recording rule records, or that
// Prometheus writes.
func TestExpressionsNameLiveMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the exporter and load generator")
	}
	known := liveKnown(t)
	for _, must := range []string{"gpulens_gpu_up", "gpulens_gpu_xid_errors_total", "gpulens_mig_memory_used_bytes",
		"gpulens_process_gpu_time_share_ratio", "gpulens_loadgen_time_to_first_token_seconds_bucket"} {
		if !known[must] {
			t.Errorf("live scrapes lack %s: the scrape set-up is broken", must)
		}
	}
	type where struct{ loc, expr string }
	var all []where
	records, alerts := loadRules(t)
	for _, r := range append(records, alerts...) {
		all = append(all, where{"rule " + r.Record + r.Alert, r.Expr})
	}
	for _, b := range dashboards.All() {
		raw, err := os.ReadFile(filepath.Join("..", "dashboards", b.File))
		if err != nil {
			t.Fatal(err)
		}
		exprs, keys, err := dashboards.Expressions(raw, promcheck.VariableQuery)
		if err != nil {
			t.Fatalf("%s: %v", b.File, err)
		}
		for _, k := range keys {
			all = append(all, where{b.File + " " + k, exprs[k]})
		}
	}
	used := map[string]bool{}
	for _, w := range all {
		if err := known.Check(w.expr); err != nil {
			t.Errorf("%s: %v", w.loc, err)
		}
		names, _ := promcheck.MetricNames(w.expr)
		for _, n := range names {
			used[n] = true
		}
	}
	t.Logf("%d expressions checked against %d known series names; %d distinct metrics used", len(all), len(known), len(used))
	// Every recording rule feeds a dashboard or an alert.
	var unused []string
	for _, r := range records {
		if !used[r.Record] {
			unused = append(unused, r.Record)
		}
	}
	sort.Strings(unused)
	if len(unused) > 0 {
		t.Errorf("recording rules used by no alert or dashboard: %v", unused)
	}
}

// The demo's probe cadence is the one tests/probe-cadence.test.yml and the
// demo scenario's header give GpulensGPUStolenTimeHigh's timing for (18
// minutes at 30 s probes; 30-45 at the default 5 minutes): a demo that
// probes at another interval would show the alert at another time than
// they say.
func TestDemoProbeCadence(t *testing.T) {
	t.Parallel()
	script, err := os.ReadFile(filepath.Join("..", "scripts", "demo.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`--collector\.probe\.interval=(\S+)`).FindAllSubmatch(script, -1)
	if len(m) != 1 || string(m[0][1]) != "30s" {
		t.Fatalf("scripts/demo.sh probes with %q; tests/probe-cadence.test.yml and scenarios/demo.yaml's header assume one --collector.probe.interval=30s: change them together", m)
	}
	test, err := os.ReadFile(filepath.Join("tests", "probe-cadence.test.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(test, []byte("interval: 30s")) {
		t.Errorf("tests/probe-cadence.test.yml does not feed one value per 30 s probe")
	}
}
