package collector

import (
	"bytes"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrapeFamilies scrapes h in the text format and parses the families.
func scrapeFamilies(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape: %d %s", rec.Code, rec.Body)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := parser.TextToMetricFamilies(bytes.NewReader(rec.Body.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

func labelOf(m *dto.Metric, name string) string {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue()
		}
	}
	return ""
}

func valueOf(m *dto.Metric) float64 {
	if c := m.GetCounter(); c != nil {
		return c.GetValue()
	}
	return m.GetGauge().GetValue()
}

// TestDCGMViewConvertsTheSnapshot: every DCGM field of the view is the
// native series of the same snapshot in DCGM's unit, with dcgm-exporter's
// labels, type and help; MIG instances carry GPU_I_PROFILE and GPU_I_ID,
// allocated devices their pod; the last XID is the code of the GPU's
// latest XID event.
func TestDCGMViewConvertsTheSnapshot(t *testing.T) {
	t.Parallel()
	type conv struct {
		native, label, value string
		f                    func(float64) float64
	}
	mhz := func(v float64) float64 { return math.Round(v / 1e6) }
	pct := func(v float64) float64 { return math.Round(v * 100) }
	mib := func(v float64) float64 { return math.Floor(v / (1 << 20)) }
	same := func(v float64) float64 { return v }
	gpuFields := map[string]conv{
		"DCGM_FI_DEV_SM_CLOCK":                    {"gpulens_gpu_clock_hertz", "clock", "sm", mhz},
		"DCGM_FI_DEV_MEM_CLOCK":                   {"gpulens_gpu_clock_hertz", "clock", "memory", mhz},
		"DCGM_FI_DEV_GPU_TEMP":                    {"gpulens_gpu_temperature_celsius", "", "", same},
		"DCGM_FI_DEV_POWER_USAGE":                 {"gpulens_gpu_power_watts", "", "", same},
		"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION":    {"gpulens_gpu_energy_joules_total", "", "", func(v float64) float64 { return math.Round(v * 1000) }},
		"DCGM_FI_DEV_PCIE_REPLAY_COUNTER":         {"gpulens_gpu_pcie_replay_errors_total", "", "", same},
		"DCGM_FI_DEV_GPU_UTIL":                    {"gpulens_gpu_utilization_ratio", "", "", pct},
		"DCGM_FI_DEV_MEM_COPY_UTIL":               {"gpulens_gpu_memory_bandwidth_utilization_ratio", "", "", pct},
		"DCGM_FI_DEV_ENC_UTIL":                    {"gpulens_gpu_encoder_utilization_ratio", "", "", pct},
		"DCGM_FI_DEV_DEC_UTIL":                    {"gpulens_gpu_decoder_utilization_ratio", "", "", pct},
		"DCGM_FI_DEV_FB_FREE":                     {"gpulens_gpu_memory_free_bytes", "", "", mib},
		"DCGM_FI_DEV_FB_USED":                     {"gpulens_gpu_memory_used_bytes", "", "", mib},
		"DCGM_FI_DEV_FB_RESERVED":                 {"gpulens_gpu_memory_reserved_bytes", "", "", mib},
		"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS":   {"gpulens_gpu_remapped_rows", "type", "correctable", same},
		"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": {"gpulens_gpu_remapped_rows", "type", "uncorrectable", same},
		"DCGM_FI_DEV_ROW_REMAP_FAILURE":           {"gpulens_gpu_remapping_failed", "", "", same},
		"DCGM_FI_PROF_GR_ENGINE_ACTIVE":           {"gpulens_gpu_graphics_activity_ratio", "", "", same},
		"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE":         {"gpulens_gpu_tensor_activity_ratio", "", "", same},
		"DCGM_FI_PROF_DRAM_ACTIVE":                {"gpulens_gpu_dram_bandwidth_utilization_ratio", "", "", same},
		"DCGM_FI_PROF_PCIE_TX_BYTES":              {"gpulens_gpu_pcie_throughput_bytes_per_second", "direction", "tx", same},
		"DCGM_FI_PROF_PCIE_RX_BYTES":              {"gpulens_gpu_pcie_throughput_bytes_per_second", "direction", "rx", same},
	}
	wantType := map[string]dto.MetricType{
		"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": dto.MetricType_COUNTER, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": dto.MetricType_COUNTER,
		"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": dto.MetricType_COUNTER, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": dto.MetricType_COUNTER,
	}
	for _, tc := range []struct {
		scenario string
		gpus     int
		migs     int // MIG instances, each with FB_USED
		pods     int // series of DCGM_FI_DEV_FB_USED with a pod
	}{
		{"dgx-h100", 8, 0, 0},
		// No pod attribution here (the golden files and the dashboard
		// test in alerts/ have pods).
		{"mig-mixed", 2, 6, 0},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			e := newSimExporter(t, tc.scenario)
			// An XID on GPU 1, as the driver reports it.
			lib := e.s.lib
			h, ret := lib.DeviceGetHandleByIndex(1)
			if ret != nvml.SUCCESS {
				t.Fatal(ret)
			}
			e.s.xid = newXIDWatcher(lib, e.s.DeviceCount(), e.s, e.s.logger, e.clock.Now)
			e.s.xid.devices = append(e.s.xid.devices, xidDevice{handle: h, gpu: "1"})
			e.s.xid.record(nvml.EventData{Device: h, EventData: 79})
			e.s.xid.record(nvml.EventData{Device: h, EventData: 48})

			view := NewDCGMExposition(e.s, DCGMOptions{Hostname: "node-a", Exposition: ExpositionOptions{Now: e.clock.Now}})
			dcgm := scrapeFamilies(t, view)
			native := scrapeFamilies(t, e.exp)
			for name, mf := range dcgm {
				if !strings.HasPrefix(name, "DCGM_FI_") {
					t.Errorf("the DCGM view serves %s", name)
				}
				want, ok := wantType[name]
				if !ok {
					want = dto.MetricType_GAUGE
				}
				if mf.GetType() != want {
					t.Errorf("%s: type %s, want %s", name, mf.GetType(), want)
				}
				for _, m := range mf.GetMetric() {
					for _, l := range []string{"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"} {
						if labelOf(m, l) == "" {
							t.Errorf("%s%v: no %s", name, m.GetLabel(), l)
						}
					}
					if got := labelOf(m, "device"); got != "nvidia"+labelOf(m, "gpu") || labelOf(m, "Hostname") != "node-a" {
						t.Errorf("%s%v: device or Hostname wrong", name, m.GetLabel())
					}
				}
			}
			for _, m := range native["gpulens_gpu_info"].GetMetric() {
				gpu := labelOf(m, "gpu")
				for name, c := range gpuFields {
					var nat *dto.Metric
					for _, n := range native[c.native].GetMetric() {
						if labelOf(n, "gpu") == gpu && (c.label == "" || labelOf(n, c.label) == c.value) {
							nat = n
						}
					}
					var got *dto.Metric
					for _, d := range dcgm[name].GetMetric() {
						if labelOf(d, "gpu") == gpu && labelOf(d, "GPU_I_ID") == "" {
							got = d
						}
					}
					isMIG := labelOf(m, "uuid") != "" && tc.migs > 0
					switch {
					case nat == nil && got != nil:
						t.Errorf("GPU %s: %s served without its source %s", gpu, name, c.native)
					case got == nil && nat != nil && !(isMIG && strings.HasPrefix(name, "DCGM_FI_DEV_FB_")):
						t.Errorf("GPU %s: %s missing (%s is served)", gpu, name, c.native)
					case got != nil && valueOf(got) != c.f(valueOf(nat)):
						t.Errorf("GPU %s: %s = %v, want %v (%s %v)", gpu, name, valueOf(got), c.f(valueOf(nat)), c.native, valueOf(nat))
					case got != nil && (labelOf(got, "UUID") != labelOf(m, "uuid") || labelOf(got, "modelName") != labelOf(m, "name") ||
						labelOf(got, "pci_bus_id") != labelOf(m, "pci_bus_id") || labelOf(got, "DCGM_FI_DRIVER_VERSION") != labelOf(m, "driver_version")):
						t.Errorf("GPU %s: %s labels %v do not match gpulens_gpu_info %v", gpu, name, got.GetLabel(), m.GetLabel())
					}
				}
			}
			xids := map[string]float64{}
			for _, m := range dcgm["DCGM_FI_DEV_XID_ERRORS"].GetMetric() {
				xids[labelOf(m, "gpu")] = valueOf(m)
			}
			if len(xids) != tc.gpus || xids["1"] != 48 || xids["0"] != 0 {
				t.Errorf("DCGM_FI_DEV_XID_ERRORS by GPU %v, want %d GPUs, 48 on GPU 1, 0 on the others", xids, tc.gpus)
			}
			migs, pods := 0, 0
			for _, m := range dcgm["DCGM_FI_DEV_FB_USED"].GetMetric() {
				if labelOf(m, "GPU_I_ID") == "" {
					continue
				}
				migs++
				if labelOf(m, "GPU_I_PROFILE") == "" {
					t.Errorf("MIG series without a profile: %v", m.GetLabel())
				}
				if labelOf(m, "pod") != "" {
					pods++
					if labelOf(m, "namespace") == "" || labelOf(m, "container") == "" {
						t.Errorf("pod without namespace or container: %v", m.GetLabel())
					}
				}
			}
			if migs != tc.migs || pods != tc.pods {
				t.Errorf("%d MIG instances with FB_USED (%d with a pod), want %d (%d)", migs, pods, tc.migs, tc.pods)
			}
			// Nothing converted while the view is not scraped.
			if n := view.renders.Load(); n != 1 {
				t.Errorf("%d renders of the view after one scrape", n)
			}
		})
	}
}

