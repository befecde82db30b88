package dashboards

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpulens/gpulens/alerts/promcheck"
)

// The committed JSON must be what the generator writes now.
func TestGeneratedJSONUpToDate(t *testing.T) {
	for _, b := range All() {
		want, err := Render(b)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(b.File)
		if err != nil {
			t.Fatalf("%s: %v (run make dashboards)", b.File, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the generator's output: run make dashboards and commit the result", b.File)
		}
	}
}

// Every committed JSON file is generated, and there are at least five.
func TestNoStrayDashboards(t *testing.T) {
	files, err := filepath.Glob("*.json")
	if err != nil {
		t.Fatal(err)
	}
	gen := map[string]bool{}
	for _, b := range All() {
		gen[b.File] = true
	}
	for _, f := range files {
		if !gen[f] {
			t.Errorf("%s is not written by the generator", f)
		}
	}
	if len(All()) < 5 {
		t.Errorf("%d dashboards, want at least 5", len(All()))
	}
}

func TestCommittedDashboardsPassLint(t *testing.T) {
	for _, b := range All() {
		raw, err := os.ReadFile(b.File)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range Lint(raw) {
			t.Errorf("%s: %s", b.File, p)
		}
	}
}

// Every query parses once Grafana's variables are substituted. That the
// metrics exist is checked against live scrapes in alerts.
func TestQueriesParse(t *testing.T) {
	n := 0
	for _, b := range All() {
		raw, err := os.ReadFile(b.File)
		if err != nil {
			t.Fatal(err)
		}
		exprs, keys, err := Expressions(raw, promcheck.VariableQuery)
		if err != nil {
			t.Fatalf("%s: %v", b.File, err)
		}
		for _, k := range keys {
			n++
			if _, err := promcheck.MetricNames(exprs[k]); err != nil {
				t.Errorf("%s %s: %v", b.File, k, err)
			}
		}
	}
	if n < 100 {
		t.Errorf("only %d expressions found in the dashboards; the extraction is broken", n)
	}
}

// mutate decodes the first committed dashboard, lets f change it and
// re-encodes it.
func mutate(t *testing.T, f func(d map[string]any)) []byte {
	t.Helper()
	raw, err := os.ReadFile(All()[0].File)
	if err != nil {
		t.Fatal(err)
	}
	var d map[string]any
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	f(d)
	out, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// firstPanel returns the first non-row panel.
func firstPanel(d map[string]any) map[string]any {
	for _, p := range d["panels"].([]any) {
		if pm := p.(map[string]any); pm["type"] != "row" {
			return pm
		}
	}
	panic("no panel")
}

func firstTarget(d map[string]any) map[string]any {
	return firstPanel(d)["targets"].([]any)[0].(map[string]any)
}

// The lint reports each kind of problem it promises to catch.
func TestLintCatchesProblems(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(d map[string]any)
		want   string
	}{
		{"duplicate id", func(d map[string]any) {
			ps := d["panels"].([]any)
			ps[2].(map[string]any)["id"] = ps[1].(map[string]any)["id"]
		}, "already used by"},
		{"no unit", func(d map[string]any) {
			delete(firstPanel(d)["fieldConfig"].(map[string]any)["defaults"].(map[string]any), "unit")
		}, `"GPUs up": no unit`},
		{"no description", func(d map[string]any) { firstPanel(d)["description"] = " " }, `"GPUs up": no description`},
		{"no thresholds", func(d map[string]any) {
			delete(firstPanel(d)["fieldConfig"].(map[string]any)["defaults"].(map[string]any), "thresholds")
		}, `"GPUs up": no thresholds`},
		{"empty panel", func(d map[string]any) { firstPanel(d)["targets"] = []any{} }, `"GPUs up": no queries`},
		{"empty expression", func(d map[string]any) { firstTarget(d)["expr"] = "" }, "target A: empty expression"},
		{"hard-coded datasource", func(d map[string]any) {
			firstTarget(d)["datasource"] = map[string]any{"type": "prometheus", "uid": "P1809F7CD0C75ACF3"}
		}, "target A: datasource is not ${datasource}"},
		{"hard-coded instance", func(d map[string]any) {
			firstTarget(d)["expr"] = `sum(gpulens_gpu_up{instance="node-3:9835"})`
		}, `hard-coded instance="node-3:9835"`},
		{"hard-coded pod", func(d map[string]any) {
			firstTarget(d)["expr"] = `sum(gpulens_process_info{pod=~"vllm-.*"})`
		}, `hard-coded pod=~"vllm-.*"`},
		{"fixed rate window", func(d map[string]any) {
			firstTarget(d)["expr"] = `sum(rate(gpulens_gpu_busy_seconds_total[5m]))`
		}, "range [5m]"},
		{"undefined variable", func(d map[string]any) {
			firstTarget(d)["expr"] = `sum(gpulens_gpu_up{instance=~"$node"})`
		}, "variable $node is not defined"},
		{"no datasource variable", func(d map[string]any) {
			tl := d["templating"].(map[string]any)
			tl["list"] = tl["list"].([]any)[1:]
		}, `no prometheus datasource variable named "datasource"`},
		{"unknown field", func(d map[string]any) { firstPanel(d)["colour"] = "red" }, "strict decode"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			probs := Lint(mutate(t, tc.mutate))
			for _, p := range probs {
				if strings.Contains(p, tc.want) {
					return
				}
			}
			t.Errorf("lint did not report %q; it reported %q", tc.want, probs)
		})
	}
}

