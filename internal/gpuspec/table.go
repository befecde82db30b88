package gpuspec

// Sources, by product. Datasheet figures are per GPU; tensor figures in the
// datasheets are quoted "with sparsity" and the table keeps half of them
// (dense), which the datasheets' footnotes state.
const (
	srcA100         = "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
	srcA30          = "https://www.nvidia.com/content/dam/en-zz/Solutions/data-center/products/a30-gpu/pdf/a30-datasheet.pdf"
	srcA10          = "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/datasheet-new/nvidia-a10-datasheet.pdf"
	srcL4           = "https://www.nvidia.com/en-us/data-center/l4/"
	srcL40S         = "https://www.nvidia.com/en-us/data-center/l40s/"
	srcAda          = "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf" // appendix: RTX 4090 and L40-class peak rates
	srcRTX4090      = "https://www.nvidia.com/en-us/geforce/graphics-cards/40-series/rtx-4090/"
	srcH100         = "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"                 // H100 SXM and H100 NVL
	srcH100PCIe     = "https://www.nvidia.com/content/dam/en-zz/Solutions/gtcs22/data-center/h100/PB-11133-001_v01.pdf" // H100 PCIe product brief
	srcH200         = "https://www.nvidia.com/en-us/data-center/h200/"
	srcHGX          = "https://www.nvidia.com/en-us/data-center/hgx/" // HGX B200: per-GPU figures
	srcHopperBench  = "https://arxiv.org/abs/2402.13499"              // Luo et al., Benchmarking and Dissecting the Nvidia Hopper GPU Architecture: mma.sync vs wgmma
	srcVGPUTypes    = "https://docs.nvidia.com/vgpu/latest/grid-vgpu-user-guide/index.html"
	srcMIGUserGuide = "https://docs.nvidia.com/datacenter/tesla/mig-user-guide/"
	// L2 cache sizes: the architecture whitepapers (A100 40 MB, GA102 6 MB,
	// H100 SXM5/PCIe 50 MB; the Ada whitepaper srcAda: AD102 96 MB of which
	// the RTX 4090 enables 72 MB, AD104 48 MB) and, for the B200, a
	// microbenchmark study reading CUDA's L2 size on a rented B200.
	srcAmpereWP  = "https://images.nvidia.com/aem-dam/en-zz/Solutions/data-center/nvidia-ampere-architecture-whitepaper.pdf"
	srcGA102WP   = "https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf"
	srcHopperWP  = "https://resources.nvidia.com/en-us-tensor-core/gtc22-whitepaper-hopper"
	srcB200Cache = "https://chipsandcheese.com/p/nvidias-b200-keeping-the-cuda-juggernaut"
)

// Estimated shares of the datasheet peaks that the probe's kernels reach on
// a healthy card, by architecture. None of them is measured yet: the first
// measurement on real hardware replaces the estimate of that model (set
// ProbeMeasured). They err low, so that a healthy card passes with margin
// and a card at 60 % of them is far below what its architecture allows.
const (
	// Ampere and Ada run mma.sync m16n8k16 natively; a kernel with four
	// independent accumulator chains per warp gets most of the dense peak.
	shareTensorAmpere = 0.75
	// Hopper's datasheet peak needs wgmma (sm_90a); warp-level mma.sync
	// reaches roughly 60 % of it in microbenchmarks (srcHopperBench).
	shareTensorHopper = 0.55
	// Blackwell's peak needs tcgen05; mma.sync is a legacy path there and
	// its share is unknown: a low estimate.
	shareTensorBlackwell = 0.30
	// Low-power boards (L4 at 72 W, A10 at 150 W) hit their power limit
	// under a dense kernel and lower their clocks.
	shareTensorLowPower = 0.55
	shareFP32           = 0.80
	shareFP32LowPower   = 0.60
	// A grid-stride copy of 16-byte words reaches 85–90 % of HBM or GDDR
	// peak on a healthy card.
	shareCopy          = 0.80
	shareCopyBlackwell = 0.75
)

