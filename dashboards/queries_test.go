package dashboards

import (
	"encoding/json"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/gpulens/gpulens/alerts/promcheck"
)

// The tables that join several queries show one row per identifying label
// set: every process, MIG instance, namespace and probed device once, with
// every value column filled but those the exporter does not measure.
func TestTableShapes(t *testing.T) {
	env := newPromEnv(t, healthyFleet())
	want := map[string]struct {
		key  []string // identifying columns, besides Time
		rows []string // the identifying values of each row, sorted
		// empty are the cells that stay empty: "row/Value #X".
		empty []string
	}{
		"Processes on the GPU": {[]string{"cluster", "container", "gpu", "instance", "namespace", "pid", "pod", "process_name"}, []string{
			"c1/vllm/0/n1:9842/serving/4242/vllm-0/python3",
			"c1/trainer/0/n1:9842/research/5151/train-0/torchrun",
			"c1/vllm/2/n1:9842/serving/9100/chat-mig-0/python3",
			"c1/vllm/0/n2:9842/team-b/7000/chat-b-0/python3",
		}, []string{ // no SM utilisation in MIG mode, so no time share
			"c1/vllm/2/n1:9842/serving/9100/chat-mig-0/python3/Value #B",
			"c1/vllm/2/n1:9842/serving/9100/chat-mig-0/python3/Value #C",
		}},
		"MIG instances": {[]string{"cluster", "compute_instance_id", "gpu", "gpu_instance_id", "instance"}, []string{
			"c1/0/2/1/n1:9842", "c1/0/2/2/n1:9842",
		}, nil},
		// Allocation: serving and research hold n1's GPUs 0 and 1; use: team-b's
		// process on n2 runs without an allocation.
		"Cost per namespace: allocation and use": {[]string{"cluster", "namespace"}, []string{"c1/research", "c1/serving", "c1/team-b"}, []string{
			"c1/team-b/Value #A", "c1/team-b/Value #C", "c1/team-b/Value #D", "c1/team-b/Value #E",
		}},
		"Cost per pod: allocation and use": {[]string{"cluster", "namespace", "pod"}, []string{
			"c1/research/notebook-0", "c1/research/train-0", "c1/serving/chat-mig-0", "c1/serving/vllm-0", "c1/team-b/chat-b-0",
		}, []string{ // notebook-0 holds idle GPU 1; the others run without an allocation
			"c1/research/notebook-0/Value #B", "c1/research/train-0/Value #A", "c1/serving/chat-mig-0/Value #A", "c1/team-b/chat-b-0/Value #A",
		}},
		// The probed GPUs 0 and 1 of n1 are serving's and research's; no
		// neighbour: delivered = paid.
		"Paid vs delivered by namespace": {[]string{"cluster", "namespace"}, []string{"c1/research", "c1/serving"}, nil},
		"Stolen time and figures against baseline per GPU": {[]string{"cluster", "gpu", "instance", "uuid"}, []string{
			"c1/0/n1:9842/GPU-a0", "c1/1/n1:9842/GPU-a1",
		}, nil},
	}
	seen := 0
	for _, p := range allPanels(t) {
		if p.Type != "table" || len(p.Targets) < 2 {
			continue
		}
		seen++
		w, ok := want[p.Title]
		if !ok {
			t.Errorf("%s %q: a joined table this test has no expected rows for", p.file, p.Title)
			continue
		}
		key, rows := env.table(p, vars{})
		if gotKey := slices.DeleteFunc(slices.Clone(key), func(k string) bool { return k == "Time" }); !slices.Equal(gotKey, w.key) {
			t.Errorf("%q: rows joined on %v, want %v", p.Title, gotKey, w.key)
		}
		var ids []string
		for _, r := range rows {
			var id []string
			for _, k := range w.key {
				id = append(id, r[k])
			}
			ids = append(ids, strings.Join(id, "/"))
			for _, tg := range p.Targets {
				cell := strings.Join(id, "/") + "/Value #" + tg.RefID
				if empty := slices.Contains(w.empty, cell); (r["Value #"+tg.RefID] == "") != empty {
					t.Errorf("%q: %s is %q, want it empty %v: %v", p.Title, cell, r["Value #"+tg.RefID], empty, r)
				}
			}
		}
		sort.Strings(ids)
		wantIDs := slices.Clone(w.rows)
		sort.Strings(wantIDs)
		if !slices.Equal(ids, wantIDs) {
			t.Errorf("%q: rows %q, want one per %v: %q", p.Title, ids, w.key, wantIDs)
		}
	}
	if seen != len(want) {
		t.Errorf("%d joined tables in the dashboards, want %d", seen, len(want))
	}
}

