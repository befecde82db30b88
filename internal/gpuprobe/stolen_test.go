package gpuprobe

import (
	"encoding/binary"
	"reflect"
	"strings"
	"testing"
	"time"
)

// block is one block's record as the stolen-time kernel writes it.
type block struct {
	first, last, count, sum, minStep, reads uint64
	gaps                                    [][2]uint64 // start, length
}

// encode lays blocks out as KernelStolen does (kernels.go).
func encode(maxGaps int, blocks ...block) []byte {
	bb := int(StolenBlockBytes(uint64(maxGaps)))
	raw := make([]byte, len(blocks)*bb)
	for i, b := range blocks {
		w := raw[i*bb:]
		for j, v := range []uint64{b.first, b.last, b.count, b.sum, b.minStep, b.reads} {
			binary.LittleEndian.PutUint64(w[8*j:], v)
		}
		for j, g := range b.gaps {
			binary.LittleEndian.PutUint64(w[8*(StolenHeaderWords+2*j):], g[0])
			binary.LittleEndian.PutUint64(w[8*(StolenHeaderWords+2*j+1):], g[1])
		}
	}
	return raw
}

const (
	t0 = uint64(1_767_323_045_000_000_000) // a %globaltimer reading, ns
	us = uint64(time.Microsecond)
	ms = uint64(time.Millisecond)
)

// withGaps is a block of a 100 ms window with the given gap lengths, spaced
// 5 ms apart, counted and summed exactly.
func withGaps(res uint64, lengths ...uint64) block {
	b := block{first: t0, last: t0 + 100*ms, minStep: res, reads: 1_000_000}
	for i, l := range lengths {
		b.gaps = append(b.gaps, [2]uint64{t0 + uint64(i)*5*ms, l})
		b.count++
		b.sum += l
	}
	return b
}

