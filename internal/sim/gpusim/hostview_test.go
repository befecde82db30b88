package gpusim

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// hostFacts is what gpulens-verify reads of a device through NVML.
type hostFacts struct {
	Virt                           nvml.GpuVirtualizationMode
	CurGen, MaxGen, CurWidth, MaxW int
	DefaultLimit, Limit, Enforced  uint32 // mW
	EccCur, EccPending             nvml.EnableState
	TotalMiB, ReservedMiB          uint64
	RetiredRet, PendingRet         nvml.Return
}

func readHostFacts(t *testing.T, d nvml.Device) hostFacts {
	t.Helper()
	var h hostFacts
	ok := func(name string, r nvml.Return) {
		t.Helper()
		if r != nvml.SUCCESS {
			t.Fatalf("%s: %v", name, r)
		}
	}
	var r nvml.Return
	h.Virt, r = d.GetVirtualizationMode()
	ok("GetVirtualizationMode", r)
	h.CurGen, r = d.GetCurrPcieLinkGeneration()
	ok("GetCurrPcieLinkGeneration", r)
	h.MaxGen, r = d.GetMaxPcieLinkGeneration()
	ok("GetMaxPcieLinkGeneration", r)
	h.CurWidth, r = d.GetCurrPcieLinkWidth()
	ok("GetCurrPcieLinkWidth", r)
	h.MaxW, r = d.GetMaxPcieLinkWidth()
	ok("GetMaxPcieLinkWidth", r)
	h.DefaultLimit, r = d.GetPowerManagementDefaultLimit()
	ok("GetPowerManagementDefaultLimit", r)
	h.Limit, r = d.GetPowerManagementLimit()
	ok("GetPowerManagementLimit", r)
	h.Enforced, r = d.GetEnforcedPowerLimit()
	ok("GetEnforcedPowerLimit", r)
	h.EccCur, h.EccPending, r = d.GetEccMode()
	ok("GetEccMode", r)
	mem, r := d.GetMemoryInfo_v2()
	ok("GetMemoryInfo_v2", r)
	h.TotalMiB, h.ReservedMiB = mem.Total/mib, mem.Reserved/mib
	_, h.RetiredRet = d.GetRetiredPages(nvml.PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
	_, h.PendingRet = d.GetRetiredPagesPendingStatus()
	return h
}

func TestHostViewCalls(t *testing.T) {
	t.Parallel()
	const ns = nvml.ERROR_NOT_SUPPORTED
	on, off := nvml.FEATURE_ENABLED, nvml.FEATURE_DISABLED
	h100 := hostFacts{Virt: nvml.GPU_VIRTUALIZATION_MODE_NONE, CurGen: 5, MaxGen: 5, CurWidth: 16, MaxW: 16,
		DefaultLimit: 700000, Limit: 700000, Enforced: 700000, EccCur: on, EccPending: on,
		TotalMiB: 81920, ReservedMiB: 512, RetiredRet: ns, PendingRet: ns}
	with := func(f func(*hostFacts)) hostFacts {
		h := h100
		f(&h)
		return h
	}
	tests := []struct {
		name, scenario string // built-in name, or inline YAML
		want           hostFacts
	}{
		{"rented-dedicated", "rented-dedicated", h100},
		{"rented-timesliced: NVML cannot tell", "rented-timesliced", h100},
		{"rented-throttled", "rented-throttled", with(func(h *hostFacts) { h.Limit, h.Enforced = 340000, 340000 })},
		{"rented-vgpu", "rented-vgpu", with(func(h *hostFacts) {
			h.Virt, h.TotalMiB, h.ReservedMiB = nvml.GPU_VIRTUALIZATION_MODE_VGPU, 20480, 128
		})},
		{"vGPU guest with the full-board profile", "devices: [{model: h100-sxm5-80gb, virtualization: vgpu-guest}]",
			with(func(h *hostFacts) { h.Virt = nvml.GPU_VIRTUALIZATION_MODE_VGPU })},
		{"A100 defaults: gen4 x16, 400 W", "devices: [{model: a100-sxm4-80gb}]", with(func(h *hostFacts) {
			h.CurGen, h.MaxGen, h.DefaultLimit, h.Limit, h.Enforced, h.ReservedMiB = 4, 4, 400000, 400000, 400000, 0
		})},
		{"A100 passthrough, narrow link, ECC off", `
devices:
  - model: a100-pcie-80gb
    virtualization: passthrough
    pcie_link: {generation: 3, width: 8}
    ecc_mode: false
    power_limit: 250
`, with(func(h *hostFacts) {
			h.Virt, h.CurGen, h.MaxGen, h.CurWidth = nvml.GPU_VIRTUALIZATION_MODE_PASSTHROUGH, 3, 4, 8
			h.DefaultLimit, h.Limit, h.Enforced, h.ReservedMiB = 300000, 250000, 250000, 0
			h.EccCur, h.EccPending = off, off
		})},
		{"only the width", "devices: [{model: b200-sxm5-180gb, pcie_link: {width: 4}}]", with(func(h *hostFacts) {
			h.CurWidth, h.DefaultLimit, h.Limit, h.Enforced, h.TotalMiB, h.ReservedMiB = 4, 1000000, 1000000, 1000000, 184320, 768
		})},
		{"explicit none", "devices: [{model: h200-sxm5-141gb, virtualization: none, ecc_mode: true}]", with(func(h *hostFacts) {
			h.TotalMiB, h.ReservedMiB = 144384, 640
		})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var sc *Scenario
			if strings.Contains(tc.scenario, ":") {
				sc = mustParse(t, tc.scenario)
			} else {
				sc = mustLoad(t, tc.scenario)
			}
			_, lib, clk := newTestFleet(t, sc, 1)
			clk.Set(90 * time.Second)
			if got := readHostFacts(t, handle(t, lib, 0)); got != tc.want {
				t.Errorf("host facts:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestHostViewEccOff: with ECC disabled the error counters are not
// available, as on a real board.
func TestHostViewEccOff(t *testing.T) {
	t.Parallel()
	_, lib, _ := newTestFleet(t, mustParse(t, "devices: [{model: a100-pcie-40gb, ecc_mode: false}]"), 1)
	d := handle(t, lib, 0)
	if _, r := d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.VOLATILE_ECC); r != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("GetTotalEccErrors with ECC off = %v; want ERROR_NOT_SUPPORTED", r)
	}
	_, lib, _ = newTestFleet(t, mustParse(t, "devices: [{model: a100-pcie-40gb}]"), 1)
	if _, r := handle(t, lib, 0).GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.VOLATILE_ECC); r != nvml.SUCCESS {
		t.Errorf("GetTotalEccErrors with ECC on = %v; want SUCCESS", r)
	}
}

func TestRetiredPagesArgs(t *testing.T) {
	t.Parallel()
	_, lib, _ := newTestFleet(t, mustLoad(t, "minimal"), 1)
	d := handle(t, lib, 0)
	tests := []struct {
		cause nvml.PageRetirementCause
		want  nvml.Return
	}{
		{nvml.PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS, nvml.ERROR_NOT_SUPPORTED},
		{nvml.PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR, nvml.ERROR_NOT_SUPPORTED},
		{nvml.PAGE_RETIREMENT_CAUSE_COUNT, nvml.ERROR_INVALID_ARGUMENT},
	}
	for _, tc := range tests {
		if pages, r := d.GetRetiredPages(tc.cause); r != tc.want || pages != nil {
			t.Errorf("GetRetiredPages(%d) = %v, %v; want nil, %v", tc.cause, pages, r, tc.want)
		}
		if a, b, r := d.GetRetiredPages_v2(tc.cause); r != tc.want || a != nil || b != nil {
			t.Errorf("GetRetiredPages_v2(%d) = %v, %v, %v; want %v", tc.cause, a, b, r, tc.want)
		}
	}
}

// TestHostViewFaults: the scenario's faults, a lost GPU and a library that is
// not initialised apply to the new calls like to every other.
func TestHostViewFaults(t *testing.T) {
	t.Parallel()
	sc := mustParse(t, `
devices:
  - count: 2
    model: h100-sxm5-80gb
faults:
  - {kind: error, gpu: 0, call: GetCurrPcieLinkGeneration, error: ERROR_UNKNOWN, from: 1m}
  - {kind: error, gpu: 0, call: GetRetiredPages, error: ERROR_NO_PERMISSION}
  - {kind: lost, gpu: 1, at: 2m}
`)
	f, lib, clk := newTestFleet(t, sc, 1)
	d0, d1 := handle(t, lib, 0), handle(t, lib, 1)
	if g, r := d0.GetCurrPcieLinkGeneration(); r != nvml.SUCCESS || g != 5 {
		t.Errorf("before the fault: GetCurrPcieLinkGeneration = %d, %v", g, r)
	}
	clk.Set(time.Minute)
	if _, r := d0.GetCurrPcieLinkGeneration(); r != nvml.ERROR_UNKNOWN {
		t.Errorf("GetCurrPcieLinkGeneration under the fault = %v; want ERROR_UNKNOWN", r)
	}
	if g, r := d0.GetMaxPcieLinkGeneration(); r != nvml.SUCCESS || g != 5 {
		t.Errorf("GetMaxPcieLinkGeneration (no fault) = %d, %v", g, r)
	}
	if _, r := d0.GetRetiredPages(nvml.PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR); r != nvml.ERROR_NO_PERMISSION {
		t.Errorf("GetRetiredPages under the fault = %v; want ERROR_NO_PERMISSION", r)
	}
	clk.Set(2 * time.Minute)
	h := readLost(d1)
	for name, r := range h {
		if r != nvml.ERROR_GPU_IS_LOST {
			t.Errorf("lost GPU: %s = %v; want ERROR_GPU_IS_LOST", name, r)
		}
	}
	lib.Shutdown()
	for name, r := range readLost(f.devices[0]) {
		if r != nvml.ERROR_UNINITIALIZED {
			t.Errorf("after Shutdown: %s = %v; want ERROR_UNINITIALIZED", name, r)
		}
	}
	lib.Init()
}

// readLost calls every host-view method and returns their codes by name.
func readLost(d nvml.Device) map[string]nvml.Return {
	out := map[string]nvml.Return{}
	_, out["GetVirtualizationMode"] = d.GetVirtualizationMode()
	_, out["GetCurrPcieLinkGeneration"] = d.GetCurrPcieLinkGeneration()
	_, out["GetMaxPcieLinkGeneration"] = d.GetMaxPcieLinkGeneration()
	_, out["GetCurrPcieLinkWidth"] = d.GetCurrPcieLinkWidth()
	_, out["GetMaxPcieLinkWidth"] = d.GetMaxPcieLinkWidth()
	_, out["GetPowerManagementDefaultLimit"] = d.GetPowerManagementDefaultLimit()
	_, out["GetPowerManagementLimit"] = d.GetPowerManagementLimit()
	_, _, out["GetEccMode"] = d.GetEccMode()
	_, out["GetRetiredPages"] = d.GetRetiredPages(nvml.PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
	_, _, out["GetRetiredPages_v2"] = d.GetRetiredPages_v2(nvml.PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
	_, out["GetRetiredPagesPendingStatus"] = d.GetRetiredPagesPendingStatus()
	return out
}

// TestHostViewOnMigHandles: a MIG handle answers with its GPU's values
// instead of panicking like an unset mock method.
func TestHostViewOnMigHandles(t *testing.T) {
	t.Parallel()
	_, lib, _ := newTestFleet(t, mustLoad(t, "mig-mixed"), 1)
	parent := handle(t, lib, 0)
	mig, r := parent.GetMigDeviceHandleByIndex(2)
	if r != nvml.SUCCESS {
		t.Fatalf("GetMigDeviceHandleByIndex: %v", r)
	}
	p, m := readHostFacts(t, parent), readHostFacts(t, mig)
	// Memory is the instance's own (1g.10gb); everything else the GPU's.
	if m.TotalMiB != 10240 || m.ReservedMiB != 0 {
		t.Errorf("MIG memory %d MiB (reserved %d); want 10240, 0", m.TotalMiB, m.ReservedMiB)
	}
	m.TotalMiB, m.ReservedMiB = p.TotalMiB, p.ReservedMiB
	if m != p {
		t.Errorf("MIG handle facts %+v; want the GPU's %+v", m, p)
	}
	for name, r := range readLost(mig) {
		if r != nvml.SUCCESS && r != nvml.ERROR_NOT_SUPPORTED {
			t.Errorf("MIG %s = %v", name, r)
		}
	}
}

// TestThrottledClocks: rented-throttled's clocks and reasons under its
// tenant's load, and the probe slowdown derived by the same rules.
func TestThrottledClocks(t *testing.T) {
	t.Parallel()
	f, lib, clk := newTestFleet(t, mustLoad(t, "rented-throttled"), 1)
	d := handle(t, lib, 0)
	wantSlow := math.Sqrt((340.0-68)/(700-68)) * 0.9 // 0.590
	for _, at := range []time.Duration{0, 30 * time.Second, 5 * time.Minute, time.Hour} {
		clk.Set(at)
		reasons, r := d.GetCurrentClocksEventReasons()
		if r != nvml.SUCCESS || reasons != nvml.ClocksEventReasonSwPowerCap|nvml.ClocksEventReasonSwThermalSlowdown {
			t.Errorf("at %v: reasons %#x, %v; want SwPowerCap|SwThermalSlowdown", at, reasons, r)
		}
		// ~90 % SM (±3): demand 610-645 W against 340 W: 0.93 x 0.69-0.71
		// x 0.9 of 1980 MHz.
		sm, _ := d.GetClockInfo(nvml.CLOCK_SM)
		if sm < 1125 || sm > 1185 {
			t.Errorf("at %v: SM clock %d MHz; want 1125-1185", at, sm)
		}
		if temp, _ := d.GetTemperature(nvml.TEMPERATURE_GPU); temp != 84 {
			t.Errorf("at %v: temperature %d; want 84 (60 + 50 x 340/700)", at, temp)
		}
		if p, _ := d.GetPowerUsage(); p != 340000 {
			t.Errorf("at %v: power %d mW; want held at the 340 W limit", at, p)
		}
		if s := f.devices[0].probeSlowdown(f.elapsed()); math.Abs(s-wantSlow) > 1e-12 {
			t.Errorf("at %v: probe slowdown %v; want %v", at, s, wantSlow)
		}
	}
}

func TestProbeSlowdown(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yml string
		want      float64
	}{
		{"default board, moderate load", "devices: [{model: h100-sxm5-80gb, util: 40}]", 1},
		{"default board, full load: 80 C, under its slowdown point", "devices: [{model: h100-sxm5-80gb, util: 100}]", 1},
		{"full load in a 35 C rack: thermal slowdown at 85 C", "devices: [{model: h100-sxm5-80gb, util: 100, ambient: 35}]", 0.9},
		{"idle but capped", "devices: [{model: h100-sxm5-80gb, power_limit: 400}]", math.Sqrt(332.0 / 632)},
		{"override", "devices: [{model: h100-sxm5-80gb, power_limit: 400, util: 100, probe: {slowdown: 0.75}}]", 0.75},
		{"A100 at 300 W of 400", "devices: [{model: a100-sxm4-40gb, power_limit: 300}]", math.Sqrt(250.0 / 350)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, _, clk := newTestFleet(t, mustParse(t, tc.yml), 1)
			clk.Set(10 * time.Minute)
			if got := f.devices[0].probeSlowdown(f.elapsed()); math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("probe slowdown %v; want %v", got, tc.want)
			}
		})
	}
}

func TestNeighbourWindows(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		n    neighbourSpec
		at   map[float64]float64 // sim seconds -> share
	}{
		{"3m every 6m from 0", neighbourSpec{share: 0.5, start: 0, active: 180, every: 360},
			map[float64]float64{0: 0.5, 179.9: 0.5, 180: 0, 359: 0, 360: 0.5, 545: 0, 3600: 0.5}},
		{"from 2m on", neighbourSpec{share: 0.3, start: 120},
			map[float64]float64{0: 0, 119: 0, 120: 0.3, 1e6: 0.3}},
		{"once, 2m from 1m", neighbourSpec{share: 0.4, start: 60, active: 120},
			map[float64]float64{59: 0, 60: 0.4, 179: 0.4, 180: 0, 7200: 0}},
		{"2m every 10m from 2m", neighbourSpec{share: 0.5, start: 120, active: 120, every: 600},
			map[float64]float64{0: 0, 120: 0.5, 239: 0.5, 240: 0, 720: 0.5, 840: 0}},
	}
	for _, tc := range tests {
		tc.n.slice = 2 * time.Millisecond
		for at, want := range tc.at {
			share, slice := tc.n.at(at)
			wantSlice := time.Duration(0)
			if want > 0 {
				wantSlice = 2 * time.Millisecond
			}
			if share != want || slice != wantSlice {
				t.Errorf("%s: at %gs = %v, %v; want %v, %v", tc.name, at, share, slice, want, wantSlice)
			}
		}
	}
}

func TestParseHostViewAndProbeErrors(t *testing.T) {
	t.Parallel()
	h100 := "devices:\n  - model: h100-sxm5-80gb\n"
	tests := []struct {
		name, yml, want string
	}{
		{"unknown virtualization", h100 + "    virtualization: vgpu\n",
			`x.yaml:3: devices[0].virtualization: unknown virtualization "vgpu" (one of none, passthrough, vgpu-guest)`},
		{"vgpu memory without vgpu", h100 + "    vgpu_memory_mib: 20480\n",
			"x.yaml:3: devices[0].vgpu_memory_mib: vgpu_memory_mib needs virtualization: vgpu-guest"},
		{"vgpu memory too large", h100 + "    virtualization: vgpu-guest\n    vgpu_memory_mib: 90000\n",
			"x.yaml:4: devices[0].vgpu_memory_mib: vgpu_memory_mib 90000 must be between 1024 and the board's 81920 MiB"},
		{"vgpu with MIG", h100 + "    virtualization: vgpu-guest\n    mig: [1g.10gb]\n",
			"x.yaml:4: devices[0].mig: a vGPU guest has no MIG layout (its vGPU is one device; set vgpu_memory_mib)"},
		{"pcie generation above the model's", "devices:\n  - model: a100-pcie-40gb\n    pcie_link: {generation: 5}\n",
			"x.yaml:3: devices[0].pcie_link.generation: generation 5 must be between 1 and a100-pcie-40gb's 4"},
		{"pcie width", h100 + "    pcie_link: {generation: 4, width: 12}\n",
			"x.yaml:3: devices[0].pcie_link.width: width 12 must be one of 1, 2, 4, 8, 16 and at most h100-sxm5-80gb's 16"},
		{"empty pcie link", h100 + "    pcie_link: {}\n",
			"x.yaml:3: devices[0].pcie_link: give generation and/or width (the current link; the maximum is the model's gen5 x16)"},
		{"ecc rates with ecc off", h100 + "    ecc_mode: false\n    ecc: {corrected_per_hour: 1}\n",
			"x.yaml:4: devices[0].ecc: ECC error rates need ecc_mode: true"},
		{"slowdown out of range", h100 + "    probe: {slowdown: 1.5}\n",
			"x.yaml:3: devices[0].probe.slowdown: slowdown 1.5 must be above 0 and at most 1 (the fraction of the model's figures delivered)"},
		{"neighbour without share", h100 + "    probe:\n      neighbour: {slice: 2ms}\n",
			"x.yaml:4: devices[0].probe.neighbour.share: missing share (the neighbour's share of the GPU's time while active, e.g. 0.5)"},
		{"neighbour share 1", h100 + "    probe:\n      neighbour: {share: 1}\n",
			"x.yaml:4: devices[0].probe.neighbour.share: share 1 must be above 0 and at most 0.95"},
		{"neighbour slice too long", h100 + "    probe:\n      neighbour: {share: 0.5, slice: 2s}\n",
			"x.yaml:4: devices[0].probe.neighbour.slice: slice 2s must be between 50µs and 1s"},
		{"neighbour slice not a duration", h100 + "    probe:\n      neighbour: {share: 0.5, slice: 2}\n",
			`x.yaml:4: devices[0].probe.neighbour.slice: invalid duration "2" (use Go syntax such as 500ms, 30s, 5m, 1h30m)`},
		{"every without active", h100 + "    probe:\n      neighbour: {share: 0.5, every: 5m}\n",
			"x.yaml:4: devices[0].probe.neighbour.every: every needs active: the neighbour runs for active, then again every period"},
		{"every shorter than active", h100 + "    probe:\n      neighbour: {share: 0.5, active: 5m, every: 2m}\n",
			"x.yaml:4: devices[0].probe.neighbour.every: every 2m must be at least active (5m) and 1s"},
		{"active too short", h100 + "    probe:\n      neighbour: {share: 0.5, active: 10ms}\n",
			"x.yaml:4: devices[0].probe.neighbour.active: active 10ms must be at least 1s"},
		{"unknown neighbour field", h100 + "    probe:\n      neighbour: {share: 0.5, period: 5m}\n",
			`x.yaml:4: devices[0].probe.neighbour.period: unknown field "period" (known fields: active, every, share, slice, start)`},
		{"tenant larger than the vGPU", h100 + "    virtualization: vgpu-guest\n    vgpu_memory_mib: 20480\ntenants:\n  - {name: a, gpu: 0, memory: 30000}\n",
			"x.yaml:6: tenants[0].memory: up to 30000 MiB does not fit in 20352 MiB"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yml), "x.yaml")
			if err == nil || err.Error() != tc.want {
				t.Errorf("Parse error:\n%v\nwant:\n%s", err, tc.want)
			}
		})
	}
}
