package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

func TestStepIsGrafanasInterval(t *testing.T) {
	for _, c := range []struct {
		rng  time.Duration
		w    int
		want time.Duration
	}{
		{3 * time.Hour, 24, 15 * time.Second}, // 1920 px: 5.6 s, the scrape interval at least
		{3 * time.Hour, 12, 15 * time.Second}, // 960 px: 11.25 s
		{3 * time.Hour, 4, 45 * time.Second},  // 320 px: 33.75 s, rounded up to 45 s
		{7 * 24 * time.Hour, 24, 315 * time.Second},
		{3 * time.Hour, 0, 15 * time.Second}, // no width: the whole row
	} {
		if got := step(c.rng, c.w, 15*time.Second); got != c.want {
			t.Errorf("step(%s, %d) = %s, want %s", c.rng, c.w, got, c.want)
		}
	}
}

func TestSubstituteDefaultView(t *testing.T) {
	for _, c := range []struct {
		expr, want string
		step       time.Duration
	}{
		{`sum by (cluster) (rate(x{cluster=~"$cluster",instance=~"${instance}"}[$__rate_interval]))`,
			`sum by (cluster) (rate(x{cluster=~".*",instance=~".*"}[60s]))`, 15 * time.Second},
		{`rate(x[$__rate_interval])`, `rate(x[105s])`, 90 * time.Second}, // step + scrape
		{`increase(x[$__range]) / $__range_s`, `increase(x[10800s]) / 10800`, 15 * time.Second},
		{`avg_over_time(x[$__interval])`, `avg_over_time(x[45s])`, 45 * time.Second},
	} {
		got, err := substitute(c.expr, 3*time.Hour, c.step, 15*time.Second)
		if err != nil || got != c.want {
			t.Errorf("substitute(%q) = %q, %v, want %q", c.expr, got, err, c.want)
		}
	}
	if _, err := substitute(`x[$__unknown]`, time.Hour, time.Minute, 15*time.Second); err == nil {
		t.Error("an unknown Grafana variable was accepted")
	}
}

func TestDefaultRange(t *testing.T) {
	for from, want := range map[string]time.Duration{"now-3h": 3 * time.Hour, "now-7d": 7 * 24 * time.Hour, "now-30m": 30 * time.Minute} {
		if got, err := defaultRange(from, "now"); err != nil || got != want {
			t.Errorf("defaultRange(%q) = %s, %v, want %s", from, got, err, want)
		}
	}
	for _, bad := range [][2]string{{"now-3h", "now-1h"}, {"2026-01-01", "now"}, {"now-xd", "now"}} {
		if _, err := defaultRange(bad[0], bad[1]); err == nil {
			t.Errorf("defaultRange(%q, %q) accepted", bad[0], bad[1])
		}
	}
}

func TestParseNode(t *testing.T) {
	if n, err := parseNode(nodePath(41), 42); err != nil || n != 41 {
		t.Errorf("parseNode(%q) = %d, %v", nodePath(41), n, err)
	}
	for _, bad := range []string{nodePath(42), "/node/-1/metrics", "/node/x/metrics", "/metrics", "/node/1"} {
		if _, err := parseNode(bad, 42); err == nil {
			t.Errorf("parseNode(%q) accepted", bad)
		}
	}
}

// templateServer counts its scrapes and answers with its name, the
// count and the Accept header it got.
type templateServer struct {
	name string
	mu   sync.Mutex
	hits int
}

func (s *templateServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.hits++
	n := s.hits
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; from="+s.name)
	fmt.Fprintf(w, "%s %d %s", s.name, n, r.Header.Get("Accept"))
}

