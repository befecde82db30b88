package gpusim

import (
	"sort"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
)

// model is a GPU board: go-nvml's mock configuration (name, memory,
// architecture, MIG profiles) plus the physical figures the simulation needs.
// A board at its TDP with the default 30 °C inlet stays below its slowdown
// temperature (ambient + deltaTC: 80 °C against 83-85 °C), as a healthy GPU
// at full load does: thermal slowdown takes a hot inlet (35 °C and more at
// full power) or a cooling fault.
type model struct {
	key            string
	cfg            gpus.Config
	tdpW           float64 // default enforced power limit
	idleW          float64 // power at 0 % load
	smMaxMHz       float64
	memMaxMHz      float64
	smIdleMHz      float64
	reservedMiB    uint64  // driver/firmware reservation (Memory_v2.Reserved)
	deltaTC        float64 // temperature rise above ambient at the TDP: below slowdownC at a 30 °C inlet
	slowdownC      float64 // SwThermalSlowdown from this temperature
	fan            bool    // PCIe boards report a fan; SXM boards do not
	vbios          string
	subsystemID    uint32
	pcieMaxMiBs    float64 // link bandwidth per direction
	serialPrefix   string
	gpmSupported   bool
	videoClockFrac float64
	pcieGen        int // maximum PCIe link generation
	pcieWidth      int // maximum PCIe link width (lanes)
	probe          probeFigures
}

// probeFigures are what the CUDA probe (internal/gpuprobe) measures on a
// healthy board of the model at its default power limit, alone, on its
// maximum PCIe link: realistic achieved figures, not datasheet peaks. They
// feed the simulated CUDA driver (Fleet.ProbeDriver). Sources and
// assumptions are noted per model; where no measurement was at hand the
// figure is a stated fraction of the datasheet peak.
type probeFigures struct {
	sms            int
	memBusWidthBit int
	h2dGBs, d2hGBs float64 // pinned copies, GB/s (1e9 bytes), on the maximum link
	copyGBs        float64 // device-to-device copy kernel, read + written bytes, GB/s
	fp32TFLOPS     float64 // FP32 FMA kernel
	fp16TFLOPS     float64 // mma.sync m16n8k16 f16 inputs, f32 accumulate, dense
	bf16TFLOPS     float64
	launch         time.Duration // empty kernel launch + synchronize round trip
	timerRes       time.Duration // %globaltimer update step
}

// Probe figures shared by several models.
var (
	// H100 SXM5 80GB (datasheet: 132 SMs, 5120-bit HBM3 at 3.35 TB/s, FP32
	// 67 TFLOP/s, dense FP16/BF16 tensor 989 TFLOP/s with wgmma, PCIe gen5
	// x16). Achieved: pinned H2D/D2H ~52/~50 GB/s on gen5 x16 (of 63 GB/s;
	// typical bandwidthTest results); a copy kernel ~2.9 TB/s (87 % of peak);
	// an FMA kernel ~60 TFLOP/s (90 %). Assumption: warp-level mma.sync
	// cannot use Hopper's wgmma path and reaches ~60 % of the wgmma peak,
	// 600 TFLOP/s. Launch round trip ~8 µs; %globaltimer steps of 32 ns on
	// Hopper.
	h100Probe = probeFigures{
		sms: 132, memBusWidthBit: 5120, h2dGBs: 52, d2hGBs: 50, copyGBs: 2900,
		fp32TFLOPS: 60, fp16TFLOPS: 600, bf16TFLOPS: 600,
		launch: 8 * time.Microsecond, timerRes: 32 * time.Nanosecond,
	}
	// A100 (datasheet: 108 SMs, 5120-bit HBM2/HBM2e, FP32 19.5 TFLOP/s,
	// dense FP16/BF16 tensor 312 TFLOP/s, PCIe gen4 x16). Achieved: pinned
	// H2D/D2H ~25/~26 GB/s on gen4 x16 (of 31.5); FMA ~18.5 TFLOP/s (95 %);
	// mma.sync is Ampere's native tensor path: ~280 TFLOP/s (90 %). The copy
	// kernel's figure depends on the board's memory (withMemory). %globaltimer
	// steps of 1 µs on Ampere.
	a100Probe = probeFigures{
		sms: 108, memBusWidthBit: 5120, h2dGBs: 25, d2hGBs: 26,
		fp32TFLOPS: 18.5, fp16TFLOPS: 280, bf16TFLOPS: 280,
		launch: 8 * time.Microsecond, timerRes: time.Microsecond,
	}
)