// The merge emulation is Grafana's: queries that differ in __name__ (bare
// selectors, as the tables had) never join, which is the bug the explicit
// `by` labels fix.
func TestMergeKeepsNamesApart(t *testing.T) {
	a := frame{fields: []string{"Time", "__name__", "pid", "Value #A"}, rows: []map[string]string{{"Time": "1", "__name__": "mem", "pid": "1", "Value #A": "5"}}}
	b := frame{fields: []string{"Time", "__name__", "pid", "Value #B"}, rows: []map[string]string{{"Time": "1", "__name__": "util", "pid": "1", "Value #B": "0.5"}}}
	if _, rows := merge([]frame{a, b}); len(rows) != 2 {
		t.Errorf("bare selectors: %d rows, want 2 (half-empty)", len(rows))
	}
	a.fields, b.fields = []string{"Time", "pid", "Value #A"}, []string{"Time", "pid", "Value #B"}
	delete(a.rows[0], "__name__")
	delete(b.rows[0], "__name__")
	if key, rows := merge([]frame{a, b}); len(rows) != 1 || rows[0]["Value #A"] != "5" || rows[0]["Value #B"] != "0.5" || !slices.Equal(key, []string{"Time", "pid"}) {
		t.Errorf("same labels: key %v rows %v, want one joined row", key, rows)
	}
}

// healthPanels read 0 on a healthy fleet (not "No data") and more than 0
// where something fails.
var healthPanels = []string{
	"GPUs lost or unreadable", "Exporters down",
	"Throttled GPUs by reason", "XID errors by GPU and code", "ECC errors", "Row remapping pending or failed",
	"Collectors failing", "NVML errors by call", "Errors by class",
}

func TestHealthPanelsShowZeroWhenHealthy(t *testing.T) {
	healthy, failing := newPromEnv(t, healthyFleet()), newPromEnv(t, failingFleet())
	for _, title := range healthPanels {
		p := panelNamed(t, title)
		var healthyN int
		var failingMax float64
		for _, tg := range p.Targets {
			expr := vars{}.substitute(tg.Expr)
			for _, s := range healthy.instant(expr, fixtureEnd) {
				healthyN++
				if s.F != 0 {
					t.Errorf("%q target %s on a healthy fleet: %v = %g, want 0", title, tg.RefID, s.Metric, s.F)
				}
			}
			for _, s := range failing.instant(expr, fixtureEnd) {
				failingMax = math.Max(failingMax, s.F)
			}
		}
		if healthyN == 0 {
			t.Errorf("%q: no data on a healthy fleet; want a 0", title)
		}
		if title != "GPUs lost or unreadable" && title != "Exporters down" && !(failingMax > 0) {
			t.Errorf("%q: nothing above 0 on the failing fleet", title)
		}
	}
}

// No panel query gives NaN on the fixtures: the contention ratio of an idle
// GPU is 0, and the other ratios are defined wherever their series exist.
func TestNoNaN(t *testing.T) {
	for name, fleet := range map[string][]series{"healthy": healthyFleet(), "failing": failingFleet()} {
		env := newPromEnv(t, fleet)
		n := 0
		for _, p := range allPanels(t) {
			for _, tg := range p.Targets {
				for _, s := range env.instant(vars{}.substitute(tg.Expr), fixtureEnd) {
					n++
					if math.IsNaN(s.F) {
						t.Errorf("%s fleet: %s %q target %s: %v is NaN", name, p.file, p.Title, tg.RefID, s.Metric)
					}
				}
			}
		}
		if n < 150 {
			t.Errorf("%s fleet: only %d samples from every panel query; the fixture is broken", name, n)
		}
	}
	// The idle GPU's contention is there, at 0.
	env := newPromEnv(t, healthyFleet())
	p := panelNamed(t, "Contention ratio (5m)")
	got := map[string]float64{}
	for _, s := range env.instant(vars{}.substitute(p.Targets[0].Expr), fixtureEnd) {
		got[s.Metric.Get("instance")+" "+s.Metric.Get("gpu")] = s.F
	}
	if v, ok := got["n1:9842 1"]; !ok || v != 0 {
		t.Errorf("contention of the idle GPU n1 1 = %v (present %v), want 0", v, ok)
	}
	if v := got["n1:9842 0"]; math.Abs(v-0.5) > 1e-9 {
		t.Errorf("contention of n1 GPU 0 = %v, want 0.5 (40 %% contended of 80 %% busy)", v)
	}
}

