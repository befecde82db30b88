package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpulens/gpulens/internal/testenv"
)

// A bad price, price file or node label stops the exporter before it
// starts, with exit status 2 and a message naming the flag, and for a file
// its line and field.
func TestCostFlagsRejectBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	neg := write("neg.yaml", "models:\n  NVIDIA H100 80GB HBM3: 3\n  NVIDIA A30*: -0.6\n")
	dup := write("dup.yaml", "models:\n  NVIDIA L4: 0.6\n  NVIDIA L4: 0.7\n")
	unknown := write("unknown.yaml", "models:\n  NVIDIA L4: 0.6\ncurrencies: [USD]\n")
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"negative hourly price", []string{"--cost.gpu-hourly-usd=-1"}, []string{"--cost.gpu-hourly-usd", "must not be negative"}},
		{"hourly price not a number", []string{"--cost.gpu-hourly-usd=cheap"}, []string{"cost.gpu-hourly-usd", "cheap"}},
		{"monthly price", []string{"--cost.gpu-hourly-usd=2500"}, []string{"--cost.gpu-hourly-usd", "monthly"}},
		{"missing price file", []string{"--cost.price-file=" + filepath.Join(dir, "nope.yaml")}, []string{"--cost.price-file", "nope.yaml"}},
		{"negative price in the file", []string{"--cost.price-file=" + neg}, []string{"--cost.price-file", "neg.yaml:3", `models["NVIDIA A30*"]`, "must not be negative"}},
		{"duplicate model", []string{"--cost.price-file=" + dup}, []string{"dup.yaml:3", `models["NVIDIA L4"]`, "duplicate", "line 2"}},
		{"unknown field", []string{"--cost.price-file=" + unknown}, []string{"unknown.yaml:3", `unknown field "currencies"`}},
		{"bad node label", []string{"--cost.gpu-hourly-usd=1", "--cost.label=provider"}, []string{"--cost.label", "name=value"}},
		{"node label without a file", []string{"--cost.label=provider=b"}, []string{"--cost.label", "--cost.price-file"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out testenv.Log
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			code := run(ctx, append([]string{"--web.listen-address=127.0.0.1:0", "--sim.scenario=minimal"}, tc.args...), &out)
			if code != 2 {
				t.Errorf("exit code %d, want 2; output:\n%s", code, out.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("message does not name %q:\n%s", w, out.String())
				}
			}
		})
	}
}

// The price file prices the node's GPUs (a node override included), the
// flag the ones it does not match; the flags win over the scenario's prices;
// without a price flag a scenario with prices is priced from it, and one
// without is not priced at all.
func TestCostPrices(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "prices.yaml")
	if err := os.WriteFile(file, []byte("models:\n  NVIDIA H100*: 3\noverrides:\n  - node: cloud-b-*\n    labels: {tier: spot}\n    models: {NVIDIA A100*: 0.5}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want map[string]float64 // gpu → price; nil: no price series
	}{
		{"scenario prices", []string{"--sim.scenario=mixed-fleet"}, map[string]float64{"0": 3.5, "3": 2.5, "4": 1.4, "6": 0.6}},
		{"flag over the scenario", []string{"--sim.scenario=mixed-fleet", "--cost.gpu-hourly-usd=2"}, map[string]float64{"0": 2, "3": 2, "4": 2, "6": 2}},
		{"file, override and flag", []string{"--sim.scenario=mixed-fleet", "--cost.price-file=" + file, "--cost.node=cloud-b-1", "--cost.label=tier=spot", "--cost.gpu-hourly-usd=0.25"},
			map[string]float64{"0": 3, "3": 3, "4": 0.5, "6": 0.25}},
		{"override not for this node; A30 unpriced", []string{"--sim.scenario=mixed-fleet", "--cost.price-file=" + file, "--cost.node=cloud-a-1", "--cost.label=tier=spot"},
			map[string]float64{"0": 3, "3": 3}},
		{"no price at all", []string{"--sim.scenario=minimal"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			addr := startExporter(t, append([]string{"--sampler.interval=100ms"}, tc.args...)...)
			gpus := 7 // mixed-fleet
			if tc.args[0] == "--sim.scenario=minimal" {
				gpus = 1
			}
			fams := waitUp(t, http.DefaultClient, "http://"+addr+"/metrics", gpus)
			got := map[string]float64{}
			if f := fams["gpulens_gpu_price_usd_per_hour"]; f != nil {
				for _, s := range f.series {
					got[s.labels["gpu"]] = s.value
				}
			}
			for gpu, w := range tc.want {
				if v, ok := got[gpu]; !ok || v != w {
					t.Errorf("GPU %s: price %v (present %v), want %v", gpu, v, ok, w)
				}
			}
			if tc.want == nil && len(got) > 0 {
				t.Errorf("prices without any price configured: %v", got)
			}
			if tc.want != nil && len(tc.want) == 2 && len(got) != 4 { // the H100s only
				t.Errorf("priced GPUs %v, want the four H100s", got)
			}
			_, mig := fams["gpulens_mig_price_usd_per_hour"]
			if mig != (tc.want != nil) {
				t.Errorf("MIG prices served: %v, want %v", mig, tc.want != nil)
			}
		})
	}
}