// table lists the models in match order: an entry whose patterns would also
// match a more specific name comes after it (NVL and PCIe before the plain
// H100 SXM name, A10 after A100).
var table = []Spec{
	{
		Key: "a100-80gb-sxm", Aliases: []string{"a100-sxm-80gb", "a100-sxm4-80gb"}, Model: "A100 80GB SXM",
		Match:        []string{`\bA100[- ]SXM4?[- ]80GB\b`, `\bA100DX-\d+(-\d+)?C\b`},
		Architecture: "Ampere", ComputeCapability: "8.0", SMs: 108, L2CacheBytes: 40 * MiB,
		MemoryBytes: 80 * GiB, MemoryType: "HBM2e", MemoryBandwidth: 2039 * GBps,
		PCIeGen: 4, PCIeWidth: 16, TDPWatts: 400,
		FP32FLOPS: 19.5 * TFLOP, FP16TensorFLOPS: 312 * TFLOP, BF16TensorFLOPS: 312 * TFLOP,
		ProbeTensorShare: shareTensorAmpere, ProbeFP32Share: shareFP32, DeviceCopyShare: shareCopy,
		Sources: []string{srcA100, srcVGPUTypes, srcMIGUserGuide, srcAmpereWP},
		Notes:   "vGPU profiles on the HGX A100 80GB are named A100DX-<GB>C.",
	},
	{
		Key: "a100-40gb-sxm", Aliases: []string{"a100-sxm-40gb", "a100-sxm4-40gb"}, Model: "A100 40GB SXM",
		Match:        []string{`\bA100[- ]SXM4?[- ]40GB\b`, `\bA100X-\d+(-\d+)?C\b`},
		Architecture: "Ampere", ComputeCapability: "8.0", SMs: 108, L2CacheBytes: 40 * MiB,
		MemoryBytes: 40 * GiB, MemoryType: "HBM2", MemoryBandwidth: 1555 * GBps,
		PCIeGen: 4, PCIeWidth: 16, TDPWatts: 400,
		FP32FLOPS: 19.5 * TFLOP, FP16TensorFLOPS: 312 * TFLOP, BF16TensorFLOPS: 312 * TFLOP,
		ProbeTensorShare: shareTensorAmpere, ProbeFP32Share: shareFP32, DeviceCopyShare: shareCopy,
		Sources: []string{srcA100, srcVGPUTypes, srcMIGUserGuide, srcAmpereWP},
		Notes:   "vGPU profiles on the HGX A100 40GB are named A100X-<GB>C.",
	},
	{
		Key: "a100-80gb-pcie", Aliases: []string{"a100-pcie-80gb"}, Model: "A100 80GB PCIe",
		Match:        []string{`\bA100[- ]80GB[- ]PCIe\b`, `\bA100[- ]PCIe[- ]80GB\b`, `\bA100D-\d+(-\d+)?C\b`},
		Architecture: "Ampere", ComputeCapability: "8.0", SMs: 108, L2CacheBytes: 40 * MiB,
		MemoryBytes: 80 * GiB, MemoryType: "HBM2e", MemoryBandwidth: 1935 * GBps,
		PCIeGen: 4, PCIeWidth: 16, TDPWatts: 300,
		FP32FLOPS: 19.5 * TFLOP, FP16TensorFLOPS: 312 * TFLOP, BF16TensorFLOPS: 312 * TFLOP,
		ProbeTensorShare: shareTensorAmpere, ProbeFP32Share: shareFP32, DeviceCopyShare: shareCopy,
		Sources: []string{srcA100, srcVGPUTypes, srcMIGUserGuide, srcAmpereWP},
		Notes:   "NVML names it \"NVIDIA A100 80GB PCIe\"; vGPU profiles are named A100D-<GB>C.",
	},
	{
		Key: "a100-40gb-pcie", Aliases: []string{"a100-pcie-40gb"}, Model: "A100 40GB PCIe",
		Match:        []string{`\bA100[- ]40GB[- ]PCIe\b`, `\bA100[- ]PCIe[- ]40GB\b`, `\bA100-\d+(-\d+)?C\b`},
		Architecture: "Ampere", ComputeCapability: "8.0", SMs: 108, L2CacheBytes: 40 * MiB,
		MemoryBytes: 40 * GiB, MemoryType: "HBM2", MemoryBandwidth: 1555 * GBps,
		PCIeGen: 4, PCIeWidth: 16, TDPWatts: 250,
		FP32FLOPS: 19.5 * TFLOP, FP16TensorFLOPS: 312 * TFLOP, BF16TensorFLOPS: 312 * TFLOP,
		ProbeTensorShare: shareTensorAmpere, ProbeFP32Share: shareFP32, DeviceCopyShare: shareCopy,
		Sources: []string{srcA100, srcVGPUTypes, srcMIGUserGuide, srcAmpereWP},
		Notes:   "vGPU profiles are named A100-<GB>C.",
	},
	{
		Key: "a30", Aliases: []string{"a30-pcie", "a30-24gb"}, Model: "A30",
		Match:        []string{`\bA30\b`},
		Architecture: "Ampere", ComputeCapability: "8.0", SMs: 56, L2CacheBytes: 24 * MiB,
		MemoryBytes: 24 * GiB, MemoryType: "HBM2", MemoryBandwidth: 933 * GBps,
		PCIeGen: 4, PCIeWidth: 16, TDPWatts: 165,
		FP32FLOPS: 10.3 * TFLOP, FP16TensorFLOPS: 165 * TFLOP, BF16TensorFLOPS: 165 * TFLOP,
		ProbeTensorShare: shareTensorAmpere, ProbeFP32Share: shareFP32, DeviceCopyShare: shareCopy,
		Sources: []string{srcA30, srcVGPUTypes, srcMIGUserGuide, srcAmpereWP},
	},
	{
		Key: "a10", Aliases: []string{"a10-24gb"}, Model: "A10",
		Match:        []string{`\bA10\b`},
		Architecture: "Ampere", ComputeCapability: "8.6", SMs: 72, L2CacheBytes: 6 * MiB,
		MemoryBytes: 24 * GiB, MemoryType: "GDDR6", MemoryBandwidth: 600 * GBps,
		PCIeGen: 4, PCIeWidth: 16, TDPWatts: 150,
		FP32FLOPS: 31.2 * TFLOP, FP16TensorFLOPS: 125 * TFLOP, BF16TensorFLOPS: 125 * TFLOP,
		ProbeTensorShare: shareTensorLowPower, ProbeFP32Share: shareFP32LowPower, DeviceCopyShare: shareCopy,
		Sources: []string{srcA10, srcVGPUTypes, srcGA102WP},
		Notes:   "Not the A10G (a cloud variant with a different tensor rate): \\bA10\\b does not match it. With ECC on, NVML shows about 93.75 % of the 24 GiB.",
	},
	{
		Key: "l4", Aliases: []string{"l4-24gb"}, Model: "L4",
		Match:        []string{`\bL4\b`},
		Architecture: "Ada Lovelace", ComputeCapability: "8.9", SMs: 58, L2CacheBytes: 48 * MiB,
		MemoryBytes: 24 * GiB, MemoryType: "GDDR6", MemoryBandwidth: 300 * GBps,
		PCIeGen: 4, PCIeWidth: 16, TDPWatts: 72,
		FP32FLOPS: 30.3 * TFLOP, FP16TensorFLOPS: 121 * TFLOP, BF16TensorFLOPS: 121 * TFLOP,
		ProbeTensorShare: shareTensorLowPower, ProbeFP32Share: shareFP32LowPower, DeviceCopyShare: shareCopy,
		Sources: []string{srcL4, srcAda, srcVGPUTypes},
		Notes:   "A 72 W board: under a dense kernel it runs at its power cap well below the boost clock the datasheet peaks assume.",
	},
	{
		Key: "l40s", Aliases: []string{"l40s-48gb"}, Model: "L40S",
		Match:        []string{`\bL40S\b`},
		Architecture: "Ada Lovelace", ComputeCapability: "8.9", SMs: 142, L2CacheBytes: 96 * MiB,
		MemoryBytes: 48 * GiB, MemoryType: "GDDR6", MemoryBandwidth: 864 * GBps,
		PCIeGen: 4, PCIeWidth: 16, TDPWatts: 350,
		FP32FLOPS: 91.6 * TFLOP, FP16TensorFLOPS: 362 * TFLOP, BF16TensorFLOPS: 362 * TFLOP,
		ProbeTensorShare: shareTensorAmpere, ProbeFP32Share: shareFP32, DeviceCopyShare: shareCopy,
		Sources: []string{srcL40S, srcAda, srcVGPUTypes},
		Notes:   "Datasheet: 362.05 TFLOPS dense FP16/BF16 (733 with sparsity).",
	},
	{
		Key: "rtx-4090", Aliases: []string{"4090", "rtx4090", "geforce-rtx-4090"}, Model: "GeForce RTX 4090",
		Match:        []string{`\bRTX 4090\b`},
		Exclude:      []string{`\b4090 D\b`},
		Architecture: "Ada Lovelace", ComputeCapability: "8.9", SMs: 128, L2CacheBytes: 72 * MiB,
		MemoryBytes: 24 * GiB, MemoryType: "GDDR6X", MemoryBandwidth: 1008 * GBps,
		PCIeGen: 4, PCIeWidth: 16, TDPWatts: 450,
		FP32FLOPS: 82.6 * TFLOP, FP16TensorFLOPS: 165.2 * TFLOP, BF16TensorFLOPS: 165.2 * TFLOP,
		ProbeTensorShare: shareTensorAmpere, ProbeFP32Share: shareFP32, DeviceCopyShare: shareCopy,
		Sources: []string{srcRTX4090, srcAda},
		Notes:   "GeForce: tensor throughput with FP32 accumulation (what the probe uses) is half the FP16-accumulate rate, 165.2 dense TFLOPS (Ada whitepaper appendix). No ECC. The China-market RTX 4090 D (114 SMs) is excluded.",
	},
	{
		Key: "h100-nvl", Aliases: []string{"h100-nvl-94gb"}, Model: "H100 NVL",
		Match:        []string{`\bH100\b.*\bNVL\b`, `\bH100L-\d+(-\d+)?C\b`},
		Architecture: "Hopper", ComputeCapability: "9.0", SMs: 132, L2CacheBytes: 50 * MiB,
		MemoryBytes: 94 * GiB, MemoryType: "HBM3", MemoryBandwidth: 3900 * GBps,
		PCIeGen: 5, PCIeWidth: 16, TDPWatts: 400,
		FP32FLOPS: 60 * TFLOP, FP16TensorFLOPS: 835.5 * TFLOP, BF16TensorFLOPS: 835.5 * TFLOP,
		ProbeTensorShare: shareTensorHopper, ProbeFP32Share: shareFP32, DeviceCopyShare: shareCopy,
		Sources: []string{srcH100, srcHopperBench, srcVGPUTypes, srcMIGUserGuide, srcHopperWP},
		Notes:   "Per GPU of the NVL pair; TDP configurable 350–400 W. vGPU profiles are named H100L-<GB>C.",
	},
	{
		Key: "h100-pcie", Aliases: []string{"h100-pcie-80gb"}, Model: "H100 PCIe",
		Match:        []string{`\bH100\b.*\bPCIe\b`, `\bH100-\d+(-\d+)?C\b`},
		Architecture: "Hopper", ComputeCapability: "9.0", SMs: 114, L2CacheBytes: 50 * MiB,
		MemoryBytes: 80 * GiB, MemoryType: "HBM2e", MemoryBandwidth: 2000 * GBps,
		PCIeGen: 5, PCIeWidth: 16, TDPWatts: 350,
		FP32FLOPS: 51 * TFLOP, FP16TensorFLOPS: 756 * TFLOP, BF16TensorFLOPS: 756 * TFLOP,
		ProbeTensorShare: shareTensorHopper, ProbeFP32Share: shareFP32, DeviceCopyShare: shareCopy,
		Sources: []string{srcH100PCIe, srcHopperBench, srcVGPUTypes, srcMIGUserGuide, srcHopperWP},
		Notes:   "TDP 300–350 W. vGPU profiles are named H100-<GB>C.",
	},
	{
		Key: "h100-sxm", Aliases: []string{"h100-sxm5", "h100-sxm-80gb", "h100-sxm5-80gb"}, Model: "H100 SXM",
		Match:        []string{`\bH100\b.*\bHBM3\b`, `\bH100\b.*\bSXM`, `\bH100XM-\d+(-\d+)?C\b`},
		Exclude:      []string{`\bNVL\b`, `\bPCIe\b`},
		Architecture: "Hopper", ComputeCapability: "9.0", SMs: 132, L2CacheBytes: 50 * MiB,
		MemoryBytes: 80 * GiB, MemoryType: "HBM3", MemoryBandwidth: 3350 * GBps,
		PCIeGen: 5, PCIeWidth: 16, TDPWatts: 700,
		FP32FLOPS: 67 * TFLOP, FP16TensorFLOPS: 989.4 * TFLOP, BF16TensorFLOPS: 989.4 * TFLOP,
		ProbeTensorShare: shareTensorHopper, ProbeFP32Share: shareFP32, DeviceCopyShare: shareCopy,
		Sources: []string{srcH100, srcHopperBench, srcVGPUTypes, srcMIGUserGuide, srcHopperWP},
		Notes:   "NVML names it \"NVIDIA H100 80GB HBM3\". vGPU profiles are named H100XM-<GB>C.",
	},
	{
		Key: "h200-nvl", Aliases: []string{"h200-nvl-141gb"}, Model: "H200 NVL",
		Match:        []string{`\bH200\b.*\bNVL\b`},
		Architecture: "Hopper", ComputeCapability: "9.0", SMs: 132, L2CacheBytes: 50 * MiB,
		MemoryBytes: 141 * GiB, MemoryType: "HBM3e", MemoryBandwidth: 4800 * GBps,
		PCIeGen: 5, PCIeWidth: 16, TDPWatts: 600,
		FP32FLOPS: 60 * TFLOP, FP16TensorFLOPS: 835.5 * TFLOP, BF16TensorFLOPS: 835.5 * TFLOP,
		ProbeTensorShare: shareTensorHopper, ProbeFP32Share: shareFP32, DeviceCopyShare: shareCopy,
		Sources: []string{srcH200, srcHopperBench, srcMIGUserGuide, srcHopperWP},
		Notes:   "TDP configurable up to 600 W.",
	},
	{
		Key: "h200", Aliases: []string{"h200-sxm", "h200-sxm5", "h200-141gb"}, Model: "H200",
		Match:        []string{`\bH200\b`},
		Exclude:      []string{`\bNVL\b`},
		Architecture: "Hopper", ComputeCapability: "9.0", SMs: 132, L2CacheBytes: 50 * MiB,
		MemoryBytes: 141 * GiB, MemoryType: "HBM3e", MemoryBandwidth: 4800 * GBps,
		PCIeGen: 5, PCIeWidth: 16, TDPWatts: 700,
		FP32FLOPS: 67 * TFLOP, FP16TensorFLOPS: 989.4 * TFLOP, BF16TensorFLOPS: 989.4 * TFLOP,
		ProbeTensorShare: shareTensorHopper, ProbeFP32Share: shareFP32, DeviceCopyShare: shareCopy,
		Sources: []string{srcH200, srcHopperBench, srcMIGUserGuide, srcHopperWP},
		Notes:   "The SXM board; NVML names it \"NVIDIA H200\" (go-nvml's mock: \"NVIDIA H200 141GB HBM3e\"). Same GH100 die and clocks as the H100 SXM, more and faster memory.",
	},
	{
		Key: "b200", Aliases: []string{"b200-sxm", "b200-180gb"}, Model: "B200",
		Match:        []string{`\bB200\b`},
		Architecture: "Blackwell", ComputeCapability: "10.0", SMs: 148, L2CacheBytes: 126 * MiB,
		MemoryBytes: 180 * GiB, MemoryType: "HBM3e", MemoryBandwidth: 7700 * GBps,
		PCIeGen: 5, PCIeWidth: 16, TDPWatts: 1000,
		FP32FLOPS: 75 * TFLOP, FP16TensorFLOPS: 2250 * TFLOP, BF16TensorFLOPS: 2250 * TFLOP,
		ProbeTensorShare: shareTensorBlackwell, ProbeFP32Share: shareFP32, DeviceCopyShare: shareCopyBlackwell,
		Sources: []string{srcHGX, srcMIGUserGuide, srcB200Cache},
		Notes:   "HGX B200 per-GPU figures (FP16/BF16 4.5 PFLOPS with sparsity, 7.7 TB/s); other B200 systems quote 8 TB/s.",
	},
}
