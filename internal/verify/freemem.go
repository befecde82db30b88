package verify

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpulens/gpulens/internal/gpuprobe"
	"github.com/gpulens/gpulens/internal/nvmlret"
)

// NVMLFreeMemory is gpuprobe.Options.FreeMemory over an initialised NVML
// library: the free memory NVML reports for the device's (or MIG
// instance's) UUID, before the probe creates a context. Unknown when NVML
// does not know the UUID or cannot read its memory; the probe then checks
// cuMemGetInfo right after creating its context instead.
func NVMLFreeMemory(lib interface {
	DeviceGetHandleByUUID(string) (nvml.Device, nvml.Return)
}) gpuprobe.FreeMemoryFunc {
	return func(d gpuprobe.DeviceInfo) (uint64, bool) {
		if d.UUID == "" {
			return 0, false
		}
		h, r := lib.DeviceGetHandleByUUID(d.UUID)
		if r != nvml.SUCCESS {
			return 0, false
		}
		if m, r := h.GetMemoryInfo_v2(); r == nvml.SUCCESS {
			return m.Free, true
		}
		if m, r := h.GetMemoryInfo(); r == nvml.SUCCESS {
			return m.Free, true
		}
		return 0, false
	}
}

// NVMLProcesses is gpuprobe.Options.Processes over an initialised NVML
// library: the PIDs of the device's (or MIG instance's) compute, MPS and
// graphics process lists now; not read when NVML does not know the UUID or
// no list answers (a vGPU guest's NOT_FOUND on a busy GPU: unknown, not
// "nobody").
func NVMLProcesses(lib interface {
	DeviceGetHandleByUUID(string) (nvml.Device, nvml.Return)
}) gpuprobe.ProcessesFunc {
	return func(d gpuprobe.DeviceInfo) ([]uint32, bool) {
		if d.UUID == "" {
			return nil, false
		}
		h, r := lib.DeviceGetHandleByUUID(d.UUID)
		if r != nvml.SUCCESS {
			return nil, false
		}
		return nvmlret.ProcessPIDs(h)
	}
}
