package verify

import (
	"fmt"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpulens/gpulens/internal/gpuid"
	"github.com/gpulens/gpulens/internal/nvmlret"
)

// Library is the slice of NVML gpulens-verify reads. go-nvml's
// nvml.Interface satisfies it (the real library after Init, or a simulated
// fleet's Interface()).
type Library interface {
	SystemGetDriverVersion() (string, nvml.Return)
	SystemGetCudaDriverVersion() (int, nvml.Return)
	DeviceGetCount() (int, nvml.Return)
	DeviceGetHandleByIndex(int) (nvml.Device, nvml.Return)
}

// CallError is an NVML call that failed with anything but NOT_SUPPORTED or
// FUNCTION_NOT_FOUND (those are NotAvailable).
type CallError struct {
	Call string `json:"call"`
	// Err is the return code's name, "ERROR_UNKNOWN" (nvmlret.Name: the
	// same with any driver), or why the call did not return.
	Err string `json:"error"`
}

// NVMLHost is what NVML says of the host and its GPUs, read before the
// probe runs.
type NVMLHost struct {
	DriverVersion string `json:"driver_version,omitempty"`
	// CUDADriverVersion is NVML's encoding: 12040 for 12.4.
	CUDADriverVersion int         `json:"cuda_driver_version,omitempty"`
	DeviceCount       int         `json:"device_count"`
	GPUs              []GPUFacts  `json:"gpus"`
	NotAvailable      []string    `json:"not_available,omitempty"`
	Errors            []CallError `json:"errors,omitempty"`
}

// Virtualization modes as reported (GpuVirtualizationMode).
const (
	VirtNone        = "none"
	VirtPassthrough = "passthrough"
	VirtVGPUGuest   = "vgpu_guest"
	VirtHostVGPU    = "host_vgpu"
	VirtHostVSGA    = "host_vsga"
)

// Compute modes as reported (ComputeMode).
const (
	ComputeDefault          = "default"
	ComputeExclusiveThread  = "exclusive_thread"
	ComputeProhibited       = "prohibited"
	ComputeExclusiveProcess = "exclusive_process"
)

// GPUFacts is one physical GPU as NVML describes it. A nil pointer or an
// empty string is a fact NVML did not give: its call is then named in
// NotAvailable (NOT_SUPPORTED) or Errors (anything else).
type GPUFacts struct {
	Index    int    `json:"index"`
	Name     string `json:"name,omitempty"`
	UUID     string `json:"uuid,omitempty"`
	PCIBusID string `json:"pci_bus_id,omitempty"`

	Virtualization string        `json:"virtualization,omitempty"`
	MIGEnabled     *bool         `json:"mig_enabled,omitempty"`
	MIGInstances   []MIGInstance `json:"mig_instances,omitempty"`
	Memory         *MemoryFacts  `json:"memory,omitempty"`
	ComputeMode    string        `json:"compute_mode,omitempty"`
	ECC            *ECCFacts     `json:"ecc,omitempty"`
	RemappedRows   *RemappedRows `json:"remapped_rows,omitempty"`
	RetiredPages   *RetiredPages `json:"retired_pages,omitempty"`
	PCIe           *PCIeLink     `json:"pcie,omitempty"`
	Power          *PowerLimits  `json:"power,omitempty"`
	Processes      *ProcessFacts `json:"processes,omitempty"`
	// UtilizationPct is NVML's GPU utilisation (the share of the last
	// sample period a kernel ran, any context's) before the probe ran.
	UtilizationPct *uint32      `json:"utilization_pct,omitempty"`
	MaxSMClockMHz  uint32       `json:"max_sm_clock_mhz,omitempty"`
	UnderLoad      *LoadSamples `json:"under_load,omitempty"`
	NotAvailable   []string     `json:"not_available,omitempty"`
	Errors         []CallError  `json:"errors,omitempty"`
}

// MIGInstance is a MIG device of a GPU in MIG mode.
type MIGInstance struct {
	UUID              string `json:"uuid,omitempty"`
	Name              string `json:"name,omitempty"`
	Profile           string `json:"profile,omitempty"` // "3g.40gb", from the name
	GPUInstanceID     int    `json:"gpu_instance_id"`
	ComputeInstanceID int    `json:"compute_instance_id"`
	MemoryTotalBytes  uint64 `json:"memory_total_bytes,omitempty"`
}

