package gpuprobe_test

import (
	"math"
	"testing"

	"github.com/gpulens/gpulens/internal/gpuprobe"
)

// TestFMAChainsKeepChanging emulates gpulens_fma's PTX (ptxemu_test.go)
// for lanes across the grid, for more iterations than any probe of a
// spec-table GPU launches it with, and checks that every chain's value
// keeps changing to the end, stays finite and normal, and takes many
// different values late in the launch: a chain at a fixed point computes
// the same FMA for the rest of the launch, which draws far less power than
// real work, so a power- or heat-limited card would look healthy. The
// chains x = x·a + b (a in [0.5, 1)) this replaced reach their fixed point
// within tens to a few thousand iterations.
func TestFMAChainsKeepChanging(t *testing.T) {
	t.Parallel()
	iters := probeLaunchIters(t)[gpuprobe.KernelFMA]
	if iters < 1<<18 {
		t.Fatalf("the probe launches gpulens_fma with at most %d iterations; expected more on the spec table's GPUs", iters)
	}
	t.Logf("gpulens_fma: at most %d iterations per launch (spec table, gpulens-verify's defaults); emulating that many", iters)
	k := compileKernel(t, gpuprobe.PTXBase, gpuprobe.KernelFMA)
	const threads, blocks = 256, 4 * 148
	for _, warp := range []struct {
		block, warp int
		lanes       []int
	}{{0, 0, []int{0, 13}}, {blocks - 1, 7, []int{31}}} {
		w := newWarp(t, k, warp.block, threads, blocks, warp.warp, warp.lanes, map[string]uint64{"gpulens_fma_out": 0, "gpulens_fma_iters": iters})
		type chain struct {
			unchanged, lastUnchanged, run, maxRun int
			n                                     int
			min, max                              float64
			bad                                   float32
			badSeen                               bool
			tail                                  map[float32]bool
		}
		chains := map[[2]int]*chain{}
		bySlot := make([][]*chain, 32)
		for l := range bySlot {
			bySlot[l] = make([]*chain, len(k.slots))
		}
		w.onFMA = func(lane, dst int, before, after float32) {
			c := bySlot[lane][dst]
			if c == nil {
				c = &chain{min: math.Inf(1), tail: map[float32]bool{}}
				bySlot[lane][dst] = c
				chains[[2]int{lane, dst}] = c
			}
			c.n++
			if after == before {
				c.unchanged++
				c.lastUnchanged = c.n
				c.run++
				c.maxRun = max(c.maxRun, c.run)
			} else {
				c.run = 0
			}
			if !finiteNormal(after) && !c.badSeen {
				c.bad, c.badSeen = after, true
			}
			a := math.Abs(float64(after))
			c.min, c.max = math.Min(c.min, a), math.Max(c.max, a)
			if uint64(c.n) > iters-1000 {
				c.tail[after] = true
			}

		}
		w.run("FMA_DONE")
		if len(chains) != len(warp.lanes)*gpuprobe.FMAChains {
			t.Fatalf("block %d warp %d: %d chains seen, want %d", warp.block, warp.warp, len(chains), len(warp.lanes)*gpuprobe.FMAChains)
		}
		regName := map[int]string{}
		for n, slot := range k.slots {
			regName[slot] = n
		}
		for key, c := range chains {
			key := [2]any{key[0], regName[key[1]]}
			switch {
			case uint64(c.n) != iters:
				t.Errorf("block %d warp %d lane %v chain %v: %d steps, want %d", warp.block, warp.warp, key[0], key[1], c.n, iters)
			case c.badSeen:
				t.Errorf("block %d warp %d lane %v chain %v: reached %s (not finite and normal)", warp.block, warp.warp, key[0], key[1], fmtF(c.bad))
			case c.maxRun > 1 || float64(c.unchanged) > 1e-5*float64(iters):
				t.Errorf("block %d warp %d lane %v chain %v converged: %d of %d steps left it unchanged (the last at step %d, %d in a row at most)",
					warp.block, warp.warp, key[0], key[1], c.unchanged, iters, c.lastUnchanged, c.maxRun)
			case len(c.tail) < 900:
				t.Errorf("block %d warp %d lane %v chain %v: only %d distinct values in the last 1000 steps", warp.block, warp.warp, key[0], key[1], len(c.tail))
			case c.max > 8:
				t.Errorf("block %d warp %d lane %v chain %v: |x| reached %g, want it bounded (< 8)", warp.block, warp.warp, key[0], key[1], c.max)
			}
		}
	}
}

