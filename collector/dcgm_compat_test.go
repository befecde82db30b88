package collector

import (
	"bytes"
	"flag"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpulens/gpulens/internal/sim/gpusim"
)

var updateDCGM = flag.Bool("update-dcgm", false, "rewrite collector/testdata/dcgm/*.txt from the DCGM view")

// scrapeFamilies scrapes h in the text format and parses the families.
func scrapeFamilies(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := parser.TextToMetricFamilies(bytes.NewReader(scrapeText(t, h)))
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// scrapeText is h's text exposition.
func scrapeText(t *testing.T, h http.Handler) []byte {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape: %d %s", rec.Code, rec.Body)
	}
	return rec.Body.Bytes()
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

// fleetAllocations answers like the kubelet's pod-resources API for the
// pods of the simulated tenants running now (as the exporter's simulated
// sources do).
type fleetAllocations struct{ fleet *gpusim.Fleet }

func (a fleetAllocations) Lookup(deviceIDs ...string) []Allocation {
	var out []Allocation
	for _, p := range a.fleet.Processes() {
		for _, id := range deviceIDs {
			if p.Pod != "" && p.GPUUUID == id {
				out = append(out, Allocation{Namespace: p.Namespace, Pod: p.Pod, Container: p.Container, DeviceID: id})
			}
		}
	}
	return out
}

// dcgmSim is a simulated fleet's exporter on a fake clock with pod
// allocations and XID events, its DCGM view beside its native one.
type dcgmSim struct {
	*simExporter
	set  nvml.EventSet
	view *Exposition
}

func newDCGMSim(t *testing.T, scenario string, opts DCGMOptions) *dcgmSim {
	t.Helper()
	sc, err := gpusim.Load(scenario)
	if err != nil {
		t.Fatal(err)
	}
	fleet, lib, clock := startFleet(t, sc)
	var cs []NamedCollector
	for _, f := range Factories() {
		if f.DefaultEnabled {
			cs = append(cs, NamedCollector{Name: f.Name, Collector: f.New()})
		}
	}
	s, err := NewSampler(lib, cs, true, Config{Interval: time.Second, DeviceTimeout: 5 * time.Second, Now: clock.Now, Simulated: true,
		Processes: ProcessOptions{ProcRoot: os.DevNull, Allocations: fleetAllocations{fleet}, SelfPID: 1}})
	if err != nil {
		t.Fatal(err)
	}
	// The XID watcher's events, read by the test instead of its goroutine.
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	t.Cleanup(func() { set.Free() })
	for i := range s.DeviceCount() {
		if !s.xid.register(set, i) {
			t.Fatalf("GPU %d: no XID events", i)
		}
	}
	opts.Exposition.Now = clock.Now
	reg := NewRegistry()
	reg.MustRegister(s.Live())
	e := &simExporter{clock: clock, s: s, exp: NewExposition(s, reg, ExpositionOptions{Now: clock.Now})}
	return &dcgmSim{simExporter: e, set: set, view: NewDCGMExposition(s, opts)}
}

// run advances the fleet by n seconds of sampler cycles, delivering the
// XIDs due.
func (d *dcgmSim) run(n int) {
	for range n {
		d.second()
		for {
			data, ret := d.set.Wait(0)
			if ret != nvml.SUCCESS {
				break
			}
			d.s.xid.record(data)
		}
	}
}

// dcgmKey is one DCGM series' entity: the GPU and its GPU instance.
type dcgmKey struct{ gpu, gi string }

// expectedEntities are the entities dcgm-exporter (--devices f) watches,
// worked out from the native view: each GPU instance of a GPU in MIG mode
// that has any, else the GPU; with the pod allocated to each (the first by
// namespace, pod, container, over the instance's compute instances).
func expectedEntities(native map[string]*dto.MetricFamily) map[dcgmKey][3]string {
	out := map[dcgmKey][3]string{}
	mig := map[string]bool{}
	for _, m := range native["gpulens_gpu_mig_enabled"].GetMetric() {
		mig[labelOf(m, "gpu")] = valueOf(m) == 1
	}
	gis := map[string]string{} // mig_uuid -> gi
	split := map[string]bool{}
	for _, m := range native["gpulens_mig_instance_info"].GetMetric() {
		if mig[labelOf(m, "gpu")] {
			gis[labelOf(m, "mig_uuid")] = labelOf(m, "gpu_instance_id")
			out[dcgmKey{labelOf(m, "gpu"), labelOf(m, "gpu_instance_id")}] = [3]string{}
			split[labelOf(m, "gpu")] = true
		}
	}
	for _, m := range native["gpulens_gpu_info"].GetMetric() {
		if !split[labelOf(m, "gpu")] {
			out[dcgmKey{labelOf(m, "gpu"), ""}] = [3]string{}
		}
	}
	for _, m := range native["gpulens_gpu_allocation_info"].GetMetric() {
		k := dcgmKey{labelOf(m, "gpu"), gis[labelOf(m, "mig_uuid")]}
		p := [3]string{labelOf(m, "namespace"), labelOf(m, "pod"), labelOf(m, "container")}
		if cur, ok := out[k]; ok && (cur == [3]string{} || strings.Join(p[:], "\x00") < strings.Join(cur[:], "\x00")) {
			out[k] = p
		}
	}
	return out
}

// TestDCGMViewSeriesSet: on Hopper, MIG, a mixed Hopper/Ampere fleet and
// Ampere GPUs one of which is lost, the view has dcgm-exporter's series
// set: every device field (power, temperature, clocks, energy, PCIe, row
// remapping, XID) once per entity (per GPU instance on a GPU in MIG mode,
// with GPU_I_PROFILE, GPU_I_ID and that instance's pod; no series for the
// whole GPU there) with the GPU's native value in DCGM's unit; the
// utilisation and PCIe bytes fields only on GPUs not split; each series unique by (UUID,
// GPU_I_ID), so that the migration guide's comparison query matches one to
// one; PCIe bytes on every whole GPU, Ampere too (none on a GPU in MIG
// mode: DCGM answers N/A for a GPU instance).
func TestDCGMViewSeriesSet(t *testing.T) {
	t.Parallel()
	type conv struct {
		native, label, value string
		f                    func(float64) float64
	}
	mhz := func(v float64) float64 { return math.Round(v / 1e6) }
	pct := func(v float64) float64 { return math.Round(v * 100) }
	same := func(v float64) float64 { return v }
	device := map[string]conv{
		"DCGM_FI_DEV_SM_CLOCK":                    {"gpulens_gpu_clock_hertz", "clock", "sm", mhz},
		"DCGM_FI_DEV_MEM_CLOCK":                   {"gpulens_gpu_clock_hertz", "clock", "memory", mhz},
		"DCGM_FI_DEV_GPU_TEMP":                    {"gpulens_gpu_temperature_celsius", "", "", same},
		"DCGM_FI_DEV_POWER_USAGE":                 {"gpulens_gpu_power_watts", "", "", same},
		"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION":    {"gpulens_gpu_energy_joules_total", "", "", func(v float64) float64 { return math.Round(v * 1000) }},
		"DCGM_FI_DEV_PCIE_REPLAY_COUNTER":         {"gpulens_gpu_pcie_replay_errors_total", "", "", same},
		"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS":   {"gpulens_gpu_remapped_rows", "type", "correctable", same},
		"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": {"gpulens_gpu_remapped_rows", "type", "uncorrectable", same},
		"DCGM_FI_DEV_ROW_REMAP_FAILURE":           {"gpulens_gpu_remapping_failed", "", "", same},
	}
	whole := map[string]conv{
		"DCGM_FI_DEV_GPU_UTIL":       {"gpulens_gpu_utilization_ratio", "", "", pct},
		"DCGM_FI_DEV_MEM_COPY_UTIL":  {"gpulens_gpu_memory_bandwidth_utilization_ratio", "", "", pct},
		"DCGM_FI_DEV_ENC_UTIL":       {"gpulens_gpu_encoder_utilization_ratio", "", "", pct},
		"DCGM_FI_DEV_DEC_UTIL":       {"gpulens_gpu_decoder_utilization_ratio", "", "", pct},
		"DCGM_FI_PROF_PCIE_TX_BYTES": {"gpulens_gpu_pcie_throughput_bytes_per_second", "direction", "tx", same},
		"DCGM_FI_PROF_PCIE_RX_BYTES": {"gpulens_gpu_pcie_throughput_bytes_per_second", "direction", "rx", same},
	}
	for _, tc := range []struct {
		scenario string
		seconds  int
		entities int // entities up
		pods     int // entities with a pod
		kinds    string
	}{
		{"dgx-h100", 3, 8, 0, "8 H100"},
		{"mig-mixed", 65, 6, 5, "2 H100 in MIG mode, 6 GPU instances, 5 with a tenant's pod"},
		{"mixed-fleet", 3, 5 + 4 + 2, 8, "H100, H100 MIG, A100 MIG, A100, A30"},
		{"testdata/dcgm-ampere-lost.yaml", 8, 2, 1, "A100 (a pod), A100 lost, A30"},
	} {
		t.Run(filepath.Base(tc.scenario), func(t *testing.T) {
			t.Parallel()
			d := newDCGMSim(t, tc.scenario, DCGMOptions{Hostname: "node-a"})
			d.run(tc.seconds)
			native := scrapeFamilies(t, d.exp)
			view := scrapeFamilies(t, d.view)
			want := expectedEntities(native)
			if len(want) != tc.entities {
				t.Fatalf("%d entities up (%v), want %d (%s)", len(want), want, tc.entities, tc.kinds)
			}
			pods := 0
			for _, p := range want {
				if p != ([3]string{}) {
					pods++
				}
			}
			if pods != tc.pods {
				t.Errorf("%d entities with a pod, want %d", pods, tc.pods)
			}
			info := map[string]*dto.Metric{}
			for _, m := range native["gpulens_gpu_info"].GetMetric() {
				info[labelOf(m, "gpu")] = m
			}
			nativeValue := func(c conv, gpu string) (float64, bool) {
				for _, n := range native[c.native].GetMetric() {
					if labelOf(n, "gpu") == gpu && (c.label == "" || labelOf(n, c.label) == c.value) {
						return valueOf(n), true
					}
				}
				return 0, false
			}
			for name, mf := range view {
				seen := map[dcgmKey]bool{}
				for _, m := range mf.GetMetric() {
					k := dcgmKey{labelOf(m, "gpu"), labelOf(m, "GPU_I_ID")}
					if seen[k] {
						t.Errorf("%s: two series for GPU %s instance %q: the comparison query on (UUID, GPU_I_ID) would fail", name, k.gpu, k.gi)
					}
					seen[k] = true
					if name == "DCGM_FI_DEV_XID_ERRORS" && info[k.gpu] == nil {
						continue // a lost GPU's XID: TestDCGMViewLostGPUKeepsXID
					}
					pod, ok := want[k]
					if !ok {
						t.Errorf("%s%v: not an entity dcgm-exporter watches (want %v)", name, m.GetLabel(), want)
						continue
					}
					g := info[k.gpu]
					if labelOf(m, "UUID") != labelOf(g, "uuid") || labelOf(m, "modelName") != labelOf(g, "name") ||
						labelOf(m, "pci_bus_id") != labelOf(g, "pci_bus_id") || labelOf(m, "DCGM_FI_DRIVER_VERSION") != labelOf(g, "driver_version") ||
						labelOf(m, "device") != "nvidia"+k.gpu || labelOf(m, "Hostname") != "node-a" {
						t.Errorf("%s%v: identity differs from gpulens_gpu_info %v", name, m.GetLabel(), g.GetLabel())
					}
					if got := [3]string{labelOf(m, "namespace"), labelOf(m, "pod"), labelOf(m, "container")}; got != pod {
						t.Errorf("%s%v: pod %v, want %v", name, m.GetLabel(), got, pod)
					}
					if (k.gi == "") != (labelOf(m, "GPU_I_PROFILE") == "") {
						t.Errorf("%s%v: GPU_I_ID without GPU_I_PROFILE or the other way", name, m.GetLabel())
					}
				}
				if c, ok := device[name]; ok {
					for k := range want {
						if v, ok := nativeValue(c, k.gpu); ok && !seen[k] {
							t.Errorf("%s: no series for GPU %s instance %q (%s = %v)", name, k.gpu, k.gi, c.native, v)
						}
					}
					for _, m := range mf.GetMetric() {
						if v, ok := nativeValue(c, labelOf(m, "gpu")); !ok || valueOf(m) != c.f(v) {
							t.Errorf("%s%v = %v, want %v (%s = %v, %v)", name, m.GetLabel(), valueOf(m), c.f(v), c.native, v, ok)
						}
					}
				}
				if c, ok := whole[name]; ok {
					for _, m := range mf.GetMetric() {
						v, ok := nativeValue(c, labelOf(m, "gpu"))
						if labelOf(m, "GPU_I_ID") != "" || !ok || valueOf(m) != c.f(v) {
							t.Errorf("%s%v = %v: want whole GPUs only, %v (%s)", name, m.GetLabel(), valueOf(m), c.f(v), c.native)
						}
					}
				}
			}
			for name := range device {
				if name == "DCGM_FI_DEV_PCIE_REPLAY_COUNTER" || strings.Contains(name, "REMAP") {
					continue
				}
				if len(view[name].GetMetric()) == 0 {
					t.Errorf("%s: not served", name)
				}
			}
			// PCIe bytes wherever the GPU is whole, Ampere included.
			for k := range want {
				for _, name := range []string{"DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES"} {
					n := 0
					for _, m := range view[name].GetMetric() {
						if labelOf(m, "gpu") == k.gpu {
							n++
						}
					}
					if (k.gi == "") != (n == 1) {
						t.Errorf("%s: %d series for GPU %s (instance %q); want one for a whole GPU, none in MIG mode", name, n, k.gpu, k.gi)
					}
				}
			}
			// dcgm-exporter's MIG instances have their own framebuffer.
			for _, m := range view["DCGM_FI_DEV_FB_USED"].GetMetric() {
				if labelOf(m, "GPU_I_ID") == "" {
					continue
				}
				for _, n := range native["gpulens_mig_memory_used_bytes"].GetMetric() {
					if labelOf(n, "gpu") == labelOf(m, "gpu") && labelOf(n, "gpu_instance_id") == labelOf(m, "GPU_I_ID") &&
						valueOf(m) != math.Floor(valueOf(n)/(1<<20)) {
						t.Errorf("FB_USED%v = %v, want %v", m.GetLabel(), valueOf(m), math.Floor(valueOf(n)/(1<<20)))
					}
				}
			}
		})
	}
}

// TestDCGMViewLostGPUKeepsXID: a GPU that falls off the bus (the driver's
// XID 79, then ERROR_GPU_IS_LOST) keeps DCGM_FI_DEV_XID_ERRORS in the
// view, value 79 with err_code and err_msg as dcgm-exporter gives them,
// under the identity it had, so an alert on the XID value fires for it;
// its other series are gone. The others have XID 0, "No Error".
func TestDCGMViewLostGPUKeepsXID(t *testing.T) {
	t.Parallel()
	d := newDCGMSim(t, "testdata/dcgm-ampere-lost.yaml", DCGMOptions{})
	d.run(3)
	before := scrapeFamilies(t, d.view)
	d.run(5)
	native := scrapeFamilies(t, d.exp)
	view := scrapeFamilies(t, d.view)
	for _, m := range native["gpulens_gpu_up"].GetMetric() {
		if up := valueOf(m); (labelOf(m, "gpu") == "1") != (up == 0) {
			t.Fatalf("gpulens_gpu_up%v = %v: GPU 1 lost at 5 s, the others up", m.GetLabel(), up)
		}
	}
	xid := map[string]*dto.Metric{}
	for _, m := range view["DCGM_FI_DEV_XID_ERRORS"].GetMetric() {
		xid[labelOf(m, "gpu")] = m
	}
	for _, gpu := range []string{"0", "1", "2"} {
		m := xid[gpu]
		if m == nil {
			t.Errorf("GPU %s: no DCGM_FI_DEV_XID_ERRORS", gpu)
			continue
		}
		code, msg := 0.0, "No Error"
		if gpu == "1" {
			code, msg = 79, "GPU has fallen off the bus"
		}
		if valueOf(m) != code || labelOf(m, "err_code") != strconv.Itoa(int(code)) || labelOf(m, "err_msg") != msg {
			t.Errorf("GPU %s: DCGM_FI_DEV_XID_ERRORS%v = %v, want %v err_code=%v err_msg=%q", gpu, m.GetLabel(), valueOf(m), code, code, msg)
		}
	}
	// The lost GPU's identity is the one it had while up.
	for _, m := range before["DCGM_FI_DEV_XID_ERRORS"].GetMetric() {
		if labelOf(m, "gpu") == "1" && xid["1"] != nil {
			for _, l := range []string{"UUID", "pci_bus_id", "modelName", "device", "DCGM_FI_DRIVER_VERSION"} {
				if labelOf(m, l) == "" || labelOf(m, l) != labelOf(xid["1"], l) {
					t.Errorf("lost GPU's %s: %q, was %q", l, labelOf(xid["1"], l), labelOf(m, l))
				}
			}
		}
	}
	for name, mf := range view {
		for _, m := range mf.GetMetric() {
			if labelOf(m, "gpu") == "1" && name != "DCGM_FI_DEV_XID_ERRORS" {
				t.Errorf("the lost GPU still serves %s%v", name, m.GetLabel())
			}
		}
	}
	// A GPU in MIG mode that is lost keeps its XID once per GPU instance
	// the view last saw, with that instance's labels and pod; if the view
	// never saw it up, once for the whole GPU.
	for _, seen := range []bool{true, false} {
		d := newDCGMSim(t, "testdata/dcgm-mig-lost.yaml", DCGMOptions{})
		d.run(3)
		if seen {
			scrapeText(t, d.view)
		}
		d.run(5)
		var got []string
		for _, m := range scrapeFamilies(t, d.view)["DCGM_FI_DEV_XID_ERRORS"].GetMetric() {
			if labelOf(m, "gpu") == "1" {
				got = append(got, fmt.Sprintf("%s/%s/%s=%v,%s", labelOf(m, "GPU_I_PROFILE"), labelOf(m, "GPU_I_ID"), labelOf(m, "pod"), valueOf(m), labelOf(m, "err_code")))
			}
		}
		sort.Strings(got)
		want := []string{"//=79,79"}
		if seen {
			want = []string{"3g.40gb/2/=79,79", "4g.40gb/1/train-0=79,79"}
		}
		if !slices.Equal(got, want) {
			t.Errorf("lost MIG GPU, seen up by the view %v: XID series %v, want %v", seen, got, want)
		}
	}
	for code, msg := range map[uint64]string{0: "No Error", 48: "Double Bit ECC Error", 79: "GPU has fallen off the bus",
		94: "Contained ECC error", 172: "Uncorrectable SRAM Error", 173: "Unknown Error", 1 << 40: "Unknown Error"} {
		if got := dcgmXIDMessage(code); got != msg {
			t.Errorf("XID %d: err_msg %q, want %q", code, got, msg)
		}
	}
}

// TestDCGMViewProfFallback: with ProfFallback, a GPU without GPM (Ampere)
// serves DCGM_FI_PROF_GR_ENGINE_ACTIVE as NVML's GPU utilisation and
// DCGM_FI_PROF_DRAM_ACTIVE as its memory utilisation, ratios labelled
// gpulens_source; no tensor activity (NVML has none); a GPU in MIG mode
// without GPM gets none (NVML has no utilisation there); a GPU with GPM
// keeps GPM's values, unlabelled. Without it, nothing on Ampere.
func TestDCGMViewProfFallback(t *testing.T) {
	t.Parallel()
	for _, fallback := range []bool{true, false} {
		d := newDCGMSim(t, "testdata/dcgm-ampere-lost.yaml", DCGMOptions{ProfFallback: fallback})
		d.run(3) // GPU 1 is lost at 5 s
		native := scrapeFamilies(t, d.exp)
		view := scrapeFamilies(t, d.view)
		for _, f := range []struct {
			name, source, native string
		}{
			{"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "nvml_utilization", "gpulens_gpu_utilization_ratio"},
			{"DCGM_FI_PROF_DRAM_ACTIVE", "nvml_memory_utilization", "gpulens_gpu_memory_bandwidth_utilization_ratio"},
		} {
			want := map[string]float64{}
			if fallback {
				for _, m := range native[f.native].GetMetric() {
					want[labelOf(m, "gpu")] = valueOf(m)
				}
			}
			got := map[string]float64{}
			for _, m := range view[f.name].GetMetric() {
				got[labelOf(m, "gpu")] = valueOf(m)
				if labelOf(m, "gpulens_source") != f.source {
					t.Errorf("fallback %v: %s%v: gpulens_source %q, want %q", fallback, f.name, m.GetLabel(), labelOf(m, "gpulens_source"), f.source)
				}
			}
			if len(got) != len(want) || (fallback && len(got) != 3) {
				t.Errorf("fallback %v: %s by GPU %v, want %v (the 3 GPUs' %s)", fallback, f.name, got, want, f.native)
			}
			for gpu, v := range want {
				if got[gpu] != v {
					t.Errorf("fallback %v: %s GPU %s = %v, want %v", fallback, f.name, gpu, got[gpu], v)
				}
			}
			// The scenario's constant load: 40 % on the A100s, 70 % on the A30.
			if f.native == "gpulens_gpu_utilization_ratio" && fallback && (got["0"] != 0.4 || got["2"] != 0.7) {
				t.Errorf("GR_ENGINE_ACTIVE %v, want 0.4 on GPU 0, 0.7 on GPU 2", got)
			}
		}
		if n := len(view["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"].GetMetric()); n != 0 {
			t.Errorf("fallback %v: %d tensor series on Ampere", fallback, n)
		}
	}
	// Hopper keeps GPM's values; the A100 in MIG mode has none.
	d := newDCGMSim(t, "mixed-fleet", DCGMOptions{ProfFallback: true})
	d.run(3)
	native := scrapeFamilies(t, d.exp)
	view := scrapeFamilies(t, d.view)
	gpm := map[string]float64{}
	for _, m := range native["gpulens_gpu_graphics_activity_ratio"].GetMetric() {
		gpm[labelOf(m, "gpu")] = valueOf(m)
	}
	sources := map[string]string{}
	for _, m := range view["DCGM_FI_PROF_GR_ENGINE_ACTIVE"].GetMetric() {
		gpu := labelOf(m, "gpu")
		sources[gpu] = labelOf(m, "gpulens_source")
		if v, ok := gpm[gpu]; ok && labelOf(m, "GPU_I_ID") == "" && (valueOf(m) != v || sources[gpu] != "") {
			t.Errorf("GR_ENGINE_ACTIVE%v = %v, want GPM's %v unlabelled", m.GetLabel(), valueOf(m), v)
		}
	}
	want := map[string]string{"0": "", "1": "", "2": "", "3": "", "5": "nvml_utilization", "6": "nvml_utilization"}
	if len(sources) != len(want) {
		t.Errorf("GR_ENGINE_ACTIVE's sources by GPU %v, want %v (none for the A100 in MIG mode)", sources, want)
	}
	for gpu, s := range want {
		if got, ok := sources[gpu]; !ok || got != s {
			t.Errorf("GPU %s: GR_ENGINE_ACTIVE source %q (%v), want %q", gpu, got, ok, s)
		}
	}
}

// TestDCGMViewGolden: the view of a simulated MIG node with pods and of
// Ampere GPUs one of which is lost, as testdata/dcgm/*.txt (go test
// ./collector -run DCGMViewGolden -update-dcgm rewrites them). The fleet
// runs on a fake clock from seed 1, so every value is pinned.
func TestDCGMViewGolden(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, scenario string
		seconds        int
	}{
		{"mig", "mig-mixed", 65},
		{"ampere-lost", "testdata/dcgm-ampere-lost.yaml", 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := newDCGMSim(t, tc.scenario, DCGMOptions{Hostname: "node-a", ProfFallback: true})
			d.run(tc.seconds)
			got := scrapeText(t, d.view)
			path := filepath.Join("testdata", "dcgm", tc.name+".txt")
			if *updateDCGM {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (go test ./collector -run DCGMViewGolden -update-dcgm writes it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("the DCGM view differs from %s:\n%s", path, diffLines(string(want), string(got)))
			}
		})
	}
}

// diffLines lists the lines only in a (-) and only in b (+).
func diffLines(a, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	ina, inb := in(a), in(b)
	var out []string
	for l := range ina {
		if !inb[l] {
			out = append(out, "- "+l)
		}
	}
	for l := range inb {
		if !ina[l] {
			out = append(out, "+ "+l)
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		return "(same lines in another order)"
	}
	return strings.Join(out, "\n")
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

// TestDCGMFieldTable: every field is in the table under its own name, in
// DCGMFields, and the fallbacks are PROF fields with a gpulens_source.
func TestDCGMFieldTable(t *testing.T) {
	t.Parallel()
	names := DCGMFields()
	if len(names) != len(dcgmFieldTable) || len(names) != 22 {
		t.Fatalf("%d fields listed, %d in the table, want 22", len(names), len(dcgmFieldTable))
	}
	for _, n := range names {
		if f := dcgmFieldTable[n]; f == nil || f.name != n {
			t.Errorf("%s: not in the table under its name", n)
		}
	}
	for name, src := range DCGMFallbackFields() {
		if !strings.HasPrefix(name, "DCGM_FI_PROF_") || !strings.HasPrefix(src, "nvml_") {
			t.Errorf("fallback %s (%s)", name, src)
		}
	}
}
