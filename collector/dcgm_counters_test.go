package collector

import (
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpulens/gpulens/internal/clockevent"
)

var dcgmDefaultCounters = filepath.Join("testdata", "dcgm-exporter", "default-counters.csv")

// scrapeString is h's text exposition as a string.
func scrapeString(t *testing.T, h http.Handler) string {
	t.Helper()
	return string(scrapeText(t, h))
}

// TestDCGMCountersDefaultFileIsTheDefaultView: dcgm-exporter's own
// default-counters.csv selects exactly the view served without a file
// (same names, types, help texts, labels and values), and its three fields
// gpulens has no value for are listed with their lines.
func TestDCGMCountersDefaultFileIsTheDefaultView(t *testing.T) {
	t.Parallel()
	c, err := LoadDCGMCounters(dcgmDefaultCounters)
	if err != nil {
		t.Fatal(err)
	}
	var skipped []string
	for _, s := range c.Skipped {
		skipped = append(skipped, s.String())
	}
	want := []string{
		dcgmDefaultCounters + ":10: DCGM_FI_DEV_MEMORY_TEMP: a DCGM field gpulens has no value for; not served",
		dcgmDefaultCounters + ":65: DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL: a DCGM field gpulens has no value for; not served",
		dcgmDefaultCounters + ":69: DCGM_FI_DEV_VGPU_LICENSE_STATUS: a DCGM field gpulens has no value for; not served",
	}
	if !slices.Equal(skipped, want) {
		t.Errorf("skipped:\n%s\nwant:\n%s", strings.Join(skipped, "\n"), strings.Join(want, "\n"))
	}
	if got, want := len(c.Fields()), len(DCGMFields()); got != want {
		t.Errorf("%d fields served (%v), want the view's %d", got, c.Fields(), want)
	}
	for _, scenario := range []string{"dgx-h100", "mig-mixed"} {
		t.Run(scenario, func(t *testing.T) {
			e := newSimExporter(t, scenario)
			plain := scrapeString(t, NewDCGMExposition(e.s, DCGMOptions{Hostname: "node-a", Exposition: ExpositionOptions{Now: e.clock.Now}}))
			filed := scrapeString(t, NewDCGMExposition(e.s, DCGMOptions{Hostname: "node-a", Counters: c, Exposition: ExpositionOptions{Now: e.clock.Now}}))
			if plain != filed {
				t.Errorf("the view with dcgm-exporter's default file differs from the default view:\n--- default\n%s\n--- file\n%s", plain, filed)
			}
			if !strings.Contains(plain, "DCGM_FI_DEV_GPU_TEMP{") {
				t.Fatalf("no temperature in the view:\n%s", plain)
			}
		})
	}
}

