package gpuprobe_test

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// A host emulation of the probe's PTX kernels: it runs the kernels' text
// (the subset of PTX they use) for one warp, on the host, with PTX's
// semantics: 32- and 64-bit integer arithmetic, fma.rn.f32 as a fused
// multiply-add rounded once to float32 (math.FMA on float64, exact for the
// product of two float32 values, then rounded to float32), and
// mma.sync.aligned.m16n8k16 over the PTX ISA's fragment layout with f32
// accumulation (each element's sum of 16 products and its accumulator
// rounded once to float32: the hardware's internal order is not
// specified). It is what shows that the FMA chains and the tensor inputs
// keep changing (TestFMAChainsKeepChanging, TestMMAInputsKeepChanging).

type emuOperand struct {
	reg  int    // register slot, -1 for an immediate
	imm  uint64 // immediate bits
	name string
}

type emuInst struct {
	line    int
	op      string // "fma.rn.f32"
	args    []string
	ops     []emuOperand // operands, vectors flattened
	vec     [][]emuOperand
	pred    int // predicate slot, -1: always
	predNeg bool
	target  int // branch target pc
	// fn runs a scalar instruction on one lane's registers; nil for
	// branches, mma.sync and ret.
	fn func(w *emuWarp, lane int, r []uint64)
}

// emuKernel is one kernel compiled for emulation.
type emuKernel struct {
	name   string
	insts  []emuInst
	labels map[string]int
	slots  map[string]int
	params []string
}

var (
	emuEntryRE = regexp.MustCompile(`(?s)\.visible\s+\.entry\s+(\w+)\s*\(([^)]*)\)\s*\{(.*?)\n\}`)
	emuParamRE = regexp.MustCompile(`\.param\s+\.\w+\s+(\w+)`)
	emuLabelRE = regexp.MustCompile(`^(\w+):$`)
)

// specialRegs are the read-only registers a lane starts with.
var specialRegs = []string{"%tid.x", "%ntid.x", "%ctaid.x", "%nctaid.x", "%laneid"}

func compileKernel(t *testing.T, module, name string) *emuKernel {
	t.Helper()
	var body, params string
	for _, m := range emuEntryRE.FindAllStringSubmatch(module, -1) {
		if m[1] == name {
			params, body = m[2], m[3]
		}
	}
	if body == "" {
		t.Fatalf("no kernel %s in the module", name)
	}
	k := &emuKernel{name: name, labels: map[string]int{}, slots: map[string]int{}}
	for _, p := range emuParamRE.FindAllStringSubmatch(params, -1) {
		k.params = append(k.params, p[1])
	}
	for _, r := range specialRegs {
		k.slot(r)
	}
	for i, ln := range strings.Split(body, "\n") {
		if c := strings.Index(ln, "//"); c >= 0 {
			ln = ln[:c]
		}
		ln = strings.TrimSpace(ln)
		if ln == "" || strings.HasPrefix(ln, ".reg") {
			continue
		}
		if m := emuLabelRE.FindStringSubmatch(ln); m != nil {
			k.labels[m[1]] = len(k.insts)
			continue
		}
		ln = strings.TrimSuffix(ln, ";")
		in := emuInst{line: i + 1, pred: -1}
		if strings.HasPrefix(ln, "@") {
			g, rest, _ := strings.Cut(ln, " ")
			g = strings.TrimPrefix(g, "@")
			if strings.HasPrefix(g, "!") {
				in.predNeg, g = true, g[1:]
			}
			in.pred = k.slot(g)
			ln = strings.TrimSpace(rest)
		}
		op, rest, _ := strings.Cut(strings.ReplaceAll(ln, "\t", " "), " ")
		in.op = op
		in.args = splitOperands(rest)
		for _, a := range in.args {
			if strings.HasPrefix(a, "{") {
				var v []emuOperand
				for _, e := range strings.Split(strings.Trim(a, "{}"), ",") {
					v = append(v, k.operand(t, strings.TrimSpace(e)))
				}
				in.vec = append(in.vec, v)
				continue
			}
			in.ops = append(in.ops, k.operand(t, a))
		}
		k.insts = append(k.insts, in)
	}
	for i := range k.insts {
		in := &k.insts[i]
		if !strings.HasPrefix(in.op, "bra") && !strings.HasPrefix(in.op, "mma.sync") && in.op != "ret" {
			in.fn = k.compileScalar(t, in)
		}
		if strings.HasPrefix(in.op, "bra") {
			pc, ok := k.labels[in.args[0]]
			if !ok {
				t.Fatalf("%s line %d: no label %s", name, in.line, in.args[0])
			}
			in.target = pc
		}
	}
	return k
}

