package e2e

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/gpulens/gpulens/internal/promrules"
	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"go.yaml.in/yaml/v3"
)

// testConfig rewrites the shipped Prometheus configuration for the test:
// 1 s scrape and evaluation intervals, rule files from rulesDir, no
// Alertmanager (nothing listens for it here), and each job's targets set to
// the address of the program the test started for it. Every other setting
// stays as shipped. The jobs of the file and of targets must be the same.
func testConfig(shipped []byte, rulesDir string, targets map[string]string) ([]byte, error) {
	var cfg map[string]any
	if err := yaml.Unmarshal(shipped, &cfg); err != nil {
		return nil, fmt.Errorf("parsing the shipped configuration: %w", err)
	}
	global, _ := cfg["global"].(map[string]any)
	if global == nil {
		global = map[string]any{}
	}
	global["scrape_interval"], global["evaluation_interval"], global["scrape_timeout"] = "1s", "1s", "1s"
	cfg["global"] = global
	cfg["rule_files"] = []any{filepath.Join(rulesDir, "*.rules.yml")}
	delete(cfg, "alerting")
	jobs, _ := cfg["scrape_configs"].([]any)
	seen := map[string]bool{}
	for i, j := range jobs {
		job, ok := j.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("scrape_configs[%d] is not a mapping", i)
		}
		name, _ := job["job_name"].(string)
		addr, ok := targets[name]
		if !ok {
			return nil, fmt.Errorf("scrape_configs[%d]: job %q has no program in the test", i, name)
		}
		seen[name] = true
		statics, _ := job["static_configs"].([]any)
		if len(statics) != 1 {
			return nil, fmt.Errorf("job %s: want one static_configs entry, got %d", name, len(statics))
		}
		sc, ok := statics[0].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("job %s: static_configs[0] is not a mapping", name)
		}
		sc["targets"] = []any{addr}
	}
	for name := range targets {
		if !seen[name] {
			return nil, fmt.Errorf("the shipped configuration has no job %q", name)
		}
	}
	return yaml.Marshal(cfg)
}

// copyRules writes the shipped rule files into dir with every alert's
// `for:` set to d (promrules.SetFor: nothing else changes) and returns
// the alerts it changed.
func copyRules(t *testing.T, files []string, dir, d string) []string {
	t.Helper()
	dur, err := model.ParseDuration(d)
	if err != nil {
		t.Fatal(err)
	}
	var changed []string
	if err := promrules.CopyFiles(files, dir, promrules.SetFor(dur, &changed)); err != nil {
		t.Fatal(err)
	}
	sort.Strings(changed)
	return changed
}

// promClient queries a Prometheus (or Thanos Query) server's HTTP API
// with client_golang's client.
type promClient struct {
	base string // http://host:port
	api  promv1.API
}

func newPromClient(t *testing.T, addr string) promClient {
	t.Helper()
	c, err := api.NewClient(api.Config{Address: "http://" + addr, Client: &http.Client{Timeout: 10 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	return promClient{base: "http://" + addr, api: promv1.NewAPI(c)}
}

type sample struct {
	Metric map[string]string
	Value  float64
}

// query runs an instant query now and returns its vector (a scalar result
// is one sample without labels).
func (c promClient) query(ctx context.Context, q string) ([]sample, error) {
	v, _, _, err := c.api.Query(ctx, q, time.Time{})
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", q, err)
	}
	switch v := v.(type) {
	case model.Vector:
		out := make([]sample, 0, len(v))
		for _, s := range v {
			out = append(out, sample{Metric: labels(s.Metric), Value: float64(s.Value)})
		}
		return out, nil
	case *model.Scalar:
		return []sample{{Value: float64(v.Value)}}, nil
	default:
		return nil, fmt.Errorf("query %s: unexpected result type %q", q, v.Type())
	}
}

func labels[M ~map[model.LabelName]model.LabelValue](m M) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[string(k)] = string(v)
	}
	return out
}

type alert struct {
	Labels map[string]string
	State  string
}

func (c promClient) alerts(ctx context.Context) ([]alert, error) {
	r, err := c.api.Alerts(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]alert, 0, len(r.Alerts))
	for _, a := range r.Alerts {
		out = append(out, alert{Labels: labels(a.Labels), State: string(a.State)})
	}
	return out, nil
}
