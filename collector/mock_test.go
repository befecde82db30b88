package collector

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// newMockDevice returns a device whose every call the collectors make answers
// with fixed, known values (listed in the expected output of the tests).
func newMockDevice(i int) *mock.Device {
	d := &mock.Device{}
	d.GetUUIDFunc = func() (string, nvml.Return) {
		return fmt.Sprintf("GPU-%08d-0000-0000-0000-000000000000", i), nvml.SUCCESS
	}
	d.GetNameFunc = func() (string, nvml.Return) { return "NVIDIA H100 80GB HBM3", nvml.SUCCESS }
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
		var p nvml.PciInfo
		for j, c := range fmt.Sprintf("00000000:%02X:00.0", 0x18+i) {
			p.BusId[j] = int8(c)
		}
		return p, nvml.SUCCESS
	}
	d.GetSerialFunc = func() (string, nvml.Return) { return fmt.Sprintf("165232100%04d", i), nvml.SUCCESS }
	d.GetVbiosVersionFunc = func() (string, nvml.Return) { return "96.00.74.00.01", nvml.SUCCESS }
	d.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
		return nvml.Memory_v2{Total: 85520809984, Reserved: 566231040, Used: 42949672960, Free: 42004905984}, nvml.SUCCESS
	}
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		return nvml.Memory{Total: 85520809984, Used: 43515904000, Free: 42004905984}, nvml.SUCCESS
	}
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{Gpu: 50, Memory: 25}, nvml.SUCCESS }
	d.GetEncoderUtilizationFunc = func() (uint32, uint32, nvml.Return) { return 3, 167000, nvml.SUCCESS }
	d.GetDecoderUtilizationFunc = func() (uint32, uint32, nvml.Return) { return 7, 167000, nvml.SUCCESS }
	d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 350500, nvml.SUCCESS }
	d.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { return 700000, nvml.SUCCESS }
	d.GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) { return 123456789, nvml.SUCCESS }
	d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 61, nvml.SUCCESS }
	d.GetFanSpeedFunc = func() (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
	d.GetClockInfoFunc = func(t nvml.ClockType) (uint32, nvml.Return) {
		return map[nvml.ClockType]uint32{nvml.CLOCK_GRAPHICS: 1755, nvml.CLOCK_SM: 1755, nvml.CLOCK_MEM: 2619}[t], nvml.SUCCESS
	}
	d.GetMaxClockInfoFunc = func(t nvml.ClockType) (uint32, nvml.Return) {
		return map[nvml.ClockType]uint32{nvml.CLOCK_GRAPHICS: 1980, nvml.CLOCK_SM: 1980, nvml.CLOCK_MEM: 2619}[t], nvml.SUCCESS
	}
	d.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return 0x4 | 0x20, nvml.SUCCESS } // sw power cap + sw thermal
	d.GetPcieThroughputFunc = func(c nvml.PcieUtilCounter) (uint32, nvml.Return) {
		if c == nvml.PCIE_UTIL_TX_BYTES {
			return 1000, nvml.SUCCESS
		}
		return 2000, nvml.SUCCESS
	}
	d.GetPcieReplayCounterFunc = func() (int, nvml.Return) { return 2, nvml.SUCCESS }
	d.GetTotalEccErrorsFunc = func(t nvml.MemoryErrorType, _ nvml.EccCounterType) (uint64, nvml.Return) {
		if t == nvml.MEMORY_ERROR_TYPE_CORRECTED {
			return 5, nvml.SUCCESS
		}
		return 0, nvml.SUCCESS
	}
	d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 1, 0, true, false, nvml.SUCCESS }
	d.GetPersistenceModeFunc = func() (nvml.EnableState, nvml.Return) { return nvml.FEATURE_ENABLED, nvml.SUCCESS }
	d.GetComputeModeFunc = func() (nvml.ComputeMode, nvml.Return) { return nvml.COMPUTEMODE_EXCLUSIVE_PROCESS, nvml.SUCCESS }
	d.GetMigModeFunc = func() (int, int, nvml.Return) { return nvml.DEVICE_MIG_DISABLE, nvml.DEVICE_MIG_DISABLE, nvml.SUCCESS }
	d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) { return nvml.EventTypeXidCriticalError, nvml.SUCCESS }
	d.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
	// No process, no GPM (process, mig, gpm and contention collectors).
	noProcs := func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
	d.GetComputeRunningProcessesFunc = noProcs
	d.GetGraphicsRunningProcessesFunc = noProcs
	d.GetMPSComputeRunningProcessesFunc = noProcs
	d.GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) { return nil, nvml.ERROR_NOT_FOUND }
	d.GpmQueryDeviceSupportFunc = func() (nvml.GpmSupport, nvml.Return) { return nvml.GpmSupport{Version: 1}, nvml.SUCCESS }
	return d
}

// newMockLib returns a library with the given devices.
func newMockLib(devs ...nvml.Device) *mock.Interface {
	return &mock.Interface{
		DeviceGetCountFunc: func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < 0 || i >= len(devs) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return devs[i], nvml.SUCCESS
		},
		SystemGetDriverVersionFunc:     func() (string, nvml.Return) { return "550.54.15", nvml.SUCCESS },
		SystemGetCudaDriverVersionFunc: func() (int, nvml.Return) { return 12040, nvml.SUCCESS },
	}
}

func allCollectors() []NamedCollector {
	var cs []NamedCollector
	for _, f := range Factories() {
		cs = append(cs, NamedCollector{Name: f.Name, Collector: f.New()})
	}
	return cs
}
