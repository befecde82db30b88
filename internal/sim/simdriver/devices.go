package simdriver

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpulens/gpulens/internal/gpuid"
	"github.com/gpulens/gpulens/internal/gpuprobe"
)

// Visible is what one process enumerates of devs under CUDA_VISIBLE_DEVICES
// visible ("" for all; UUIDs or indices, unknown entries ignored): with MIG,
// CUDA (11 and 12) enumerates a single MIG instance per process, the first
// visible one, so a process given several instances sees one of them, and
// the others can only be reached from other processes.
func Visible(devs []Device, visible string) []Device {
	var picked []Device
	if strings.TrimSpace(visible) == "" {
		picked = append(picked, devs...)
	} else {
		for _, f := range strings.Split(visible, ",") {
			f = strings.TrimSpace(f)
			if i, err := strconv.Atoi(f); err == nil {
				if i >= 0 && i < len(devs) {
					picked = append(picked, devs[i])
				}
				continue
			}
			for _, d := range devs {
				if strings.EqualFold(d.UUID, f) {
					picked = append(picked, d)
					break
				}
			}
		}
	}
	out := picked[:0:0]
	mig := false
	for _, d := range picked {
		if strings.HasPrefix(d.UUID, "MIG-") {
			if mig {
				continue
			}
			mig = true
		}
		out = append(out, d)
	}
	return out
}

func (d *Driver) DeviceCount() (int, error) {
	err := d.enter(CallDeviceGetCount)
	defer d.leave()
	if err != nil {
		return 0, err
	}
	if err := d.requireInit(CallDeviceGetCount); err != nil {
		return 0, err
	}
	return len(d.devs), nil
}

func (d *Driver) DeviceName(ordinal int) (string, error) {
	err := d.enter(CallDeviceGetName)
	defer d.leave()
	if err != nil {
		return "", err
	}
	dev, err := d.device(CallDeviceGetName, ordinal)
	if err != nil {
		return "", err
	}
	return dev.Name, nil
}

func (d *Driver) DeviceUUID(ordinal int) (string, error) {
	err := d.enter(CallDeviceGetUUID)
	defer d.leave()
	if err != nil {
		return "", err
	}
	dev, err := d.device(CallDeviceGetUUID, ordinal)
	if err != nil {
		return "", err
	}
	return dev.UUID, nil
}

func (d *Driver) DeviceAttribute(ordinal int, a gpuprobe.Attribute) (int, error) {
	err := d.enter(CallDeviceGetAttr)
	defer d.leave()
	if err != nil {
		return 0, err
	}
	dev, err := d.device(CallDeviceGetAttr, ordinal)
	if err != nil {
		return 0, err
	}
	switch a {
	case gpuprobe.AttrMaxThreadsPerBlock:
		return maxThreadsPerBlock, nil
	case gpuprobe.AttrClockRateKHz:
		return dev.ClockRateKHz, nil
	case gpuprobe.AttrMultiprocessorCount:
		return dev.SMs, nil
	case gpuprobe.AttrMemoryClockRateKHz:
		return dev.MemoryClockKHz, nil
	case gpuprobe.AttrGlobalMemoryBusWidth:
		return dev.MemoryBusWidthBit, nil
	case gpuprobe.AttrMaxThreadsPerMultiprocessor:
		if dev.MaxThreadsPerSM > 0 {
			return dev.MaxThreadsPerSM, nil
		}
		return maxThreadsPerSM, nil
	case gpuprobe.AttrComputeMode:
		return dev.ComputeMode, nil
	case gpuprobe.AttrL2CacheSize:
		return dev.L2CacheBytes, nil
	case gpuprobe.AttrComputeCapabilityMajor:
		return dev.CCMajor, nil
	case gpuprobe.AttrComputeCapabilityMinor:
		return dev.CCMinor, nil
	case gpuprobe.AttrPCIDomainID, gpuprobe.AttrPCIBusID, gpuprobe.AttrPCIDeviceID:
		var b gpuid.BusID
		if dev.PCIBusID != "" {
			var err error
			if b, err = gpuid.ParseBusID(dev.PCIBusID); err != nil {
				return 0, cudaError(CallDeviceGetAttr, errInvalidValue, fmt.Sprintf("simulated device %d has a malformed PCIBusID %q", ordinal, dev.PCIBusID))
			}
		}
		switch a {
		case gpuprobe.AttrPCIDomainID:
			return int(b.Domain), nil
		case gpuprobe.AttrPCIBusID:
			return int(b.Bus), nil
		default:
			return int(b.Device), nil
		}
	}
	return 0, cudaError(CallDeviceGetAttr, errInvalidValue, fmt.Sprintf("attribute %d is not simulated", a))
}

func (d *Driver) DeviceTotalMem(ordinal int) (uint64, error) {
	err := d.enter(CallDeviceTotalMem)
	defer d.leave()
	if err != nil {
		return 0, err
	}
	dev, err := d.device(CallDeviceTotalMem, ordinal)
	if err != nil {
		return 0, err
	}
	return dev.TotalMemoryBytes, nil
}