// MemoryFacts is GetMemoryInfo_v2 (or v1, then Reserved is 0).
type MemoryFacts struct {
	TotalBytes    uint64 `json:"total_bytes"`
	ReservedBytes uint64 `json:"reserved_bytes"`
	UsedBytes     uint64 `json:"used_bytes"`
	FreeBytes     uint64 `json:"free_bytes"`
}

// ECCFacts is the ECC mode and the uncorrected error counters.
type ECCFacts struct {
	Enabled bool `json:"enabled"`
	// PendingEnabled is the mode after the next reset.
	PendingEnabled bool `json:"pending_enabled"`
	// Uncorrected errors since the last driver load (volatile) and over the
	// GPU's life (aggregate); nil when not available.
	UncorrectedVolatile  *uint64 `json:"uncorrected_volatile,omitempty"`
	UncorrectedAggregate *uint64 `json:"uncorrected_aggregate,omitempty"`
}

// RemappedRows is GetRemappedRows (Ampere and newer).
type RemappedRows struct {
	Correctable   int  `json:"correctable"`
	Uncorrectable int  `json:"uncorrectable"`
	Pending       bool `json:"pending"`
	Failure       bool `json:"failure"`
}

// RetiredPages is dynamic page retirement (before Ampere).
type RetiredPages struct {
	MultipleSingleBit int  `json:"multiple_single_bit"`
	DoubleBit         int  `json:"double_bit"`
	Pending           bool `json:"pending"`
}

// PCIeLink is the link at rest (the current generation drops at idle to
// save power; LoadSamples has it under load).
type PCIeLink struct {
	CurrentGen   int `json:"current_gen"`
	MaxGen       int `json:"max_gen"`
	CurrentWidth int `json:"current_width"`
	MaxWidth     int `json:"max_width"`
}

// PowerLimits in watts; zero when not available.
type PowerLimits struct {
	LimitW    float64 `json:"limit_w,omitempty"`
	DefaultW  float64 `json:"default_w,omitempty"`
	EnforcedW float64 `json:"enforced_w,omitempty"`
}

// ProcessFacts are the processes NVML lists on the GPU before the probe
// runs (compute, graphics and MPS lists merged by PID), without this one.
type ProcessFacts struct {
	Count       int      `json:"count"`
	MemoryBytes uint64   `json:"memory_bytes"`
	PIDs        []uint32 `json:"pids,omitempty"`
	// MPSPIDs are the MPS clients among them: they run inside the MPS
	// server's context and never pause a time-sliced one.
	MPSPIDs []uint32 `json:"mps_pids,omitempty"`
}

// Why returns why a fact read by call is missing: "not available (NVML:
// call not supported)", the call's error, or "" when neither was recorded.
func (g *GPUFacts) Why(calls ...string) string {
	for _, c := range calls {
		for _, e := range g.Errors {
			if e.Call == c {
				return "NVML " + c + ": " + e.Err
			}
		}
	}
	for _, c := range calls {
		for _, n := range g.NotAvailable {
			if n == c {
				return "not available (NVML " + c + ": not supported)"
			}
		}
	}
	return ""
}

// reader runs NVML calls, sorting their failures into not-available and
// errors. A call that panics (a mock or simulated device without that call)
// is an error, never a crash.
type reader struct {
	notAvailable *[]string
	errs         *[]CallError
}

func (r reader) do(call string, f func() nvml.Return) (ok bool) {
	defer func() {
		if p := recover(); p != nil {
			*r.errs = append(*r.errs, CallError{Call: call, Err: fmt.Sprintf("call panicked: %v", p)})
			ok = false
		}
	}()
	ret := f()
	switch nvmlret.Classify(ret) {
	case nvmlret.OK:
		return true
	case nvmlret.Absent:
		*r.notAvailable = append(*r.notAvailable, call)
	default:
		*r.errs = append(*r.errs, CallError{Call: call, Err: nvmlret.Name(ret)})
	}
	return false
}

