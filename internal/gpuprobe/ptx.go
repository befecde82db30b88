package gpuprobe

import (
	"fmt"
	"strings"
)

// ptxBase holds KernelNoop, KernelCopy, KernelFMA and KernelStolen; ptxTensor
// holds KernelMMAF16 and KernelMMABF16 (compute capability 8.0+), in a module
// of its own so that older GPUs still load the base module.
//
// Both are PTX ISA 7.0 (CUDA 11.0, driver R450 or newer). The driver JIT
// compiles them for the GPU at hand (cuModuleLoadDataEx); scripts/check-ptx.sh
// assembles them with ptxas for sm_70 (base only), sm_80 and sm_90.
//
// Conventions shared by the kernels (see kernels.go for the contracts):
//   - every parameter is .u64, in the order kernels.go documents;
//   - the global thread index is ctaid.x*ntid.x + tid.x (1-D launches); the
//     global warp index is that divided by 32 (blocks are multiples of 32);
//   - loop counts are u64 parameters, so ptxas cannot fold a loop away; the
//     hot loops are unrolled by hand (8 iterations of FMA, 4 of MMA) with a
//     one-iteration tail, so an iteration count need not be a multiple of
//     the unroll and the work done is exactly what kernels.go counts.
var (
	ptxBase = `//
// gpulens probe kernels: base module (any GPU the driver supports)
//
.version 7.0
.target sm_52
.address_size 64

// gpulens_noop(): returns at once (launch latency).
.visible .entry gpulens_noop()
{
	ret;
}

// gpulens_copy(dst, src, n16): copies n16 16-byte words, grid-stride,
// CopyUnroll (4) independent 16-byte loads in flight per thread: thread i
// loads words i, i+S, i+2S and i+3S (S: threads in the grid, so each load
// instruction of a warp reads 512 contiguous bytes) before it stores any,
// then moves on by 4S; a one-word tail loop finishes.
.visible .entry gpulens_copy(
	.param .u64 gpulens_copy_dst,
	.param .u64 gpulens_copy_src,
	.param .u64 gpulens_copy_n16
)
{
	.reg .pred 	%p<3>;
	.reg .b32 	%r<21>;
	.reg .b64 	%rd<16>;

	ld.param.u64 	%rd1, [gpulens_copy_dst];
	ld.param.u64 	%rd2, [gpulens_copy_src];
	ld.param.u64 	%rd3, [gpulens_copy_n16];
	cvta.to.global.u64 	%rd1, %rd1;
	cvta.to.global.u64 	%rd2, %rd2;
	mov.u32 	%r1, %ctaid.x;
	mov.u32 	%r2, %ntid.x;
	mov.u32 	%r3, %tid.x;
	mov.u32 	%r4, %nctaid.x;
	mul.wide.u32 	%rd4, %r1, %r2;
	cvt.u64.u32 	%rd5, %r3;
	add.u64 	%rd4, %rd4, %rd5;	// i = global thread
	mul.wide.u32 	%rd6, %r2, %r4;	// S = threads in the grid
	shl.b64 	%rd7, %rd6, 4;	// 16*S bytes
	mul.lo.u64 	%rd8, %rd6, 3;	// 3*S
	shl.b64 	%rd15, %rd6, 2;	// 4*S
COPY_LOOP4:
	add.u64 	%rd9, %rd4, %rd8;	// i+3S: the last word of this round
	setp.ge.u64 	%p1, %rd9, %rd3;
	@%p1 bra 	COPY_TAIL;
	shl.b64 	%rd10, %rd4, 4;
	add.u64 	%rd11, %rd2, %rd10;
	ld.global.v4.u32 	{%r5, %r6, %r7, %r8}, [%rd11];
	add.u64 	%rd12, %rd11, %rd7;
	ld.global.v4.u32 	{%r9, %r10, %r11, %r12}, [%rd12];
	add.u64 	%rd12, %rd12, %rd7;
	ld.global.v4.u32 	{%r13, %r14, %r15, %r16}, [%rd12];
	add.u64 	%rd12, %rd12, %rd7;
	ld.global.v4.u32 	{%r17, %r18, %r19, %r20}, [%rd12];
	add.u64 	%rd13, %rd1, %rd10;
	st.global.v4.u32 	[%rd13], {%r5, %r6, %r7, %r8};
	add.u64 	%rd13, %rd13, %rd7;
	st.global.v4.u32 	[%rd13], {%r9, %r10, %r11, %r12};
	add.u64 	%rd13, %rd13, %rd7;
	st.global.v4.u32 	[%rd13], {%r13, %r14, %r15, %r16};
	add.u64 	%rd13, %rd13, %rd7;
	st.global.v4.u32 	[%rd13], {%r17, %r18, %r19, %r20};
	add.u64 	%rd4, %rd4, %rd15;
	bra.uni 	COPY_LOOP4;
COPY_TAIL:
	setp.ge.u64 	%p2, %rd4, %rd3;
	@%p2 bra 	COPY_DONE;
COPY_LOOP1:
	shl.b64 	%rd10, %rd4, 4;
	add.u64 	%rd11, %rd2, %rd10;
	ld.global.v4.u32 	{%r5, %r6, %r7, %r8}, [%rd11];
	add.u64 	%rd13, %rd1, %rd10;
	st.global.v4.u32 	[%rd13], {%r5, %r6, %r7, %r8};
	add.u64 	%rd4, %rd4, %rd6;
	setp.lt.u64 	%p2, %rd4, %rd3;
	@%p2 bra 	COPY_LOOP1;
COPY_DONE:
	ret;
}

` + fmaKernelPTX() + `
// gpulens_stolen(out, window_ns, threshold_ns, max_gaps): thread 0 of each
// block reads %globaltimer until window_ns has passed since its first
// reading; a step longer than threshold_ns is a gap (time this block did
// not run). Header at out + ctaid.x*8*(6+2*max_gaps), little-endian u64:
// first, last, gaps, sum of gaps, smallest non-zero step (0: none seen),
// reads (the first reading included); then up to max_gaps records
// (reading before the gap, gap length). The other threads return at once.
.visible .entry gpulens_stolen(
	.param .u64 gpulens_stolen_out,
	.param .u64 gpulens_stolen_window,
	.param .u64 gpulens_stolen_threshold,
	.param .u64 gpulens_stolen_max_gaps
)
{
	.reg .pred 	%p<6>;
	.reg .b32 	%r<3>;
	.reg .b64 	%rd<20>;

	mov.u32 	%r1, %tid.x;
	setp.ne.u32 	%p1, %r1, 0;
	@%p1 bra 	STOLEN_EXIT;
	ld.param.u64 	%rd1, [gpulens_stolen_out];
	ld.param.u64 	%rd2, [gpulens_stolen_window];
	ld.param.u64 	%rd3, [gpulens_stolen_threshold];
	ld.param.u64 	%rd4, [gpulens_stolen_max_gaps];
	cvta.to.global.u64 	%rd1, %rd1;
	shl.b64 	%rd5, %rd4, 1;
	add.u64 	%rd5, %rd5, 6;
	shl.b64 	%rd5, %rd5, 3;	// bytes per block: 8*(6+2*max_gaps)
	mov.u32 	%r2, %ctaid.x;
	cvt.u64.u32 	%rd6, %r2;
	mad.lo.u64 	%rd7, %rd6, %rd5, %rd1;	// this block's header
	add.u64 	%rd8, %rd7, 48;	// this block's gap records
	mov.u64 	%rd9, %globaltimer;	// first reading
	add.u64 	%rd10, %rd9, %rd2;	// end of the window
	mov.u64 	%rd11, %rd9;	// previous reading
	mov.u64 	%rd12, 0;	// gaps
	mov.u64 	%rd13, 0;	// sum of gaps
	mov.u64 	%rd14, 0xFFFFFFFFFFFFFFFF;	// smallest non-zero step
	mov.u64 	%rd15, 1;	// reads
STOLEN_LOOP:
	mov.u64 	%rd16, %globaltimer;
	add.u64 	%rd15, %rd15, 1;
	setp.le.u64 	%p2, %rd16, %rd11;	// no step (or the timer went back)
	@%p2 bra 	STOLEN_NEXT;
	sub.u64 	%rd17, %rd16, %rd11;	// step
	min.u64 	%rd14, %rd14, %rd17;
	setp.le.u64 	%p3, %rd17, %rd3;
	@%p3 bra 	STOLEN_NEXT;
	setp.ge.u64 	%p4, %rd12, %rd4;	// record kept only below max_gaps
	@%p4 bra 	STOLEN_COUNT;
	shl.b64 	%rd18, %rd12, 4;
	add.u64 	%rd19, %rd8, %rd18;
	st.global.u64 	[%rd19], %rd11;
	st.global.u64 	[%rd19+8], %rd17;
STOLEN_COUNT:
	add.u64 	%rd12, %rd12, 1;
	add.u64 	%rd13, %rd13, %rd17;
STOLEN_NEXT:
	mov.u64 	%rd11, %rd16;
	setp.lt.u64 	%p5, %rd16, %rd10;
	@%p5 bra 	STOLEN_LOOP;
	setp.eq.u64 	%p2, %rd14, 0xFFFFFFFFFFFFFFFF;
	selp.u64 	%rd14, 0, %rd14, %p2;
	st.global.u64 	[%rd7], %rd9;
	st.global.u64 	[%rd7+8], %rd11;
	st.global.u64 	[%rd7+16], %rd12;
	st.global.u64 	[%rd7+24], %rd13;
	st.global.u64 	[%rd7+32], %rd14;
	st.global.u64 	[%rd7+40], %rd15;
STOLEN_EXIT:
	ret;
}
`
)