// withMemory returns p with another copy-kernel figure and bus width.
func withMemory(p probeFigures, copyGBs float64, busBits int) probeFigures {
	p.copyGBs, p.memBusWidthBit = copyGBs, busBits
	return p
}

var models = map[string]*model{
	"h100-sxm5-80gb": {
		key: "h100-sxm5-80gb", cfg: gpus.H100_SXM5_80GB,
		tdpW: 700, idleW: 68, smMaxMHz: 1980, memMaxMHz: 2619, smIdleMHz: 345,
		reservedMiB: 512, deltaTC: 50, slowdownC: 83, vbios: "96.00.99.00.01",
		subsystemID: 0x16C110DE, pcieMaxMiBs: 61035, serialPrefix: "1654",
		gpmSupported: true, videoClockFrac: 0.8864,
		pcieGen: 5, pcieWidth: 16, probe: h100Probe,
	},
	"h200-sxm5-141gb": {
		key: "h200-sxm5-141gb", cfg: gpus.H200_SXM5_141GB,
		tdpW: 700, idleW: 75, smMaxMHz: 1980, memMaxMHz: 3201, smIdleMHz: 345,
		reservedMiB: 640, deltaTC: 50, slowdownC: 83, vbios: "96.00.A5.00.01",
		subsystemID: 0x16C210DE, pcieMaxMiBs: 61035, serialPrefix: "1655",
		gpmSupported: true, videoClockFrac: 0.8864,
		pcieGen: 5, pcieWidth: 16,
		// H200: H100's compute (132 SMs, same clocks) with 6144-bit HBM3e at
		// 4.8 TB/s: a copy kernel ~4.2 TB/s (87 %).
		probe: withMemory(h100Probe, 4200, 6144),
	},
	"b200-sxm5-180gb": {
		key: "b200-sxm5-180gb", cfg: gpus.B200_SXM5_180GB,
		tdpW: 1000, idleW: 140, smMaxMHz: 1965, memMaxMHz: 3996, smIdleMHz: 345,
		reservedMiB: 768, deltaTC: 50, slowdownC: 85, vbios: "97.00.4B.00.01",
		subsystemID: 0x199910DE, pcieMaxMiBs: 61035, serialPrefix: "1656",
		gpmSupported: true, videoClockFrac: 0.8906,
		pcieGen: 5, pcieWidth: 16,
		// B200 (datasheet: 148 SMs, 8192-bit HBM3e at 8 TB/s, FP32 ~75
		// TFLOP/s, dense FP16/BF16 tensor 2250 TFLOP/s with tcgen05, PCIe gen5
		// x16). Assumptions: copy kernel ~6.8 TB/s (85 %), FMA ~67 TFLOP/s
		// (90 %); legacy mma.sync runs at about Hopper's per-SM rate, scaled to
		// 148 SMs: ~660 TFLOP/s, far below the tcgen05 peak.
		probe: probeFigures{
			sms: 148, memBusWidthBit: 8192, h2dGBs: 52, d2hGBs: 50, copyGBs: 6800,
			fp32TFLOPS: 67, fp16TFLOPS: 660, bf16TFLOPS: 660,
			launch: 8 * time.Microsecond, timerRes: 32 * time.Nanosecond,
		},
	},
	"a100-sxm4-80gb": {
		key: "a100-sxm4-80gb", cfg: gpus.A100_SXM4_80GB,
		tdpW: 400, idleW: 55, smMaxMHz: 1410, memMaxMHz: 1593, smIdleMHz: 210,
		reservedMiB: 0, deltaTC: 50, slowdownC: 85, vbios: "92.00.45.00.06",
		subsystemID: 0x147F10DE, pcieMaxMiBs: 30517, serialPrefix: "1563",
		videoClockFrac: 0.9362,
		pcieGen:        4, pcieWidth: 16,
		// HBM2e at 2.04 TB/s: copy ~1.9 TB/s (the 80GB boards reach ~93 %).
		probe: withMemory(a100Probe, 1900, 5120),
	},
	"a100-sxm4-40gb": {
		key: "a100-sxm4-40gb", cfg: withName(gpus.A100_SXM4_40GB, "NVIDIA A100-SXM4-40GB"),
		tdpW: 400, idleW: 50, smMaxMHz: 1410, memMaxMHz: 1215, smIdleMHz: 210,
		reservedMiB: 0, deltaTC: 50, slowdownC: 85, vbios: "92.00.19.00.10",
		subsystemID: 0x134F10DE, pcieMaxMiBs: 30517, serialPrefix: "1562",
		videoClockFrac: 0.9362,
		pcieGen:        4, pcieWidth: 16,
		// HBM2 at 1.555 TB/s: copy ~1.35 TB/s (87 %).
		probe: withMemory(a100Probe, 1350, 5120),
	},
	"a100-pcie-40gb": {
		key: "a100-pcie-40gb", cfg: gpus.A100_PCIE_40GB,
		tdpW: 250, idleW: 35, smMaxMHz: 1410, memMaxMHz: 1215, smIdleMHz: 210,
		reservedMiB: 0, deltaTC: 50, slowdownC: 85, fan: true, vbios: "92.00.25.00.08",
		subsystemID: 0x145F10DE, pcieMaxMiBs: 30517, serialPrefix: "1322",
		videoClockFrac: 0.9362,
		pcieGen:        4, pcieWidth: 16,
		// HBM2 at 1.555 TB/s: copy ~1.35 TB/s. Same compute figures as the SXM
		// board: short probe kernels do not reach the 250 W limit.
		probe: withMemory(a100Probe, 1350, 5120),
	},
	"a100-pcie-80gb": {
		key: "a100-pcie-80gb", cfg: gpus.A100_PCIE_80GB,
		tdpW: 300, idleW: 45, smMaxMHz: 1410, memMaxMHz: 1512, smIdleMHz: 210,
		reservedMiB: 0, deltaTC: 50, slowdownC: 85, fan: true, vbios: "92.00.90.00.04",
		subsystemID: 0x153310DE, pcieMaxMiBs: 30517, serialPrefix: "1323",
		videoClockFrac: 0.9362,
		pcieGen:        4, pcieWidth: 16,
		// HBM2e at 1.935 TB/s: copy ~1.7 TB/s (87 %).
		probe: withMemory(a100Probe, 1700, 5120),
	},
	"a30-pcie-24gb": {
		key: "a30-pcie-24gb", cfg: gpus.A30_PCIE_24GB,
		tdpW: 165, idleW: 30, smMaxMHz: 1440, memMaxMHz: 1215, smIdleMHz: 210,
		reservedMiB: 0, deltaTC: 50, slowdownC: 85, fan: true, vbios: "92.00.66.00.01",
		subsystemID: 0x153210DE, pcieMaxMiBs: 30517, serialPrefix: "1321",
		videoClockFrac: 0.9167,
		pcieGen:        4, pcieWidth: 16,
		// A30 (datasheet: 56 SMs, 3072-bit HBM2 at 933 GB/s, FP32 10.3
		// TFLOP/s, dense FP16/BF16 tensor 165 TFLOP/s, PCIe gen4 x16).
		// Achieved, as for A100: copy ~0.8 TB/s, FMA ~9.8 TFLOP/s (95 %),
		// mma.sync ~150 TFLOP/s (90 %).
		probe: probeFigures{
			sms: 56, memBusWidthBit: 3072, h2dGBs: 25, d2hGBs: 26, copyGBs: 800,
			fp32TFLOPS: 9.8, fp16TFLOPS: 150, bf16TFLOPS: 150,
			launch: 8 * time.Microsecond, timerRes: time.Microsecond,
		},
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