// TestDCGMCountersSelectAndAdd: a file serves only its fields, under its
// names, types and help texts, a legacy name included; the fields outside
// dcgm-exporter's default set (FB_TOTAL, power limit, maximum clocks, ECC,
// clock-event reasons, SM activity) carry the values of the native view
// with the labels of their scope's series; without a DCGM_FI_DRIVER_VERSION
// label line, no series has that label.
func TestDCGMCountersSelectAndAdd(t *testing.T) {
	t.Parallel()
	file := `# a custom set
DCGM_FI_DEV_FB_USED, gauge, used (MiB).
dcgm_fb_free , gauge, Legacy free.
DCGM_FI_DEV_FB_TOTAL, gauge, total (MiB).
DCGM_FI_DEV_ENFORCED_POWER_LIMIT, gauge, limit (W).
DCGM_FI_DEV_MAX_SM_CLOCK, gauge, max SM (MHz).
DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, counter, DBE.
DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, gauge, reasons.
DCGM_FI_PROF_SM_ACTIVE, gauge, SM active.
DCGM_FI_PROF_GR_ENGINE_ACTIVE, gauge, engine.
DCGM_FI_DEV_GPU_TEMP, counter, typed as the file says.
`
	c, err := ParseDCGMCounters("custom.csv", strings.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Skipped) != 0 {
		t.Errorf("skipped %v", c.Skipped)
	}
	for _, tc := range []struct {
		scenario  string
		totals    int // FB_TOTAL series: GPUs not in MIG mode, and MIG instances
		migTotals int
	}{
		{"dgx-h100", 8, 0},
		{"mig-mixed", 6, 6},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			e := newSimExporter(t, tc.scenario)
			dcgm := scrapeFamilies(t, NewDCGMExposition(e.s, DCGMOptions{Hostname: "node-a", Counters: c, Exposition: ExpositionOptions{Now: e.clock.Now}}))
			native := scrapeFamilies(t, e.exp)
			var names []string
			for name := range dcgm {
				names = append(names, name)
			}
			slices.Sort(names)
			wantNames := []string{"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ENFORCED_POWER_LIMIT",
				"DCGM_FI_DEV_FB_TOTAL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_MAX_SM_CLOCK", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_SM_ACTIVE", "dcgm_fb_free"}
			if !slices.Equal(names, wantNames) {
				t.Fatalf("families %v, want %v", names, wantNames)
			}
			if got := dcgm["DCGM_FI_DEV_GPU_TEMP"]; got.GetType() != dto.MetricType_COUNTER || got.GetHelp() != "typed as the file says." {
				t.Errorf("GPU_TEMP: %v %q, want the file's counter and help", got.GetType(), got.GetHelp())
			}
			if got := dcgm["dcgm_fb_free"].GetHelp(); got != "Legacy free." {
				t.Errorf("dcgm_fb_free help %q", got)
			}
			for name, mf := range dcgm {
				for _, m := range mf.GetMetric() {
					if labelOf(m, "DCGM_FI_DRIVER_VERSION") != "" {
						t.Errorf("%s%v: DCGM_FI_DRIVER_VERSION label, not listed in the file", name, m.GetLabel())
					}
					if labelOf(m, "UUID") == "" || labelOf(m, "Hostname") != "node-a" {
						t.Errorf("%s%v: no identity", name, m.GetLabel())
					}
				}
			}
			// Native values by GPU (and MIG instance).
			nat := func(family, label, value string) map[string]float64 {
				out := map[string]float64{}
				for _, m := range native[family].GetMetric() {
					if label != "" && labelOf(m, label) != value {
						continue
					}
					out[labelOf(m, "gpu")+"/"+labelOf(m, "gpu_instance_id")] = valueOf(m)
				}
				return out
			}
			view := func(family string) map[string]float64 {
				out := map[string]float64{}
				for _, m := range dcgm[family].GetMetric() {
					out[labelOf(m, "gpu")+"/"+labelOf(m, "GPU_I_ID")] = valueOf(m)
				}
				return out
			}
			mib := func(v float64) float64 { return math.Floor(v / (1 << 20)) }
			totals := view("DCGM_FI_DEV_FB_TOTAL")
			if len(totals) != tc.totals {
				t.Errorf("FB_TOTAL series %d, want %d: %v", len(totals), tc.totals, totals)
			}
			for k, v := range nat("gpulens_gpu_memory_total_bytes", "", "") {
				if got, ok := totals[k]; ok && got != mib(v) {
					t.Errorf("FB_TOTAL %s = %v, want %v", k, got, mib(v))
				}
			}
			migTotals := 0
			for k, v := range nat("gpulens_mig_memory_total_bytes", "", "") {
				migTotals++
				if got := totals[k]; got != mib(v) {
					t.Errorf("FB_TOTAL of instance %s = %v, want %v", k, got, mib(v))
				}
			}
			if migTotals != tc.migTotals {
				t.Errorf("%d MIG instances, want %d", migTotals, tc.migTotals)
			}
			// FB_TOTAL has FB_USED's labels, series by series.
			used := map[string]string{}
			for _, m := range dcgm["DCGM_FI_DEV_FB_USED"].GetMetric() {
				used[labelOf(m, "gpu")+"/"+labelOf(m, "GPU_I_ID")] = labelString(m)
			}
			for _, m := range dcgm["DCGM_FI_DEV_FB_TOTAL"].GetMetric() {
				if k := labelOf(m, "gpu") + "/" + labelOf(m, "GPU_I_ID"); used[k] != labelString(m) {
					t.Errorf("FB_TOTAL %s labels %s, FB_USED's %s", k, labelString(m), used[k])
				}
			}
			free := view("dcgm_fb_free")
			if len(free) == 0 {
				t.Error("no dcgm_fb_free (the legacy name of DCGM_FI_DEV_FB_FREE)")
			}
			// A GPU in MIG mode has no whole-GPU series in the view: a
			// device field (repeated) is its GPU's value on every GPU
			// instance's series, as dcgm-exporter repeats it; a PROF field
			// is each instance's own (checked against gpulens_mig_*).
			for _, chk := range []struct {
				field, native, label, value string
				conv                        func(float64) float64
				repeated                    bool
			}{
				{"DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "gpulens_gpu_power_limit_watts", "", "", func(v float64) float64 { return v }, true},
				{"DCGM_FI_DEV_MAX_SM_CLOCK", "gpulens_gpu_max_clock_hertz", "clock", "sm", func(v float64) float64 { return math.Round(v / 1e6) }, true},
				{"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "gpulens_gpu_ecc_errors_total", "type", "uncorrected", func(v float64) float64 { return v }, true},
				{"DCGM_FI_PROF_SM_ACTIVE", "gpulens_gpu_sm_activity_ratio", "", "", func(v float64) float64 { return v }, false},
				{"DCGM_FI_PROF_SM_ACTIVE", "gpulens_mig_sm_activity_ratio", "", "", func(v float64) float64 { return v }, false},
			} {
				got := view(chk.field)
				want := nat(chk.native, chk.label, chk.value)
				if len(want) == 0 && chk.native != "gpulens_mig_sm_activity_ratio" {
					t.Errorf("%s: the native view has no %s", chk.field, chk.native)
				}
				for k, v := range want {
					if g, ok := got[k]; ok {
						if g != chk.conv(v) {
							t.Errorf("%s %s = %v, want %v", chk.field, k, g, chk.conv(v))
						}
						continue
					}
					instances := 0
					for gk, g := range got {
						gpu, inst, _ := strings.Cut(gk, "/")
						if gpu+"/" != k || inst == "" {
							continue
						}
						instances++
						if chk.repeated && g != chk.conv(v) {
							t.Errorf("%s %s (GPU instance of GPU %s) = %v, want the GPU's %v", chk.field, gk, gpu, g, chk.conv(v))
						}
					}
					if instances == 0 {
						t.Errorf("%s %s: no series, neither the GPU's nor its GPU instances'", chk.field, k)
					}
				}
			}
			// An extra field alone: its scope's series need not be served.
			only, err := ParseDCGMCounters("only.csv", strings.NewReader("DCGM_FI_DEV_FB_TOTAL, gauge, t\nDCGM_FI_DEV_ENFORCED_POWER_LIMIT, gauge, p\n"))
			if err != nil {
				t.Fatal(err)
			}
			alone := scrapeFamilies(t, NewDCGMExposition(e.s, DCGMOptions{Hostname: "node-a", Counters: only, Exposition: ExpositionOptions{Now: e.clock.Now}}))
			if len(alone) != 2 || len(alone["DCGM_FI_DEV_FB_TOTAL"].GetMetric()) != tc.totals || len(alone["DCGM_FI_DEV_ENFORCED_POWER_LIMIT"].GetMetric()) != len(dcgm["DCGM_FI_DEV_ENFORCED_POWER_LIMIT"].GetMetric()) {
				t.Errorf("FB_TOTAL and the power limit alone: %v", alone)
			}
			if len(view("DCGM_FI_PROF_SM_ACTIVE")) == 0 {
				t.Error("no SM_ACTIVE series (GPM GPUs)")
			}
			// Each extra field has the labels of its scope's series, one
			// for one, whatever series the view has for that scope.
			for extra, scope := range map[string]string{
				"DCGM_FI_PROF_SM_ACTIVE":           "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
				"DCGM_FI_DEV_FB_TOTAL":             "DCGM_FI_DEV_FB_USED",
				"DCGM_FI_DEV_ENFORCED_POWER_LIMIT": "DCGM_FI_DEV_GPU_TEMP",
				"DCGM_FI_DEV_MAX_SM_CLOCK":         "DCGM_FI_DEV_GPU_TEMP",
			} {
				var got, want []string
				for _, m := range dcgm[extra].GetMetric() {
					got = append(got, labelString(m))
				}
				for _, m := range dcgm[scope].GetMetric() {
					want = append(want, labelString(m))
				}
				slices.Sort(got)
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Errorf("%s series %v, want the labels of %s's %v", extra, got, scope, want)
				}
			}
			// The clock-event bitmask: the bits of the active reasons.
			bits := map[string]float64{}
			for _, m := range native["gpulens_gpu_clock_event_active"].GetMetric() {
				r, ok := clockevent.Lookup(labelOf(m, "reason"))
				if !ok {
					t.Fatalf("reason %q", labelOf(m, "reason"))
				}
				k := labelOf(m, "gpu") + "/"
				bits[k] += valueOf(m) * float64(r.Bit)
			}
			reasons := view("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")
			if len(reasons) == 0 {
				t.Error("no clock-event reasons")
			}
			for k, v := range reasons {
				g, _, _ := strings.Cut(k, "/")
				if v != bits[g+"/"] {
					t.Errorf("reasons %s = %v, want %v", k, v, bits[g+"/"])
				}
			}
		})
	}
}