// ptxTensor: see ptxBase.
var ptxTensor = `//
// gpulens probe kernels: tensor module (mma.sync, compute capability 8.0+)
//
.version 7.0
.target sm_80
.address_size 64

// gpulens_mma_f16(out, iters) / gpulens_mma_bf16(out, iters): each warp runs
// MMAChains (4) independent mma.sync.aligned.m16n8k16 per iteration, f32
// accumulators. Every element of a lane's A and B fragments is
// pseudo-random, per lane, in ±[0.5, 1) (a xorshift32 seeded with the
// global thread index fills the sign and mantissa bits), and changes every
// iteration: each iteration advances a per-lane Weyl sequence
// (w += 0x9E3779B9) and XORs its sign and mantissa bits into every A and B
// register, the exponents untouched, so the elements stay in ±[0.5, 1) and
// the tensor cores switch as under real work for the whole launch. Chain
// c's accumulators start at c+1 and each iteration adds 16 products of
// magnitude < 1 whose signs change with the inputs: a walk that stays
// finite in f32 (at most c+1 + 16 × iters) and keeps changing.
// Lane 0 of each warp stores the sum of its 16 accumulators to
// out[global warp] (f32).
` + mmaKernel("f16", "F16") + "\n" + mmaKernel("bf16", "BF16")

