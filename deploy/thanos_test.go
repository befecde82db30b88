package deploy

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The two-cluster Thanos stack (compose.thanos.yaml): each cluster's
// exporter, Prometheus (its own configuration, unique external cluster
// label, the shipped rules) and a sidecar reading that Prometheus; Thanos
// Query over both sidecars, under the name the Grafana data source uses;
// the Thanos image at the version tools/thanos pins (the binary
// deploy/e2e's TestThanosGlobalView runs).
func TestComposeThanos(t *testing.T) {
	const file = "compose.thanos.yaml"
	p := loadCompose(t, file)
	var names []string
	for n := range p.Services {
		names = append(names, n)
	}
	sort.Strings(names)
	want := []string{"exporter-a", "exporter-b", "grafana", "prometheus-a", "prometheus-b", "query", "sidecar-a", "sidecar-b"}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("services %v; want %v", names, want)
	}
	publishedOnLoopback(t, file, p)

	gomod, err := os.ReadFile(filepath.Join(root, "tools", "thanos", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*github\.com/thanos-io/thanos (v\S+)`).FindSubmatch(gomod)
	if m == nil {
		t.Fatal("tools/thanos/go.mod requires no github.com/thanos-io/thanos")
	}
	thanosImage := "quay.io/thanos/thanos:" + string(m[1])

	seen := map[string]string{} // external cluster label → config file
	for _, c := range []string{"a", "b"} {
		prom, side := p.Services["prometheus-"+c], p.Services["sidecar-"+c]
		mounts := map[string]string{}
		var data string
		for _, v := range prom.Volumes {
			mounts[v.Target] = v.Source
			if v.Target == "/prometheus" {
				data = v.Source
			}
		}
		cfgFile := filepath.Base(mounts["/etc/prometheus/prometheus.yml"])
		if cfgFile != "prometheus.cluster-"+c+".yml" {
			t.Errorf("prometheus-%s reads %q", c, cfgFile)
		}
		if src := mounts["/etc/prometheus/rules"]; filepath.Clean(src) != filepath.Clean(filepath.Join(p.WorkingDir, "..", "..", "alerts")) {
			t.Errorf("prometheus-%s rules from %q, want alerts/", c, src)
		}
		b, err := os.ReadFile(filepath.Join(root, "deploy", "compose", cfgFile))
		if err != nil {
			t.Fatal(err)
		}
		var cfg struct {
			Global struct {
				ExternalLabels map[string]string `json:"external_labels"`
			} `json:"global"`
			RuleFiles     []string `json:"rule_files"`
			ScrapeConfigs []struct {
				StaticConfigs []struct {
					Targets []string          `json:"targets"`
					Labels  map[string]string `json:"labels"`
				} `json:"static_configs"`
			} `json:"scrape_configs"`
		}
		if err := yaml.Unmarshal(b, &cfg); err != nil {
			t.Fatalf("%s: %v", cfgFile, err)
		}
		cl := cfg.Global.ExternalLabels["cluster"]
		if cl == "" || seen[cl] != "" {
			t.Errorf("%s: external cluster label %q is empty or also %s's", cfgFile, cl, seen[cl])
		}
		seen[cl] = cfgFile
		if !reflect.DeepEqual(cfg.RuleFiles, []string{"rules/*.rules.yml"}) {
			t.Errorf("%s: rule files %v", cfgFile, cfg.RuleFiles)
		}
		for _, sc := range cfg.ScrapeConfigs {
			for _, st := range sc.StaticConfigs {
				if st.Labels["cluster"] != cl || !reflect.DeepEqual(st.Targets, []string{"exporter-" + c + ":9842"}) {
					t.Errorf("%s: targets %v labels %v; want exporter-%s:9842 with cluster %q", cfgFile, st.Targets, st.Labels, c, cl)
				}
			}
		}
		if side.Image != thanosImage || !hasArg(side.Command, "--prometheus.url=http://prometheus-"+c+":9090") ||
			!hasArg(side.Command, "--tsdb.path=/prometheus") {
			t.Errorf("sidecar-%s: image %q command %v", c, side.Image, side.Command)
		}
		sharesData := false
		for _, v := range side.Volumes {
			sharesData = sharesData || (v.Source == data && v.Target == "/prometheus" && v.ReadOnly)
		}
		if data == "" || !sharesData {
			t.Errorf("sidecar-%s does not read prometheus-%s's data volume %q read-only: %+v", c, c, data, side.Volumes)
		}
		if !hasArg(p.Services["exporter-"+c].Command, "--web.listen-address=:9842") {
			t.Errorf("exporter-%s: %v", c, p.Services["exporter-"+c].Command)
		}
	}

	q := p.Services["query"]
	var endpoints []string
	for _, a := range q.Command {
		if e, ok := strings.CutPrefix(a, "--endpoint="); ok {
			endpoints = append(endpoints, e)
		}
	}
	if q.Image != thanosImage || q.Command[0] != "query" || !reflect.DeepEqual(endpoints, []string{"sidecar-a:10901", "sidecar-b:10901"}) {
		t.Errorf("query: image %q command %v", q.Image, q.Command)
	}
	// Grafana's provisioned data source is http://prometheus:9090.
	if n := q.Networks["default"]; n == nil || !reflect.DeepEqual(n.Aliases, []string{"prometheus"}) || !hasArg(q.Command, "--http-address=0.0.0.0:9090") {
		t.Errorf("query: networks %+v command %v; want it as prometheus:9090", q.Networks, q.Command)
	}
}
