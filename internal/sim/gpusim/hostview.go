package gpusim

import (
	"math"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// The facts a renter checks before trusting a host (gpulens-verify):
// virtualization mode, PCIe link, power limits, ECC mode and retired pages.
// Each device group sets them in the scenario; the defaults are a healthy
// bare-metal board of the model.

type rawPcieLink struct {
	Generation int `yaml:"generation"`
	Width      int `yaml:"width"`
}

// hostView is a device's virtualization, link and ECC settings, resolved.
type hostView struct {
	virt      nvml.GpuVirtualizationMode
	vgpuMiB   uint64 // vGPU guest: the profile's framebuffer (MiB); 0 otherwise
	pcieGen   int    // current PCIe link generation
	pcieWidth int    // current PCIe link width (lanes)
	eccOff    bool   // ecc_mode: false
}

// Virtualization modes as the scenario names them.
var virtualizations = map[string]nvml.GpuVirtualizationMode{
	"":            nvml.GPU_VIRTUALIZATION_MODE_NONE,
	"none":        nvml.GPU_VIRTUALIZATION_MODE_NONE,
	"passthrough": nvml.GPU_VIRTUALIZATION_MODE_PASSTHROUGH,
	"vgpu-guest":  nvml.GPU_VIRTUALIZATION_MODE_VGPU,
}

var pcieWidths = []int{1, 2, 4, 8, 16}

// minVgpuMiB is the smallest vGPU framebuffer a scenario may give (the
// smallest datacenter profiles have 1 GiB).
const minVgpuMiB = 1024

func validateHostView(l *errList, gp string, g *rawGroup, m *model, base *deviceSpec) {
	v, ok := virtualizations[g.Virtualization]
	if !ok {
		l.add(gp+".virtualization", "unknown virtualization %q (one of %s)", g.Virtualization, strings.Join(sortedKeys(virtualizations), ", "))
	}
	base.virt = v
	if g.VgpuMemoryMiB != nil {
		mb := *g.VgpuMemoryMiB
		switch {
		case v != nvml.GPU_VIRTUALIZATION_MODE_VGPU:
			l.add(gp+".vgpu_memory_mib", "vgpu_memory_mib needs virtualization: vgpu-guest")
		case mb < minVgpuMiB || uint64(mb) > m.cfg.MemoryMB:
			l.add(gp+".vgpu_memory_mib", "vgpu_memory_mib %d must be between %d and the board's %d MiB", mb, minVgpuMiB, m.cfg.MemoryMB)
		default:
			base.vgpuMiB = uint64(mb)
		}
	} else if v == nvml.GPU_VIRTUALIZATION_MODE_VGPU {
		base.vgpuMiB = m.cfg.MemoryMB // the full-board profile
	}
	if v == nvml.GPU_VIRTUALIZATION_MODE_VGPU && len(g.Mig) > 0 {
		l.add(gp+".mig", "a vGPU guest has no MIG layout (its vGPU is one device; set vgpu_memory_mib)")
	}

	base.pcieGen, base.pcieWidth = m.pcieGen, m.pcieWidth
	if pl := g.PcieLink; pl != nil {
		if pl.Generation == 0 && pl.Width == 0 {
			l.add(gp+".pcie_link", "give generation and/or width (the current link; the maximum is the model's gen%d x%d)", m.pcieGen, m.pcieWidth)
		}
		if pl.Generation != 0 {
			if pl.Generation < 1 || pl.Generation > m.pcieGen {
				l.add(gp+".pcie_link.generation", "generation %d must be between 1 and %s's %d", pl.Generation, m.key, m.pcieGen)
			} else {
				base.pcieGen = pl.Generation
			}
		}
		if pl.Width != 0 {
			if !slices.Contains(pcieWidths, pl.Width) || pl.Width > m.pcieWidth {
				l.add(gp+".pcie_link.width", "width %d must be one of 1, 2, 4, 8, 16 and at most %s's %d", pl.Width, m.key, m.pcieWidth)
			} else {
				base.pcieWidth = pl.Width
			}
		}
	}

	if g.EccMode != nil && !*g.EccMode {
		base.eccOff = true
		if g.ECC != nil && (g.ECC.CorrectedPerHour != 0 || g.ECC.UncorrectedPerHour != 0) {
			l.add(gp+".ecc", "ECC error rates need ecc_mode: true")
		}
	}
}

// totalMiB is the memory NVML shows: the board's, or the vGPU profile's.
func (s *deviceSpec) totalMiB() uint64 {
	if s.vgpuMiB > 0 {
		return s.vgpuMiB
	}
	return s.model.cfg.MemoryMB
}

// reservedMiB is the driver's reservation, in proportion to a vGPU
// profile's share of the board.
func (s *deviceSpec) reservedMiB() uint64 {
	if s.vgpuMiB > 0 {
		return s.model.reservedMiB * s.vgpuMiB / s.model.cfg.MemoryMB
	}
	return s.model.reservedMiB
}

// pcieLaneGBs is the usable rate of one PCIe lane per direction in GB/s by
// generation (after 8b/10b coding for gen 1-2, 128b/130b from gen 3).
var pcieLaneGBs = [...]float64{0, 0.25, 0.5, 0.985, 1.969, 3.938, 7.563}

// linkScale is the current PCIe link's bandwidth over the model's maximum.
func (s *deviceSpec) linkScale() float64 {
	m := s.model
	return pcieLaneGBs[s.pcieGen] * float64(s.pcieWidth) / (pcieLaneGBs[m.pcieGen] * float64(m.pcieWidth))
}

// ---- nvml.Device methods ----

func (d *device) GetVirtualizationMode() (nvml.GpuVirtualizationMode, nvml.Return) {
	if _, r := d.enter("GetVirtualizationMode"); r != nvml.SUCCESS {
		return 0, r
	}
	return d.spec.virt, nvml.SUCCESS
}

func (d *device) GetCurrPcieLinkGeneration() (int, nvml.Return) {
	if _, r := d.enter("GetCurrPcieLinkGeneration"); r != nvml.SUCCESS {
		return 0, r
	}
	return d.spec.pcieGen, nvml.SUCCESS
}

func (d *device) GetMaxPcieLinkGeneration() (int, nvml.Return) {
	if _, r := d.enter("GetMaxPcieLinkGeneration"); r != nvml.SUCCESS {
		return 0, r
	}
	return d.spec.model.pcieGen, nvml.SUCCESS
}

func (d *device) GetCurrPcieLinkWidth() (int, nvml.Return) {
	if _, r := d.enter("GetCurrPcieLinkWidth"); r != nvml.SUCCESS {
		return 0, r
	}
	return d.spec.pcieWidth, nvml.SUCCESS
}

func (d *device) GetMaxPcieLinkWidth() (int, nvml.Return) {
	if _, r := d.enter("GetMaxPcieLinkWidth"); r != nvml.SUCCESS {
		return 0, r
	}
	return d.spec.model.pcieWidth, nvml.SUCCESS
}

// GetPowerManagementDefaultLimit is the board's TDP, in mW.
func (d *device) GetPowerManagementDefaultLimit() (uint32, nvml.Return) {
	if _, r := d.enter("GetPowerManagementDefaultLimit"); r != nvml.SUCCESS {
		return 0, r
	}
	return uint32(math.Round(d.spec.model.tdpW * 1000)), nvml.SUCCESS
}

// GetPowerManagementLimit is the limit set (power_limit), in mW; the
// simulation enforces it, so it equals GetEnforcedPowerLimit.
func (d *device) GetPowerManagementLimit() (uint32, nvml.Return) {
	if _, r := d.enter("GetPowerManagementLimit"); r != nvml.SUCCESS {
		return 0, r
	}
	return uint32(math.Round(d.spec.powerLimitW * 1000)), nvml.SUCCESS
}

// GetEccMode returns the current and pending ECC mode (the same: no change
// is pending in the simulation).
func (d *device) GetEccMode() (nvml.EnableState, nvml.EnableState, nvml.Return) {
	if _, r := d.enter("GetEccMode"); r != nvml.SUCCESS {
		return 0, 0, r
	}
	if d.spec.eccOff {
		return nvml.FEATURE_DISABLED, nvml.FEATURE_DISABLED, nvml.SUCCESS
	}
	return nvml.FEATURE_ENABLED, nvml.FEATURE_ENABLED, nvml.SUCCESS
}

// Page retirement is the pre-Ampere mechanism: every simulated model
// (A100, A30, H100, H200, B200) is Ampere or newer and remaps rows instead
// (GetRemappedRows), and, like those real boards, answers the page
// retirement calls with ERROR_NOT_SUPPORTED. A cause out of range is
// ERROR_INVALID_ARGUMENT.
func (d *device) retiredPages(call string, cause nvml.PageRetirementCause) nvml.Return {
	if _, r := d.enter(call); r != nvml.SUCCESS {
		return r
	}
	if cause >= nvml.PAGE_RETIREMENT_CAUSE_COUNT {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	return nvml.ERROR_NOT_SUPPORTED
}

func (d *device) GetRetiredPages(cause nvml.PageRetirementCause) ([]uint64, nvml.Return) {
	return nil, d.retiredPages("GetRetiredPages", cause)
}

func (d *device) GetRetiredPages_v2(cause nvml.PageRetirementCause) ([]uint64, []uint64, nvml.Return) {
	return nil, nil, d.retiredPages("GetRetiredPages_v2", cause)
}

func (d *device) GetRetiredPagesPendingStatus() (nvml.EnableState, nvml.Return) {
	if _, r := d.enter("GetRetiredPagesPendingStatus"); r != nvml.SUCCESS {
		return 0, r
	}
	return 0, nvml.ERROR_NOT_SUPPORTED
}

// MIG handles answer the host-view calls with their GPU's values (the link,
// the power limit and the ECC mode belong to the whole board).

func (m *migDevice) GetVirtualizationMode() (nvml.GpuVirtualizationMode, nvml.Return) {
	return m.parent.GetVirtualizationMode()
}
func (m *migDevice) GetCurrPcieLinkGeneration() (int, nvml.Return) {
	return m.parent.GetCurrPcieLinkGeneration()
}
func (m *migDevice) GetMaxPcieLinkGeneration() (int, nvml.Return) {
	return m.parent.GetMaxPcieLinkGeneration()
}
func (m *migDevice) GetCurrPcieLinkWidth() (int, nvml.Return) { return m.parent.GetCurrPcieLinkWidth() }
func (m *migDevice) GetMaxPcieLinkWidth() (int, nvml.Return)  { return m.parent.GetMaxPcieLinkWidth() }
func (m *migDevice) GetPowerManagementDefaultLimit() (uint32, nvml.Return) {
	return m.parent.GetPowerManagementDefaultLimit()
}
func (m *migDevice) GetPowerManagementLimit() (uint32, nvml.Return) {
	return m.parent.GetPowerManagementLimit()
}
func (m *migDevice) GetEnforcedPowerLimit() (uint32, nvml.Return) {
	return m.parent.GetEnforcedPowerLimit()
}
func (m *migDevice) GetEccMode() (nvml.EnableState, nvml.EnableState, nvml.Return) {
	return m.parent.GetEccMode()
}
func (m *migDevice) GetRetiredPages(c nvml.PageRetirementCause) ([]uint64, nvml.Return) {
	return m.parent.GetRetiredPages(c)
}
func (m *migDevice) GetRetiredPages_v2(c nvml.PageRetirementCause) ([]uint64, []uint64, nvml.Return) {
	return m.parent.GetRetiredPages_v2(c)
}
func (m *migDevice) GetRetiredPagesPendingStatus() (nvml.EnableState, nvml.Return) {
	return m.parent.GetRetiredPagesPendingStatus()
}