// TestDCGMViewLint: promtool's lint (promlint) finds in the DCGM view only
// what dcgm-exporter's names are (counters without _total, one with its
// type in its name, the camelCase label modelName), kept because consumers
// depend on them; the native view of the same exporter is clean.
func TestDCGMViewLint(t *testing.T) {
	t.Parallel()
	e := newSimExporter(t, "dgx-h100")
	view := NewDCGMExposition(e.s, DCGMOptions{Hostname: "node-a"})
	lint := func(h http.Handler) map[string]bool {
		fams := scrapeFamilies(t, h)
		var mfs []*dto.MetricFamily
		for _, mf := range fams {
			mfs = append(mfs, mf)
		}
		problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, p := range problems {
			out[p.Metric+": "+p.Text] = true
		}
		return out
	}
	want := map[string]bool{}
	served := scrapeFamilies(t, view)
	if len(served) < 15 {
		t.Fatalf("the DCGM view serves %d families", len(served))
	}
	for name := range served {
		want[name+": label names should be written in 'snake_case' not 'camelCase'"] = true
	}
	for _, name := range []string{"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
		"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"} {
		want[name+`: counter metrics should have "_total" suffix`] = true
	}
	want["DCGM_FI_DEV_PCIE_REPLAY_COUNTER: metric name should not include type 'counter'"] = true
	got := lint(view)
	for p := range got {
		if !want[p] {
			t.Errorf("unexpected lint problem in the DCGM view: %s", p)
		}
	}
	for p := range want {
		if !got[p] {
			t.Errorf("lint problem expected of dcgm-exporter's names not found (renamed?): %s", p)
		}
	}
	for p := range lint(e.exp) {
		t.Errorf("the native view: %s", p)
	}
}
