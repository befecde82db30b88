package gpuprobe

// ptxBase holds KernelNoop, KernelCopy, KernelFMA and KernelStolen; ptxTensor
// holds KernelMMAF16 and KernelMMABF16 (compute capability 8.0+), in a module
// of its own so that older GPUs still load the base module.
const (
	ptxBase   = "" // TODO(gpuprobe): being written
	ptxTensor = ""
)
