package gpusim

import (
	"time"

	"github.com/gpulens/gpulens/internal/sim/simdriver"
)

// What the simulated CUDA driver needs to keep the probe off a GPU that is
// not its to share: the compute mode (the device group's compute_mode, the
// same value NVML's GetComputeMode answers; CUDA's CUcomputemode numbers are
// NVML's), which other processes hold a context (EXCLUSIVE_PROCESS refuses
// ours while one does), the memory a context of ours takes, and the L2
// size the device-copy buffers must exceed.

// ctxFigures are a model's per-context memory and L2 size.
type ctxFigures struct {
	// contextMiB is the device memory one bare CUDA 12 driver-API context
	// takes on the model with lazy module loading (the default since CUDA
	// 12.2): the order nvidia-smi shows for a process that has created a
	// context and loaded nothing, larger on bigger chips (more SMs: more
	// per-SM local memory and stacks reserved). Not measured by this
	// project yet: docs/real-gpu.md checks it against
	// gpulens_probe_context_memory_bytes the next time a GPU is lent.
	contextMiB uint64
	// l2MiB is CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE (NVIDIA's architecture
	// whitepapers: 40 MB A100, 24 MB A30, 50 MB H100 and H200, 126 MB B200;
	// the attribute reports MiB).
	l2MiB uint64
}

// modelCtx is ctxFigures by model key; a model not listed has no L2
// figure (the copy buffers are then not held to one) and the default
// context size.
var modelCtx = map[string]ctxFigures{
	"h100-sxm5-80gb":  {contextMiB: 520, l2MiB: 50},
	"h200-sxm5-141gb": {contextMiB: 520, l2MiB: 50},
	"b200-sxm5-180gb": {contextMiB: 600, l2MiB: 126},
	"a100-sxm4-80gb":  {contextMiB: 420, l2MiB: 40},
	"a100-sxm4-40gb":  {contextMiB: 420, l2MiB: 40},
	"a100-pcie-40gb":  {contextMiB: 420, l2MiB: 40},
	"a100-pcie-80gb":  {contextMiB: 420, l2MiB: 40},
	"a30-pcie-24gb":   {contextMiB: 310, l2MiB: 24},
}

const defaultContextMiB = 500

// maxThreadsPerSM is CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR by
// compute capability (CUDA C++ Programming Guide, table of technical
// specifications per compute capability).
func maxThreadsPerSM(major, minor int) int {
	switch {
	case major == 7 && minor == 5:
		return 1024
	case major == 8 && minor >= 6, major == 12:
		return 1536
	}
	return 2048
}

// withProbeSafety fills in dev's compute mode, other processes' contexts,
// per-context memory, L2 size and thread limit, for the whole GPU (md nil)
// or one of its MIG instances (whose L2 share follows its memory share).
func (d *device) withProbeSafety(dev *simdriver.Device, md *migDevice) {
	m := d.spec.model
	fig, ok := modelCtx[m.key]
	if !ok {
		fig.contextMiB = defaultContextMiB
	}
	dev.ComputeMode = int(d.spec.computeMode)
	dev.ContextMemoryBytes = fig.contextMiB * mib
	dev.L2CacheBytes = int(fig.l2MiB * mib)
	dev.MaxThreadsPerSM = maxThreadsPerSM(m.cfg.CudaMajor, m.cfg.CudaMinor)
	inst := -1
	if md != nil {
		inst = md.idx
		dev.L2CacheBytes = int(fig.l2MiB * mib * md.prof.memoryMiB / m.cfg.MemoryMB)
	}
	f := d.f
	dev.OtherContexts = func(at time.Time) int { return d.otherContexts(f.simSeconds(at), inst) }
}

// otherContexts is how many other processes hold a context on the device
// (inst < 0) or MIG instance inst at sim time t: the scenario's active
// tenants there, its invisible neighbour while it runs (on every
// instance), and, on a whole GPU whose scenario lists no tenants, one
// unnamed process whenever NVML shows memory in use.
func (d *device) otherContexts(t float64, inst int) int {
	n := 0
	for _, ts := range d.spec.tenants {
		if inst >= 0 && ts.migInstance != inst {
			continue
		}
		if ts.at(t, d.key).active {
			n++
		}
	}
	if share, _ := d.spec.probe.neighbour.at(t); share > 0 {
		n++
	}
	if inst < 0 && len(d.spec.tenants) == 0 && n == 0 && d.memory(t).Used > 0 {
		n++
	}
	return n
}