// mmaKernelPTX is gpulens_mma_{{T}}: the f16 and bf16 kernels differ only in
// the input type of their conversions and mma.sync, and in their names and
// labels.
const mmaKernelPTX = `.visible .entry gpulens_mma_{{T}}(
	.param .u64 gpulens_mma_{{T}}_out,
	.param .u64 gpulens_mma_{{T}}_iters
)
{
	.reg .pred 	%p<4>;
	.reg .b32 	%r<8>;
	.reg .b32 	%ra<4>;
	.reg .b32 	%rb<2>;
	.reg .b32 	%rs;
	.reg .b32 	%rt;
	.reg .b32 	%rw;
	.reg .b64 	%rd<9>;
	.reg .f32 	%f<24>;

	ld.param.u64 	%rd1, [gpulens_mma_{{T}}_out];
	ld.param.u64 	%rd2, [gpulens_mma_{{T}}_iters];
	mov.u32 	%r1, %laneid;
	mov.u32 	%r2, %ctaid.x;
	mov.u32 	%r3, %ntid.x;
	mov.u32 	%r6, %tid.x;
	mad.lo.u32 	%r2, %r2, %r3, %r6;	// global thread
	mad.lo.u32 	%rs, %r2, 0x9E3779B9, 0x2545F491;	// xorshift32 seed
	or.b32 	%rs, %rs, 1;
{{DRAW}}	mov.u32 	%rw, %rs;	// the Weyl sequence starts where the draws ended
	mov.f32 	%f0, 0f3F800000;
	mov.f32 	%f1, 0f3F800000;
	mov.f32 	%f2, 0f3F800000;
	mov.f32 	%f3, 0f3F800000;
	mov.f32 	%f4, 0f40000000;
	mov.f32 	%f5, 0f40000000;
	mov.f32 	%f6, 0f40000000;
	mov.f32 	%f7, 0f40000000;
	mov.f32 	%f8, 0f40400000;
	mov.f32 	%f9, 0f40400000;
	mov.f32 	%f10, 0f40400000;
	mov.f32 	%f11, 0f40400000;
	mov.f32 	%f12, 0f40800000;
	mov.f32 	%f13, 0f40800000;
	mov.f32 	%f14, 0f40800000;
	mov.f32 	%f15, 0f40800000;
	mov.u64 	%rd3, %rd2;	// iterations left
	setp.lt.u64 	%p1, %rd3, 4;
	@%p1 bra 	{{L}}_TAIL;
{{L}}_LOOP4:
	mma.sync.aligned.m16n8k16.row.col.f32.{{T}}.{{T}}.f32 	{%f0, %f1, %f2, %f3}, {%ra0, %ra1, %ra2, %ra3}, {%rb0, %rb1}, {%f0, %f1, %f2, %f3};
	mma.sync.aligned.m16n8k16.row.col.f32.{{T}}.{{T}}.f32 	{%f4, %f5, %f6, %f7}, {%ra0, %ra1, %ra2, %ra3}, {%rb0, %rb1}, {%f4, %f5, %f6, %f7};
	mma.sync.aligned.m16n8k16.row.col.f32.{{T}}.{{T}}.f32 	{%f8, %f9, %f10, %f11}, {%ra0, %ra1, %ra2, %ra3}, {%rb0, %rb1}, {%f8, %f9, %f10, %f11};
	mma.sync.aligned.m16n8k16.row.col.f32.{{T}}.{{T}}.f32 	{%f12, %f13, %f14, %f15}, {%ra0, %ra1, %ra2, %ra3}, {%rb0, %rb1}, {%f12, %f13, %f14, %f15};
{{NEXT}}	mma.sync.aligned.m16n8k16.row.col.f32.{{T}}.{{T}}.f32 	{%f0, %f1, %f2, %f3}, {%ra0, %ra1, %ra2, %ra3}, {%rb0, %rb1}, {%f0, %f1, %f2, %f3};
	mma.sync.aligned.m16n8k16.row.col.f32.{{T}}.{{T}}.f32 	{%f4, %f5, %f6, %f7}, {%ra0, %ra1, %ra2, %ra3}, {%rb0, %rb1}, {%f4, %f5, %f6, %f7};
	mma.sync.aligned.m16n8k16.row.col.f32.{{T}}.{{T}}.f32 	{%f8, %f9, %f10, %f11}, {%ra0, %ra1, %ra2, %ra3}, {%rb0, %rb1}, {%f8, %f9, %f10, %f11};
	mma.sync.aligned.m16n8k16.row.col.f32.{{T}}.{{T}}.f32 	{%f12, %f13, %f14, %f15}, {%ra0, %ra1, %ra2, %ra3}, {%rb0, %rb1}, {%f12, %f13, %f14, %f15};
{{NEXT}}	mma.sync.aligned.m16n8k16.row.col.f32.{{T}}.{{T}}.f32 	{%f0, %f1, %f2, %f3}, {%ra0, %ra1, %ra2, %ra3}, {%rb0, %rb1}, {%f0, %f1, %f2, %f3};
	mma.sync.aligned.m16n8k16.row.col.f32.{{T}}.{{T}}.f32 	{%f4, %f5, %f6, %f7}, {%ra0, %ra1, %ra2, %ra3}, {%rb0, %rb1}, {%f4, %f5, %f6, %f7};
	mma.sync.aligned.m16n8k16.row.col.f32.{{T}}.{{T}}.f32 	{%f8, %f9, %f10, %f11}, {%ra0, %ra1, %ra2, %ra3}, {%rb0, %rb1}, {%f8, %f9, %f10, %f11};
	mma.sync.aligned.m16n8k16.row.col.f32.{{T}}.{{T}}.f32 	{%f12, %f13, %f14, %f15}, {%ra0, %ra1, %ra2, %ra3}, {%rb0, %rb1}, {%f12, %f13, %f14, %f15};
{{NEXT}}	mma.sync.aligned.m16n8k16.row.col.f32.{{T}}.{{T}}.f32 	{%f0, %f1, %f2, %f3}, {%ra0, %ra1, %ra2, %ra3}, {%rb0, %rb1}, {%f0, %f1, %f2, %f3};
	mma.sync.aligned.m16n8k16.row.col.f32.{{T}}.{{T}}.f32 	{%f4, %f5, %f6, %f7}, {%ra0, %ra1, %ra2, %ra3}, {%rb0, %rb1}, {%f4, %f5, %f6, %f7};
	mma.sync.aligned.m16n8k16.row.col.f32.{{T}}.{{T}}.f32 	{%f8, %f9, %f10, %f11}, {%ra0, %ra1, %ra2, %ra3}, {%rb0, %rb1}, {%f8, %f9, %f10, %f11};
	mma.sync.aligned.m16n8k16.row.col.f32.{{T}}.{{T}}.f32 	{%f12, %f13, %f14, %f15}, {%ra0, %ra1, %ra2, %ra3}, {%rb0, %rb1}, {%f12, %f13, %f14, %f15};
{{NEXT}}	sub.u64 	%rd3, %rd3, 4;
	setp.ge.u64 	%p1, %rd3, 4;
	@%p1 bra 	{{L}}_LOOP4;
{{L}}_TAIL:
	setp.eq.u64 	%p2, %rd3, 0;
	@%p2 bra 	{{L}}_DONE;
{{L}}_LOOP1:
	mma.sync.aligned.m16n8k16.row.col.f32.{{T}}.{{T}}.f32 	{%f0, %f1, %f2, %f3}, {%ra0, %ra1, %ra2, %ra3}, {%rb0, %rb1}, {%f0, %f1, %f2, %f3};
	mma.sync.aligned.m16n8k16.row.col.f32.{{T}}.{{T}}.f32 	{%f4, %f5, %f6, %f7}, {%ra0, %ra1, %ra2, %ra3}, {%rb0, %rb1}, {%f4, %f5, %f6, %f7};
	mma.sync.aligned.m16n8k16.row.col.f32.{{T}}.{{T}}.f32 	{%f8, %f9, %f10, %f11}, {%ra0, %ra1, %ra2, %ra3}, {%rb0, %rb1}, {%f8, %f9, %f10, %f11};
	mma.sync.aligned.m16n8k16.row.col.f32.{{T}}.{{T}}.f32 	{%f12, %f13, %f14, %f15}, {%ra0, %ra1, %ra2, %ra3}, {%rb0, %rb1}, {%f12, %f13, %f14, %f15};
{{NEXT}}	sub.u64 	%rd3, %rd3, 1;
	setp.ne.u64 	%p2, %rd3, 0;
	@%p2 bra 	{{L}}_LOOP1;
{{L}}_DONE:
	add.rn.f32 	%f16, %f0, %f1;
	add.rn.f32 	%f16, %f16, %f2;
	add.rn.f32 	%f16, %f16, %f3;
	add.rn.f32 	%f16, %f16, %f4;
	add.rn.f32 	%f16, %f16, %f5;
	add.rn.f32 	%f16, %f16, %f6;
	add.rn.f32 	%f16, %f16, %f7;
	add.rn.f32 	%f16, %f16, %f8;
	add.rn.f32 	%f16, %f16, %f9;
	add.rn.f32 	%f16, %f16, %f10;
	add.rn.f32 	%f16, %f16, %f11;
	add.rn.f32 	%f16, %f16, %f12;
	add.rn.f32 	%f16, %f16, %f13;
	add.rn.f32 	%f16, %f16, %f14;
	add.rn.f32 	%f16, %f16, %f15;
	setp.ne.u32 	%p3, %r1, 0;
	@%p3 bra 	{{L}}_EXIT;
	mov.u32 	%r5, %ctaid.x;
	mov.u32 	%r6, %ntid.x;
	mov.u32 	%r7, %tid.x;
	mul.wide.u32 	%rd4, %r5, %r6;
	cvt.u64.u32 	%rd5, %r7;
	add.u64 	%rd4, %rd4, %rd5;
	shr.u64 	%rd4, %rd4, 5;	// global warp
	cvta.to.global.u64 	%rd6, %rd1;
	shl.b64 	%rd7, %rd4, 2;
	add.u64 	%rd6, %rd6, %rd7;
	st.global.f32 	[%rd6], %f16;
{{L}}_EXIT:
	ret;
}
`