// GatherNVML reads the host and every GPU NVML lists. selfPID is this
// process (left out of the process lists). It never fails: what it could
// not read is recorded in the result.
func GatherNVML(lib Library, selfPID int) (*NVMLHost, []nvml.Device) {
	h := &NVMLHost{}
	r := reader{&h.NotAvailable, &h.Errors}
	r.do("SystemGetDriverVersion", func() (ret nvml.Return) { h.DriverVersion, ret = lib.SystemGetDriverVersion(); return })
	r.do("SystemGetCudaDriverVersion", func() (ret nvml.Return) { h.CUDADriverVersion, ret = lib.SystemGetCudaDriverVersion(); return })
	if !r.do("DeviceGetCount", func() (ret nvml.Return) { h.DeviceCount, ret = lib.DeviceGetCount(); return }) {
		return h, nil
	}
	handles := make([]nvml.Device, 0, h.DeviceCount)
	for i := 0; i < h.DeviceCount; i++ {
		var d nvml.Device
		g := GPUFacts{Index: i}
		gr := reader{&g.NotAvailable, &g.Errors}
		if gr.do("DeviceGetHandleByIndex", func() (ret nvml.Return) { d, ret = lib.DeviceGetHandleByIndex(i); return }) {
			gatherGPU(d, &g, gr, selfPID)
		}
		h.GPUs = append(h.GPUs, g)
		handles = append(handles, d)
	}
	return h, handles
}