func (k *emuKernel) slot(name string) int {
	if s, ok := k.slots[name]; ok {
		return s
	}
	k.slots[name] = len(k.slots)
	return k.slots[name]
}

// splitOperands splits "a, {b, c}, [d]" at the top-level commas.
func splitOperands(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	if rest := strings.TrimSpace(s[start:]); rest != "" {
		out = append(out, rest)
	}
	return out
}

func (k *emuKernel) operand(t *testing.T, a string) emuOperand {
	t.Helper()
	switch {
	case strings.HasPrefix(a, "%"):
		return emuOperand{reg: k.slot(a), name: a}
	case strings.HasPrefix(a, "["):
		return emuOperand{reg: -1, name: strings.Trim(a, "[]")}
	case strings.HasPrefix(a, "0f"):
		v, err := strconv.ParseUint(a[2:], 16, 32)
		if err != nil {
			t.Fatalf("%s: %v", a, err)
		}
		return emuOperand{reg: -1, imm: v, name: a}
	}
	if v, err := strconv.ParseUint(a, 0, 64); err == nil {
		return emuOperand{reg: -1, imm: v, name: a}
	}
	if _, ok := k.labels[a]; ok || emuLabelRE.MatchString(a+":") {
		return emuOperand{reg: -1, name: a} // a branch target
	}
	t.Fatalf("%s: operand %q not understood", k.name, a)
	return emuOperand{}
}

// emuWarp runs a kernel for 32 lanes in lockstep (the kernels branch
// uniformly up to where the emulation stops).
type emuWarp struct {
	t    *testing.T
	k    *emuKernel
	regs [32][]uint64
	// lanes are the lanes emulated: all 32 for mma.sync (unless skipMMA),
	// any subset for kernels whose lanes do not interact.
	lanes  []int
	params map[string]uint64
	// skipMMA makes mma.sync leave its accumulators as they are (D = C):
	// the integer work around it still runs, for long emulations.
	skipMMA bool
	// onFMA is called after each fma.rn.f32 with the lane, the destination
	// register's slot (emuKernel.slots) and its value before and after.
	onFMA func(lane, dst int, before, after float32)
	// onMMA is called before each mma.sync with the instruction's
	// A and B registers of every lane, and after it with the accumulators
	// before and after (lane, register order).
	onMMA func(in *emuInst, ab [32][6]uint32, before, after [32][4]float32)
	steps int
}

// newWarp sets up lanes (nil: all 32) of warp warpInBlock of block block,
// in a grid of blocks blocks of threads threads.
func newWarp(t *testing.T, k *emuKernel, block, threads, blocks, warpInBlock int, lanes []int, params map[string]uint64) *emuWarp {
	if lanes == nil {
		for l := range 32 {
			lanes = append(lanes, l)
		}
	}
	w := &emuWarp{t: t, k: k, params: params, lanes: lanes}
	for l := range 32 {
		w.regs[l] = make([]uint64, len(k.slots))
		tid := warpInBlock*32 + l
		w.regs[l][k.slots["%tid.x"]] = uint64(tid)
		w.regs[l][k.slots["%ntid.x"]] = uint64(threads)
		w.regs[l][k.slots["%ctaid.x"]] = uint64(block)
		w.regs[l][k.slots["%nctaid.x"]] = uint64(blocks)
		w.regs[l][k.slots["%laneid"]] = uint64(l)
	}
	return w
}

func (w *emuWarp) val(l int, o emuOperand) uint64 {
	if o.reg < 0 {
		return o.imm
	}
	return w.regs[l][o.reg]
}

func f32(b uint64) float32  { return math.Float32frombits(uint32(b)) }
func bits(f float32) uint64 { return uint64(math.Float32bits(f)) }

// run executes from the start until the label stop (or ret).
func (w *emuWarp) run(stop string) {
	k := w.k
	end, ok := k.labels[stop]
	if !ok {
		w.t.Fatalf("%s: no label %s", k.name, stop)
	}
	pc := 0
	for pc != end && pc < len(k.insts) {
		in := &k.insts[pc]
		pc++
		w.steps++
		if strings.HasPrefix(in.op, "bra") {
			taken := 0
			for _, l := range w.lanes {
				if in.pred < 0 || (w.regs[l][in.pred] != 0) != in.predNeg {
					taken++
				}
			}
			if taken != 0 && taken != len(w.lanes) {
				w.t.Fatalf("%s line %d: the warp diverges", k.name, in.line)
			}
			if taken == len(w.lanes) {
				pc = in.target
			}
			continue
		}
		if in.pred >= 0 {
			w.t.Fatalf("%s line %d: predicated %s not emulated", k.name, in.line, in.op)
		}
		if strings.HasPrefix(in.op, "mma.sync") {
			w.mma(in)
			continue
		}
		if in.op == "ret" {
			return
		}
		for _, l := range w.lanes {
			in.fn(w, l, w.regs[l])
		}
	}
}