// Energy per hour does not depend on the zoom (the graph interval): a GPU
// at a steady 500 W uses 0.5 kWh an hour whatever $__rate_interval is;
// the stat totals the range.
func TestEnergyIndependentOfZoom(t *testing.T) {
	env := newPromEnv(t, healthyFleet())
	p := panelNamed(t, "Energy per hour")
	sel := vars{"instance": "n1:9842", "gpu": "0"}
	for _, interval := range []string{"1m", "5m", "20m"} {
		v := vars{"instance": sel["instance"], "gpu": sel["gpu"], "__rate_interval": interval}
		res := env.instant(v.substitute(p.Targets[0].Expr), fixtureEnd)
		if len(res) != 1 || math.Abs(res[0].F-0.5) > 1e-9 {
			t.Errorf("energy per hour with $__rate_interval=%s: %v, want 0.5 kWh", interval, res)
		}
	}
	if p.FieldConfig.Defaults.Unit != "kwatth" {
		t.Errorf("energy per hour in %q, want kwatth", p.FieldConfig.Defaults.Unit)
	}
	total := panelNamed(t, "Energy in the time range")
	res := env.instant(sel.substitute(total.Targets[0].Expr), fixtureEnd)
	// 500 W for 30 minutes: 0.25 kWh (increase() extrapolates to the range).
	if len(res) != 1 || math.Abs(res[0].F-0.25) > 0.01 {
		t.Errorf("energy in the 30-minute range: %v, want 0.25 kWh", res)
	}
}

// GPU memory by namespace follows the node and GPU filters.
func TestMemoryByNamespaceFollowsFilters(t *testing.T) {
	env := newPromEnv(t, healthyFleet())
	p := panelNamed(t, "GPU memory by namespace")
	const mib = 1 << 20
	for _, tc := range []struct {
		v    vars
		want map[string]float64
	}{
		{vars{}, map[string]float64{"serving": (30720 + 30000) * mib, "research": 20480 * mib, "team-b": 24576 * mib}},
		{vars{"instance": "n1:9842", "gpu": "0"}, map[string]float64{"serving": 30720 * mib, "research": 20480 * mib}},
		{vars{"instance": "n1:9842", "gpu": "2"}, map[string]float64{"serving": 30000 * mib}},
		{vars{"instance": "n2:9842"}, map[string]float64{"team-b": 24576 * mib}},
	} {
		got := map[string]float64{}
		for _, s := range env.instant(tc.v.substitute(p.Targets[0].Expr), fixtureEnd) {
			got[s.Metric.Get("namespace")] = s.F
		}
		if len(got) != len(tc.want) {
			t.Errorf("filters %v: %v, want %v", tc.v, got, tc.want)
			continue
		}
		for ns, w := range tc.want {
			if got[ns] != w {
				t.Errorf("filters %v: namespace %s holds %v, want %v", tc.v, ns, got[ns], w)
			}
		}
	}
}

// The legend of requests by outcome lists successes and the error classes
// that occur, not the seven classes at 0.
func TestOutcomesAtZeroStayOutOfLegends(t *testing.T) {
	p := panelNamed(t, "Requests per second by outcome")
	for _, tc := range []struct {
		fleet []series
		want  []string
	}{{healthyFleet(), []string{"success"}}, {failingFleet(), []string{"success", "timeout"}}} {
		env := newPromEnv(t, tc.fleet)
		var got []string
		for _, s := range env.instant(vars{}.substitute(p.Targets[0].Expr), fixtureEnd) {
			got = append(got, s.Metric.Get("outcome"))
		}
		sort.Strings(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("outcomes shown: %v, want %v", got, tc.want)
		}
	}
}

// Every currency panel shows its values with at least two significant
// digits: a request costs $0.0000868 in the fixture, which Grafana's
// automatic decimals print as 8.68e-05.
func TestCurrencyPanelsShowDigits(t *testing.T) {
	env := newPromEnv(t, failingFleet())
	n := 0
	for _, p := range allPanels(t) {
		if p.FieldConfig.Defaults.Unit != "currencyUSD" {
			continue
		}
		for _, tg := range p.Targets {
			for _, s := range env.instant(vars{}.substitute(tg.Expr), fixtureEnd) {
				if s.F <= 0 {
					continue
				}
				n++
				// Grafana's automatic decimals print values from a cent up
				// readably; below, the panel must fix enough decimals.
				ok := s.F >= 0.01
				if d := p.FieldConfig.Defaults.Decimals; d != nil {
					ok = s.F*math.Pow(10, *d) >= 10
				}
				if !ok {
					t.Errorf("%s %q target %s: $%g shows with %v decimals: fewer than two significant digits", p.file, p.Title, tg.RefID, s.F, p.FieldConfig.Defaults.Decimals)
				}
			}
		}
	}
	if n < 5 {
		t.Errorf("only %d currency values checked", n)
	}
	if p := panelNamed(t, "Cost per request"); p.FieldConfig.Defaults.Decimals == nil || *p.FieldConfig.Defaults.Decimals < 6 {
		t.Errorf("cost per request shows %v decimals; a request costs under a cent", p.FieldConfig.Defaults.Decimals)
	}
}