func gatherGPU(d nvml.Device, g *GPUFacts, r reader, selfPID int) {
	r.do("GetName", func() (ret nvml.Return) { g.Name, ret = d.GetName(); return })
	r.do("GetUUID", func() (ret nvml.Return) { g.UUID, ret = d.GetUUID(); return })
	r.do("GetPciInfo", func() nvml.Return {
		p, ret := d.GetPciInfo()
		if ret == nvml.SUCCESS {
			g.PCIBusID = busID(p)
		}
		return ret
	})
	r.do("GetVirtualizationMode", func() nvml.Return {
		m, ret := d.GetVirtualizationMode()
		if ret == nvml.SUCCESS {
			g.Virtualization = virtName(m)
		}
		return ret
	})
	r.do("GetMigMode", func() nvml.Return {
		cur, _, ret := d.GetMigMode()
		if ret == nvml.SUCCESS {
			on := cur == nvml.DEVICE_MIG_ENABLE
			g.MIGEnabled = &on
		}
		return ret
	})
	if g.MIGEnabled != nil && *g.MIGEnabled {
		g.MIGInstances = gatherMIG(d, r)
	}
	r.do("GetMemoryInfo_v2", func() nvml.Return {
		m, ret := d.GetMemoryInfo_v2()
		if ret == nvml.SUCCESS {
			g.Memory = &MemoryFacts{TotalBytes: m.Total, ReservedBytes: m.Reserved, UsedBytes: m.Used, FreeBytes: m.Free}
		}
		return ret
	})
	if g.Memory == nil {
		r.do("GetMemoryInfo", func() nvml.Return {
			m, ret := d.GetMemoryInfo()
			if ret == nvml.SUCCESS {
				g.Memory = &MemoryFacts{TotalBytes: m.Total, UsedBytes: m.Used, FreeBytes: m.Free}
			}
			return ret
		})
	}
	r.do("GetComputeMode", func() nvml.Return {
		m, ret := d.GetComputeMode()
		if ret == nvml.SUCCESS {
			g.ComputeMode = computeName(m)
		}
		return ret
	})
	r.do("GetEccMode", func() nvml.Return {
		cur, pend, ret := d.GetEccMode()
		if ret == nvml.SUCCESS {
			g.ECC = &ECCFacts{Enabled: cur == nvml.FEATURE_ENABLED, PendingEnabled: pend == nvml.FEATURE_ENABLED}
		}
		return ret
	})
	if g.ECC != nil && g.ECC.Enabled {
		for _, c := range []struct {
			call string
			kind nvml.EccCounterType
			dst  **uint64
		}{
			{"GetTotalEccErrors(uncorrected,volatile)", nvml.VOLATILE_ECC, &g.ECC.UncorrectedVolatile},
			{"GetTotalEccErrors(uncorrected,aggregate)", nvml.AGGREGATE_ECC, &g.ECC.UncorrectedAggregate},
		} {
			r.do(c.call, func() nvml.Return {
				n, ret := d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, c.kind)
				if ret == nvml.SUCCESS {
					*c.dst = &n
				}
				return ret
			})
		}
	}
	r.do("GetRemappedRows", func() nvml.Return {
		corr, unc, pending, failure, ret := d.GetRemappedRows()
		if ret == nvml.SUCCESS {
			g.RemappedRows = &RemappedRows{Correctable: corr, Uncorrectable: unc, Pending: pending, Failure: failure}
		}
		return ret
	})
	if g.RemappedRows == nil {
		// Before Ampere: dynamic page retirement.
		var rp RetiredPages
		ok := r.do("GetRetiredPages(multiple_single_bit)", func() nvml.Return {
			p, ret := d.GetRetiredPages(nvml.PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
			rp.MultipleSingleBit = len(p)
			return ret
		})
		ok = r.do("GetRetiredPages(double_bit)", func() nvml.Return {
			p, ret := d.GetRetiredPages(nvml.PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
			rp.DoubleBit = len(p)
			return ret
		}) && ok
		ok = r.do("GetRetiredPagesPendingStatus", func() nvml.Return {
			s, ret := d.GetRetiredPagesPendingStatus()
			rp.Pending = s == nvml.FEATURE_ENABLED
			return ret
		}) && ok
		if ok {
			g.RetiredPages = &rp
		}
	}
	var link PCIeLink
	okLink := r.do("GetCurrPcieLinkGeneration", func() (ret nvml.Return) { link.CurrentGen, ret = d.GetCurrPcieLinkGeneration(); return })
	okLink = r.do("GetMaxPcieLinkGeneration", func() (ret nvml.Return) { link.MaxGen, ret = d.GetMaxPcieLinkGeneration(); return }) && okLink
	okLink = r.do("GetCurrPcieLinkWidth", func() (ret nvml.Return) { link.CurrentWidth, ret = d.GetCurrPcieLinkWidth(); return }) && okLink
	okLink = r.do("GetMaxPcieLinkWidth", func() (ret nvml.Return) { link.MaxWidth, ret = d.GetMaxPcieLinkWidth(); return }) && okLink
	if okLink {
		g.PCIe = &link
	}
	var pw PowerLimits
	gotPower := false
	for _, c := range []struct {
		call string
		f    func() (uint32, nvml.Return)
		dst  *float64
	}{
		{"GetPowerManagementLimit", d.GetPowerManagementLimit, &pw.LimitW},
		{"GetPowerManagementDefaultLimit", d.GetPowerManagementDefaultLimit, &pw.DefaultW},
		{"GetEnforcedPowerLimit", d.GetEnforcedPowerLimit, &pw.EnforcedW},
	} {
		if r.do(c.call, func() nvml.Return {
			mw, ret := c.f()
			*c.dst = float64(mw) / 1000
			return ret
		}) {
			gotPower = true
		}
	}
	if gotPower {
		g.Power = &pw
	}
	r.do("GetMaxClockInfo(sm)", func() (ret nvml.Return) { g.MaxSMClockMHz, ret = d.GetMaxClockInfo(nvml.CLOCK_SM); return })
	g.Processes = gatherProcesses(d, r, selfPID)
	var util nvml.Utilization
	if r.do("GetUtilizationRates", func() (ret nvml.Return) { util, ret = d.GetUtilizationRates(); return }) {
		g.UtilizationPct = &util.Gpu
	}
}

func gatherMIG(d nvml.Device, r reader) []MIGInstance {
	var n int
	if !r.do("GetMaxMigDeviceCount", func() (ret nvml.Return) { n, ret = d.GetMaxMigDeviceCount(); return }) {
		return nil
	}
	var out []MIGInstance
	for i := 0; i < n; i++ {
		var m nvml.Device
		empty := false
		if !r.do(fmt.Sprintf("GetMigDeviceHandleByIndex(%d)", i), func() nvml.Return {
			var ret nvml.Return
			m, ret = d.GetMigDeviceHandleByIndex(i)
			if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
				empty = true // an unused slot
				return nvml.SUCCESS
			}
			return ret
		}) || empty || m == nil {
			continue
		}
		var mi MIGInstance
		r.do("MIG GetUUID", func() (ret nvml.Return) { mi.UUID, ret = m.GetUUID(); return })
		r.do("MIG GetName", func() (ret nvml.Return) { mi.Name, ret = m.GetName(); return })
		mi.Profile = migProfile(mi.Name)
		r.do("MIG GetGpuInstanceId", func() (ret nvml.Return) { mi.GPUInstanceID, ret = m.GetGpuInstanceId(); return })
		r.do("MIG GetComputeInstanceId", func() (ret nvml.Return) { mi.ComputeInstanceID, ret = m.GetComputeInstanceId(); return })
		r.do("MIG GetMemoryInfo", func() nvml.Return {
			mem, ret := m.GetMemoryInfo()
			mi.MemoryTotalBytes = mem.Total
			return ret
		})
		out = append(out, mi)
	}
	return out
}

