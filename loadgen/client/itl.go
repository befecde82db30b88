package client

import "iter"

// InterTokenLatencies yields the token-level inter-token latencies of r in
// seconds (docs/loadgen-metrics.md). Content chunks delivered by the same
// read (equal offsets) form one group: the client saw their tokens at
// once, so a group of K tokens arriving Δ after the previous group yields K
// values Δ/K, never K−1 zeros. The tokens of the first group are covered by
// TTFT.
func (r *Result) InterTokenLatencies() iter.Seq[float64] {
	return func(yield func(float64) bool) {
		var (
			prevT, curT int64
			curK        int64
			havePrev    bool
		)
		finish := func() bool {
			if havePrev {
				g := float64(curT-prevT) / 1e9 / float64(curK)
				for j := int64(0); j < curK; j++ {
					if !yield(g) {
						return false
					}
				}
			}
			prevT, havePrev = curT, true
			return true
		}
		for i, off := range r.ChunkOffsets {
			k := int64(1)
			if i < len(r.ChunkTokens) {
				k = int64(r.ChunkTokens[i])
			}
			if k <= 0 {
				continue
			}
			if curK > 0 && off == curT {
				curK += k
				continue
			}
			if curK > 0 && !finish() {
				return
			}
			curT, curK = off, k
		}
		if curK > 0 {
			finish()
		}
	}
}