// mmaKernel instantiates mmaKernelPTX for one input type ("f16", "bf16")
// with its label prefix ("F16", "BF16").
func mmaKernel(dtype, label string) string {
	// Two elements per register, each ±[0.5, 1): the sign and mantissa
	// bits random, the exponent that of 0.5 (f16: 5 exponent bits, 10
	// mantissa; bf16: 8 and 7).
	mask, bits := "0x83FF83FF", "0x38003800"
	if dtype == "bf16" {
		mask, bits = "0x807F807F", "0x3F003F00"
	}
	var draw strings.Builder
	for _, reg := range []string{"%ra0", "%ra1", "%ra2", "%ra3", "%rb0", "%rb1"} {
		xorshiftPTX(&draw, "%rs", "%rt")
		fmt.Fprintf(&draw, "\tand.b32 \t%s, %%rs, %s;\n\tor.b32 \t%s, %s, %s;\t// two elements in ±[0.5, 1)\n", reg, mask, reg, reg, bits)
	}
	// Every iteration: w += 0x9E3779B9, and w's sign and mantissa bits
	// flip those of every A and B element.
	next := "\tadd.u32 \t%rw, %rw, 0x9E3779B9;\n\tand.b32 \t%rt, %rw, " + mask + ";\t// sign and mantissa bits\n"
	for _, reg := range []string{"%ra0", "%ra1", "%ra2", "%ra3", "%rb0", "%rb1"} {
		next += fmt.Sprintf("\txor.b32 \t%s, %s, %%rt;\n", reg, reg)
	}
	return strings.NewReplacer("{{T}}", dtype, "{{L}}", label, "{{DRAW}}", draw.String(), "{{NEXT}}", next).Replace(mmaKernelPTX)
}

