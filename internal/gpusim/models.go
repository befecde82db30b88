package gpusim

import (
	"sort"

	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
)

// model is a GPU board: go-nvml's mock configuration (name, memory,
// architecture, MIG profiles) plus the physical figures the simulation needs.
type model struct {
	key            string
	cfg            gpus.Config
	tdpW           float64 // default enforced power limit
	idleW          float64 // power at 0 % load
	smMaxMHz       float64
	memMaxMHz      float64
	smIdleMHz      float64
	reservedMiB    uint64  // driver/firmware reservation (Memory_v2.Reserved)
	deltaTC        float64 // temperature rise above ambient at the power limit
	slowdownC      float64 // SwThermalSlowdown from this temperature
	fan            bool    // PCIe boards report a fan; SXM boards do not
	vbios          string
	subsystemID    uint32
	pcieMaxMiBs    float64 // link bandwidth per direction
	serialPrefix   string
	gpmSupported   bool
	videoClockFrac float64
}

var models = map[string]*model{
	"h100-sxm5-80gb": {
		key: "h100-sxm5-80gb", cfg: gpus.H100_SXM5_80GB,
		tdpW: 700, idleW: 68, smMaxMHz: 1980, memMaxMHz: 2619, smIdleMHz: 345,
		reservedMiB: 512, deltaTC: 55, slowdownC: 83, vbios: "96.00.99.00.01",
		subsystemID: 0x16C110DE, pcieMaxMiBs: 61035, serialPrefix: "1654",
		gpmSupported: true, videoClockFrac: 0.8864,
	},
	"h200-sxm5-141gb": {
		key: "h200-sxm5-141gb", cfg: gpus.H200_SXM5_141GB,
		tdpW: 700, idleW: 75, smMaxMHz: 1980, memMaxMHz: 3201, smIdleMHz: 345,
		reservedMiB: 640, deltaTC: 55, slowdownC: 83, vbios: "96.00.A5.00.01",
		subsystemID: 0x16C210DE, pcieMaxMiBs: 61035, serialPrefix: "1655",
		gpmSupported: true, videoClockFrac: 0.8864,
	},
	"b200-sxm5-180gb": {
		key: "b200-sxm5-180gb", cfg: gpus.B200_SXM5_180GB,
		tdpW: 1000, idleW: 140, smMaxMHz: 1965, memMaxMHz: 3996, smIdleMHz: 345,
		reservedMiB: 768, deltaTC: 50, slowdownC: 85, vbios: "97.00.4B.00.01",
		subsystemID: 0x199910DE, pcieMaxMiBs: 61035, serialPrefix: "1656",
		gpmSupported: true, videoClockFrac: 0.8906,
	},
	"a100-sxm4-80gb": {
		key: "a100-sxm4-80gb", cfg: gpus.A100_SXM4_80GB,
		tdpW: 400, idleW: 55, smMaxMHz: 1410, memMaxMHz: 1593, smIdleMHz: 210,
		reservedMiB: 0, deltaTC: 50, slowdownC: 85, vbios: "92.00.45.00.06",
		subsystemID: 0x147F10DE, pcieMaxMiBs: 30517, serialPrefix: "1563",
		videoClockFrac: 0.9362,
	},
	"a100-sxm4-40gb": {
		key: "a100-sxm4-40gb", cfg: withName(gpus.A100_SXM4_40GB, "NVIDIA A100-SXM4-40GB"),
		tdpW: 400, idleW: 50, smMaxMHz: 1410, memMaxMHz: 1215, smIdleMHz: 210,
		reservedMiB: 0, deltaTC: 50, slowdownC: 85, vbios: "92.00.19.00.10",
		subsystemID: 0x134F10DE, pcieMaxMiBs: 30517, serialPrefix: "1562",
		videoClockFrac: 0.9362,
	},
	"a100-pcie-40gb": {
		key: "a100-pcie-40gb", cfg: gpus.A100_PCIE_40GB,
		tdpW: 250, idleW: 35, smMaxMHz: 1410, memMaxMHz: 1215, smIdleMHz: 210,
		reservedMiB: 0, deltaTC: 50, slowdownC: 85, fan: true, vbios: "92.00.25.00.08",
		subsystemID: 0x145F10DE, pcieMaxMiBs: 30517, serialPrefix: "1322",
		videoClockFrac: 0.9362,
	},
	"a100-pcie-80gb": {
		key: "a100-pcie-80gb", cfg: gpus.A100_PCIE_80GB,
		tdpW: 300, idleW: 45, smMaxMHz: 1410, memMaxMHz: 1512, smIdleMHz: 210,
		reservedMiB: 0, deltaTC: 50, slowdownC: 85, fan: true, vbios: "92.00.90.00.04",
		subsystemID: 0x153310DE, pcieMaxMiBs: 30517, serialPrefix: "1323",
		videoClockFrac: 0.9362,
	},
	"a30-pcie-24gb": {
		key: "a30-pcie-24gb", cfg: gpus.A30_PCIE_24GB,
		tdpW: 165, idleW: 30, smMaxMHz: 1440, memMaxMHz: 1215, smIdleMHz: 210,
		reservedMiB: 0, deltaTC: 50, slowdownC: 85, fan: true, vbios: "92.00.66.00.01",
		subsystemID: 0x153210DE, pcieMaxMiBs: 30517, serialPrefix: "1321",
		videoClockFrac: 0.9167,
	},
}

func withName(c gpus.Config, name string) gpus.Config {
	c.Name = name
	return c
}

func modelNames() []string {
	names := make([]string, 0, len(models))
	for k := range models {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}