func TestFanoutServesEachNodeItsTemplateOncePerRefresh(t *testing.T) {
	a, b := &templateServer{name: "a"}, &templateServer{name: "b"}
	sa, sb := httptest.NewServer(a), httptest.NewServer(b)
	defer sa.Close()
	defer sb.Close()
	f := newFanout([]string{sa.URL, sb.URL}, 5, 15*time.Second)
	now := time.Unix(1000, 0)
	f.now = func() time.Time { return now }
	srv := httptest.NewServer(f)
	defer srv.Close()

	get := func(node int, accept string) (int, string, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+nodePath(node), nil)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(body)
	}
	for _, c := range []struct {
		node         int
		accept, want string
	}{
		{0, "text/plain", "a 1 text/plain"},
		{2, "text/plain", "a 1 text/plain"}, // cached: the same bytes
		{4, "text/plain", "a 1 text/plain"},
		{1, "text/plain", "b 1 text/plain"},
		{3, "text/plain", "b 1 text/plain"},
		{0, "application/openmetrics-text", "a 2 application/openmetrics-text"}, // per format
	} {
		code, ct, body := get(c.node, c.accept)
		if code != http.StatusOK || body != c.want {
			t.Errorf("node %d (%s): %d %q, want %q", c.node, c.accept, code, body, c.want)
		}
		if want := "text/plain; from=" + c.want[:1]; ct != want {
			t.Errorf("node %d: Content-Type %q, want the template's %q", c.node, ct, want)
		}
	}
	now = now.Add(15 * time.Second)
	if _, _, body := get(2, "text/plain"); body != "a 3 text/plain" {
		t.Errorf("after the refresh: %q, want a new scrape of a", body)
	}
	if code, _, _ := get(5, ""); code != http.StatusNotFound {
		t.Errorf("node 5 of 5: %d, want 404", code)
	}
	if a.hits != 3 || b.hits != 1 {
		t.Errorf("template scrapes: a %d, b %d; want 3 and 1", a.hits, b.hits)
	}
}

func TestPromConfigOneTargetPerNode(t *testing.T) {
	raw := promConfig("127.0.0.1:1234", 3, 15*time.Second, []string{"/r/a.rules.yml", "/r/b.rules.yml"})
	var c struct {
		Global struct {
			Scrape string `yaml:"scrape_interval"`
			Eval   string `yaml:"evaluation_interval"`
		} `yaml:"global"`
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			Job    string `yaml:"job_name"`
			Static []struct {
				Targets []string          `yaml:"targets"`
				Labels  map[string]string `yaml:"labels"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal([]byte(raw), &c); err != nil {
		t.Fatalf("%v\n%s", err, raw)
	}
	if c.Global.Scrape != "15s" || c.Global.Eval != "15s" || strings.Join(c.RuleFiles, ",") != "/r/a.rules.yml,/r/b.rules.yml" {
		t.Errorf("global %+v, rule files %v", c.Global, c.RuleFiles)
	}
	if len(c.ScrapeConfigs) != 1 || len(c.ScrapeConfigs[0].Static) != 3 {
		t.Fatalf("want one job of 3 targets:\n%s", raw)
	}
	for i, s := range c.ScrapeConfigs[0].Static {
		want := map[string]string{"cluster": "bench", "instance": fmt.Sprintf("node-%05d:9842", i), "__metrics_path__": nodePath(i)}
		if len(s.Targets) != 1 || s.Targets[0] != "127.0.0.1:1234" || fmt.Sprint(s.Labels) != fmt.Sprint(want) {
			t.Errorf("target %d: %v %v, want %v", i, s.Targets, s.Labels, want)
		}
	}
}

func TestLoadPanelsReadsTheShippedDashboards(t *testing.T) {
	qs, ranges, err := loadPanels("../../dashboards", []string{"gpulens-fleet", "gpulens-cost", "gpulens-sharing"})
	if err != nil {
		t.Fatal(err)
	}
	per := map[string]int{}
	for _, q := range qs {
		per[q.Board]++
		if q.Expr == "" || q.RefID == "" || q.Width <= 0 {
			t.Errorf("%s: incomplete %+v", q.Key(), q)
		}
		if _, err := substitute(q.Expr, ranges[q.Board], 15*time.Second, 15*time.Second); err != nil {
			t.Error(err)
		}
	}
	for _, b := range []string{"gpulens-fleet", "gpulens-cost", "gpulens-sharing"} {
		if per[b] < 10 || ranges[b] != 3*time.Hour {
			t.Errorf("%s: %d queries, default range %s", b, per[b], ranges[b])
		}
	}
}

func TestCount(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 9999: "9999", 10_000: "10k", 999_499: "999k", 1_250_000: "1.2M", 12_500_000: "12M"} {
		if got := count(n); got != want {
			t.Errorf("count(%d) = %q, want %q", n, got, want)
		}
	}
}