// TestMMAInputsKeepChanging emulates gpulens_mma_f16 and gpulens_mma_bf16
// for one warp: every iteration must feed the tensor cores new A and B
// elements (constant inputs draw far less power than real work), all in
// ±[0.5, 1) (finite, normal); the accumulators must keep changing and
// stay finite and normal. The full products are emulated for a few
// thousand iterations; the integer work that changes the inputs for as
// many iterations as any probe of a spec-table GPU launches.
func TestMMAInputsKeepChanging(t *testing.T) {
	t.Parallel()
	full := probeLaunchIters(t)
	for _, kernel := range []string{gpuprobe.KernelMMAF16, gpuprobe.KernelMMABF16} {
		t.Run(kernel, func(t *testing.T) {
			bf16 := kernel == gpuprobe.KernelMMABF16
			label := "F16_DONE"
			if bf16 {
				label = "BF16_DONE"
			}
			k := compileKernel(t, gpuprobe.PTXTensor, kernel)
			for _, tc := range []struct {
				iters   uint64
				skipMMA bool
			}{
				{2048, false},
				{full[kernel], true},
			} {
				if tc.iters < 1024 {
					t.Fatalf("the probe launches %s with at most %d iterations; expected more", kernel, tc.iters)
				}
				var lanes []int // all 32 for the products
				if tc.skipMMA {
					lanes = []int{0, 5, 30}
				}
				w := newWarp(t, k, 3, 128, 8*148, 1, lanes, map[string]uint64{"gpulens_mma_" + map[bool]string{false: "f16", true: "bf16"}[bf16] + "_out": 0,
					"gpulens_mma_" + map[bool]string{false: "f16", true: "bf16"}[bf16] + "_iters": tc.iters})
				w.skipMMA = tc.skipMMA
				var prev [32][6]uint32
				var mmas, sameInputs, sameAcc, badIn, badAcc int
				first := true
				w.onMMA = func(in *emuInst, ab [32][6]uint32, before, after [32][4]float32) {
					mmas++
					if in.vec[0][0].name == "%f0" { // chain 0: one per iteration
						if !first && ab == prev {
							sameInputs++
						}
						first, prev = false, ab
					}
					for _, l := range w.lanes {
						for r := range 6 {
							for h := range 2 {
								if !inHalfToOne(uint16(ab[l][r]>>(16*h)), bf16) {
									badIn++
								}
							}
						}
						if tc.skipMMA {
							continue
						}
						for i := range 4 {
							if after[l][i] == before[l][i] {
								sameAcc++
							}
							if !finiteNormal(after[l][i]) {
								badAcc++
							}
						}
					}
				}
				w.run(label)
				if want := 4 * tc.iters; uint64(mmas) != want {
					t.Fatalf("%d iterations: %d mma.sync run, want %d", tc.iters, mmas, want)
				}
				if sameInputs > 0 {
					t.Errorf("%d iterations: %d iterations fed the tensor cores the same A and B as the one before", tc.iters, sameInputs)
				}
				if badIn > 0 {
					t.Errorf("%d iterations: %d input elements outside ±[0.5, 1)", tc.iters, badIn)
				}
				if badAcc > 0 {
					t.Errorf("%d iterations: %d accumulator values not finite and normal", tc.iters, badAcc)
				}
				// An accumulator may keep its value when its 16 products
				// cancel below its ulp: rare, never the rule.
				if tc.skipMMA {
					continue
				}
				if share := float64(sameAcc) / float64(mmas*32*4); share > 1e-3 {
					t.Errorf("%d iterations: %.2g%% of accumulator updates left the value unchanged", tc.iters, 100*share)
				}
			}
		})
	}
}

// inHalfToOne reports whether a binary16 or bfloat16 is in ±[0.5, 1): its
// exponent field is that of 0.5 (binary16: 14 of bias 15; bfloat16: 126 of
// bias 127).
func inHalfToOne(h uint16, bf16 bool) bool {
	if bf16 {
		return h>>7&0xff == 126
	}
	return h>>10&0x1f == 14
}
