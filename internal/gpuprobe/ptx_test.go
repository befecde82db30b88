package gpuprobe

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestWritePTX writes the PTX modules to $GPULENS_PTX_OUT/{base,tensor}.ptx
// for scripts/check-ptx.sh, which assembles them with NVIDIA's ptxas.
func TestWritePTX(t *testing.T) {
	dir := os.Getenv("GPULENS_PTX_OUT")
	if dir == "" {
		t.Skip("GPULENS_PTX_OUT not set: nothing to write (make check-ptx sets it)")
	}
	for name, text := range map[string]string{"base.ptx": ptxBase, "tensor.ptx": ptxTensor} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

type ptxEntry struct {
	params []string // declared types, in order
	body   string
}

var (
	entryRE = regexp.MustCompile(`(?s)\.visible\s+\.entry\s+(\w+)\s*\(([^)]*)\)\s*\{(.*?)\n\}`)
	paramRE = regexp.MustCompile(`\.param\s+(\.\w+)\s+\w+`)
)

// parsePTXEntries returns the module's kernels by name.
func parsePTXEntries(t *testing.T, module string) map[string]ptxEntry {
	t.Helper()
	out := map[string]ptxEntry{}
	for _, m := range entryRE.FindAllStringSubmatch(module, -1) {
		var params []string
		for _, p := range paramRE.FindAllStringSubmatch(m[2], -1) {
			params = append(params, p[1])
		}
		if _, dup := out[m[1]]; dup {
			t.Fatalf("kernel %s defined twice", m[1])
		}
		out[m[1]] = ptxEntry{params: params, body: m[3]}
	}
	return out
}

func directive(module, name string) string {
	m := regexp.MustCompile(`(?m)^\.` + name + `\s+(\S+)`).FindStringSubmatch(module)
	if m == nil {
		return ""
	}
	return m[1]
}

// TestPTXModules checks each module's header and that it defines exactly
// the kernels of kernels.go with their documented .u64 parameters, and the
// work each iteration does (FMAChains FMAs, MMAChains mma.sync) matches the
// constants the probe's FLOP counts use.
func TestPTXModules(t *testing.T) {
	tests := []struct {
		name    string
		module  string
		target  string
		kernels map[string]int // name: number of .u64 params
	}{
		{"base", ptxBase, "sm_52", map[string]int{KernelNoop: 0, KernelCopy: 3, KernelFMA: 2, KernelStolen: 4}},
		{"tensor", ptxTensor, "sm_80", map[string]int{KernelMMAF16: 2, KernelMMABF16: 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := directive(tc.module, "version"); got != "7.0" {
				t.Errorf(".version = %q, want 7.0", got)
			}
			if got := directive(tc.module, "target"); got != tc.target {
				t.Errorf(".target = %q, want %s", got, tc.target)
			}
			if got := directive(tc.module, "address_size"); got != "64" {
				t.Errorf(".address_size = %q, want 64", got)
			}
			entries := parsePTXEntries(t, tc.module)
			var names []string
			for n := range entries {
				names = append(names, n)
			}
			slices.Sort(names)
			var want []string
			for n := range tc.kernels {
				want = append(want, n)
			}
			slices.Sort(want)
			if !slices.Equal(names, want) {
				t.Fatalf("kernels = %v, want %v", names, want)
			}
			for n, nparams := range tc.kernels {
				e := entries[n]
				if len(e.params) != nparams {
					t.Errorf("%s has %d params, want %d", n, len(e.params), nparams)
				}
				for i, p := range e.params {
					if p != ".u64" {
						t.Errorf("%s param %d is %s, want .u64", n, i, p)
					}
				}
				if !strings.Contains(e.body, "ret;") {
					t.Errorf("%s has no ret", n)
				}
			}
		})
	}
}

// loopBody returns the instructions between label and the branch back to it.
func loopBody(t *testing.T, body, label string) string {
	t.Helper()
	start := strings.Index(body, "\n"+label+":")
	end := strings.Index(body, "bra \t"+label+";")
	if start < 0 || end < start {
		t.Fatalf("no loop %s", label)
	}
	return body[start:end]
}

// TestPTXWorkPerIteration checks that the unrolled and the tail loops do
// exactly the work kernels.go counts per iteration, on independent chains.
func TestPTXWorkPerIteration(t *testing.T) {
	base := parsePTXEntries(t, ptxBase)
	tensor := parsePTXEntries(t, ptxTensor)
	tests := []struct {
		kernel, body, loop, instr string
		iters, chains             int
	}{
		{KernelFMA, base[KernelFMA].body, "FMA_LOOP8", "fma.rn.f32", 8, FMAChains},
		{KernelFMA, base[KernelFMA].body, "FMA_LOOP1", "fma.rn.f32", 1, FMAChains},
		{KernelMMAF16, tensor[KernelMMAF16].body, "F16_LOOP4", "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", 4, MMAChains},
		{KernelMMAF16, tensor[KernelMMAF16].body, "F16_LOOP1", "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", 1, MMAChains},
		{KernelMMABF16, tensor[KernelMMABF16].body, "BF16_LOOP4", "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", 4, MMAChains},
		{KernelMMABF16, tensor[KernelMMABF16].body, "BF16_LOOP1", "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", 1, MMAChains},
	}
	for _, tc := range tests {
		t.Run(tc.loop, func(t *testing.T) {
			loop := loopBody(t, tc.body, tc.loop)
			var dests []string
			for line := range strings.SplitSeq(loop, "\n") {
				f := strings.Fields(line)
				if len(f) < 2 || f[0] != tc.instr {
					continue
				}
				dests = append(dests, strings.TrimSuffix(strings.Join(f[1:], " "), ";"))
			}
			if len(dests) != tc.iters*tc.chains {
				t.Fatalf("%s: %d × %s, want %d iterations × %d chains", tc.loop, len(dests), tc.instr, tc.iters, tc.chains)
			}
			// Chain c of iteration i writes the same accumulator as chain c
			// of iteration 0, and the chains of one iteration are distinct.
			first := map[string]bool{}
			for c := 0; c < tc.chains; c++ {
				d := strings.SplitN(dests[c], ",", 2)[0]
				if tc.instr != "fma.rn.f32" {
					d, _, _ = strings.Cut(dests[c], "}")
				}
				if first[d] {
					t.Fatalf("%s: chains share accumulator %s", tc.loop, d)
				}
				first[d] = true
			}
			sub := regexp.MustCompile(`sub\.u64\s+(%rd\d+), (%rd\d+), (\d+);`).FindStringSubmatch(loop)
			if sub == nil || sub[1] != sub[2] || sub[3] != strconv.Itoa(tc.iters) {
				t.Errorf("%s does not count its iterations down by %d: %q", tc.loop, tc.iters, sub)
			}
		})
	}
}

// TestPTXOperandsPerLane: the FMA and mma.sync kernels take their operands
// from a per-thread xorshift32 (seeded with the global thread index), every
// chain its own multiplier and addend, and A fragments of four different
// registers: constant operands draw far less power than real work.
func TestPTXOperandsPerLane(t *testing.T) {
	base := parsePTXEntries(t, ptxBase)
	tensor := parsePTXEntries(t, ptxTensor)
	fma := base[KernelFMA].body
	if !strings.Contains(fma, "mad.lo.u32 \t%r4, %r4, 0x9E3779B9") {
		t.Errorf("FMA kernel: no per-thread seed")
	}
	if n := strings.Count(fma, "shr.u32"); n != 3*FMAChains/2 {
		t.Errorf("FMA kernel: %d xorshift steps, want %d (x, y, h per pair of chains)", n, 3*FMAChains/2)
	}
	loop := loopBody(t, fma, "FMA_LOOP1")
	ops := map[string]bool{}
	for line := range strings.SplitSeq(loop, "\n") {
		f := strings.Fields(strings.NewReplacer(",", " ", ";", " ").Replace(line))
		if len(f) == 5 && f[0] == "fma.rn.f32" {
			ops[f[3]], ops[f[4]] = true, true
		}
	}
	if len(ops) != 2*FMAChains {
		t.Errorf("FMA chains use %d distinct multiplier/addend registers, want %d: %v", len(ops), 2*FMAChains, ops)
	}
	for name, e := range map[string]ptxEntry{KernelMMAF16: tensor[KernelMMAF16], KernelMMABF16: tensor[KernelMMABF16]} {
		if !strings.Contains(e.body, "{%ra0, %ra1, %ra2, %ra3}, {%rb0, %rb1}") {
			t.Errorf("%s: A and B fragments are not four and two different registers", name)
		}
		if n := strings.Count(e.body, "shr.u32"); n != 6 {
			t.Errorf("%s: %d xorshift steps, want 6 (4 A + 2 B registers)", name, n)
		}
	}
}

// TestPTXCopyLoadsInFlight: the copy kernel's main loop issues CopyUnroll
// 16-byte loads before its first store.
func TestPTXCopyLoadsInFlight(t *testing.T) {
	body := parsePTXEntries(t, ptxBase)[KernelCopy].body
	start := strings.Index(body, "\nCOPY_LOOP4:")
	end := strings.Index(body, "\nCOPY_TAIL:")
	if start < 0 || end < start {
		t.Fatal("no COPY_LOOP4 ... COPY_TAIL")
	}
	loop := body[start:end]
	firstStore := strings.Index(loop, "st.global.v4.u32")
	if n := strings.Count(loop[:max(0, firstStore)], "ld.global.v4.u32"); n != CopyUnroll {
		t.Errorf("%d loads before the first store, want %d", n, CopyUnroll)
	}
	if n := strings.Count(loop, "st.global.v4.u32"); n != CopyUnroll {
		t.Errorf("%d stores per round, want %d", n, CopyUnroll)
	}
}