// The lint reports a table whose queries Grafana's merge would not join
// into one row per identifying label set.
func TestLintCatchesTableJoins(t *testing.T) {
	// processes mutates the targets of GPU detail's "Processes on the GPU".
	processes := func(f func(p map[string]any, ts []any)) []byte {
		raw, err := os.ReadFile("gpulens-gpu.json")
		if err != nil {
			t.Fatal(err)
		}
		var d map[string]any
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatal(err)
		}
		for _, p := range d["panels"].([]any) {
			if pm := p.(map[string]any); pm["title"] == "Processes on the GPU" {
				f(pm, pm["targets"].([]any))
			}
		}
		out, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	expr := func(ts []any, i int, e string) { ts[i].(map[string]any)["expr"] = e }
	tests := []struct {
		name string
		raw  []byte
		want string
	}{
		{"bare selector", processes(func(_ map[string]any, ts []any) {
			expr(ts, 1, `gpulens_process_sm_utilization_ratio{gpu=~"$gpu"}`)
		}), "is not an aggregation by the labels to join"},
		{"without", processes(func(_ map[string]any, ts []any) {
			expr(ts, 2, `max without (uuid) (gpulens_process_gpu_time_share_ratio{gpu=~"$gpu"})`)
		}), "is not an aggregation by the labels to join"},
		{"different labels", processes(func(_ map[string]any, ts []any) {
			expr(ts, 2, `max by (instance, gpu, pid) (gpulens_process_gpu_time_share_ratio{gpu=~"$gpu"})`)
		}), "every query after the first must aggregate by the same labels"},
		{"label the first query lacks", processes(func(_ map[string]any, ts []any) {
			expr(ts, 1, `max by (cluster, instance, gpu, pid, namespace, pod, container, process_name, uuid) (gpulens_process_sm_utilization_ratio{gpu=~"$gpu"})`)
		}), "do not all include"},
		{"no merge", processes(func(p map[string]any, _ []any) { p["transformations"] = []any{} }), "needs the merge transformation"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			probs := Lint(tc.raw)
			for _, p := range probs {
				if strings.Contains(p, tc.want) {
					return
				}
			}
			t.Errorf("lint did not report %q; it reported %q", tc.want, probs)
		})
	}
}