// A panel showing a share (of time, of busy time) has a percent unit.
func TestRatioPanelsUsePercent(t *testing.T) {
	for _, p := range allPanels(t) {
		names := map[string]bool{}
		for _, tg := range p.Targets {
			ns, err := promcheck.MetricNames(tg.Expr)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range ns {
				names[n] = true
			}
		}
		ratio := len(names) > 0
		for n := range names {
			ratio = ratio && (strings.HasSuffix(n, "_ratio") || strings.Contains(n, ":ratio") || n == "gpu_reason:gpulens_gpu_clock_event_active:avg_over_time10m")
		}
		if !ratio || strings.Contains(p.Targets[0].Expr, "/") || strings.Contains(p.Targets[0].Expr, "count") {
			continue
		}
		if u := p.FieldConfig.Defaults.Unit; u != "percentunit" {
			t.Errorf("%s %q shows ratios (%v) with unit %q, want percentunit", p.file, p.Title, keys(names), u)
		}
	}
	if u := panelNamed(t, "Throttling GPUs and reasons").FieldConfig.Defaults.Unit; u != "percentunit" {
		t.Errorf("Throttling GPUs and reasons: unit %q, want percentunit", u)
	}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// GPU detail opens on one GPU of one node: its node and GPU filters have no
// All option (Grafana then selects the first value), and on the fixture a
// panel then shows that GPU's lines only.
func TestGPUDetailOpensOnOneGPU(t *testing.T) {
	raw, err := os.ReadFile("gpulens-gpu.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Templating struct {
			List []struct {
				Name       string          `json:"name"`
				IncludeAll bool            `json:"includeAll"`
				Current    *map[string]any `json:"current"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, v := range d.Templating.List {
		if v.Name != "instance" && v.Name != "gpu" {
			continue
		}
		found++
		if v.IncludeAll || v.Current != nil {
			t.Errorf("GPU detail variable %s: includeAll %v, current %v; want no All option and no preset value (Grafana picks the first)", v.Name, v.IncludeAll, v.Current)
		}
	}
	if found != 2 {
		t.Errorf("GPU detail has %d of the instance and gpu variables", found)
	}
	env := newPromEnv(t, healthyFleet())
	p := panelNamed(t, "GPU and memory-bandwidth utilisation")
	one := vars{"instance": "n1:9842", "gpu": "0"}
	if res := env.instant(one.substitute(p.Targets[0].Expr), fixtureEnd); len(res) != 1 {
		t.Errorf("busy share of the first GPU: %d series, want 1", len(res))
	}
}

// TestFixtureRules: the rules evaluated over the fixture give what the
// other tests rely on (a broken rule evaluation would pass them vacuously).
func TestFixtureRules(t *testing.T) {
	env := newPromEnv(t, healthyFleet())
	for expr, want := range map[string]float64{
		`gpu:gpulens_gpu_busy:ratio_rate5m{instance="n1:9842",gpu="0"}`:                      0.8,
		`namespace:gpulens_idle_allocated_gpus:count{namespace="research"}`:                  1,
		`target_model:gpulens_loadgen_cost_per_request_usd:rate5m`:                           2.5 / 3600 / 8,
		`target_model_outcome:gpulens_loadgen_requests:rate5m{outcome="success"}`:            8,
		`gpu:gpulens_probe_fp32_flop_per_second:p90_over_time7d{instance="n1:9842",gpu="0"}`: 5e13,
	} {
		res := env.instant(expr, fixtureEnd)
		if len(res) != 1 || math.Abs(res[0].F-want)/want > 1e-9 {
			t.Errorf("%s = %v, want %g", expr, res, want)
		}
	}
	if res := env.instant(`target_model:gpulens_loadgen_time_to_first_token_seconds:p99_rate5m`, fixtureEnd); len(res) != 1 || res[0].F < 0.02 || res[0].F > 0.0313 {
		t.Errorf("TTFT p99 from the native histogram: %v, want in (2^-5.125, 2^-5]", res)
	}
}
