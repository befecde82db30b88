// Package nvmlret is the one home of what gpulens does with an NVML return
// code: its stable names and how a reader treats it, and of the reading
// that hinges on it most, which processes a device's lists name
// (ProcessPIDs). The exporter's collector, gpulens-verify and the
// simulated fleet's scenarios use it.
//
// nvml.Return.Error() is not a name: once libnvidia-ml is loaded, go-nvml
// answers with nvmlErrorString's free-form sentence ("Unknown Error"),
// which differs between driver versions; only without the library does it
// answer the constant's name. Labels, reports and scenario files need a
// spelling that stays the same, so they take it from here.
package nvmlret

import (
	"fmt"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// codes lists every NVML return code by its constant's name in nvml.h
// (NVML_ERROR_UNKNOWN as "ERROR_UNKNOWN", as go-nvml names it).
var codes = []struct {
	ret  nvml.Return
	name string
}{
	{nvml.SUCCESS, "SUCCESS"},
	{nvml.ERROR_UNINITIALIZED, "ERROR_UNINITIALIZED"},
	{nvml.ERROR_INVALID_ARGUMENT, "ERROR_INVALID_ARGUMENT"},
	{nvml.ERROR_NOT_SUPPORTED, "ERROR_NOT_SUPPORTED"},
	{nvml.ERROR_NO_PERMISSION, "ERROR_NO_PERMISSION"},
	{nvml.ERROR_ALREADY_INITIALIZED, "ERROR_ALREADY_INITIALIZED"},
	{nvml.ERROR_NOT_FOUND, "ERROR_NOT_FOUND"},
	{nvml.ERROR_INSUFFICIENT_SIZE, "ERROR_INSUFFICIENT_SIZE"},
	{nvml.ERROR_INSUFFICIENT_POWER, "ERROR_INSUFFICIENT_POWER"},
	{nvml.ERROR_DRIVER_NOT_LOADED, "ERROR_DRIVER_NOT_LOADED"},
	{nvml.ERROR_TIMEOUT, "ERROR_TIMEOUT"},
	{nvml.ERROR_IRQ_ISSUE, "ERROR_IRQ_ISSUE"},
	{nvml.ERROR_LIBRARY_NOT_FOUND, "ERROR_LIBRARY_NOT_FOUND"},
	{nvml.ERROR_FUNCTION_NOT_FOUND, "ERROR_FUNCTION_NOT_FOUND"},
	{nvml.ERROR_CORRUPTED_INFOROM, "ERROR_CORRUPTED_INFOROM"},
	{nvml.ERROR_GPU_IS_LOST, "ERROR_GPU_IS_LOST"},
	{nvml.ERROR_RESET_REQUIRED, "ERROR_RESET_REQUIRED"},
	{nvml.ERROR_OPERATING_SYSTEM, "ERROR_OPERATING_SYSTEM"},
	{nvml.ERROR_LIB_RM_VERSION_MISMATCH, "ERROR_LIB_RM_VERSION_MISMATCH"},
	{nvml.ERROR_IN_USE, "ERROR_IN_USE"},
	{nvml.ERROR_MEMORY, "ERROR_MEMORY"},
	{nvml.ERROR_NO_DATA, "ERROR_NO_DATA"},
	{nvml.ERROR_VGPU_ECC_NOT_SUPPORTED, "ERROR_VGPU_ECC_NOT_SUPPORTED"},
	{nvml.ERROR_INSUFFICIENT_RESOURCES, "ERROR_INSUFFICIENT_RESOURCES"},
	{nvml.ERROR_FREQ_NOT_SUPPORTED, "ERROR_FREQ_NOT_SUPPORTED"},
	{nvml.ERROR_ARGUMENT_VERSION_MISMATCH, "ERROR_ARGUMENT_VERSION_MISMATCH"},
	{nvml.ERROR_DEPRECATED, "ERROR_DEPRECATED"},
	{nvml.ERROR_NOT_READY, "ERROR_NOT_READY"},
	{nvml.ERROR_GPU_NOT_FOUND, "ERROR_GPU_NOT_FOUND"},
	{nvml.ERROR_INVALID_STATE, "ERROR_INVALID_STATE"},
	{nvml.ERROR_RESET_TYPE_NOT_SUPPORTED, "ERROR_RESET_TYPE_NOT_SUPPORTED"},
	{nvml.ERROR_UNKNOWN, "ERROR_UNKNOWN"},
}

// Name is the constant's name of r, "ERROR_UNKNOWN" (reports, scenario
// files); "RETURN_<n>" for a code this table does not know (a newer
// driver's).
func Name(r nvml.Return) string {
	for _, c := range codes {
		if c.ret == r {
			return c.name
		}
	}
	return fmt.Sprintf("RETURN_%d", int32(r))
}

// Label is r as a low-cardinality Prometheus label value: Name in lower
// case without "ERROR_" ("unknown", "gpu_is_lost"); "code_<n>" for a code
// this table does not know.
func Label(r nvml.Return) string {
	for _, c := range codes {
		if c.ret == r {
			return strings.ToLower(strings.TrimPrefix(c.name, "ERROR_"))
		}
	}
	return fmt.Sprintf("code_%d", int32(r))
}

// Describe is r for a person: its Name, then the loaded library's own
// text when it has another ("ERROR_DRIVER_NOT_LOADED (Driver Not
// Loaded)"), for logs and messages; never for labels or data.
func Describe(r nvml.Return) string {
	name, text := Name(r), r.Error() //nolint:forbidigo // the one place the library's text is read, next to the stable name
	if text == "" || text == name {
		return name
	}
	return name + " (" + text + ")"
}

// Parse is the code Name calls s; ok is false for a name it does not know.
func Parse(s string) (r nvml.Return, ok bool) {
	for _, c := range codes {
		if c.name == s {
			return c.ret, true
		}
	}
	return 0, false
}

// Names lists every error's name (all but SUCCESS), sorted.
func Names() []string {
	var out []string
	for _, c := range codes {
		if c.ret != nvml.SUCCESS {
			out = append(out, c.name)
		}
	}
	slices.Sort(out)
	return out
}

// Outcome is how a reader treats a call's return code.
type Outcome int

const (
	// OK: the value is good.
	OK Outcome = iota
	// Absent: the device or the driver does not have it (NOT_SUPPORTED;
	// FUNCTION_NOT_FOUND, an older driver without the symbol). The fact or
	// metric is missing; no error.
	Absent
	// Lost: the GPU fell off the bus (GPU_IS_LOST): an error, and no
	// further call on it answers.
	Lost
	// Failed: any other code, an error.
	Failed
)

// Classify is the one rule of what a return code means to a reader.
func Classify(r nvml.Return) Outcome {
	switch r {
	case nvml.SUCCESS:
		return OK
	case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND:
		return Absent
	case nvml.ERROR_GPU_IS_LOST:
		return Lost
	}
	return Failed
}

// ProcessPIDs is the one reading of who has a context on a device (or MIG
// device) now: the PIDs in its compute, MPS and graphics process lists,
// each once, in the order the lists give them. ok is false when no list
// answers: unknown, not "nobody" (a vGPU guest's NOT_FOUND on a busy GPU).
// The exporter's probe and gpulens-verify both take the processes on a GPU
// from here.
func ProcessPIDs(d interface {
	GetComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return)
	GetMPSComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return)
	GetGraphicsRunningProcesses() ([]nvml.ProcessInfo, nvml.Return)
}) (pids []uint32, ok bool) {
	for _, get := range []func() ([]nvml.ProcessInfo, nvml.Return){d.GetComputeRunningProcesses, d.GetMPSComputeRunningProcesses, d.GetGraphicsRunningProcesses} {
		ps, r := get()
		if r != nvml.SUCCESS {
			continue
		}
		ok = true
		for _, p := range ps {
			if !slices.Contains(pids, p.Pid) {
				pids = append(pids, p.Pid)
			}
		}
	}
	return pids, ok
}
