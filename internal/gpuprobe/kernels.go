package gpuprobe

// Kernel names and parameter layouts. The PTX text (ptx.go) implements them
// on a real GPU; simdriver recognises them by name and emulates their effect
// and duration. Every parameter is .u64.
const (
	// KernelNoop(): returns at once. Launch latency.
	KernelNoop = "gpulens_noop"
	// KernelCopy(dst, src, n16): copies n16 16-byte words from src to dst,
	// grid-stride, CopyUnroll independent 16-byte loads in flight per
	// thread. Device memory bandwidth = 2*16*n16 bytes / kernel time.
	KernelCopy = "gpulens_copy"
	// KernelFMA(out, iters): each thread runs FMAChains independent FP32 FMA
	// chains for iters iterations and stores one float to out[globalThread].
	// FLOP = threads * iters * FMAChains * 2.
	KernelFMA = "gpulens_fma"
	// KernelMMAF16(out, iters) and KernelMMABF16(out, iters): each warp
	// issues MMAChains independent mma.sync.aligned.m16n8k16 (f16 or bf16
	// inputs, f32 accumulators) per iteration and lane 0 of each warp stores
	// one float to out[globalWarp]. FLOP = warps * iters * MMAChains * MMAFlop.
	// Need compute capability 8.0 or newer (a separate module, ptxTensor).
	KernelMMAF16  = "gpulens_mma_f16"
	KernelMMABF16 = "gpulens_mma_bf16"
	// KernelStolen(out, window_ns, threshold_ns, max_gaps): launched with
	// one block per SM (Dim3{SMs,1,1}, Dim3{32,1,1}); thread 0 of each block
	// reads %globaltimer in a tight loop for window_ns and records every step
	// longer than threshold_ns. Block b writes StolenBlockBytes(max_gaps)
	// bytes at out + b*StolenBlockBytes(max_gaps), as little-endian u64:
	//   [0] first timer reading (ns)
	//   [1] last timer reading (ns)
	//   [2] number of gaps seen (may exceed max_gaps; only max_gaps are kept)
	//   [3] sum of all gap lengths (ns), including gaps not kept
	//   [4] smallest non-zero timer step seen (ns): the timer's resolution
	//   [5] number of timer reads
	//   then max_gaps records of two u64: gap start (the reading before the
	//   gap, ns) and gap length (ns).
	KernelStolen = "gpulens_stolen"
)

// Work shapes shared by the PTX and the simulator.
const (
	FMAChains  = 8
	CopyUnroll = 4 // 16-byte loads a copy thread has in flight
	MMAChains  = 4
	MMAFlop    = 2 * 16 * 8 * 16 // one m16n8k16 mma.sync per warp

	StolenHeaderWords = 6
)

// StolenBlockBytes is the size of one block's record in KernelStolen's output.
func StolenBlockBytes(maxGaps uint64) uint64 { return 8 * (StolenHeaderWords + 2*maxGaps) }