func TestDecodeStolen(t *testing.T) {
	const thr = 10 * time.Microsecond
	for _, tc := range []struct {
		name    string
		maxGaps int
		blocks  []block
		want    StolenResult
	}{
		{
			name:    "no gaps",
			maxGaps: 4,
			blocks:  []block{withGaps(32), withGaps(32), withGaps(40), withGaps(32)},
			want:    StolenResult{Window: 100 * time.Millisecond, Threshold: thr, TimerResolution: 32, Blocks: 4},
		},
		{
			// Ratios 0.08, 0.04 and 0.10: median 0.08, worst 0.10. Kept
			// gaps 1,2,2,3,4,10 ms: median 2.5 ms, nearest-rank p90 10 ms.
			name:    "known gaps",
			maxGaps: 4,
			blocks:  []block{withGaps(us, 2*ms, 2*ms, 4*ms), withGaps(us, ms, 3*ms), withGaps(us, 10*ms)},
			want: StolenResult{Window: 100 * time.Millisecond, Threshold: thr, TimerResolution: time.Microsecond, Blocks: 3,
				Ratio: 0.08, MaxRatio: 0.10, Gaps: 2, GapMedian: 2500 * time.Microsecond, GapP90: 10 * time.Millisecond, GapMax: 10 * time.Millisecond},
		},
		{
			// Five gaps of 5 ms, two kept: count and ratio come from the
			// exact header, percentiles from the kept two.
			name:    "more gaps than kept",
			maxGaps: 2,
			blocks: []block{{first: t0, last: t0 + 100*ms, count: 5, sum: 25 * ms, minStep: us, reads: 10,
				gaps: [][2]uint64{{t0 + ms, 5 * ms}, {t0 + 20*ms, 5 * ms}}}},
			want: StolenResult{Window: 100 * time.Millisecond, Threshold: thr, TimerResolution: time.Microsecond, Blocks: 1,
				Ratio: 0.25, MaxRatio: 0.25, Gaps: 5, GapMedian: 5 * time.Millisecond, GapP90: 5 * time.Millisecond, GapMax: 5 * time.Millisecond},
		},
		{
			// A 5 µs timer: 10x is above the 10 µs threshold, so the
			// threshold becomes 50 µs and the 15 and 20 µs gaps drop out.
			name:    "coarse timer raises the threshold",
			maxGaps: 8,
			blocks:  []block{withGaps(5*us, 15*us, 20*us, ms, 2*ms)},
			want: StolenResult{Window: 100 * time.Millisecond, Threshold: 50 * time.Microsecond, TimerResolution: 5 * time.Microsecond, Blocks: 1,
				Ratio: 0.03, MaxRatio: 0.03, Gaps: 2, GapMedian: 1500 * time.Microsecond, GapP90: 2 * time.Millisecond, GapMax: 2 * time.Millisecond},
		},
		{
			// A 20 µs timer over a 10 µs threshold: every step was a gap
			// (5000 in the window, summing to all of it), 4 kept. Raised to
			// 200 µs, only the kept 2 ms gap counts, over the 2.06 ms the
			// kept gaps cover (not the whole 100 ms window: that read 0.02).
			name:    "timer coarser than the threshold",
			maxGaps: 4,
			blocks: []block{{first: t0, last: t0 + 100*ms, count: 5000, sum: 100 * ms, minStep: 20 * us, reads: 5001,
				gaps: [][2]uint64{{t0, 20 * us}, {t0 + 20*us, 20 * us}, {t0 + 40*us, 2 * ms}, {t0 + 2040*us, 20 * us}}}},
			want: StolenResult{Window: 100 * time.Millisecond, Threshold: 200 * time.Microsecond, TimerResolution: 20 * time.Microsecond, Blocks: 1,
				Ratio: 2 / 2.06, MaxRatio: 2 / 2.06, Coverage: 0.0206, Gaps: 1, GapMedian: 2 * time.Millisecond, GapP90: 2 * time.Millisecond, GapMax: 2 * time.Millisecond},
		},
		{
			// Blocks that never read the timer are left out.
			name:    "blocks that did not run",
			maxGaps: 2,
			blocks:  []block{{}, withGaps(us, 10*ms), {first: t0, last: t0, reads: 3}},
			want: StolenResult{Window: 100 * time.Millisecond, Threshold: thr, TimerResolution: time.Microsecond, Blocks: 1,
				Ratio: 0.1, MaxRatio: 0.1, Gaps: 1, GapMedian: 10 * time.Millisecond, GapP90: 10 * time.Millisecond, GapMax: 10 * time.Millisecond},
		},
		{
			// Unequal windows: the median window and per-block ratios.
			name:    "windows differ",
			maxGaps: 1,
			blocks: []block{
				{first: t0, last: t0 + 100*ms, count: 1, sum: 10 * ms, minStep: us, reads: 9, gaps: [][2]uint64{{t0, 10 * ms}}},
				{first: t0, last: t0 + 200*ms, count: 1, sum: 10 * ms, minStep: us, reads: 9, gaps: [][2]uint64{{t0, 10 * ms}}},
			},
			want: StolenResult{Window: 150 * time.Millisecond, Threshold: thr, TimerResolution: time.Microsecond, Blocks: 2,
				Ratio: 0.075, MaxRatio: 0.1, Gaps: 1, GapMedian: 10 * time.Millisecond, GapP90: 10 * time.Millisecond, GapMax: 10 * time.Millisecond},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeStolen(encode(tc.maxGaps, tc.blocks...), len(tc.blocks), tc.maxGaps, thr)
			if err != nil {
				t.Fatal(err)
			}
			// Ratios are float divisions: compare them to 1e-12.
			if d := got.Ratio - tc.want.Ratio; d > 1e-12 || d < -1e-12 {
				t.Errorf("Ratio = %v, want %v", got.Ratio, tc.want.Ratio)
			}
			if d := got.MaxRatio - tc.want.MaxRatio; d > 1e-12 || d < -1e-12 {
				t.Errorf("MaxRatio = %v, want %v", got.MaxRatio, tc.want.MaxRatio)
			}
			if tc.want.Coverage == 0 {
				tc.want.Coverage = 1 // the kept gaps cover the whole window
			}
			if d := got.Coverage - tc.want.Coverage; d > 1e-12 || d < -1e-12 {
				t.Errorf("Coverage = %v, want %v", got.Coverage, tc.want.Coverage)
			}
			got.Ratio, got.MaxRatio, got.Coverage = tc.want.Ratio, tc.want.MaxRatio, tc.want.Coverage
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestDecodeStolenErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		raw     []byte
		blocks  int
		maxGaps int
		want    string
	}{
		{"short buffer", make([]byte, 100), 2, 4, "output has 100 bytes"},
		{"no block ran", encode(2, block{}, block{}), 2, 2, "none of the 2 blocks read the timer"},
		{"gaps longer than the window", encode(1, block{first: t0, last: t0 + ms, count: 1, sum: 2 * ms, reads: 2}), 1, 1, "more than its"},
		{"gap before the window", encode(1, block{first: t0, last: t0 + 10*ms, count: 1, sum: ms, reads: 2, gaps: [][2]uint64{{t0 - ms, ms}}}), 1, 1, "outside the window"},
		{"no blocks", nil, 0, 4, "0 blocks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeStolen(tc.raw, tc.blocks, tc.maxGaps, 10*time.Microsecond)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestQuantiles(t *testing.T) {
	for _, tc := range []struct {
		sorted   []time.Duration
		med, p90 time.Duration
	}{
		{nil, 0, 0},
		{[]time.Duration{7}, 7, 7},
		{[]time.Duration{1, 2, 4, 8}, 3, 8}, // mean of the middle two; nearest rank
		{[]time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 5, 9},
		{[]time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 6, 10},
	} {
		if got := medianSorted(tc.sorted); got != tc.med {
			t.Errorf("median %v = %v, want %v", tc.sorted, got, tc.med)
		}
		if got := quantileSorted(tc.sorted, 0.9); got != tc.p90 {
			t.Errorf("p90 %v = %v, want %v", tc.sorted, got, tc.p90)
		}
	}
	if got := median([]float64{3, 1, 2, 10}); got != 2.5 {
		t.Errorf("median = %v, want 2.5", got)
	}
	if got := median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("median = %v, want 2", got)
	}
}

// TestStolenSchedule: the windows are spread evenly among the other
// measurements, the last after the last of them; without other
// measurements they run back to back.
func TestStolenSchedule(t *testing.T) {
	for _, tc := range []struct {
		windows, others int
		want            []int
	}{
		{4, 8, []int{0, 0, 1, 0, 1, 0, 1, 0, 1}},
		{1, 8, []int{0, 0, 0, 0, 0, 0, 0, 0, 1}},
		{3, 8, []int{0, 0, 0, 1, 0, 0, 1, 0, 1}},
		{8, 8, []int{0, 1, 1, 1, 1, 1, 1, 1, 1}},
		{8, 3, []int{0, 2, 3, 3}},
		{4, 0, []int{4}},
	} {
		if got := stolenSchedule(tc.windows, tc.others); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("stolenSchedule(%d, %d) = %v, want %v", tc.windows, tc.others, got, tc.want)
		}
	}
}

// TestDecodeWindowClipsTheLastGap: the kernel stops at its first reading
// at least the window after its first, so a neighbour's slice over the
// window's end counts whole; the part beyond the window is left out
// (a 25 ms window whose last 1 ms and 2 ms beyond were a gap lost 1 ms:
// 0.04, not 3 ms of 27: 0.11).
func TestDecodeWindowClipsTheLastGap(t *testing.T) {
	b := block{first: t0, last: t0 + 27*ms, count: 1, sum: 3 * ms, minStep: 32, reads: 1000,
		gaps: [][2]uint64{{t0 + 24*ms, 3 * ms}}}
	raw := encode(4, b)
	r, _, err := decodeWindow(raw, 1, 4, 10*time.Microsecond, 25*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if d := r.Ratio - 0.04; d > 1e-9 || d < -1e-9 || r.Window != 27*time.Millisecond || r.Coverage != 1 {
		t.Errorf("ratio %v window %s coverage %v, want 0.04, 27ms, 1", r.Ratio, r.Window, r.Coverage)
	}
	if r, _ := decodeStolen(raw, 1, 4, 10*time.Microsecond); r.Ratio != float64(3*ms)/float64(27*ms) {
		t.Errorf("without the window: ratio %v, want 3/27", r.Ratio)
	}
}