// xorshiftPTX advances the per-thread xorshift32 state in reg (Marsaglia's
// 13, 17, 5), using tmp.
func xorshiftPTX(b *strings.Builder, reg, tmp string) {
	fmt.Fprintf(b, "\tshl.b32 \t%s, %s, 13;\n\txor.b32 \t%s, %s, %s;\n", tmp, reg, reg, reg, tmp)
	fmt.Fprintf(b, "\tshr.u32 \t%s, %s, 17;\n\txor.b32 \t%s, %s, %s;\n", tmp, reg, reg, reg, tmp)
	fmt.Fprintf(b, "\tshl.b32 \t%s, %s, 5;\n\txor.b32 \t%s, %s, %s;\n", tmp, reg, reg, reg, tmp)
}

// fmaKernelPTX is gpulens_fma. Every operand is per lane and per chain
// pseudo-random, and no chain settles, so that the multipliers and adders
// switch as under real work for the whole launch (constant operands, or
// chains at a fixed point, draw far less power, and a power- or
// cooling-limited card would look healthy). The FMAChains chains are
// FMAChains/2 pairs (x, y), each one step of a rotation per iteration
// (symplectic Euler):
//
//	x = fma(y, h, x)   // x + h·y
//	y = fma(x, -h, y)  // y − h·x (the new x)
//
// with x_0, y_0 in [1, 2) and h in [0.5, 1) drawn per lane and pair from a
// xorshift32 seeded with the global thread index. The map has determinant 1
// and trace 2 − h² in (1, 1.75], so (x, y) goes round an ellipse (about
// 2π/h iterations a turn) for ever: it neither converges nor grows, |x| and
// |y| stay below 4, and the rounding only walks the ellipse's size by an
// ulp or so per step. (The chains this replaced, x = x·a + b with a < 1,
// reached their fixed point b/(1−a) within tens to a few thousand
// iterations and then computed the same value for the rest of the launch:
// TestFMAChainsKeepChanging emulates both.)
func fmaKernelPTX() string {
	var b strings.Builder
	b.WriteString(`// gpulens_fma(out, iters): FMAChains (8) FP32 FMA chains per thread, in
// pairs (x, y) that each take one rotation step per iteration,
// x = fma(y, h, x) then y = fma(x, -h, y), per-lane pseudo-random x_0, y_0
// in [1, 2) and h in [0.5, 1) (see fmaKernelPTX): the values go round an
// ellipse and never settle. iters iterations; the sum of the chains goes to
// out[gid] (f32).
.visible .entry gpulens_fma(
	.param .u64 gpulens_fma_out,
	.param .u64 gpulens_fma_iters
)
{
	.reg .pred 	%p<3>;
	.reg .b32 	%r<8>;
	.reg .b64 	%rd<8>;
	.reg .f32 	%f<13>;
	.reg .f32 	%fa<8>;

	ld.param.u64 	%rd1, [gpulens_fma_out];
	ld.param.u64 	%rd2, [gpulens_fma_iters];
	mov.u32 	%r1, %ctaid.x;
	mov.u32 	%r2, %ntid.x;
	mov.u32 	%r3, %tid.x;
	mul.wide.u32 	%rd3, %r1, %r2;
	cvt.u64.u32 	%rd4, %r3;
	add.u64 	%rd3, %rd3, %rd4;	// gid
	cvt.u32.u64 	%r4, %rd3;
	mad.lo.u32 	%r4, %r4, 0x9E3779B9, 0x2545F491;	// xorshift32 seed from gid
	or.b32 	%r4, %r4, 1;
`)
	draw := func(dst, exp, what string) {
		xorshiftPTX(&b, "%r4", "%r5")
		fmt.Fprintf(&b, "\tand.b32 \t%%r6, %%r4, 0x007FFFFF;\n\tor.b32 \t%%r6, %%r6, %s;\n\tmov.b32 \t%s, %%r6;\t// %s\n", exp, dst, what)
	}
	for k := range FMAChains / 2 {
		draw(fmt.Sprintf("%%f%d", 2*k+1), "0x3F800000", fmt.Sprintf("x_%d in [1, 2)", k))
		draw(fmt.Sprintf("%%f%d", 2*k+2), "0x3F800000", fmt.Sprintf("y_%d in [1, 2)", k))
		draw(fmt.Sprintf("%%fa%d", 2*k), "0x3F000000", fmt.Sprintf("h_%d in [0.5, 1)", k))
		fmt.Fprintf(&b, "\tneg.f32 \t%%fa%d, %%fa%d;\t// -h_%d\n", 2*k+1, 2*k, k)
	}
	b.WriteString(`	mov.u64 	%rd5, %rd2;	// iterations left
	setp.lt.u64 	%p1, %rd5, 8;
	@%p1 bra 	FMA_TAIL;
FMA_LOOP8:
`)
	chains := func() {
		for k := range FMAChains / 2 {
			x, y := 2*k+1, 2*k+2
			fmt.Fprintf(&b, "\tfma.rn.f32 \t%%f%d, %%f%d, %%fa%d, %%f%d;\n", x, y, 2*k, x)
			fmt.Fprintf(&b, "\tfma.rn.f32 \t%%f%d, %%f%d, %%fa%d, %%f%d;\n", y, x, 2*k+1, y)
		}
	}
	for range 8 {
		chains()
	}
	b.WriteString(`	sub.u64 	%rd5, %rd5, 8;
	setp.ge.u64 	%p1, %rd5, 8;
	@%p1 bra 	FMA_LOOP8;
FMA_TAIL:
	setp.eq.u64 	%p2, %rd5, 0;
	@%p2 bra 	FMA_DONE;
FMA_LOOP1:
`)
	chains()
	b.WriteString(`	sub.u64 	%rd5, %rd5, 1;
	setp.ne.u64 	%p2, %rd5, 0;
	@%p2 bra 	FMA_LOOP1;
FMA_DONE:
	add.rn.f32 	%f12, %f1, %f2;
	add.rn.f32 	%f12, %f12, %f3;
	add.rn.f32 	%f12, %f12, %f4;
	add.rn.f32 	%f12, %f12, %f5;
	add.rn.f32 	%f12, %f12, %f6;
	add.rn.f32 	%f12, %f12, %f7;
	add.rn.f32 	%f12, %f12, %f8;
	cvta.to.global.u64 	%rd6, %rd1;
	shl.b64 	%rd7, %rd3, 2;
	add.u64 	%rd6, %rd6, %rd7;
	st.global.f32 	[%rd6], %f12;
	ret;
}

`)
	return b.String()
}