func gatherProcesses(d nvml.Device, r reader, selfPID int) *ProcessFacts {
	byPID := map[uint32]uint64{}
	var order, mps []uint32
	listed := false
	for _, c := range []struct {
		call string
		f    func() ([]nvml.ProcessInfo, nvml.Return)
	}{
		{"GetComputeRunningProcesses", d.GetComputeRunningProcesses},
		{"GetGraphicsRunningProcesses", d.GetGraphicsRunningProcesses},
		{"GetMPSComputeRunningProcesses", d.GetMPSComputeRunningProcesses},
	} {
		var ps []nvml.ProcessInfo
		if !r.do(c.call, func() (ret nvml.Return) { ps, ret = c.f(); return }) {
			continue
		}
		listed = true
		for _, p := range ps {
			if int(p.Pid) == selfPID {
				continue
			}
			if _, seen := byPID[p.Pid]; !seen {
				order = append(order, p.Pid)
			}
			if c.call == "GetMPSComputeRunningProcesses" && !slices.Contains(mps, p.Pid) {
				mps = append(mps, p.Pid)
			}
			// The same process in two lists holds one allocation.
			byPID[p.Pid] = max(byPID[p.Pid], p.UsedGpuMemory)
		}
	}
	if !listed {
		return nil
	}
	pf := &ProcessFacts{Count: len(order), PIDs: order, MPSPIDs: mps}
	for _, m := range byPID {
		pf.MemoryBytes += m
	}
	return pf
}

// busID is NVML's busId string of p, else the same form built from its
// domain, bus and device numbers (function 0).
func busID(p nvml.PciInfo) string {
	var b strings.Builder
	for _, c := range p.BusId {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	if b.Len() > 0 {
		return b.String()
	}
	if p.Domain == 0 && p.Bus == 0 && p.Device == 0 {
		return ""
	}
	return gpuid.BusID{Domain: p.Domain, Bus: uint8(p.Bus), Device: uint8(p.Device)}.String()
}

func virtName(m nvml.GpuVirtualizationMode) string {
	switch m {
	case nvml.GPU_VIRTUALIZATION_MODE_NONE:
		return VirtNone
	case nvml.GPU_VIRTUALIZATION_MODE_PASSTHROUGH:
		return VirtPassthrough
	case nvml.GPU_VIRTUALIZATION_MODE_VGPU:
		return VirtVGPUGuest
	case nvml.GPU_VIRTUALIZATION_MODE_HOST_VGPU:
		return VirtHostVGPU
	case nvml.GPU_VIRTUALIZATION_MODE_HOST_VSGA:
		return VirtHostVSGA
	}
	return fmt.Sprintf("unknown_%d", m)
}

func computeName(m nvml.ComputeMode) string {
	switch m {
	case nvml.COMPUTEMODE_DEFAULT:
		return ComputeDefault
	case nvml.COMPUTEMODE_EXCLUSIVE_THREAD:
		return ComputeExclusiveThread
	case nvml.COMPUTEMODE_PROHIBITED:
		return ComputeProhibited
	case nvml.COMPUTEMODE_EXCLUSIVE_PROCESS:
		return ComputeExclusiveProcess
	}
	return fmt.Sprintf("unknown_%d", m)
}

// migProfile extracts "3g.40gb" from "NVIDIA H100 80GB HBM3 MIG 3g.40gb".
func migProfile(name string) string {
	i := strings.LastIndex(name, " MIG ")
	if i < 0 {
		return ""
	}
	return strings.TrimSpace(name[i+len(" MIG "):])
}