// compileScalar turns a scalar instruction into a function of one lane's
// registers.
func (k *emuKernel) compileScalar(t *testing.T, in *emuInst) func(w *emuWarp, lane int, r []uint64) {
	t.Helper()
	o := in.ops
	if strings.HasPrefix(in.op, "st.global.") {
		// The emulation stops before the stores; the kernels' outputs
		// are not what it checks.
		return func(*emuWarp, int, []uint64) {}
	}
	if len(o) == 0 || o[0].reg < 0 {
		t.Fatalf("%s line %d: %s: no destination register", k.name, in.line, in.op)
	}
	d := o[0].reg
	// src returns operand i's value getter.
	src := func(i int) func(r []uint64) uint64 {
		if i >= len(o) {
			t.Fatalf("%s line %d: %s: operand %d missing", k.name, in.line, in.op, i)
		}
		if o[i].reg < 0 {
			v := o[i].imm
			return func([]uint64) uint64 { return v }
		}
		s := o[i].reg
		return func(r []uint64) uint64 { return r[s] }
	}
	un := func(f func(a uint64) uint64) func(*emuWarp, int, []uint64) {
		a := src(1)
		return func(_ *emuWarp, _ int, r []uint64) { r[d] = f(a(r)) }
	}
	bin := func(f func(a, b uint64) uint64) func(*emuWarp, int, []uint64) {
		a, b := src(1), src(2)
		return func(_ *emuWarp, _ int, r []uint64) { r[d] = f(a(r), b(r)) }
	}
	switch in.op {
	case "ld.param.u64":
		name := o[1].name
		return func(w *emuWarp, _ int, r []uint64) {
			p, ok := w.params[name]
			if !ok {
				w.t.Fatalf("%s line %d: no parameter %s", k.name, in.line, name)
			}
			r[d] = p
		}
	case "mov.u32", "mov.b32", "mov.f32", "cvt.u64.u32":
		return un(func(a uint64) uint64 { return uint64(uint32(a)) })
	case "cvt.u32.u64":
		return un(func(a uint64) uint64 { return uint64(uint32(a)) })
	case "mov.u64", "cvta.to.global.u64":
		return un(func(a uint64) uint64 { return a })
	case "neg.f32":
		return un(func(a uint64) uint64 { return bits(-f32(a)) })
	case "mul.wide.u32":
		return bin(func(a, b uint64) uint64 { return uint64(uint32(a)) * uint64(uint32(b)) })
	case "mul.lo.u64":
		return bin(func(a, b uint64) uint64 { return a * b })
	case "add.u64":
		return bin(func(a, b uint64) uint64 { return a + b })
	case "sub.u64":
		return bin(func(a, b uint64) uint64 { return a - b })
	case "shl.b64":
		return bin(func(a, b uint64) uint64 { return a << b })
	case "add.u32":
		return bin(func(a, b uint64) uint64 { return uint64(uint32(a) + uint32(b)) })
	case "or.b32":
		return bin(func(a, b uint64) uint64 { return uint64(uint32(a) | uint32(b)) })
	case "and.b32":
		return bin(func(a, b uint64) uint64 { return uint64(uint32(a) & uint32(b)) })
	case "xor.b32":
		return bin(func(a, b uint64) uint64 { return uint64(uint32(a) ^ uint32(b)) })
	case "shl.b32":
		return bin(func(a, b uint64) uint64 { return uint64(uint32(a) << uint32(b)) })
	case "shr.u32":
		return bin(func(a, b uint64) uint64 { return uint64(uint32(a) >> uint32(b)) })
	case "shr.u64":
		return bin(func(a, b uint64) uint64 { return a >> b })
	case "setp.ne.u32":
		return bin(func(a, b uint64) uint64 { return b2u(uint32(a) != uint32(b)) })
	case "add.rn.f32":
		return bin(func(a, b uint64) uint64 { return bits(f32(a) + f32(b)) })
	case "setp.lt.u64":
		return bin(func(a, b uint64) uint64 { return b2u(a < b) })
	case "setp.ge.u64":
		return bin(func(a, b uint64) uint64 { return b2u(a >= b) })
	case "setp.eq.u64":
		return bin(func(a, b uint64) uint64 { return b2u(a == b) })
	case "setp.ne.u64":
		return bin(func(a, b uint64) uint64 { return b2u(a != b) })
	case "mad.lo.u32":
		a, b, c := src(1), src(2), src(3)
		return func(_ *emuWarp, _ int, r []uint64) { r[d] = uint64(uint32(a(r))*uint32(b(r)) + uint32(c(r))) }
	case "fma.rn.f32":
		a, b, c := src(1), src(2), src(3)
		return func(w *emuWarp, lane int, r []uint64) {
			before := f32(r[d])
			x := float32(math.FMA(float64(f32(a(r))), float64(f32(b(r))), float64(f32(c(r)))))
			r[d] = bits(x)
			if w.onFMA != nil {
				w.onFMA(lane, d, before, x)
			}
		}
	}
	t.Fatalf("%s line %d: %s not emulated", k.name, in.line, in.op)
	return nil
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// halfToFloat decodes an IEEE binary16 or a bfloat16.
func halfToFloat(h uint16, bf16 bool) float64 {
	if bf16 {
		return float64(math.Float32frombits(uint32(h) << 16))
	}
	return f16Table[h]
}

var f16Table = func() (t [1 << 16]float64) {
	for h := range t {
		t[h] = decodeF16(uint16(h))
	}
	return t
}()

func decodeF16(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp, man := int(h>>10&0x1f), float64(h&0x3ff)
	switch exp {
	case 0:
		return sign * man * math.Pow(2, -24)
	case 31:
		if man == 0 {
			return sign * math.Inf(1)
		}
		return math.NaN()
	}
	return sign * (1 + man/1024) * math.Pow(2, float64(exp-15))
}

// mma emulates mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.*.f32
// d, a, b, c over the PTX ISA's fragment layout: lane l, group g = l/4,
// t = l%4; A's elements a0..a7 (two per register, low half first) sit at
// row g (a0, a1, a4, a5) or g+8 (a2, a3, a6, a7), column 2t + i%2 (+8 for
// a4..a7); B's b0..b3 at row (k) 2t + i%2 (+8 for b2, b3), column g; C's
// and D's c0..c3 at row g (c0, c1) or g+8, column 2t + i%2.
func (w *emuWarp) mma(in *emuInst) {
	if len(in.vec) != 4 || len(in.vec[1]) != 4 || len(in.vec[2]) != 2 {
		w.t.Fatalf("%s line %d: mma operands %v", w.k.name, in.line, in.args)
	}
	if !w.skipMMA && len(w.lanes) != 32 {
		w.t.Fatalf("%s line %d: mma.sync needs the whole warp", w.k.name, in.line)
	}
	bf16 := strings.Contains(in.op, ".bf16")
	var ab [32][6]uint32
	var before, after [32][4]float32
	var A [16][16]float64
	var B [16][8]float64
	var C [16][8]float64
	for _, l := range w.lanes {
		g, t := l/4, l%4
		for r := range 4 {
			ab[l][r] = uint32(w.val(l, in.vec[1][r]))
		}
		for r := range 2 {
			ab[l][4+r] = uint32(w.val(l, in.vec[2][r]))
		}
		for i := range 8 {
			h := uint16(ab[l][i/2] >> (16 * (i % 2)))
			row, col := g, 2*t+i%2
			if i == 2 || i == 3 || i == 6 || i == 7 {
				row += 8
			}
			if i >= 4 {
				col += 8
			}
			A[row][col] = halfToFloat(h, bf16)
		}
		for i := range 4 {
			h := uint16(ab[l][4+i/2] >> (16 * (i % 2)))
			k := 2*t + i%2
			if i >= 2 {
				k += 8
			}
			B[k][g] = halfToFloat(h, bf16)
		}
		for i := range 4 {
			before[l][i] = f32(w.val(l, in.vec[3][i]))
			row, col := g, 2*t+i%2
			if i >= 2 {
				row += 8
			}
			C[row][col] = float64(before[l][i])
		}
	}
	for _, l := range w.lanes {
		g, t := l/4, l%4
		for i := range 4 {
			row, col := g, 2*t+i%2
			if i >= 2 {
				row += 8
			}
			d := C[row][col]
			if !w.skipMMA {
				for k := range 16 {
					d += A[row][k] * B[k][col]
				}
			}
			after[l][i] = float32(d)
		}
	}
	for _, l := range w.lanes {
		for i := range 4 {
			w.regs[l][in.vec[0][i].reg] = bits(after[l][i])
		}
	}
	if w.onMMA != nil {
		w.onMMA(in, ab, before, after)
	}
}

// finiteNormal reports whether f is finite and not subnormal (0 allowed).
func finiteNormal(f float32) bool {
	if math.IsInf(float64(f), 0) || math.IsNaN(float64(f)) {
		return false
	}
	return f == 0 || math.Abs(float64(f)) >= 0x1p-126
}

func fmtF(f float32) string { return fmt.Sprintf("%.9g", f) }
