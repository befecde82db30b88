package gpuprobe

import (
	"encoding/binary"
	"fmt"
	"slices"
	"time"
)

// stolenBlock is one block's record from KernelStolen's output.
type stolenBlock struct {
	first, last, count, sum, minStep, reads uint64
	gaps                                    []time.Duration // kept gap lengths
	lastKeptEnd                             uint64          // end of the last kept gap (ns)
}

// decodeStolen turns KernelStolen's output (layout in kernels.go) for
// blocks blocks of maxGaps kept gaps each into a StolenResult. threshold is
// the threshold the kernel ran with.
//
// Blocks that did not run (no timer read, or no time between their first
// and last reading) are left out; it is an error when none ran, or when a
// record is inconsistent (more gaps kept than counted, gaps summing to more
// than the window).
//
// Coarse timers: when 10x the timer resolution (the smallest non-zero step
// any block saw) is above threshold, every timer step may have counted as a
// gap, so the threshold is raised to 10x the resolution and each block's
// count and sum are recomputed from its kept gaps only. That costs two
// things: gaps shorter than the raised threshold are not seen at all, and a
// block that saw more than maxGaps gaps (likely, since every timer step was
// one) loses those beyond the first maxGaps. Such a block's kept gaps
// describe only the part of its window up to the end of the last kept gap,
// so its ratio is the kept gaps' sum over that covered part, not over the
// whole window (which would read as little stolen time as the records ran
// out early); StolenResult.Coverage says how much of the window that was.
func decodeStolen(raw []byte, blocks, maxGaps int, threshold time.Duration) (StolenResult, error) {
	if blocks <= 0 || maxGaps <= 0 {
		return StolenResult{}, fmt.Errorf("stolen: %d blocks, %d max gaps", blocks, maxGaps)
	}
	blockBytes := int(StolenBlockBytes(uint64(maxGaps)))
	if len(raw) < blocks*blockBytes {
		return StolenResult{}, fmt.Errorf("stolen: output has %d bytes, %d blocks of %d gaps need %d", len(raw), blocks, maxGaps, blocks*blockBytes)
	}
	var recs []stolenBlock
	var resolution uint64
	for b := range blocks {
		words := raw[b*blockBytes : (b+1)*blockBytes]
		u := func(i int) uint64 { return binary.LittleEndian.Uint64(words[8*i:]) }
		r := stolenBlock{first: u(0), last: u(1), count: u(2), sum: u(3), minStep: u(4), reads: u(5)}
		if r.reads == 0 || r.last <= r.first {
			continue
		}
		window := r.last - r.first
		if r.sum > window {
			return StolenResult{}, fmt.Errorf("stolen: block %d: gaps sum to %d ns, more than its %d ns window", b, r.sum, window)
		}
		kept := int(min(r.count, uint64(maxGaps)))
		for i := range kept {
			start, length := u(StolenHeaderWords+2*i), u(StolenHeaderWords+2*i+1)
			if start < r.first || length > window {
				return StolenResult{}, fmt.Errorf("stolen: block %d: gap %d (%d ns at %d) lies outside the window [%d, %d]", b, i, length, start, r.first, r.last)
			}
			r.gaps = append(r.gaps, time.Duration(length))
			r.lastKeptEnd = max(r.lastKeptEnd, start+length)
		}
		if r.minStep > 0 && (resolution == 0 || r.minStep < resolution) {
			resolution = r.minStep
		}
		recs = append(recs, r)
	}
	if len(recs) == 0 {
		return StolenResult{}, fmt.Errorf("stolen: none of the %d blocks read the timer", blocks)
	}

	thr := threshold
	raised := resolution > 0 && 10*time.Duration(resolution) > threshold
	if raised {
		thr = 10 * time.Duration(resolution)
	}
	var windows []time.Duration
	var ratios, counts, coverages []float64
	var all []time.Duration
	for _, r := range recs {
		window := time.Duration(r.last - r.first)
		covered := window
		count, sum := float64(r.count), time.Duration(r.sum)
		gaps := r.gaps
		if raised {
			if r.count > uint64(len(r.gaps)) && r.lastKeptEnd > r.first {
				covered = min(window, time.Duration(r.lastKeptEnd-r.first))
			}
			gaps = slices.DeleteFunc(slices.Clone(gaps), func(g time.Duration) bool { return g <= thr })
			count, sum = float64(len(gaps)), 0
			for _, g := range gaps {
				sum += g
			}
		}
		windows = append(windows, window)
		ratios = append(ratios, float64(sum)/float64(covered))
		coverages = append(coverages, float64(covered)/float64(window))
		counts = append(counts, count)
		all = append(all, gaps...)
	}
	res := StolenResult{
		Window:          medianDuration(windows),
		Threshold:       thr,
		TimerResolution: time.Duration(resolution),
		Blocks:          len(recs),
		Ratio:           median(ratios),
		Coverage:        median(coverages),
		MaxRatio:        slices.Max(ratios),
		Gaps:            int(median(counts)),
	}
	if len(all) > 0 {
		slices.Sort(all)
		res.GapMedian = medianSorted(all)
		res.GapP90 = quantileSorted(all, 0.9)
		res.GapMax = all[len(all)-1]
	}
	return res, nil
}
