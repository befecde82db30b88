package verify

import (
	"reflect"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

func TestGatherNVMLHealthy(t *testing.T) {
	dev := mockGPU(uuid0, bus0, 0)
	h, handles := GatherNVML(mockLibrary(dev), 4242)
	if h.DriverVersion != "550.54.15" || h.CUDADriverVersion != cuda124 || h.DeviceCount != 1 || len(h.GPUs) != 1 || len(handles) != 1 {
		t.Fatalf("host %+v, %d handles", h, len(handles))
	}
	g := h.GPUs[0]
	want := GPUFacts{
		Index: 0, Name: h100, UUID: uuid0, PCIBusID: bus0, Virtualization: VirtNone, MIGEnabled: boolp(false),
		Memory:         &MemoryFacts{TotalBytes: 80 * gib, ReservedBytes: 512 * mib, UsedBytes: 4 * mib, FreeBytes: 80*gib - 516*mib},
		ComputeMode:    ComputeDefault,
		ECC:            &ECCFacts{Enabled: true, PendingEnabled: true, UncorrectedVolatile: u64(0), UncorrectedAggregate: u64(0)},
		RemappedRows:   &RemappedRows{},
		PCIe:           &PCIeLink{CurrentGen: 5, MaxGen: 5, CurrentWidth: 16, MaxWidth: 16},
		Power:          &PowerLimits{LimitW: 700, DefaultW: 700, EnforcedW: 700},
		Processes:      &ProcessFacts{},
		UtilizationPct: new(uint32),
		MaxSMClockMHz:  1980,
	}
	if !reflect.DeepEqual(g, want) {
		t.Errorf("facts\n got %+v\nwant %+v", g, want)
	}
	// Retired pages are not read when remapped rows are available.
	if n := len(dev.GetRetiredPagesCalls()); n != 0 {
		t.Errorf("GetRetiredPages called %d times", n)
	}
}

func TestGatherNVMLNotSupportedErrorsAndPanics(t *testing.T) {
	dev := mockGPU(uuid0, bus0, 0)
	dev.GetVirtualizationModeFunc = func() (nvml.GpuVirtualizationMode, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
	dev.GetEccModeFunc = func() (nvml.EnableState, nvml.EnableState, nvml.Return) { return 0, 0, nvml.ERROR_NOT_SUPPORTED }
	dev.GetPowerManagementDefaultLimitFunc = func() (uint32, nvml.Return) { return 0, nvml.ERROR_NO_PERMISSION }
	dev.GetRemappedRowsFunc = nil // a mock without the call panics: recorded, not a crash
	dev.GetRetiredPagesFunc = func(c nvml.PageRetirementCause) ([]uint64, nvml.Return) {
		if c == nvml.PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR {
			return []uint64{0x1000, 0x2000}, nvml.SUCCESS
		}
		return nil, nvml.SUCCESS
	}
	dev.GetRetiredPagesPendingStatusFunc = func() (nvml.EnableState, nvml.Return) { return nvml.FEATURE_DISABLED, nvml.SUCCESS }
	dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return []nvml.ProcessInfo{{Pid: 4242, UsedGpuMemory: 500 * mib}, {Pid: 77, UsedGpuMemory: 3 * gib}}, nvml.SUCCESS
	}
	dev.GetMPSComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return []nvml.ProcessInfo{{Pid: 77, UsedGpuMemory: 3 * gib}, {Pid: 78, UsedGpuMemory: 1 * gib}}, nvml.SUCCESS
	}
	dev.GetGraphicsRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }

	h, _ := GatherNVML(mockLibrary(dev), 4242)
	g := h.GPUs[0]
	if g.Virtualization != "" || g.ECC != nil {
		t.Errorf("unsupported facts were filled: virt %q ecc %+v", g.Virtualization, g.ECC)
	}
	for _, call := range []string{"GetVirtualizationMode", "GetEccMode", "GetGraphicsRunningProcesses"} {
		if !strings.HasPrefix(g.Why(call), "not available") {
			t.Errorf("Why(%s) = %q, want not available", call, g.Why(call))
		}
	}
	if w := g.Why("GetPowerManagementDefaultLimit"); w != "NVML GetPowerManagementDefaultLimit: ERROR_NO_PERMISSION" {
		t.Errorf("Why(default limit) = %q", w)
	}
	if w := g.Why("GetRemappedRows"); !strings.Contains(w, "call panicked") {
		t.Errorf("Why(GetRemappedRows) = %q, want the recovered panic", w)
	}
	if g.Power == nil || g.Power.LimitW != 700 || g.Power.DefaultW != 0 {
		t.Errorf("power %+v: the limit was read, the default not", g.Power)
	}
	if g.RetiredPages == nil || *g.RetiredPages != (RetiredPages{DoubleBit: 2}) {
		t.Errorf("retired pages %+v, want 2 double-bit", g.RetiredPages)
	}
	// Our own PID is left out; 77 is in two lists and counted once.
	if p := g.Processes; p == nil || p.Count != 2 || p.MemoryBytes != 4*gib || !reflect.DeepEqual(p.PIDs, []uint32{77, 78}) {
		t.Errorf("processes %+v, want 77 and 78 holding 4 GiB", g.Processes)
	}
}

