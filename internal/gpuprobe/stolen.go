package gpuprobe

import (
	"encoding/binary"
	"errors"
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
	r, _, err := decodeWindow(raw, blocks, maxGaps, threshold, 0)
	return r, err
}

// decodeWindow is decodeStolen for a kernel launched with window (0: not
// known), also returning the kept gaps' lengths (those above the threshold
// used). The kernel stops at its first reading at least window after its
// first: when a neighbour's slice covers the window's end, that reading
// comes after the slice and the whole slice counts, which on a short
// window biases the ratio up (by about half a slice over the window). So
// the part of the last gap beyond the window is left out of the block's
// sum and the ratio is over the window itself (not with a raised
// threshold, whose records end early anyway).
func decodeWindow(raw []byte, blocks, maxGaps int, threshold, planned time.Duration) (StolenResult, []time.Duration, error) {
	if blocks <= 0 || maxGaps <= 0 {
		return StolenResult{}, nil, fmt.Errorf("stolen: %d blocks, %d max gaps", blocks, maxGaps)
	}
	blockBytes := int(StolenBlockBytes(uint64(maxGaps)))
	if len(raw) < blocks*blockBytes {
		return StolenResult{}, nil, fmt.Errorf("stolen: output has %d bytes, %d blocks of %d gaps need %d", len(raw), blocks, maxGaps, blocks*blockBytes)
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
			return StolenResult{}, nil, fmt.Errorf("stolen: block %d: gaps sum to %d ns, more than its %d ns window", b, r.sum, window)
		}
		kept := int(min(r.count, uint64(maxGaps)))
		for i := range kept {
			start, length := u(StolenHeaderWords+2*i), u(StolenHeaderWords+2*i+1)
			if start < r.first || length > window {
				return StolenResult{}, nil, fmt.Errorf("stolen: block %d: gap %d (%d ns at %d) lies outside the window [%d, %d]", b, i, length, start, r.first, r.last)
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
		return StolenResult{}, nil, fmt.Errorf("stolen: none of the %d blocks read the timer", blocks)
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
		coverages = append(coverages, float64(covered)/float64(window))
		if over := window - planned; planned > 0 && !raised && over > 0 {
			sum, covered = max(0, sum-over), planned
		}
		windows = append(windows, window)
		ratios = append(ratios, float64(sum)/float64(covered))
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
	return res, all, nil
}

// stolenRun is what the stolen-time windows of one probe found so far.
type stolenRun struct {
	gpuTime time.Duration // their GPU time
	planned time.Duration // the windows launched, summed
	parts   []stolenPart
	tried   int
	err     error // the first window that failed
	failed  int
	// overshoot is the most GPU time a window took beyond its length (a
	// start or an end in a neighbour's time slice): later windows leave
	// at least that much of the budget free.
	overshoot time.Duration
}

// stolenPart is one window that worked.
type stolenPart struct {
	res        StolenResult
	gaps       []time.Duration // kept gap lengths
	start, end time.Time
}

// stolenSchedule places the Config.StolenWindows windows among the other
// measurements: after[k] windows run after the first k of them (others),
// the last window after the last measurement, the others evenly between
// (4 windows among 8 measurements: after the 2nd, 4th, 6th and 8th), so
// that they sample the whole probe rather than one moment of it.
func stolenSchedule(windows, others int) (after []int) {
	after = make([]int, others+1)
	for w := range windows {
		k := (others*(w+1) + windows - 1) / windows
		after[k]++
	}
	return after
}

// stolenWindow runs window i (0-based) of n: KernelStolen for its part of
// StolenWindow with one block of one warp per SM, decoded by decodeStolen.
// Each window is shortened to fit the GPU-time budget left, less what the
// other measurements still to run were planned and a slack per window left
// (stolenSlack of the window, at least minStolenSlack, and at least the
// most a window run so far overshot: its launch and a neighbour's time
// slice it may start or end in), rather than the budget exceeded;
// below minStolenWindow (or 20 gap thresholds) it is not run. A failure is
// kept for stolenResult; the windows after it still run.
func (s *session) stolenWindow(i, n int, othersLeft bool) {
	s.stolen.tried++
	if err := s.runStolenWindow(i, n, othersLeft); err != nil {
		s.stolen.failed++
		if s.stolen.err == nil {
			s.stolen.err = fmt.Errorf("window %d of %d: %w", i+1, n, err)
		}
	}
}

func (s *session) runStolenWindow(i, n int, othersLeft bool) error {
	if err := s.ctx.Err(); err != nil {
		return fmt.Errorf("not run: %w", err)
	}
	per := s.cfg.StolenWindow / time.Duration(n)
	slack := max(minStolenSlack, time.Duration(float64(per)*stolenSlack), s.stolen.overshoot)
	left := s.cfg.GPUTimeBudget - s.gpuTime
	var others time.Duration
	if othersLeft {
		others = max(0, s.planned-(s.gpuTime-s.stolen.gpuTime))
	}
	windowsLeft := time.Duration(n - i)
	window := per
	if avail := (left - others - windowsLeft*slack) / windowsLeft; avail < window {
		window = avail
	}
	if least := max(minStolenWindow, 20*s.cfg.GapThreshold); window < least {
		return fmt.Errorf("GPU time budget (%s) spent before the stolen-time window: %s left, the window needs at least %s", s.cfg.GPUTimeBudget, max(0, left), least)
	}
	if window < per {
		s.log.Debug("gpuprobe: stolen-time window shortened to fit the GPU-time budget", "device", s.dev.Ordinal, "window", window, "configured", per)
	}
	f, err := s.function(KernelStolen)
	if err != nil {
		return err
	}
	blocks := s.dev.SMs
	maxGaps := uint64(s.cfg.MaxGaps)
	bytes := uint64(blocks) * StolenBlockBytes(maxGaps)
	if bytes > s.mem {
		return fmt.Errorf("the output of %d blocks of %d gaps needs %d bytes, over the buffer budget (%d): lower MaxGaps", blocks, maxGaps, bytes, s.mem)
	}
	out, free, err := s.alloc(bytes)
	if err != nil {
		return err
	}
	defer free()
	if err := s.drv.MemsetD8(out, 0, bytes); err != nil {
		return err
	}
	ev, destroy, err := s.events()
	if err != nil {
		return err
	}
	defer destroy()
	grid, block := Dim3{uint32(blocks), 1, 1}, Dim3{stolenBlockWidth, 1, 1}
	before := s.gpuTime
	start := s.drv.Now()
	_, err = s.timed(ev, func() error {
		return s.drv.LaunchKernel(f, grid, block, 0, uint64(out), uint64(window), uint64(s.cfg.GapThreshold), maxGaps)
	})
	end := s.drv.Now()
	took := s.gpuTime - before
	s.stolen.gpuTime += took
	s.stolen.overshoot = max(s.stolen.overshoot, took-window)
	if err != nil {
		return err
	}
	raw := make([]byte, bytes)
	if err := s.drv.MemcpyDtoH(raw, out); err != nil {
		return err
	}
	r, gaps, err := decodeWindow(raw, blocks, s.cfg.MaxGaps, s.cfg.GapThreshold, window)
	if err != nil {
		return err
	}
	r.WindowPlanned = window
	s.stolen.planned += window
	s.stolen.parts = append(s.stolen.parts, stolenPart{res: r, gaps: gaps, start: start, end: end})
	return nil
}

// stolenResult combines the windows into Result.Stolen (combineStolen) and
// reports the first window that failed, if any (the result then rests on
// the others; none worked: no result).
func (s *session) stolenResult() error {
	if len(s.stolen.parts) > 0 {
		r := combineStolen(s.stolen.parts)
		s.res.Stolen = &r
	}
	switch {
	case s.stolen.tried == 0:
		return errors.New("no stolen-time window ran")
	case s.stolen.err != nil && len(s.stolen.parts) > 0:
		return fmt.Errorf("%d of %d stolen-time windows failed, the figures rest on the others; %w", s.stolen.failed, s.stolen.tried, s.stolen.err)
	}
	return s.stolen.err
}

// combineStolen is the StolenResult of the windows: the watched time and
// the planned windows summed, ratio and coverage weighted by each window's
// length, the worst block of any, gaps per block summed, gap lengths over
// every window's kept gaps.
func combineStolen(parts []stolenPart) StolenResult {
	var out StolenResult
	var ratio, coverage, total float64
	var all []time.Duration
	for i, p := range parts {
		r := p.res
		w := float64(r.Window)
		total += w
		ratio += r.Ratio * w
		coverage += r.Coverage * w
		out.Window += r.Window
		out.WindowPlanned += r.WindowPlanned
		out.Threshold = max(out.Threshold, r.Threshold)
		if r.TimerResolution > 0 && (out.TimerResolution == 0 || r.TimerResolution < out.TimerResolution) {
			out.TimerResolution = r.TimerResolution
		}
		if i == 0 || r.Blocks < out.Blocks {
			out.Blocks = r.Blocks
		}
		out.MaxRatio = max(out.MaxRatio, r.MaxRatio)
		out.Gaps += r.Gaps
		all = append(all, p.gaps...)
		out.Windows = append(out.Windows, StolenWindow{Start: p.start, End: p.end, Window: r.Window, Ratio: r.Ratio})
	}
	if total > 0 {
		out.Ratio, out.Coverage = ratio/total, coverage/total
	}
	if len(all) > 0 {
		slices.Sort(all)
		out.GapMedian = medianSorted(all)
		out.GapP90 = quantileSorted(all, 0.9)
		out.GapMax = all[len(all)-1]
	}
	return out
}
