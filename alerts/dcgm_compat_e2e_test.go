package alerts

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gpulens/gpulens/alerts/promcheck"
	"github.com/gpulens/gpulens/internal/testenv"
)

// dcgmDashboard is NVIDIA's dcgm-exporter dashboard (Apache-2.0; origin
// and licence beside it).
var dcgmDashboard = filepath.Join("testdata", "dcgm-exporter", "dcgm-exporter-dashboard.json")

// grafanaBoard is the part of a Grafana dashboard the test reads.
type grafanaBoard struct {
	Panels     []grafanaPanel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type grafanaPanel struct {
	Title   string         `json:"title"`
	Panels  []grafanaPanel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

var labelValuesQuery = regexp.MustCompile(`^\s*label_values\(\s*(.+)\s*,\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$`)

// TestDCGMDashboardOnCompatView runs the exporter on the simulated
// mixed-fleet scenario with the DCGM-compatible view on, and a real
// Prometheus scraping that view (as it scraped dcgm-exporter: job
// dcgm-exporter, path /dcgm/metrics). Every variable of NVIDIA's
// dcgm-exporter dashboard must list values, every query of every panel
// (variables set to All, as Grafana does) must return series for the
// fleet's GPUs, and the per-pod utilisation query of a prometheus-adapter
// or KEDA rule must return the pods holding whole GPUs.
func TestDCGMDashboardOnCompatView(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the exporter and Prometheus for about 10 s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bins := testenv.Binaries(t, "gpulens-exporter", "prometheus")
	dir := t.TempDir()
	exporter := testenv.Run(t, bins[0], "--sim.scenario=mixed-fleet", "--sampler.interval=250ms",
		"--web.listen-address=127.0.0.1:0", "--compat.dcgm")
	cfg := fmt.Sprintf("global:\n  scrape_interval: 500ms\n  scrape_timeout: 500ms\n"+
		"scrape_configs:\n  - job_name: dcgm-exporter\n    metrics_path: /dcgm/metrics\n    static_configs:\n      - targets: [%q]\n",
		exporter.MustAddress(ctx, t))
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	prom := testenv.Run(t, bins[1], "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address=127.0.0.1:0")
	addr := prom.MustAddress(ctx, t)

	// The mixed fleet: 4 H100 (GPM), 2 A100 and an A30, two of them in
	// MIG mode; wait for every GPU's temperature and the H100s' tensor
	// activity. As dcgm-exporter, the view has a GPU in MIG mode's device
	// fields once per GPU instance (the H100's 4, the A100's 2): 5 whole
	// GPUs and 6 instances.
	const gpus, entities = 7, 11
	ready := testenv.Poll(ctx, 250*time.Millisecond, func() bool {
		n, err := promQuery(ctx, addr, `count(DCGM_FI_DEV_GPU_TEMP)`, time.Now())
		if err != nil || len(n) != 1 || n[0].value != entities {
			return false
		}
		p, err := promQuery(ctx, addr, `count(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE)`, time.Now())
		return err == nil && len(p) == 1
	})
	if !ready {
		t.Fatalf("no DCGM series for %d GPUs: %v\nexporter:\n%s\nprometheus:\n%s", gpus, ctx.Err(), exporter.Log(), prom.Log())
	}
	at := time.Now()

	raw, err := os.ReadFile(dcgmDashboard)
	if err != nil {
		t.Fatal(err)
	}
	var board grafanaBoard
	if err := json.Unmarshal(raw, &board); err != nil {
		t.Fatal(err)
	}
	// The variables: label_values(expr, label) as Grafana's Prometheus
	// data source asks it; "All" is every value, as a regex alternation.
	values := map[string]string{}
	for _, v := range board.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(string)
		m := labelValuesQuery.FindStringSubmatch(q)
		if m == nil {
			t.Fatalf("variable %s: query %q is not label_values(expr, label)", v.Name, q)
		}
		r, err := promQuery(ctx, addr, fmt.Sprintf("count by (%s) (%s)", m[2], m[1]), at)
		if err != nil {
			t.Fatalf("variable %s: %v", v.Name, err)
		}
		var vals []string
		for _, s := range r {
			if s.metric[m[2]] != "" {
				// As Grafana formats a multi-value variable in a
				// regex matcher: escaped, inside a PromQL string.
				vals = append(vals, strings.ReplaceAll(regexp.QuoteMeta(s.metric[m[2]]), `\`, `\\`))
			}
		}
		sort.Strings(vals)
		if len(vals) == 0 {
			t.Errorf("variable %s (%s) lists no values", v.Name, q)
		}
		values[v.Name] = "(" + strings.Join(vals, "|") + ")"
	}
	if got := strings.Count(values["gpu"], "|") + 1; got != gpus {
		t.Errorf("variable gpu lists %d GPUs, want %d: %s", got, gpus, values["gpu"])
	}
	substitute := func(expr string) string {
		for name, v := range values {
			expr = strings.ReplaceAll(expr, "$"+name, v)
		}
		return promcheck.Substitute(expr)
	}

	// What each panel's query returns on the fleet: one series per whole
	// GPU and per GPU instance, one value, or (tensor activity, from GPM)
	// the four H100s.
	want := map[string]int{
		"GPU Temperature":          entities,
		"GPU Avg. Temp":            1,
		"GPU Power Usage":          entities,
		"GPU Power Total":          1,
		"GPU SM Clocks":            entities,
		"GPU Utilization":          0, // checked below: GPUs not in MIG mode
		"GPU Framebuffer Mem Used": 0, // per GPU and per MIG instance
		"Tensor Core Utilization":  0, // GPM GPUs and their MIG instances
	}
	var panels []grafanaPanel
	var walk func([]grafanaPanel)
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			panels = append(panels, p)
			walk(p.Panels)
		}
	}
	walk(board.Panels)
	queries := 0
	for _, p := range panels {
		for _, target := range p.Targets {
			if target.Expr == "" {
				continue
			}
			queries++
			n, ok := want[p.Title]
			if !ok {
				t.Errorf("panel %q: not in the test's table (a new dashboard?)", p.Title)
				continue
			}
			r, err := promQuery(ctx, addr, substitute(target.Expr), at)
			switch {
			case err != nil:
				t.Errorf("panel %q: %s: %v", p.Title, target.Expr, err)
			case len(r) == 0:
				t.Errorf("panel %q: %s returns no data", p.Title, target.Expr)
			case n > 0 && len(r) != n:
				t.Errorf("panel %q: %s returns %d series, want %d", p.Title, target.Expr, len(r), n)
			}
			for _, s := range r {
				if s.value < 0 {
					t.Errorf("panel %q: %s: %v = %v", p.Title, target.Expr, s.metric, s.value)
				}
			}
		}
	}
	if queries != len(want) {
		t.Errorf("%d queries in the dashboard, want %d", queries, len(want))
	}

	// Units: MHz, °C, W, MiB, % and a 0–1 ratio, within the fleet's range.
	ranges := map[string][2]float64{
		"DCGM_FI_DEV_SM_CLOCK":            {100, 3000},
		"DCGM_FI_DEV_GPU_TEMP":            {20, 100},
		"DCGM_FI_DEV_POWER_USAGE":         {20, 1000},
		"DCGM_FI_DEV_FB_USED":             {0, 81920},
		"DCGM_FI_DEV_GPU_UTIL":            {0, 100},
		"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": {0, 1},
	}
	for name, rg := range ranges {
		r, err := promQuery(ctx, addr, name, at)
		if err != nil || len(r) == 0 {
			t.Errorf("%s: %v %v", name, r, err)
			continue
		}
		for _, s := range r {
			if s.value < rg[0] || s.value > rg[1] {
				t.Errorf("%s%v = %v, outside %v", name, s.metric, s.value, rg)
			}
			for _, l := range []string{"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"} {
				if s.metric[l] == "" {
					t.Errorf("%s%v: no %s label", name, s.metric, l)
				}
			}
		}
	}

	// A prometheus-adapter / KEDA rule: mean GPU utilisation per pod. The
	// pods of the mixed fleet that hold whole GPUs (a MIG instance has no
	// GPU utilisation in NVML, nor in DCGM).
	r, err := promQuery(ctx, addr, `avg by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL{pod!=""})`, at)
	if err != nil {
		t.Fatal(err)
	}
	var pods []string
	for _, s := range r {
		pods = append(pods, s.metric["namespace"]+"/"+s.metric["pod"])
		if s.value < 0 || s.value > 100 {
			t.Errorf("pod %s: utilisation %v%%", s.metric["pod"], s.value)
		}
	}
	sort.Strings(pods)
	alloc, err := promQuery(ctx, addr, `count by (namespace, pod) (DCGM_FI_DEV_GPU_TEMP{pod!="",GPU_I_ID=""})`, at)
	if err != nil {
		t.Fatal(err)
	}
	var allocated []string
	for _, s := range alloc {
		allocated = append(allocated, s.metric["namespace"]+"/"+s.metric["pod"])
	}
	sort.Strings(allocated)
	if len(pods) == 0 || !slices.Equal(pods, allocated) {
		t.Errorf("per-pod utilisation for %v, want the pods holding whole GPUs %v", pods, allocated)
	}
	t.Logf("per-pod utilisation: %v", r)
}