func TestGatherNVMLMIGAndLibraryErrors(t *testing.T) {
	parent := mockGPU(uuid0, bus0, 0)
	parent.GetMigModeFunc = func() (int, int, nvml.Return) { return nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS }
	parent.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
	migs := []nvml.Device{
		&mock.Device{
			GetUUIDFunc:              func() (string, nvml.Return) { return "MIG-aaaa", nvml.SUCCESS },
			GetNameFunc:              func() (string, nvml.Return) { return h100 + " MIG 3g.40gb", nvml.SUCCESS },
			GetGpuInstanceIdFunc:     func() (int, nvml.Return) { return 2, nvml.SUCCESS },
			GetComputeInstanceIdFunc: func() (int, nvml.Return) { return 0, nvml.SUCCESS },
			GetMemoryInfoFunc:        func() (nvml.Memory, nvml.Return) { return nvml.Memory{Total: 40 * gib}, nvml.SUCCESS },
		},
		nil,          // an empty slot
		&mock.Device{ // a half-implemented device: every call panics
		},
	}
	parent.GetMigDeviceHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i < len(migs) && migs[i] != nil {
			return migs[i], nvml.SUCCESS
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	lib := mockLibrary(parent)
	lib.SystemGetCudaDriverVersionFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
	h, _ := GatherNVML(lib, 1)
	if len(h.Errors) != 1 || h.Errors[0].Call != "SystemGetCudaDriverVersion" {
		t.Errorf("host errors %+v", h.Errors)
	}
	g := h.GPUs[0]
	if len(g.MIGInstances) != 2 {
		t.Fatalf("MIG instances %+v, want 2 (the empty slot skipped)", g.MIGInstances)
	}
	if m := g.MIGInstances[0]; m != (MIGInstance{UUID: "MIG-aaaa", Name: h100 + " MIG 3g.40gb", Profile: "3g.40gb", GPUInstanceID: 2, MemoryTotalBytes: 40 * gib}) {
		t.Errorf("MIG instance 0 = %+v", m)
	}
	panics := 0
	for _, e := range g.Errors {
		if strings.HasPrefix(e.Call, "MIG ") && strings.Contains(e.Err, "call panicked") {
			panics++
		}
	}
	if panics != 5 {
		t.Errorf("%d recovered MIG call panics, want 5: %+v", panics, g.Errors)
	}
}

func TestGatherNVMLNoDevices(t *testing.T) {
	lib := mockLibrary()
	lib.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_DRIVER_NOT_LOADED }
	h, handles := GatherNVML(lib, 1)
	if len(h.GPUs) != 0 || handles != nil || len(h.Errors) != 1 || h.Errors[0].Err != "ERROR_DRIVER_NOT_LOADED" {
		t.Errorf("host %+v", h)
	}
}

// A call an older driver lacks (FUNCTION_NOT_FOUND) is not available, as
// NOT_SUPPORTED is and as the exporter counts it (nvmlret.Classify): not
// an error that fails the NVML check. Any other code is an error named by
// its constant (nvmlret.Name), whatever text the loaded library gives.
func TestGatherNVMLReturnCodes(t *testing.T) {
	dev := mockGPU(uuid0, bus0, 0)
	dev.GetMaxPcieLinkGenerationFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_FUNCTION_NOT_FOUND }
	dev.GetPowerManagementDefaultLimitFunc = func() (uint32, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
	h, _ := GatherNVML(mockLibrary(dev), 4242)
	g := h.GPUs[0]
	if !reflect.DeepEqual(g.NotAvailable, []string{"GetMaxPcieLinkGeneration"}) {
		t.Errorf("not available %v, want [GetMaxPcieLinkGeneration]", g.NotAvailable)
	}
	if want := []CallError{{Call: "GetPowerManagementDefaultLimit", Err: "ERROR_UNKNOWN"}}; !reflect.DeepEqual(g.Errors, want) {
		t.Errorf("errors %+v, want %+v", g.Errors, want)
	}
}
