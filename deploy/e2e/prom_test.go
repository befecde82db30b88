package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"testing"

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

// shortenFor rewrites every `for:` of a rule file to d and returns the new
// file and the names of the alerts it changed. Everything else, the
// expressions first of all, stays as shipped (checked by the caller).
func shortenFor(src []byte, d string) ([]byte, []string, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, nil, err
	}
	var changed []string
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n.Kind == yaml.MappingNode {
			alert := ""
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == "alert" {
					alert = n.Content[i+1].Value
				}
			}
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == "for" && alert != "" {
					n.Content[i+1].Value = d
					changed = append(changed, alert)
				}
			}
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(&doc)
	out, err := yaml.Marshal(&doc)
	return out, changed, err
}

// withoutFor decodes a rule file with every `for:` removed, to compare two
// files up to their `for:` durations.
func withoutFor(src []byte) (any, error) {
	var v any
	if err := yaml.Unmarshal(src, &v); err != nil {
		return nil, err
	}
	var strip func(v any)
	strip = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			delete(x, "for")
			for _, c := range x {
				strip(c)
			}
		case []any:
			for _, c := range x {
				strip(c)
			}
		}
	}
	strip(v)
	return v, nil
}

// copyRules writes the shipped rule files into dir with `for:` set to d,
// after checking that nothing else changed.
func copyRules(t *testing.T, files []string, dir, d string) []string {
	t.Helper()
	var all []string
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out, changed, err := shortenFor(src, d)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		a, errA := withoutFor(src)
		b, errB := withoutFor(out)
		if errA != nil || errB != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: the copy differs from the shipped file in more than for: (%v, %v)", f, errA, errB)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), out, 0o644); err != nil {
			t.Fatal(err)
		}
		all = append(all, changed...)
	}
	sort.Strings(all)
	return all
}

// promClient queries a Prometheus server's HTTP API.
type promClient struct {
	base string
	http *http.Client
}

type sample struct {
	Metric map[string]string
	Value  float64
}

type apiResponse struct {
	Status string          `json:"status"`
	Error  string          `json:"error"`
	Data   json.RawMessage `json:"data"`
}

func (c promClient) get(ctx context.Context, path string, params url.Values, data any) error {
	u := c.base + path
	if params != nil {
		u += "?" + params.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("reading %s: %w", u, err)
	}
	var r apiResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return fmt.Errorf("GET %s: %s: %w", u, resp.Status, err)
	}
	if r.Status != "success" {
		return fmt.Errorf("GET %s: %s: %s", u, resp.Status, r.Error)
	}
	return json.Unmarshal(r.Data, data)
}

// query runs an instant query and returns its vector (a scalar result is
// one sample without labels).
func (c promClient) query(ctx context.Context, q string) ([]sample, error) {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := c.get(ctx, "/api/v1/query", url.Values{"query": {q}}, &data); err != nil {
		return nil, err
	}
	parse := func(v [2]any) (float64, error) {
		s, _ := v[1].(string)
		return strconv.ParseFloat(s, 64)
	}
	switch data.ResultType {
	case "vector":
		var res []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		}
		if err := json.Unmarshal(data.Result, &res); err != nil {
			return nil, err
		}
		out := make([]sample, 0, len(res))
		for _, r := range res {
			v, err := parse(r.Value)
			if err != nil {
				return nil, fmt.Errorf("query %s: value %v: %w", q, r.Value, err)
			}
			out = append(out, sample{Metric: r.Metric, Value: v})
		}
		return out, nil
	case "scalar":
		var r [2]any
		if err := json.Unmarshal(data.Result, &r); err != nil {
			return nil, err
		}
		v, err := parse(r)
		return []sample{{Value: v}}, err
	default:
		return nil, fmt.Errorf("query %s: unexpected result type %q", q, data.ResultType)
	}
}

type alert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
}

func (c promClient) alerts(ctx context.Context) ([]alert, error) {
	var data struct {
		Alerts []alert `json:"alerts"`
	}
	err := c.get(ctx, "/api/v1/alerts", nil, &data)
	return data.Alerts, err
}
