package collector

import (
	"math"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// t0 is a sample timestamp in µs; offsets below are multiples of 250 ms so
// that every expected value is exact in binary floating point.
const t0 = uint64(1_700_000_000_000_000)

func smp(pid uint32, offMs uint64, sm, mem uint32) nvml.ProcessUtilizationSample {
	return nvml.ProcessUtilizationSample{Pid: pid, TimeStamp: t0 + offMs*1000, SmUtil: sm, MemUtil: mem}
}

type wantPid struct {
	covered, sm, mem, attributed float64
	active                       bool
}

func TestUtilTimelineAggregation(t *testing.T) {
	t.Parallel()
	type cycle struct {
		since     uint64
		samples   []nvml.ProcessUtilizationSample
		pids      map[uint32]wantPid
		busy      float64
		contended float64
		lastSeen  uint64
	}
	tests := []struct {
		name     string
		maxCover uint64 // µs; the sampler interval
		cycles   []cycle
	}{
		{
			// A simulated fleet started in the future: its first sample is
			// 30 minutes after the time asked from. With the period not yet
			// known the sample covers one sampler interval (1 s), not 30
			// minutes; once known, the period bounds it.
			name:     "first sample far ahead of since",
			maxCover: 1_000_000,
			cycles: []cycle{
				{
					since:    t0 - 1_800_000_000,
					samples:  []nvml.ProcessUtilizationSample{smp(1, 0, 50, 0)},
					pids:     map[uint32]wantPid{1: {covered: 1, sm: 0.5, attributed: 0.5, active: true}},
					busy:     0.5,
					lastSeen: t0,
				},
				{
					since:    t0,
					samples:  []nvml.ProcessUtilizationSample{smp(1, 250, 100, 0), smp(1, 500, 100, 0)},
					pids:     map[uint32]wantPid{1: {covered: 0.5, sm: 0.5, attributed: 0.5, active: true}},
					busy:     0.5,
					lastSeen: t0 + 500_000,
				},
			},
		},
		{
			name: "lone tenant across two cycles, out of order",
			cycles: []cycle{
				{
					since:   t0,
					samples: []nvml.ProcessUtilizationSample{smp(1, 750, 50, 25), smp(1, 250, 50, 25), smp(1, 1000, 50, 25), smp(1, 500, 50, 25)},
					// first sample covers one period (250 ms) back to t0
					pids:     map[uint32]wantPid{1: {covered: 1, sm: 0.5, mem: 0.25, attributed: 0.5, active: true}},
					busy:     0.5,
					lastSeen: t0 + 1_000_000,
				},
				{
					since:    t0 + 1_000_000,
					samples:  []nvml.ProcessUtilizationSample{smp(1, 1250, 100, 0), smp(1, 1500, 0, 0)},
					pids:     map[uint32]wantPid{1: {covered: 0.5, sm: 0.25, attributed: 0.25, active: true}},
					busy:     0.25,
					lastSeen: t0 + 1_500_000,
				},
			},
		},
		{
			name: "second tenant joins; duplicates and old samples ignored",
			cycles: []cycle{
				{
					since:    t0,
					samples:  []nvml.ProcessUtilizationSample{smp(1, 500, 50, 0), smp(1, 1000, 50, 0)},
					pids:     map[uint32]wantPid{1: {covered: 1, sm: 0.5, attributed: 0.5, active: true}},
					busy:     0.5,
					lastSeen: t0 + 1_000_000,
				},
				{
					// pid 1's sample at 1250 covers (1000, 1250] (its previous sample,
					// from the last cycle); pid 2's first sample covers one period
					// (500 ms, learnt from pid 1) but never before since = 1000.
					since: t0 + 1_000_000,
					samples: []nvml.ProcessUtilizationSample{
						smp(2, 1250, 100, 0), smp(1, 1250, 100, 0), smp(2, 1500, 100, 0),
						smp(2, 1250, 100, 0), // duplicate
						smp(1, 750, 100, 0),  // older than since: already read
						smp(1, 1000, 100, 0), // equal to since: already read
					},
					// (1000,1250]: both at 100 % -> busy 0.25, contended 0.25, half each;
					// (1250,1500]: pid 2 alone.
					pids: map[uint32]wantPid{
						1: {covered: 0.25, sm: 0.25, attributed: 0.125, active: true},
						2: {covered: 0.5, sm: 0.5, attributed: 0.375, active: true},
					},
					busy:      0.5,
					contended: 0.25,
					lastSeen:  t0 + 1_500_000,
				},
			},
		},
		{
			name: "two saturating tenants: all busy time contended",
			cycles: []cycle{{
				since: t0,
				samples: []nvml.ProcessUtilizationSample{
					smp(1, 250, 100, 0), smp(2, 250, 100, 0), smp(1, 500, 100, 0), smp(2, 500, 100, 0),
					smp(1, 750, 100, 0), smp(2, 750, 100, 0), smp(1, 1000, 100, 0), smp(2, 1000, 100, 0),
				},
				pids: map[uint32]wantPid{
					1: {covered: 1, sm: 1, attributed: 0.5, active: true},
					2: {covered: 1, sm: 1, attributed: 0.5, active: true},
				},
				busy: 1, contended: 1, lastSeen: t0 + 1_000_000,
			}},
		},
		{
			name: "resident but idle second process is not contention",
			cycles: []cycle{{
				since:   t0,
				samples: []nvml.ProcessUtilizationSample{smp(1, 500, 75, 0), smp(2, 500, 0, 0), smp(1, 1000, 75, 0), smp(2, 1000, 0, 0)},
				pids: map[uint32]wantPid{
					1: {covered: 1, sm: 0.75, attributed: 0.75, active: true},
					2: {covered: 1},
				},
				busy: 0.75, lastSeen: t0 + 1_000_000,
			}},
		},
		{
			name: "no sample newer than since",
			cycles: []cycle{{
				since:   t0 + 1_000_000,
				samples: []nvml.ProcessUtilizationSample{smp(1, 500, 75, 0)},
				pids:    map[uint32]wantPid{},
			}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tl := utilTimeline{maxCover: tc.maxCover}
			for i, c := range tc.cycles {
				got := tl.add(c.samples, c.since)
				if got.busy != c.busy || got.contended != c.contended {
					t.Errorf("cycle %d: busy %v contended %v, want %v %v", i, got.busy, got.contended, c.busy, c.contended)
				}
				if tl.lastSeen != c.lastSeen {
					t.Errorf("cycle %d: lastSeen %d, want %d", i, tl.lastSeen, c.lastSeen)
				}
				if len(got.pids) != len(c.pids) {
					t.Errorf("cycle %d: %d pids, want %d", i, len(got.pids), len(c.pids))
				}
				var share float64
				for pid, w := range c.pids {
					u := got.pids[pid]
					if u == nil {
						t.Errorf("cycle %d: pid %d missing", i, pid)
						continue
					}
					g := wantPid{covered: u.covered, sm: u.sm, mem: u.mem, attributed: u.attributed, active: u.active}
					if g != w {
						t.Errorf("cycle %d pid %d: got %+v, want %+v", i, pid, g, w)
					}
					share += u.attributed
				}
				if math.Abs(share-got.busy) > 1e-12 {
					t.Errorf("cycle %d: attributed %v != busy %v", i, share, got.busy)
				}
			}
		})
	}
}

func TestUtilTimelineOversubscribedSharesSumToOne(t *testing.T) {
	t.Parallel()
	var tl utilTimeline
	// 70 % + 45 % of SM time: busy is capped at 100 %, split 70:45.
	got := tl.add([]nvml.ProcessUtilizationSample{smp(1, 250, 70, 0), smp(2, 250, 45, 0), smp(1, 500, 70, 0), smp(2, 500, 45, 0)}, t0)
	if got.busy != 0.5 || got.contended != 0.5 {
		t.Fatalf("busy %v contended %v, want 0.5 0.5", got.busy, got.contended)
	}
	s1, s2 := ratio(got.pids[1].attributed, got.busy), ratio(got.pids[2].attributed, got.busy)
	if math.Abs(s1-70.0/115) > 1e-12 || math.Abs(s2-45.0/115) > 1e-12 {
		t.Errorf("shares %v %v, want %v %v", s1, s2, 70.0/115, 45.0/115)
	}
	if s1+s2 > 1+1e-12 {
		t.Errorf("shares sum to %v > 1", s1+s2)
	}
}

// Whole-µs timestamps of a 1/6 s sample period are 166666 or 166667 µs
// apart: a busy process's samples cover every µs of the span (the smallest
// gap as the period left 1 µs of every other period out), and a real gap
// (a period without a sample: idle) is still not covered.
func TestUtilTimelineJitteredPeriod(t *testing.T) {
	t.Parallel()
	var tl utilTimeline
	var samples []nvml.ProcessUtilizationSample
	for k := uint64(1); k <= 12; k++ {
		samples = append(samples, nvml.ProcessUtilizationSample{Pid: 7, TimeStamp: t0 + k*1_000_000/6, SmUtil: 100})
	}
	c := tl.add(samples, t0)
	if got, want := c.pids[7].covered, 2.0; math.Abs(got-want) > 1e-9 {
		t.Errorf("12 samples 1/6 s apart cover %.6f s, want %.6f", got, want)
	}
	// Two periods without a sample (idle), then one: it covers one period.
	c = tl.add([]nvml.ProcessUtilizationSample{{Pid: 7, TimeStamp: t0 + 15*1_000_000/6, SmUtil: 100}}, t0+2_000_000)
	if got, want := c.pids[7].covered, 0.166666; math.Abs(got-want) > 2e-6 {
		t.Errorf("a sample after two idle periods covers %.6f s, want one period (%.6f)", got, want)
	}
}
