package gpusim

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpulens/gpulens/internal/nvmlret"
)

func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file string
		want []string // every line of the error, exactly
	}{
		{"unknown-field.yaml", []string{
			`unknown-field.yaml:11: devices[1].util.perod: unknown field "perod" (known fields: duty, max, min, noise, noise_period, period, period_step, phase, phase_step, shape, value)`,
		}},
		{"bad-period.yaml", []string{
			"bad-period.yaml:3: devices[0].util.period: period 10ms must be at least 1s",
			"bad-period.yaml:3: devices[0].util.duty: duty 1.5 must be between 0 and 1 (exclusive)",
		}},
		{"bad-model.yaml", []string{
			`bad-model.yaml:3: devices[0].model: unknown model "h100-pcie" (one of a100-pcie-40gb, a100-pcie-80gb, a100-sxm4-40gb, a100-sxm4-80gb, a30-pcie-24gb, b200-sxm5-180gb, h100-sxm5-80gb, h200-sxm5-141gb)`,
		}},
		{"bad-fault.yaml", []string{
			"bad-fault.yaml:5: faults[0].gpu: gpu 4 does not exist (the scenario has 4 devices, 0-3)",
			`bad-fault.yaml:8: faults[1].call: unknown call "GetPowerUsag" (one of ` + strings.Join(deviceCallNames(), ", ") + ", or *)",
			`bad-fault.yaml:10: faults[2].delay: invalid duration "forever" (use Go syntax such as 500ms, 30s, 5m, 1h30m)`,
			"bad-fault.yaml:11: faults[3].error: error does not apply to kind xid",
		}},
		{"bad-type.yaml", []string{
			"bad-type.yaml:2: devices[0].count: cannot unmarshal !!str `many` into int",
		}},
		{"bad-syntax.yaml", []string{
			"bad-syntax.yaml:2: invalid YAML: did not find expected ',' or ']'",
		}},
		{"bad-range.yaml", []string{
			"bad-range.yaml:3: devices[0].util.value: 120 is out of range [0, 100] percent",
			"bad-range.yaml:4: devices[0].power.max: max 100 is below min 500",
			"bad-range.yaml:5: devices[0].random_xids.codes: at least one XID code is required",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			_, err = Parse(data, tc.file)
			if err == nil {
				t.Fatal("Parse succeeded; want an error")
			}
			got := strings.Split(err.Error(), "\n")
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("error:\n%s\nwant:\n%s", err, strings.Join(tc.want, "\n"))
			}
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Source != tc.file || pe.Line == 0 {
				t.Errorf("errors.As ParseError = %+v", pe)
			}
		})
	}
}