// labelString is a series' labels as one string.
func labelString(m *dto.Metric) string {
	var b strings.Builder
	for _, lp := range m.GetLabel() {
		b.WriteString(lp.GetName() + "=" + lp.GetValue() + ",")
	}
	return b.String()
}

// TestDCGMCountersFileErrors: what a counters file gets wrong stops the
// exporter with the file, the line and the field.
func TestDCGMCountersFileErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, file, want string }{
		{"typo", "DCGM_FI_DEV_GPU_TEMP, gauge, t\nDCGM_FI_DEV_GPU_TMEP, gauge, t\n", `f.csv:2: "DCGM_FI_DEV_GPU_TMEP" is not a DCGM field`},
		{"two fields", "# c\n\nDCGM_FI_DEV_GPU_TEMP, gauge\n", "f.csv:3: 2 fields, want 3"},
		{"bad type", "DCGM_FI_DEV_GPU_TEMP, gague, t\n", `f.csv:1: DCGM_FI_DEV_GPU_TEMP: "gague" is not a Prometheus type`},
		{"histogram", "DCGM_FI_DEV_GPU_TEMP, histogram, t\n", `f.csv:1: DCGM_FI_DEV_GPU_TEMP: type "histogram"`},
		{"twice", "DCGM_FI_DEV_GPU_TEMP, gauge, t\nDCGM_FI_DEV_GPU_TEMP, gauge, t\n", "f.csv:2: DCGM_FI_DEV_GPU_TEMP listed again (first on line 1)"},
		{"nothing served", "DCGM_FI_DEV_MEMORY_TEMP, gauge, t\nDCGM_FI_DRIVER_VERSION, label, d\n", "f.csv: no field of the file is one the view serves (1 lines skipped)"},
		{"empty", "# only comments\n", "f.csv: no field of the file is one the view serves"},
		{"bare quote", "DCGM_FI_DEV_GPU_TEMP, gauge, a \"b\n", "f.csv:1: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseDCGMCounters("f.csv", strings.NewReader(tc.file))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
	// A missing file names itself.
	_, err := LoadDCGMCounters(filepath.Join(t.TempDir(), "nope.csv"))
	if !os.IsNotExist(err) || !strings.Contains(err.Error(), "nope.csv") {
		t.Errorf("missing file: %v", err)
	}
	// Known DCGM fields the view cannot serve are listed, not errors; an
	// exporter field (DCGM_EXP_*) and a label other than the driver
	// version too.
	c, err := ParseDCGMCounters("f.csv", strings.NewReader("DCGM_FI_DEV_GPU_TEMP, gauge, t\nDCGM_EXP_XID_ERRORS_COUNT, counter, x\nDCGM_FI_DEV_POWER_VIOLATION, counter, v\nDCGM_FI_DEV_SERIAL, label, s\n"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range c.Skipped {
		got = append(got, s.Field)
	}
	if want := []string{"DCGM_EXP_XID_ERRORS_COUNT", "DCGM_FI_DEV_POWER_VIOLATION", "DCGM_FI_DEV_SERIAL"}; !slices.Equal(got, want) {
		t.Errorf("skipped %v, want %v", got, want)
	}
}

// TestDCGMExtraFieldsDocumented: every field a counters file can add is a
// DCGM field, named in docs/metrics.md and in the migration guide.
func TestDCGMExtraFieldsDocumented(t *testing.T) {
	t.Parallel()
	metrics, err := os.ReadFile(filepath.Join("..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	guide, err := os.ReadFile(filepath.Join("..", "docs", "dcgm-migration.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range DCGMExtraFields() {
		if _, ok := dcgmFieldIDs()[name]; !ok {
			t.Errorf("%s is not a DCGM field", name)
		}
		if !strings.Contains(string(metrics), "`"+name+"`") || !strings.Contains(string(guide), "`"+name+"`") {
			t.Errorf("%s: not in docs/metrics.md and docs/dcgm-migration.md", name)
		}
	}
	for _, name := range DCGMFields() {
		if _, ok := dcgmFieldIDs()[name]; !ok {
			t.Errorf("the view's %s is not a DCGM field", name)
		}
	}
}