func TestParseInline(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yml, want string
	}{
		{"empty", "", "x.yaml: empty scenario: expected a mapping with at least a devices list"},
		{"not a mapping", "- 1\n- 2\n", "x.yaml:1: scenario must be a YAML mapping (name, devices, faults, ...)"},
		{"no devices", "name: x\n", "x.yaml: devices: at least one device group is required"},
		{"unknown top field", "name: x\ndevice:\n  - model: h100-sxm5-80gb\n",
			`x.yaml:2: device: unknown field "device" (known fields: call_latency, cuda_version, description, devices, driver_version, faults, host, name, tenants)`},
		{"bad cuda", "cuda_version: twelve\ndevices: [{model: h100-sxm5-80gb}]\n",
			`x.yaml:1: cuda_version: invalid CUDA version "twelve" (expected MAJOR.MINOR, e.g. 12.4)`},
		{"flow style field", "devices: [{model: h100-sxm5-80gb, count: 0}]\n",
			"x.yaml:1: devices[0].count: count 0 must be between 1 and 1024"},
		{"too many", "devices:\n  - {model: h100-sxm5-80gb, count: 1000}\n  - {model: h100-sxm5-80gb, count: 100}\n",
			"x.yaml:3: devices[1].count: the scenario has more than 1024 devices"},
		{"missing shape", "devices:\n  - model: h100-sxm5-80gb\n    util: {min: 1, max: 2}\n",
			"x.yaml:3: devices[0].util: missing shape (one of constant, ramp, sawtooth, sine, square, triangle), or give a value for a constant"},
		{"until before from", "devices: [{model: h100-sxm5-80gb}]\nfaults:\n  - {kind: slow, gpu: 0, call: GetName, delay: 1s, from: 2m, until: 1m}\n",
			`x.yaml:3: faults[0].until: until 1m must be after from "2m"`},
		{"lost without at", "devices: [{model: h100-sxm5-80gb}]\nfaults:\n  - {kind: lost, gpu: 0}\n",
			"x.yaml:3: faults[0].at: missing at (sim time the GPU falls off the bus)"},
		{"unknown error name", "devices: [{model: h100-sxm5-80gb}]\nfaults:\n  - {kind: error, gpu: 0, call: GetName, error: ERROR_OOPS}\n",
			`x.yaml:3: faults[0].error: unknown error "ERROR_OOPS" (one of ` + strings.Join(nvmlret.Names(), ", ") + ")"},
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

func TestParseCustom(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("testdata/custom.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sc, err := Parse(data, "custom.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if sc.Name != "custom" || sc.DeviceCount() != 4 || sc.driverVersion != "560.35.03" || sc.cudaVersion != 12060 ||
		sc.callLatency != 5*time.Millisecond || len(sc.faults) != 4 {
		t.Errorf("scenario = %+v", sc)
	}
	d := sc.devices[1]
	if d.model.key != "h200-sxm5-141gb" || d.powerLimitW != 600 || d.ambientC != 25 || d.util.phase != 120 || d.memUsed.value != 92 {
		t.Errorf("device 1 = %+v util %+v", d, d.util)
	}
	d = sc.devices[3]
	if d.persistence || d.computeMode != nvml.COMPUTEMODE_EXCLUSIVE_PROCESS || d.remapped.Correctable != 2 || d.pcieRx.shape != shapeTriangle {
		t.Errorf("device 3 = %+v", d)
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	want := []string{"dgx-h100", "faulty", "minimal"}
	for _, n := range want {
		found := false
		for _, b := range BuiltinNames() {
			found = found || b == n
		}
		if !found {
			t.Errorf("BuiltinNames() = %v; missing %s", BuiltinNames(), n)
		}
	}
	sc, err := Load("testdata/custom.yaml")
	if err != nil || sc.Name != "custom" {
		t.Errorf("Load(file) = %v, %v", sc, err)
	}
	_, err = Load("no-such-scenario")
	if err == nil || !strings.Contains(err.Error(), `loading scenario "no-such-scenario" (built-in scenarios: `) {
		t.Errorf("Load(missing) error = %v", err)
	}
}

// TestBuiltinsEveryCall calls every simulated method on every device of every
// built-in scenario at several times: nothing may panic (an unset mock
// method would), and healthy devices answer SUCCESS.
func TestBuiltinsEveryCall(t *testing.T) {
	t.Parallel()
	for _, name := range BuiltinNames() {
		t.Run(name, func(t *testing.T) {
			sc := mustLoad(t, name)
			// Hangs would make this test slow; it checks coverage, not timing.
			var faults []*faultSpec
			for _, f := range sc.faults {
				if f.kind != faultHang && f.kind != faultSlow {
					faults = append(faults, f)
				}
			}
			sc2 := *sc
			sc2.faults = faults
			sc2.callLatency = 0
			f, lib, clk := newTestFleet(t, &sc2, 11)
			n, r := lib.DeviceGetCount()
			if r != nvml.SUCCESS || n != sc.DeviceCount() || n == 0 {
				t.Fatalf("DeviceGetCount = %d, %v", n, r)
			}
			set, _ := lib.EventSetCreate()
			defer set.Free()
			for _, at := range []time.Duration{0, 90 * time.Second, 2 * time.Hour} {
				clk.Set(at)
				for i := 0; i < n; i++ {
					d := f.devices[i]
					callEverything(t, d, set)
				}
				if _, r := set.Wait(0); r != nvml.SUCCESS && r != nvml.ERROR_TIMEOUT {
					t.Errorf("Wait = %v", r)
				}
			}
		})
	}
}

// callEverything invokes each method listed in deviceCalls.
func callEverything(t *testing.T, d *device, set nvml.EventSet) {
	t.Helper()
	called := map[string]nvml.Return{}
	rec := func(name string, r nvml.Return) { called[name] = r }
	_, r := d.GetUUID()
	rec("GetUUID", r)
	_, r = d.GetName()
	rec("GetName", r)
	_, r = d.GetIndex()
	rec("GetIndex", r)
	_, r = d.GetMinorNumber()
	rec("GetMinorNumber", r)
	_, r = d.GetBrand()
	rec("GetBrand", r)
	_, r = d.GetArchitecture()
	rec("GetArchitecture", r)
	_, _, r = d.GetCudaComputeCapability()
	rec("GetCudaComputeCapability", r)
	_, r = d.GetPciInfo()
	rec("GetPciInfo", r)
	_, r = d.GetSerial()
	rec("GetSerial", r)
	_, r = d.GetVbiosVersion()
	rec("GetVbiosVersion", r)
	for _, c := range []nvml.ClockType{nvml.CLOCK_SM, nvml.CLOCK_MEM, nvml.CLOCK_GRAPHICS, nvml.CLOCK_VIDEO} {
		_, r = d.GetMaxClockInfo(c)
		rec("GetMaxClockInfo", r)
		_, r = d.GetClockInfo(c)
		rec("GetClockInfo", r)
	}
	_, r = d.GetMemoryInfo()
	rec("GetMemoryInfo", r)
	_, r = d.GetMemoryInfo_v2()
	rec("GetMemoryInfo_v2", r)
	_, r = d.GetUtilizationRates()
	if r == nvml.ERROR_NOT_SUPPORTED && d.migEnabled() {
		r = nvml.SUCCESS
	}
	rec("GetUtilizationRates", r)
	_, _, r = d.GetEncoderUtilization()
	rec("GetEncoderUtilization", r)
	_, _, r = d.GetDecoderUtilization()
	rec("GetDecoderUtilization", r)
	_, r = d.GetTemperature(nvml.TEMPERATURE_GPU)
	rec("GetTemperature", r)
	_, r = d.GetPowerUsage()
	rec("GetPowerUsage", r)
	_, r = d.GetEnforcedPowerLimit()
	rec("GetEnforcedPowerLimit", r)
	_, r = d.GetTotalEnergyConsumption()
	rec("GetTotalEnergyConsumption", r)
	_, r = d.GetFanSpeed()
	if r == nvml.ERROR_NOT_SUPPORTED && !d.spec.model.fan {
		r = nvml.SUCCESS
	}
	rec("GetFanSpeed", r)
	_, r = d.GetCurrentClocksEventReasons()
	rec("GetCurrentClocksEventReasons", r)
	for _, c := range []nvml.PcieUtilCounter{nvml.PCIE_UTIL_TX_BYTES, nvml.PCIE_UTIL_RX_BYTES} {
		_, r = d.GetPcieThroughput(c)
		rec("GetPcieThroughput", r)
	}
	_, r = d.GetPcieReplayCounter()
	rec("GetPcieReplayCounter", r)
	for _, et := range []nvml.MemoryErrorType{nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.MEMORY_ERROR_TYPE_UNCORRECTED} {
		for _, ct := range []nvml.EccCounterType{nvml.VOLATILE_ECC, nvml.AGGREGATE_ECC} {
			_, r = d.GetTotalEccErrors(et, ct)
			if r == nvml.ERROR_NOT_SUPPORTED && d.spec.eccOff {
				r = nvml.SUCCESS
			}
			rec("GetTotalEccErrors", r)
		}
	}
	_, _, _, _, r = d.GetRemappedRows()
	rec("GetRemappedRows", r)
	_, r = d.GetPersistenceMode()
	rec("GetPersistenceMode", r)
	_, r = d.GetComputeMode()
	rec("GetComputeMode", r)
	_, _, r = d.GetMigMode()
	rec("GetMigMode", r)
	_, r = d.GetSupportedEventTypes()
	rec("GetSupportedEventTypes", r)
	rec("RegisterEvents", d.RegisterEvents(nvml.EventTypeXidCriticalError, set))
	callPhase2(d, rec)
	callHostView(d, rec)

	for _, name := range deviceCalls {
		r, ok := called[name]
		if !ok {
			t.Errorf("gpu %d: %s not exercised by the test", d.index, name)
			continue
		}
		if want := d.expectedReturn(name); r != want {
			t.Errorf("gpu %d at %.0fs: %s = %v; want %v", d.index, d.f.elapsed(), name, r, want)
		}
	}
}

// expectedReturn is what a call should return given the scenario's faults.
func (d *device) expectedReturn(call string) nvml.Return {
	t := d.f.elapsed()
	if t >= d.lostAt {
		return nvml.ERROR_GPU_IS_LOST
	}
	for _, f := range d.callFaults {
		if f.kind == faultError && f.matches(call, t) {
			return f.ret
		}
	}
	return nvml.SUCCESS
}

// callPhase2 calls the process, MIG and GPM methods. Where the design says a
// call fails on this device (no MIG layout, no GPM, no tenants running), the
// expected failure is recorded as SUCCESS.
func callPhase2(d *device, rec func(string, nvml.Return)) {
	norm := func(name string, r, designed nvml.Return) {
		if r == designed {
			r = nvml.SUCCESS
		}
		rec(name, r)
	}
	_, r := d.GetComputeRunningProcesses()
	rec("GetComputeRunningProcesses", r)
	_, r = d.GetGraphicsRunningProcesses()
	rec("GetGraphicsRunningProcesses", r)
	_, r = d.GetMPSComputeRunningProcesses()
	rec("GetMPSComputeRunningProcesses", r)
	_, r = d.GetProcessUtilization(0)
	switch {
	case d.migEnabled():
		norm("GetProcessUtilization", r, nvml.ERROR_NOT_SUPPORTED)
	default:
		norm("GetProcessUtilization", r, nvml.ERROR_NOT_FOUND)
	}
	_, r = d.GetMaxMigDeviceCount()
	rec("GetMaxMigDeviceCount", r)
	_, r = d.GetMigDeviceHandleByIndex(0)
	if !d.migEnabled() {
		norm("GetMigDeviceHandleByIndex", r, nvml.ERROR_NOT_FOUND)
	} else {
		rec("GetMigDeviceHandleByIndex", r)
	}
	_, r = d.IsMigDeviceHandle()
	rec("IsMigDeviceHandle", r)
	_, r = d.GetGpuInstanceId()
	norm("GetGpuInstanceId", r, nvml.ERROR_INVALID_ARGUMENT)
	_, r = d.GetComputeInstanceId()
	norm("GetComputeInstanceId", r, nvml.ERROR_INVALID_ARGUMENT)
	_, r = d.GetDeviceHandleFromMigDeviceHandle()
	norm("GetDeviceHandleFromMigDeviceHandle", r, nvml.ERROR_INVALID_ARGUMENT)
	_, r = d.GpmQueryDeviceSupport()
	rec("GpmQueryDeviceSupport", r)
	s, _ := d.f.lib.GpmSampleAlloc()
	r = d.GpmSampleGet(s)
	if !d.spec.model.gpmSupported {
		norm("GpmSampleGet", r, nvml.ERROR_NOT_SUPPORTED)
	} else {
		rec("GpmSampleGet", r)
	}
	r = d.GpmMigSampleGet(1, s)
	switch {
	case !d.spec.model.gpmSupported:
		norm("GpmMigSampleGet", r, nvml.ERROR_NOT_SUPPORTED)
	case !d.migEnabled():
		norm("GpmMigSampleGet", r, nvml.ERROR_INVALID_ARGUMENT)
	default:
		rec("GpmMigSampleGet", r)
	}
	s.Free()
}

// callHostView calls the verify report's calls (hostview.go). Page
// retirement is ERROR_NOT_SUPPORTED on every simulated (Ampere or newer)
// model by design.
func callHostView(d *device, rec func(string, nvml.Return)) {
	notSupported := func(name string, r nvml.Return) {
		if r == nvml.ERROR_NOT_SUPPORTED {
			r = nvml.SUCCESS
		}
		rec(name, r)
	}
	_, r := d.GetVirtualizationMode()
	rec("GetVirtualizationMode", r)
	_, r = d.GetCurrPcieLinkGeneration()
	rec("GetCurrPcieLinkGeneration", r)
	_, r = d.GetMaxPcieLinkGeneration()
	rec("GetMaxPcieLinkGeneration", r)
	_, r = d.GetCurrPcieLinkWidth()
	rec("GetCurrPcieLinkWidth", r)
	_, r = d.GetMaxPcieLinkWidth()
	rec("GetMaxPcieLinkWidth", r)
	_, r = d.GetPowerManagementDefaultLimit()
	rec("GetPowerManagementDefaultLimit", r)
	_, r = d.GetPowerManagementLimit()
	rec("GetPowerManagementLimit", r)
	_, _, r = d.GetEccMode()
	rec("GetEccMode", r)
	_, r = d.GetRetiredPages(nvml.PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
	notSupported("GetRetiredPages", r)
	_, _, r = d.GetRetiredPages_v2(nvml.PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
	notSupported("GetRetiredPages_v2", r)
	_, r = d.GetRetiredPagesPendingStatus()
	notSupported("GetRetiredPagesPendingStatus", r)
}
